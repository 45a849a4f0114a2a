"""Structure-aware mutators over valid Kafka files.

A seed is a :class:`Case`: the bytes of one file and where it sits (kind, topic), so that an
internal topic's records reach the internal decoders. Mutators know the formats: they find the
entries of a `.log`, change one header field to a value at its type's limits, rewrite varints
and lengths inside records (recompressing the records area with the batch's own codec), flip
attribute and codec bits, and fix the CRC half of the time so that the mutation reaches the code
behind the CRC check. Others truncate, splice two cases, zero-fill or duplicate ranges; index,
time index, transaction index and snapshot entries get the same field-level treatment.
"""

from __future__ import annotations

import dataclasses
import pathlib
import random
import struct
import zlib

import crc32c

from decoders.compression import compress, decompress
from decoders.constants import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from decoders.consumer_offsets import (
    encode_group_metadata_key,
    encode_offset_commit,
    encode_offset_commit_key,
)
from decoders.transaction_log import encode_key as txn_key
from simulator.writer import (
    Record,
    SnapshotEntry,
    build_batch,
    control_batch,
    legacy_message,
    legacy_wrapper,
    offset_index_bytes,
    snapshot_bytes,
    time_index_bytes,
    txn_index_bytes,
)

CODECS = (COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD)


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    data: bytes
    kind: str = "log"  # log, index, timeindex, txnindex, snapshot
    topic: str = "t"
    origin: str = "built"


# v2 header fields: (offset, struct format); lastOffsetDelta, timestamps, producer fields...
V2_FIELDS = [
    (0, ">q"),  # baseOffset
    (8, ">i"),  # batchLength
    (12, ">i"),  # partitionLeaderEpoch
    (16, ">b"),  # magic
    (17, ">I"),  # crc
    (21, ">h"),  # attributes
    (23, ">i"),  # lastOffsetDelta
    (27, ">q"),  # baseTimestamp
    (35, ">q"),  # maxTimestamp
    (43, ">q"),  # producerId
    (51, ">h"),  # producerEpoch
    (53, ">i"),  # baseSequence
    (57, ">i"),  # recordsCount
]
LEGACY_FIELDS = [(0, ">q"), (8, ">i"), (12, ">I"), (16, ">b"), (17, ">b"), (18, ">q")]
LIMITS = {
    ">b": [0, 1, -1, 2, 3, 127, -128],
    ">h": [0, -1, 1, 7, 8, 0x10, 0x20, 0x40, 32767, -32768],
    ">i": [0, -1, 1, 2**31 - 1, -(2**31), 2**24, 61, 49, 12],
    ">I": [0, 2**32 - 1],
    ">q": [0, -1, 1, 2**63 - 1, -(2**63), 2**62, -(2**62), 2**40, 253402300800000],
}


