"""numba's cache for the kernels (decoders.numba_cache): what it takes from numba, checked so
that a numba release that changes it fails here instead of leaving every process to compile
every kernel again, slowly and without an error.

The numba it was checked against: 0.68.1. If one of these fails after an upgrade, read
decoders/numba_cache.py's docstring: the locator uses numba's public locator API, the
signatures of a cache come from numba's internals."""

from __future__ import annotations

import importlib.resources
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numba
import numba.core.caching
import numpy as np
import pytest

from decoders import kernels, numba_cache


def test_numba_still_has_the_locator_api_and_default_list_relied_on():
    """The zip locator and the locator list setting exist; the list set in numba.config names
    numba's own defaults after ours (it replaces numba's list: a default numba added and this
    module did not name would be lost)."""
    assert numba_cache.SHARES_ZIP_CACHE, f"numba {numba.__version__}: no zip locator or list"
    for method in ("from_function", "get_cache_path", "get_source_stamp", "get_disambiguator",
                   "ensure_cache_path"):  # fmt: skip
        assert callable(getattr(numba.core.caching.ZipCacheLocator, method, None)), method
    defaults = numba.core.caching.CacheImpl._locator_classes  # numba's list, read by the test only
    assert tuple(c.__name__ for c in defaults) == numba_cache.DEFAULT_LOCATORS
    for name in numba_cache.DEFAULT_LOCATORS:  # the plain names numba resolves in its module
        assert getattr(numba.core.caching, name) in defaults
    if kernels.NUMBA_CACHE:  # kernels installed the locator when it imported
        assert numba.config.CACHE_LOCATOR_CLASSES.split(",")[0] == numba_cache.LOCATOR


def test_numba_still_has_the_cache_index_relied_on():
    """The one private use: a cached kernel's index lists the signature it was called with."""
    if not kernels.NUMBA_CACHE:
        pytest.skip("no writable cache directory")
    kernel = kernels.hop_entries
    kernel(np.zeros(64, np.uint8), 0, 0, 1 << 20)
    index = kernel._cache._cache_file._load_index()  # the shape numba_cache relies on
    assert isinstance(index, dict) and index
    assert all(isinstance(key, tuple) and len(key) == 3 for key in index)
    assert set(kernel.signatures) <= set(numba_cache.cached_signatures(kernel))


def test_install_puts_the_locator_first_once_and_keeps_the_users_list(monkeypatch):
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    monkeypatch.setattr(numba.config, "CACHE_LOCATOR_CLASSES", "")
    monkeypatch.setattr(numba_cache.ShippedLocator, "root", None)
    numba_cache.install("/cache")
    assert numba.config.CACHE_DIR == "/cache" and numba_cache.ShippedLocator.root == "/cache"
    assert numba.config.CACHE_LOCATOR_CLASSES.split(",") == [
        numba_cache.LOCATOR,
        *numba_cache.DEFAULT_LOCATORS,
    ]
    monkeypatch.setattr(numba.config, "CACHE_LOCATOR_CLASSES", "UserWideCacheLocator")
    numba_cache.install("/cache")
    numba_cache.install("/cache")
    want = f"{numba_cache.LOCATOR},UserWideCacheLocator"
    assert want == numba.config.CACHE_LOCATOR_CLASSES


def test_inside_zip():
    assert numba_cache.inside_zip("/a/app-1/logreplay.zip/decoders/kernels.py") == (
        "decoders/kernels.py"
    )
    assert numba_cache.inside_zip("/a/decoders/kernels.py") is None
    assert numba_cache.inside_zip("/a/logreplay.zip") is None


SHIPPED = """
import json, sys
sys.path.insert(0, sys.argv[1])
import decoders
from decoders import kernels
loaded = kernels.load_cached(kernels) if sys.argv[3] == "load" else 0
decoders.read_dump([sys.argv[2]], tables=["batches", "records"])
stats = [f.stats for f in vars(kernels).values() if hasattr(f, "stats")]
print(json.dumps({
    "module": kernels.__file__,
    "loaded": loaded,
    "hits": sum(sum(s.cache_hits.values()) for s in stats),
    "misses": sum(sum(s.cache_misses.values()) for s in stats),
    "paths": sorted({s.cache_path for s in stats}),
}))
"""


def test_kernels_from_a_zip_at_another_path_are_loaded_from_the_cache_not_compiled(
    tmp_path, sample_dump
):
    """What the module is for, end to end: the kernels shipped in a zip, as spark-submit's
    --py-files puts them in each application's own directory. The first application compiles
    them; the second, from another directory, loads every one before its first call (as
    jobs.daemon does before it forks the workers) and compiles nothing. A numba that changed
    either the locator API or the cache index fails here: nothing loaded, or kernels compiled."""
    source = importlib.resources.files("decoders")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")
    runs = []
    for app, mode in (("app-1", "call"), ("app-2", "load")):
        archive = tmp_path / app / "logreplay.zip"
        archive.parent.mkdir()
        with zipfile.ZipFile(archive, "w") as z:
            for f in source.iterdir():
                if f.name.endswith(".py"):
                    z.writestr(f"decoders/{f.name}", f.read_bytes())
        done = subprocess.run(
            [sys.executable, "-c", SHIPPED, str(archive), str(sample_dump[0]), mode],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert str(tmp_path / "app-1") in first["module"]
    assert str(tmp_path / "app-2") in second["module"]
    assert first["misses"] > 0  # compiled, and written to the cache
    assert second["loaded"] > 0, "no kernel loaded from the cache index"
    assert second["misses"] == 0, "kernels compiled again from another archive path"
    assert second["hits"] >= second["loaded"]
    # the cache is under the directory named for the kernels' sources, not the archive's path
    (shared,) = {p for r in runs for p in r["paths"]}
    assert Path(shared).parent.parent == tmp_path / "numba"
    assert Path(shared).parent.name.startswith("logreplay-") and Path(shared).name == "decoders"
