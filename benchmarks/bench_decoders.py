"""Decoder benchmark: our header scan and deep decode against the physical floors and the peer
decoders (kafka-python, aiokafka's compiled reader), all in one run so ratios are comparable.

    ./dev bench [--mb 200] [--repeat 3] [--skip-kafka-python]

Data: segments of ~N MB generated with simulator.writer (100 records per batch, key 16 B,
value ~100 B, no headers), uncompressed and in every codec as Kafka's Java producer frames it
(lz4 frames of 64 KiB blocks, zstd, snappy in snappy-java's xerial framing, gzip), cached
under benchmarks/data/. Each decoder reads the same records with CRC validation and without
(ours: ``verify_crc``; the clients: their batches' ``validate_crc()``, which their consumers
call when ``check.crcs`` is on); the compressed files' peer is cramjam decompressing the same
payloads alone. Times are CPU seconds of this process (median of --repeat runs); MB/s are
file bytes / CPU s. Finally a 1 GiB segment is streamed in a child process to report its
peak RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import struct
import subprocess
import sys
import time
from functools import partial

import cramjam
import crc32c

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from decoders.segment import SegmentDecoder  # noqa: E402
from simulator.writer import Record, build_batch  # noqa: E402

DATA = os.path.join(HERE, "data")
RECORDS_PER_BATCH = 100
CODECS = {"plain": 0, "lz4": 3, "zstd": 4, "snappy": 2, "gzip": 1}
# the fixed-costs issue's line for compressed files: within this factor of cramjam's
# decompression plus the uncompressed walk
COMPRESSED_LINE = 1.25


def generate(path: str, codec: int, target_bytes: int) -> None:
    """Write batches until the uncompressed-equivalent size reaches target_bytes."""
    tmp = path + ".tmp"
    written_uncompressed, offset, ts = 0, 0, 1_700_000_000_000
    with open(tmp, "wb") as f:
        while written_uncompressed < target_bytes:
            recs = [
                Record(
                    f"{offset + i:016x}".encode(),
                    (
                        f'{{"id": {offset + i}, "name": "customer-{(offset + i) % 9973}", "amount": {(offset + i) * 37 % 100000}, "pad": "'
                        + "x" * 30
                        + '"}'
                    ).encode(),
                    (),
                    ts + i,
                )
                for i in range(RECORDS_PER_BATCH)
            ]
            plain = build_batch(recs, offset)
            written_uncompressed += len(plain)
            f.write(plain if codec == 0 else build_batch(recs, offset, codec=codec))
            offset += RECORDS_PER_BATCH
            ts += RECORDS_PER_BATCH
    os.replace(tmp, path)


def cpu(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def read_floor(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        while b := os.pread(fd, 16 << 20, pos):
            pos += len(b)
    finally:
        os.close(fd)


def crc_floor(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        pos, c = 0, 0
        while b := os.pread(fd, 16 << 20, pos):
            c = crc32c.crc32c(b, c)
            pos += len(b)
    finally:
        os.close(fd)


def ours_scan(path: str) -> int:
    with SegmentDecoder(path, deep=False) as dec:
        return sum(w.batches.num_rows for w in dec.windows())


def ours_deep(path: str, verify_crc: bool = True) -> int:
    n = 0
    with SegmentDecoder(path, deep=True, verify_crc=verify_crc) as dec:
        for w in dec.windows():
            n += sum(r.num_rows for r in w.records)
    return n


def _iterate(memory_records_cls, path: str, verify_crc: bool) -> int:
    """Touch every record's fields through a peer client's reader."""
    with open(path, "rb") as f:
        mr = memory_records_cls(f.read())
    n = 0
    while (b := mr.next_batch()) is not None:
        if verify_crc and not b.validate_crc():
            raise ValueError("CRC mismatch")
        for r in b:
            _ = (r.offset, r.timestamp, r.key, r.value, r.headers)
            n += 1
    return n


def kafka_python(path: str, verify_crc: bool = True) -> int:
    from kafka.record.memory_records import MemoryRecords

    return _iterate(MemoryRecords, path, verify_crc)


def aiokafka(path: str, verify_crc: bool = True) -> int:
    from aiokafka.record.memory_records import MemoryRecords

    return _iterate(MemoryRecords, path, verify_crc)


def _xerial_blocks(payload: bytes):
    """The raw snappy blocks of a snappy-java stream (16-byte header, then length-prefixed)."""
    pos = 16
    while pos + 4 <= len(payload):
        (size,) = struct.unpack_from(">i", payload, pos)
        yield payload[pos + 4 : pos + 4 + size]
        pos += 4 + size


def _snappy(payload: bytes) -> int:
    return sum(len(cramjam.snappy.decompress_raw(b)) for b in _xerial_blocks(payload))


def cramjam_floor(path: str, codec: int) -> int:
    """Decompress every batch payload with cramjam: the floor for compressed data."""
    dec = {
        1: lambda p: len(cramjam.gzip.decompress(p)),
        2: _snappy,
        3: lambda p: len(cramjam.lz4.decompress(p)),
        4: lambda p: len(cramjam.zstd.decompress(p)),
    }[codec]
    with open(path, "rb") as f:
        data = f.read()
    pos, out = 0, 0
    while pos + 61 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        out += dec(data[pos + 61 : pos + 12 + size])
        pos += 12 + size
    return out


def stream_rss(path: str) -> str:
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(HERE)!r})\n"
        "from decoders.segment import SegmentDecoder\n"
        "n=0\n"
        f"with SegmentDecoder({path!r}) as dec:\n"
        "    for w in dec.windows():\n"
        "        n += sum(r.num_rows for r in w.records)\n"
        "hwm = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print(n, hwm // 1024)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    return f"{int(out[0]):,} records, peak RSS {out[1]} MB"


def measure(name: str, path: str, uncompressed: int, args) -> list[tuple]:
    """Rows of (file, what, CPU s, MB/s of the file, MB/s uncompressed, records/s)."""
    size, records, codec = os.path.getsize(path), ours_deep(path), CODECS[name]
    plan = [
        ("read floor (pread 16 MiB)", partial(read_floor, path), args.repeat, False),
        ("crc32c over the file", partial(crc_floor, path), args.repeat, False),
        ("ours: header scan + CRC", partial(ours_scan, path), args.repeat, False),
    ]
    if codec:
        plan.append(
            (
                "cramjam decompress per batch",
                partial(cramjam_floor, path, codec),
                args.repeat,
                False,
            )
        )
    plan += [
        ("ours: deep decode to Arrow", partial(ours_deep, path), args.repeat, True),
        ("ours: deep decode, no CRC", partial(ours_deep, path, False), args.repeat, True),
        ("aiokafka (Cython)", partial(aiokafka, path), args.repeat, True),
        ("aiokafka (Cython), no CRC", partial(aiokafka, path, False), args.repeat, True),
    ]
    if not args.skip_kafka_python:
        plan.append(("kafka-python", partial(kafka_python, path), 1, True))
    out = []
    for what, fn, repeat, per_record in plan:
        seconds = cpu(fn, repeat)
        out.append(
            (
                name,
                what,
                seconds,
                size / seconds / 1e6,
                uncompressed / seconds / 1e6,
                records / seconds if per_record else None,
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--mb", type=int, default=200, help="uncompressed size of each generated segment"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-kafka-python", action="store_true", help="it takes ~10 s per 200 MB")
    ap.add_argument("--skip-rss", action="store_true")
    args = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    files = {}
    for name, codec in CODECS.items():
        path = os.path.join(DATA, f"{name}-{args.mb}mb.log")
        if not os.path.exists(path):
            print(f"generating {path} ...", file=sys.stderr)
            generate(path, codec, args.mb << 20)
        files[name] = path

    ours_deep(files["plain"])  # compile (numba cache) outside the timings
    rows = []
    for name, path in files.items():
        rows += measure(name, path, os.path.getsize(files["plain"]), args)

    print("\n| file | what | CPU s | MB/s (file) | MB/s (uncompressed) | records/s |")
    print("|---|---|---:|---:|---:|---:|")
    for name, what, s, mbs, umbs, rps in rows:
        print(
            f"| {name} | {what} | {s:.3f} | {mbs:,.0f} | {umbs:,.0f} | {'' if rps is None else f'{rps / 1e6:.2f} M'} |"
        )
    by = {(n, w): s for n, w, s, _, _, _ in rows}
    print()
    walk = by[("plain", "ours: deep decode to Arrow")]
    for name in files:
        ours, aio = by[(name, "ours: deep decode to Arrow")], by[(name, "aiokafka (Cython)")]
        bare = by[(name, "ours: deep decode, no CRC")] / by[(name, "aiokafka (Cython), no CRC")]
        line = f"{name}: deep decode {aio / ours:.1f}x aiokafka with CRC, {1 / bare:.1f}x without"
        if (name, "cramjam decompress per batch") in by:
            floor = by[(name, "cramjam decompress per batch")]
            line += (
                f"; {ours:.3f} s against {COMPRESSED_LINE} x (cramjam {floor:.3f} s + the "
                f"uncompressed walk {walk:.3f} s) = {COMPRESSED_LINE * (floor + walk):.3f} s"
            )
        print(line)
    if not args.skip_rss:
        big = os.path.join(DATA, "plain-1gb.log")
        if not os.path.exists(big):
            with open(files["plain"], "rb") as src, open(big + ".tmp", "wb") as dst:
                chunk = src.read()
                while dst.tell() < (1 << 30):
                    dst.write(chunk)
            os.replace(big + ".tmp", big)
        print(f"1 GiB segment streamed, deep: {stream_rss(big)}")
    # (ru_maxrss survives exec on Linux, so the child reads its own VmHWM instead)
    print(f"bench process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB")


if __name__ == "__main__":
    main()