def seeds(corpus: pathlib.Path | None = None, per_kind: int = 40, rng_seed: int = 0) -> list[Case]:
    """Valid inputs: writer-built batches of every version and codec, internal-topic records,
    indexes and snapshots, the sample dump of the simulator and small files of the real corpus."""
    out: list[Case] = []
    recs = [
        Record(b"k%d" % i, b"value-%d" % i * (i % 5 + 1), [("h", b"x"), ("n", None)], 1000 + i)
        for i in range(12)
    ]
    for codec in CODECS:
        out.append(Case(build_batch(recs, 100, codec=codec)))
        out.append(
            Case(
                build_batch(
                    recs[:3],
                    5,
                    codec=codec,
                    producer_id=7,
                    producer_epoch=1,
                    base_sequence=2**31 - 2,
                    transactional=True,
                    log_append_time=5000,
                )
                + control_batch(1, 7, 1, 3, 6000, base_offset=8)
            )
        )
        if codec and codec != COMPRESSION_ZSTD:
            for magic in (0, 1):
                msgs = [(b"k", b"v%d" % i, 1000 + i) for i in range(4)]
                out.append(Case(legacy_wrapper(msgs, 10, codec, magic=magic)))
    out.append(
        Case(
            legacy_message(0, b"k", b"v", magic=0)
            + legacy_message(1, None, b"v1", magic=1, timestamp=5)
        )
    )
    commits = [
        Record(encode_offset_commit_key("g", "t", p), encode_offset_commit(p * 10, 1000, v), [], 1)
        for p, v in ((0, 0), (1, 1), (2, 3), (3, 4))
    ]
    commits.append(Record(encode_offset_commit_key("g", "t", 9), None, [], 2))
    commits.append(Record(encode_group_metadata_key("g"), None, [], 3))
    for codec in (COMPRESSION_NONE, COMPRESSION_ZSTD):
        out.append(Case(build_batch(commits, codec=codec), topic="__consumer_offsets"))
    out.append(
        Case(
            build_batch([Record(txn_key("tx"), None, [], 1)], codec=COMPRESSION_NONE),
            topic="__transaction_state",
        )
    )
    out.append(Case(offset_index_bytes([(i * 3 + 1, i * 100 + 50) for i in range(20)]), "index"))
    out.append(Case(time_index_bytes([(1000 + i, i * 3) for i in range(20)]), "timeindex"))
    out.append(
        Case(txn_index_bytes([(7, i * 10, i * 10 + 5, i * 10 + 6) for i in range(8)]), "txnindex")
    )
    out.append(
        Case(
            snapshot_bytes(
                [
                    SnapshotEntry(7, 1, 5, 100, 3, 1000, 2, -1),
                    SnapshotEntry(8, 0, 0, 200, 0, 2000, -1, 150),
                ]
            ),
            "snapshot",
        )
    )
    out.extend(_sample_dump())
    if corpus is not None and corpus.is_dir():
        out.extend(_corpus(corpus, per_kind, rng_seed))
    return out


def _sample_dump() -> list[Case]:
    import tempfile

    from decoders import discover
    from jobs.sample import write_sample_dump

    with tempfile.TemporaryDirectory() as d:
        write_sample_dump(d)
        return [
            Case(pathlib.Path(f.path).read_bytes(), f.info.kind, f.info.topic or "t", "sample")
            for f in discover([d])
            if f.info.kind in ("log", "index", "timeindex", "txnindex", "snapshot") and f.size
        ]


def _corpus(root: pathlib.Path, per_kind: int, rng_seed: int) -> list[Case]:
    rng = random.Random(rng_seed)
    out = []
    for ext in ("log", "index", "timeindex", "snapshot", "txnindex"):
        files = sorted(
            p for p in root.rglob(f"*.{ext}") if 0 < p.stat().st_size <= 16 * 1024 and p.is_file()
        )
        rng.shuffle(files)
        for p in files[:per_kind]:
            topic = p.parent.name.rsplit("-", 1)[0]
            out.append(Case(p.read_bytes(), ext, topic, "corpus"))
    return out


# -- the mutators --------------------------------------------------------------------------------
def entries(data: bytes) -> list[tuple[int, int]]:
    """(position, total length) of the whole entries at the start of a `.log`."""
    out, p = [], 0
    while p + 17 <= len(data):
        (size,) = struct.unpack_from(">i", data, p + 8)
        if size < 14 or p + 12 + size > len(data):
            break
        out.append((p, 12 + size))
        p += 12 + size
    return out


def fix_crc(buf: bytearray, p: int, n: int) -> None:
    if buf[p + 16] == 2 and n >= 21:
        struct.pack_into(">I", buf, p + 17, crc32c.crc32c(bytes(buf[p + 21 : p + n])))
    elif buf[p + 16] in (0, 1) and n >= 16:
        struct.pack_into(">I", buf, p + 12, zlib.crc32(bytes(buf[p + 16 : p + n])))


def _value(rng: random.Random, fmt: str) -> int:
    if rng.random() < 0.7:
        return rng.choice(LIMITS[fmt])
    bits = struct.calcsize(fmt) * 8
    signed = fmt[-1].islower()
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return rng.randint(lo, hi)


