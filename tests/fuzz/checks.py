"""What every fuzzed input must satisfy: no exception (nor a `decode_failed` row, which is how
the decoder contains one per file in production), every byte accounted, the same output
twice. Peak memory is checked in a subprocess (tests.fuzz.measure) for the large inputs."""

from __future__ import annotations

import hashlib

import decoders
from decoders.accounting import FileInfo
from decoders.errors import DECODE_FAILED
from tests.fuzz.mutators import Case

TABLES = tuple(decoders.TABLES)


class Failure(Exception):
    """An input broke a guarantee; ``signature`` groups failures with the same cause."""

    def __init__(self, signature: str, detail: str) -> None:
        super().__init__(f"{signature}: {detail}")
        self.signature = signature


def info_for(case: Case) -> FileInfo:
    return FileInfo(
        file=f"{case.topic}-0/00000000000000000000.{case.kind}",
        topic=case.topic,
        partition=0,
        base_offset=0,
        kind=case.kind,
    )


def decode(case: Case, memory_budget: int | None = None) -> tuple[str, dict]:
    """(digest of every table's rows, the segments row) of one decode of a case."""
    digest = hashlib.sha256()
    seg = None
    for table, batch in decoders.iter_file(
        case.data, TABLES, info=info_for(case), memory_budget=memory_budget
    ):
        digest.update(table.encode())
        for col in batch.columns:
            for buf in col.buffers():
                if buf is not None:
                    digest.update(buf)
        if table == "segments":
            seg = batch.to_pylist()[0]
        if table == "errors":
            for e in batch.to_pylist():
                if e["kind"] == DECODE_FAILED:  # an exception iter_file contained: a bug
                    raise ContainedError(e["reason"])
    return digest.hexdigest(), seg


class ContainedError(Exception):
    """An exception the decoder turned into a `decode_failed` row; its reason names the type
    and the place it was raised ("decoding stopped with IndexError at decoders/x.py:12: ...")."""

    @property
    def signature(self) -> str:
        head = str(self).removeprefix("decoding stopped with ").split(":", 2)
        return ":".join(head[:2]).replace(" at ", "@")


def check(case: Case, memory_budget: int | None = None) -> None:
    """Raise Failure when the case breaks a guarantee."""
    try:
        first, seg = decode(case, memory_budget)
        second, _ = decode(case, memory_budget)
    except ContainedError as e:
        raise Failure(e.signature, str(e)[:300]) from e
    except Exception as e:  # noqa: BLE001 - any exception is the finding
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f"{tb.tb_frame.f_code.co_filename.rsplit('/', 2)[-1]}:{tb.tb_lineno}" if tb else "?"
        raise Failure(f"{type(e).__name__}@{where}", repr(e)[:300]) from e
    if seg is None:
        raise Failure("no-segments-row", "no segments row")
    total = seg["bytes_valid"] + seg["bytes_padding"] + seg["bytes_corrupt"]
    if total != len(case.data) or seg["size"] != len(case.data):
        raise Failure(
            f"accounting-{case.kind}",
            f"size {len(case.data)}, row size {seg['size']}, valid+padding+corrupt {total}",
        )
    if first != second:
        raise Failure(f"nondeterministic-{case.kind}", "two decodes differ")
