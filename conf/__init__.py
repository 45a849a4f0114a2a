"""The embedded defaults, `default.yaml`: the one definition of every default of the project
(replay.config validates it and lays user files and overrides over it). A package so that the
file ships inside the wheel (`./dev package`) and is read through importlib.resources, from a
checkout, an installed wheel or a zip on spark-submit's --py-files alike."""

from __future__ import annotations

from importlib.resources import files

DEFAULTS_FILE = "default.yaml"


def default_yaml() -> str:
    """The text of the embedded defaults."""
    return files(__name__).joinpath(DEFAULTS_FILE).read_text(encoding="utf-8")
