"""The code stays small enough to read (docs/architecture.md, "Code shape"): no function of
the project is longer than MAX_LINES lines unless a comment right above it says why (a compiled
kernel whose state would cross calls if split, say). Tests are left out: a test reads as a
story."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 80


def _packages() -> list[str]:
    """The project's code: the packages pyproject.toml ships, and the benchmarks (not a virtual
    environment or a build beside them, whatever its name)."""
    import tomllib

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return sorted({p.rstrip("*").rstrip(".") for p in found["packages"]["find"]["include"]}
                  | {"benchmarks"})  # fmt: skip


def _sources() -> list[Path]:
    out = []
    for package in _packages():
        for here, dirs, files in os.walk(ROOT / package):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
            out += [Path(here, f) for f in sorted(files) if f.endswith(".py")]
    return out


def _reason_above(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the line above the function (above its decorators) is a comment."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return first >= 2 and lines[first - 2].strip().startswith("#")


def long_functions(path: Path) -> list[tuple[str, int]]:
    """(name, lines) of each function of ``path`` over MAX_LINES lines without a reason."""
    text = path.read_text()
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_LINES and not _reason_above(lines, node):
                out.append((f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", n))
    return out


def test_no_function_is_longer_than_its_limit_without_a_reason():
    sources = _sources()
    assert len(sources) > 100  # the project's modules, not an empty walk
    assert {p.relative_to(ROOT).parts[0] for p in sources} == set(_packages())
    found = [f for p in sources for f in long_functions(p)]
    assert not found, f"functions over {MAX_LINES} lines, with no comment above saying why: {found}"


def test_a_long_function_is_found_and_a_reason_lets_it_stand(tmp_path, monkeypatch):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    bare = tmp_path / "bare.py"
    bare.write_text(f"def long():\n{body}\n")
    reasoned = tmp_path / "reasoned.py"
    reasoned.write_text(f"# one compiled loop: split, its state would cross calls\n"
                        f"@staticmethod\ndef long():\n{body}\n")  # fmt: skip
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert [n for _, n in long_functions(bare)] == [MAX_LINES + 1]
    assert long_functions(reasoned) == []