def m_header_field(rng, case: Case, others) -> bytes:
    ents = entries(case.data)
    if not ents:
        return m_bitflip(rng, case, others)
    buf = bytearray(case.data)
    p, n = rng.choice(ents)
    fields = V2_FIELDS if buf[p + 16] == 2 and n >= 61 else LEGACY_FIELDS
    off, fmt = rng.choice(fields)
    if p + off + struct.calcsize(fmt) <= len(buf):
        struct.pack_into(fmt, buf, p + off, _value(rng, fmt))
    if rng.random() < 0.6 and off not in (8, 16):
        fix_crc(buf, p, n)
    return bytes(buf)


def m_attributes(rng, case: Case, others) -> bytes:
    ents = entries(case.data)
    if not ents:
        return m_bitflip(rng, case, others)
    buf = bytearray(case.data)
    p, n = rng.choice(ents)
    if buf[p + 16] == 2 and n >= 23:
        attrs = struct.unpack_from(">h", buf, p + 21)[0]
        attrs ^= 1 << rng.randrange(7)
        if rng.random() < 0.3:
            attrs = (attrs & ~7) | rng.randrange(8)
        struct.pack_into(">h", buf, p + 21, attrs)
    else:
        buf[p + 17] ^= 1 << rng.randrange(8)
    if rng.random() < 0.7:
        fix_crc(buf, p, n)
    return bytes(buf)


def _varint(v: int) -> bytes:
    z = (v << 1) ^ (v >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _mutate_area(rng, area: bytes) -> bytes:
    """Replace a byte run inside a records area by a varint at a limit, or an overlong one."""
    if not area:
        return bytes([rng.randrange(256)])
    a = rng.randrange(len(area))
    b = min(len(area), a + rng.choice((1, 1, 2, 5, 10)))
    choice = rng.random()
    if choice < 0.5:
        v = rng.choice([0, -1, -2, 1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), len(area), 1 << 20])
        new = _varint(v)
    elif choice < 0.7:
        new = b"\xff" * rng.choice((5, 10, 11))
    elif choice < 0.85:
        new = b""
    else:
        new = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return area[:a] + new + area[b:]


def m_records(rng, case: Case, others) -> bytes:
    """Mutate inside a v2 records area (through its codec) and rebuild the batch around it."""
    v2 = [(p, n) for p, n in entries(case.data) if case.data[p + 16] == 2 and n >= 61]
    if not v2:
        return m_header_field(rng, case, others)
    p, n = rng.choice(v2)
    raw = bytearray(case.data[p : p + n])
    codec = struct.unpack_from(">h", raw, 21)[0] & 7
    payload = raw[61:]
    try:
        area = bytes(payload) if codec == 0 else decompress(codec, bytes(payload), 64 << 20)
    except Exception:  # noqa: BLE001 - a seed that does not decompress: mutate its bytes
        area, codec = payload, 0
    area = _mutate_area(rng, area)
    if rng.random() < 0.2:  # records count disagreeing with the area
        struct.pack_into(">i", raw, 57, _value(rng, ">i"))
    payload = compress(codec, area) if codec in (1, 2, 3, 4) else area
    batch = raw[:61] + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    if rng.random() < 0.8:
        struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return case.data[:p] + bytes(batch) + case.data[p + n :]


def m_payload(rng, case: Case, others) -> bytes:
    """Corrupt a compressed payload's bytes (and keep the CRC right, half the time)."""
    v2 = [(p, n) for p, n in entries(case.data) if case.data[p + 16] == 2 and n > 61]
    if not v2:
        return m_bitflip(rng, case, others)
    buf = bytearray(case.data)
    p, n = rng.choice(v2)
    for _ in range(rng.randint(1, 4)):
        i = p + 61 + rng.randrange(n - 61)
        buf[i] = rng.randrange(256)
    if rng.random() < 0.5:
        fix_crc(buf, p, n)
    return bytes(buf)


