"""Shared fixtures: the real broker corpus beside the repository, decoded once per session."""

from __future__ import annotations

import pathlib

import pytest

import decoders

REPO = pathlib.Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "real"


@pytest.fixture(scope="session")
def corpus() -> pathlib.Path:
    assert CORPUS.is_dir(), (
        f"the real corpus is expected at {CORPUS} (../shared beside the repository)"
    )
    return CORPUS


@pytest.fixture(scope="session")
def corpus_tables(corpus):
    return decoders.read_dump([str(corpus)], tables=list(decoders.TABLES))


@pytest.fixture(scope="session")
def corpus_logs(corpus) -> list[pathlib.Path]:
    logs = sorted(corpus.rglob("*.log"))
    assert len(logs) > 1000
    return logs


@pytest.fixture
def sample_dump(tmp_path):
    from jobs.sample import write_sample_dump

    out = tmp_path / "sample"
    facts = write_sample_dump(str(out))
    return out, facts
