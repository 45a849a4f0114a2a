"""numba's on-disk cache for logreplay's kernels (decoders.kernels, replay.crosslog): the
directory it lives in, a locator for kernels imported from a zip, and what a cache holds.

Why a module of its own: what numba documents does not cover all of it, and the one use of
numba's internals is kept here, said why, so that a numba release that changes it breaks this
module and its test (tests/test_numba_cache.py) loudly instead of leaving every process to
compile every kernel again (seconds of CPU each, with no error anywhere). Checked against
numba 0.68.1.

- Kernels shipped in a zip (spark-submit ``--py-files``, ``./dev package``): numba's own
  ``ZipCacheLocator`` names the cache after the archive's path, and Spark unpacks the archive
  in each application's own work directory, so every executor of every application would
  compile the kernels again. :class:`ShippedLocator` keeps them under a directory that depends
  only on the kernels' sources (decoders.kernels names it for their hash); numba's stamps are
  hashes of the sources' contents, so the cache is safe to share. Public API only: a subclass
  of the documented ``ZipCacheLocator`` that overrides its documented methods, put first
  through numba's documented locator list (``NUMBA_CACHE_LOCATOR_CLASSES``, set in
  ``numba.config`` rather than the environment, which child processes would inherit without
  this package to import).
- :func:`cached_signatures`, for a process that forks workers (jobs.daemon): it loads every
  cached kernel once before forking, and numba has no public way to list the signatures its
  cache holds for a function. The one private use: the dispatcher's ``_cache`` (a
  ``FunctionCache``), its ``_cache_file`` (an ``IndexDataCacheFile``) and that file's
  ``_load_index()``, a dict keyed by ``(signature, codegen magic, code hashes)``.
"""

from __future__ import annotations

import os
from pathlib import PurePath, PurePosixPath
from typing import Any, ClassVar

import numba
import numba.core.caching

# numba's default locators, in its order (numba.core.caching); the list set below replaces it,
# so it must name them all: tests/test_numba_cache.py holds it equal to numba's own
DEFAULT_LOCATORS = (
    "UserProvidedCacheLocator",
    "InTreeCacheLocator",
    "UserWideCacheLocator",
    "IPythonCacheLocator",
    "ZipCacheLocator",
)
# the packages whose kernels ShippedLocator places when they are imported from a zip
OWN_PACKAGES = ("decoders", "replay")
LOCATOR = f"{__name__}.ShippedLocator"
# numba's zip locator and its locator list setting (both in 0.68): without them, zip-imported
# kernels are cached as that numba does it
SHARES_ZIP_CACHE = hasattr(numba.core.caching, "ZipCacheLocator") and hasattr(
    numba.config, "CACHE_LOCATOR_CLASSES"
)
_ZipCacheLocator: Any = getattr(numba.core.caching, "ZipCacheLocator", object)


def inside_zip(py_file: str) -> str | None:
    """The path of ``py_file`` inside the zip archive it was imported from (``decoders/x.py``),
    or None when it does not come from a zip."""
    parts = PurePath(py_file).parts
    for i, part in enumerate(parts):
        if part.endswith(".zip"):
            rest = parts[i + 1 :]
            return PurePosixPath(*rest).as_posix() if rest else None
    return None


class ShippedLocator(_ZipCacheLocator):
    """numba's zip locator, with the cache under :attr:`root` (set by :func:`install`) instead
    of a directory named for the archive's path: ``<root>/<package>/``."""

    root: ClassVar[str | None] = None

    def __init__(self, py_func: Any, py_file: str) -> None:
        super().__init__(py_func, py_file)
        inside = inside_zip(py_file) or ""
        self.shipped_path = os.path.join(self.root or "", os.path.dirname(inside))

    def get_cache_path(self) -> str:
        return self.shipped_path

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> ShippedLocator | None:
        inside = inside_zip(py_file)
        if cls.root is None or inside is None or inside.split("/")[0] not in OWN_PACKAGES:
            return None  # numba's next locator decides
        try:
            locator = cls(py_func, py_file)
            locator.ensure_cache_path()
        except (OSError, ValueError):
            return None
        return locator


def install(cache_dir: str) -> None:
    """Cache the kernels under ``cache_dir`` from now on (numba reads both settings when a
    function is decorated): ``NUMBA_CACHE_DIR``'s setting for kernels imported from files, and
    :class:`ShippedLocator` first in numba's locator list for those imported from a zip, ahead
    of whatever list the user set (numba's defaults when none)."""
    numba.config.CACHE_DIR = cache_dir
    if not SHARES_ZIP_CACHE:
        return
    ShippedLocator.root = cache_dir
    current = [c.strip() for c in (numba.config.CACHE_LOCATOR_CLASSES or "").split(",")]
    rest = [c for c in current if c and c != LOCATOR] or list(DEFAULT_LOCATORS)
    numba.config.CACHE_LOCATOR_CLASSES = ",".join([LOCATOR, *rest])


def cached_signatures(kernel: Any) -> list[Any]:
    """The signatures numba's on-disk cache holds for ``kernel`` (a function decorated with
    ``cache=True``): compiling one of them loads it from the cache. numba's internals (see the
    module's docstring): raises whatever their absence raises, never guesses."""
    index = kernel._cache._cache_file._load_index()
    return [key[0] for key in index]