def m_bitflip(rng, case: Case, others) -> bytes:
    if not case.data:
        return bytes([rng.randrange(256)])
    buf = bytearray(case.data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf)


def m_truncate(rng, case: Case, others) -> bytes:
    if not case.data:
        return b""
    return case.data[: rng.randrange(len(case.data))]


def m_splice(rng, case: Case, others) -> bytes:
    other = rng.choice(others).data if others else case.data
    a = rng.randrange(len(case.data) + 1)
    b = rng.randrange(len(other) + 1)
    return case.data[:a] + other[b:]


def m_zero_range(rng, case: Case, others) -> bytes:
    if not case.data:
        return bytes(rng.randint(1, 4096))
    a = rng.randrange(len(case.data))
    b = rng.randint(a, len(case.data))
    zeros = bytes(b - a) if rng.random() < 0.7 else bytes(rng.randint(1, 1 << 16))
    return case.data[:a] + zeros + (case.data[b:] if rng.random() < 0.7 else b"")


def m_duplicate(rng, case: Case, others) -> bytes:
    ents = entries(case.data)
    if not ents:
        return case.data + case.data
    p, n = rng.choice(ents)
    return case.data[: p + n] + case.data[p : p + n] + case.data[p + n :]


def m_index_entry(rng, case: Case, others) -> bytes:
    size = {"index": 8, "timeindex": 12, "txnindex": 34, "snapshot": 46}.get(case.kind, 8)
    fields = {
        "index": [(0, ">i"), (4, ">i")],
        "timeindex": [(0, ">q"), (8, ">i")],
        "txnindex": [(0, ">h"), (2, ">q"), (10, ">q"), (18, ">q"), (26, ">q")],
        "snapshot": [
            (0, ">q"),
            (8, ">h"),
            (10, ">i"),
            (14, ">q"),
            (22, ">i"),
            (26, ">q"),
            (34, ">i"),
            (38, ">q"),
        ],
    }.get(case.kind, [(0, ">i")])
    base = 10 if case.kind == "snapshot" else 0
    n = (len(case.data) - base) // size
    buf = bytearray(case.data)
    if case.kind == "snapshot" and rng.random() < 0.3 and len(buf) >= 10:
        off, fmt = rng.choice([(0, ">h"), (2, ">I"), (6, ">i")])
        struct.pack_into(fmt, buf, off, _value(rng, fmt))
    elif n > 0:
        e = rng.randrange(n)
        off, fmt = rng.choice(fields)
        struct.pack_into(fmt, buf, base + e * size + off, _value(rng, fmt))
    if case.kind == "snapshot" and len(buf) >= 10 and rng.random() < 0.7:
        struct.pack_into(">I", buf, 2, crc32c.crc32c(bytes(buf[6:])))
    return bytes(buf)


LOG_MUTATORS = [
    m_header_field,
    m_header_field,
    m_attributes,
    m_records,
    m_records,
    m_payload,
    m_bitflip,
    m_truncate,
    m_splice,
    m_zero_range,
    m_duplicate,
]
FILE_MUTATORS = [m_index_entry, m_index_entry, m_bitflip, m_truncate, m_splice, m_zero_range]


def mutate(rng: random.Random, case: Case, pool: list[Case], rounds: int | None = None) -> Case:
    """One to three mutations of a case; splices draw on cases of the same kind."""
    same = [c for c in pool if c.kind == case.kind]
    data = case.data
    names = []
    for _ in range(rounds or rng.choice((1, 1, 1, 2, 3))):
        op = rng.choice(LOG_MUTATORS if case.kind == "log" else FILE_MUTATORS)
        names.append(op.__name__[2:])
        data = op(rng, dataclasses.replace(case, data=data), same)
    return dataclasses.replace(case, data=data, origin=f"{case.origin}:{'+'.join(names)}")
