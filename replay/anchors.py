"""Alignment anchors a dump carries: ``alignment.json`` at its root (docs/extract.md).

A slice cut out of a dump by ``logreplay extract`` starts in the middle of a long-lived
producer's history. Under transaction version 0/1 such a producer keeps one id and one epoch
for life and its transactions are milliseconds apart, so which coordinator transaction is
which partition transaction is fixed only by where both histories start
(:class:`replay.crosslog.Anchor`). The audit of the whole dump established it; the slice
carries the pair it starts at, and the slice's audit aligns from there as the whole dump's
did. An anchor whose pair is not in the dump is ignored (the alignment then starts as for
any copy that begins mid-history). An anchor is a statement of the audit that wrote it, taken
as given: the run prints the anchors it read (summary.json's ``layout``), and only extract
writes the file, beside the slice's manifest.json naming the audit it comes from.
"""

from __future__ import annotations

import json
import os

from decoders.filesystems import resolve
from replay.crosslog import Anchor

ANCHORS_FILE = "alignment.json"
WRITER = "logreplay extract"
# keys of one anchor in the file
_FIELDS = ("cluster", "producer_id", "topic", "partition", "entry_offset", "log_partition",
           "log_offset")  # fmt: skip

Anchors = dict[tuple[str, int], dict[tuple[str, int], Anchor]]


_END_FIELDS = ("end_entry_offset", "end_log_offset")  # optional: where it ends pinned


def anchor_row(cluster: str, producer_id: int, topic: str, partition: int, anchor: Anchor) -> dict:
    """One anchor as the file holds it."""
    values = (cluster, producer_id, topic, partition, anchor.entry_offset, anchor.log_partition,
              anchor.log_offset)  # fmt: skip
    row = dict(zip(_FIELDS, values, strict=True))
    if anchor.end_entry_offset is not None:
        row.update(zip(_END_FIELDS, (anchor.end_entry_offset, anchor.end_log_offset), strict=True))
    return row


def document(rows: list[dict]) -> bytes:
    """The file's bytes: the anchors and what they mean, for a human reading the slice."""
    doc = {
        "written_by": WRITER,
        "meaning": "each partition entry at entry_offset is the coordinator transaction whose "
        "first record is at log_offset of __transaction_state-<log_partition>, as the audit "
        "of the whole dump aligned them (and the entry at end_entry_offset the one at "
        "end_log_offset); the slice's audit aligns from that pair on (up to the end pair)",
        "anchors": rows,
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def parsed(data: bytes) -> Anchors:
    """The anchors of a file's bytes (malformed rows are left out: an anchor only pins)."""
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    out: Anchors = {}
    rows = doc.get("anchors") if isinstance(doc, dict) else None
    for r in rows if isinstance(rows, list) else []:
        try:
            cluster, pid, topic, partition, entry, log_partition, log_offset = (
                r[k] for k in _FIELDS
            )
            end = [r.get(k) for k in _END_FIELDS]
            end = [int(v) for v in end] if None not in end else [None, None]
            anchor = Anchor(int(entry), int(log_partition), int(log_offset), *end)
        except (KeyError, TypeError, ValueError):
            continue
        out.setdefault((str(cluster), int(pid)), {})[(str(topic), int(partition))] = anchor
    return out


def read_anchors(paths: list[str]) -> Anchors:
    """The anchors of every dump root given (a local path or a URI) that holds the file."""
    out: Anchors = {}
    for root in paths:
        fs, path = resolve(os.fspath(root))
        target = f"{path.rstrip('/')}/{ANCHORS_FILE}"
        try:
            if fs is None:
                with open(target, "rb") as fh:
                    data = fh.read()
            else:
                with fs.open_input_file(target) as fh:
                    data = fh.read()
        except (OSError, ValueError):  # none there (or not a directory): nothing pinned
            continue
        for key, by_tp in parsed(data).items():
            out.setdefault(key, {}).update(by_tp)
    return out


def described(anchors: Anchors) -> list[dict]:
    """The anchors as a run shows them (summary.json's layout)."""
    return [anchor_row(c, pid, t, p, a) for (c, pid), by in sorted(anchors.items())
            for (t, p), a in sorted(by.items())]  # fmt: skip
