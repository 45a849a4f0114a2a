"""Audit and decode on production-shaped dumps, with their floors and peers, in one run.

    python benchmarks/bench_production.py [--gb 1 4] [--large-gb 1] [--data /tmp/perf-data]
        [--codec lz4]

Dumps (generated once, kept under --data, never in the repository): production-shaped ones of
each size (:mod:`prodshape`: small batches of 5 records, an exactly-once Streams app, busy
`__consumer_offsets`), and for comparison the large-batch dump the older benchmarks used (the
``demo`` scenario grown with ``--scale``: 200 records of 1 KB per batch). One table per run:

- floors: the single-process header scan and the single-process deep decode (every table) of
  the same files, and Spark's own start-up (session, first action, first Python job);
- ``logreplay audit`` and ``logreplay decode`` (all tables): wall time, the same less Spark's
  start-up, per GB and per million batches; CPU seconds of every process (JVM, Python driver,
  Python workers) per GB and per million batches; peak RSS of the driver (JVM and Python) and
  of the largest Python worker;
- the data source alone (``--source``), as a user queries it: in a plain local session
  (``SparkSession.builder.master("local[2]")``, Spark's default JVM options, not the CLI's
  tuned ones) with the source registered, rows/s of ``.load().count()`` of the records table,
  the first query of the session and the same query again, and of ``.write.parquet``, per core
  against the single-process decode of the records table of the same files (rows per CPU
  second); its peer, in the same session: Spark's own Parquet source over the same records
  (those ``logreplay decode`` wrote), counted and written to Parquet again;
- with ``--small-driver MEM``, each production-shaped dump audited again with
  ``spark.driver.memory`` MEM: whether a larger dump needs a larger driver;
- instead, with ``--long-lived N...``: one long-lived TV1 Streams producer of N transactions
  (:mod:`simulator.long_lived`; ``--faults`` its faults variant, checked against its truth)
  against a production-shaped dump of the same size, audited in the same run: wall time and
  the largest Python worker's peak RSS (the task that judges the producer); ``--rounds N``:
  each pair's audits alternated N times, the median wall time and the ratio of the medians.

The machine is shared: compare figures within one run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import measure  # noqa: E402
import prodshape  # noqa: E402

ALL_TABLES = (
    "segments", "errors", "batches", "records", "offset_commits", "group_metadata",
    "group_records", "txn_log", "index_entries", "producer_snapshots", "aborted_txns",
)  # fmt: skip


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def floors(dump: str) -> dict:
    """Single-process header scan and deep decode of every file, in this process."""
    import decoders

    files = decoders.discover([dump])
    for f in sorted(files, key=lambda f: f.size)[:20]:  # compile the kernels before timing
        for deep in (False, True):
            for _ in decoders.iter_file(f, ("batches", "segments"), deep=deep):
                pass
    out = {}
    for name, tables, deep in (
        ("header scan", ("batches", "segments"), False),
        ("deep decode", ALL_TABLES, True),
        ("deep decode, records", ("records",), True),
    ):
        rows: dict[str, int] = {}
        w, c = time.perf_counter(), cpu_self()
        for f in files:
            for t, b in decoders.iter_file(f, tables, deep=deep):
                rows[t] = rows.get(t, 0) + b.num_rows
        out[name] = {"wall": time.perf_counter() - w, "cpu": cpu_self() - c, "rows": rows}
    return out


def make_dumps(args) -> list[tuple[str, str]]:
    dumps = []
    codec = prodshape.CODECS[args.codec]
    for gb in args.gb:
        path = os.path.join(args.data, f"prod-{gb:g}gb" + (f"-{args.codec}" if codec else ""))
        if not os.path.exists(path + ".complete"):
            print(f"generating {path}", file=sys.stderr)
            prodshape.generate(path, gb, codec=codec)
            open(path + ".complete", "w").close()
        dumps.append(("production", path))
    for gb in args.large_gb:
        path = os.path.join(args.data, f"large-{gb:g}gb")
        if not os.path.exists(path + ".complete"):
            from simulator import synth

            print(f"generating {path}", file=sys.stderr)
            synth("demo", path, seed=1, scale=128 * gb)
            open(path + ".complete", "w").close()
        dumps.append(("large batches", path))
    return dumps


def logreplay(args: list[str]) -> measure.Measured:
    exe = [sys.executable, "-m", "jobs.cli"]
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    m = measure.run([*exe, *args], env)
    if m.returncode not in (0, 1):  # audit exits 1 only with --gate failing
        print(m.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"logreplay {args[0]} failed ({m.returncode})")
    return m


def child(kind: str, dump: str, out: str, decoded: str = "") -> None:
    """Run inside a measured subprocess: Spark's start-up floor, or the data source's rates
    (and, given the records ``logreplay decode`` wrote, Spark's own Parquet rates over the
    same rows: the peer of a query that writes Parquet)."""
    t0 = time.perf_counter()
    if kind == "startup":
        from jobs.session import spark_session

        spark = spark_session(None, f"bench-{kind}")
    else:
        spark = user_session(f"bench-{kind}")
    res = {"session": time.perf_counter() - t0}
    t = time.perf_counter()
    spark.range(1).count()
    res["first_action"] = time.perf_counter() - t
    if kind == "startup":
        t = time.perf_counter()

        def ident(batches):
            yield from batches

        spark.range(1000).mapInArrow(ident, "id long").write.mode("overwrite").parquet(out)
        res["python_job"] = time.perf_counter() - t
    else:
        df = spark.read.format("kafka-segments").option("table", "records").load(dump)
        for name in ("count", "count_again"):
            t = time.perf_counter()
            res["rows"] = df.count()
            res[name] = time.perf_counter() - t
        t = time.perf_counter()
        df.write.mode("overwrite").parquet(os.path.join(out, "source"))
        res["write"] = time.perf_counter() - t
        # a query of offsets and timestamps naming its columns (the source builds no others)
        from pyspark.sql import functions as F

        stamps = (spark.read.format("kafka-segments").option("table", "records")
                  .option("columns", "offset,timestamp").load(dump))  # fmt: skip
        for name in ("columns", "columns_again"):
            t = time.perf_counter()
            got = stamps.agg(F.count("offset"), F.max("offset"), F.min("timestamp")).collect()[0]
            res[name] = time.perf_counter() - t
            assert got[0] == res["rows"], (got, res["rows"])
        if decoded:  # the peer: Spark's own Parquet reader and writer over the same rows
            parquet = spark.read.parquet(decoded)
            t = time.perf_counter()
            res["parquet_rows"] = parquet.count()
            res["parquet_count"] = time.perf_counter() - t
            # the Python data source API's own floor: the same rows, already Arrow, handed
            # over by a source that only reads them back (no decoding at all)
            spark.dataSource.register(_passthrough())
            files = sorted(
                os.path.join(d, f) for d, _s, fs in os.walk(decoded) for f in fs
                if f.endswith(".parquet")
            )  # fmt: skip
            import pyarrow.parquet as pq
            from pyspark.sql.pandas.types import from_arrow_schema

            # the files' own columns (a partition column of the directories is not in them)
            schema = from_arrow_schema(pq.read_schema(files[0]))
            handed = (spark.read.format("arrow-passthrough").schema(schema)
                      .option("files", "\n".join(files)).load())  # fmt: skip
            for name in ("passthrough_count", "passthrough_count_again"):
                t = time.perf_counter()
                res["passthrough_rows"] = handed.count()
                res[name] = time.perf_counter() - t
            t = time.perf_counter()
            parquet.write.mode("overwrite").parquet(os.path.join(out, "parquet"))
            res["parquet_write"] = time.perf_counter() - t
    print(json.dumps(res))


def _passthrough():
    """A Python data source that hands Spark the Parquet files it is given as Arrow batches,
    as they are: what Spark's Python data source path costs per row with no decoding at all
    (the floor of ``kafka-segments``' own rate). Made here, in ``__main__``, so that
    cloudpickle ships the classes by value to the workers."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Reader(DataSourceReader):
        def __init__(self, files: list[str]) -> None:
            self.files = files

        def partitions(self):
            return [InputPartition(f) for f in self.files]

        def read(self, partition):
            import pyarrow.parquet as pq

            yield from pq.ParquetFile(partition.value).iter_batches(10_000)

    class Passthrough(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow-passthrough"

        def reader(self, schema):
            return Reader(self.options["files"].split("\n"))

    return Passthrough


def user_session(app_name: str):
    """A session as a user makes one in a notebook: Spark's defaults (JVM options, memory, time
    zone), only local[2] to match the machine, on loopback; then the source registered."""
    from pyspark.sql import SparkSession

    from decoders.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def spawn_child(kind: str, dump: str, out: str, decoded: str = "") -> tuple[dict, measure.Measured]:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    m = measure.run([sys.executable, __file__, "--child", kind, dump, out, decoded], env)
    if m.returncode:
        print(m.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{kind} failed")
    return json.loads(m.stdout.strip().splitlines()[-1]), m


def mb(n: int) -> str:
    return f"{n / 1e6:,.0f}"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, nargs="*", default=[1, 4])
    ap.add_argument("--large-gb", type=float, nargs="*", default=[1])
    ap.add_argument("--data", default="/tmp/perf-data")
    ap.add_argument("--jobs", nargs="*", default=["audit", "decode"])
    ap.add_argument("--source", action="store_true", help="also measure the data source alone")
    ap.add_argument(
        "--codec",
        choices=sorted(prodshape.CODECS),
        default="none",
        help="the production-shaped dumps' compression.type (prodshape.py)",
    )
    ap.add_argument(
        "--small-driver",
        metavar="MEM",
        help="also audit each production-shaped dump with spark.driver.memory=MEM (e.g. 512m): "
        "whether a larger dump needs a larger driver",
    )
    ap.add_argument(
        "--long-lived",
        type=int,
        nargs="*",
        default=[],
        metavar="TRANSACTIONS",
        help="instead: audit one long-lived TV1 Streams producer with each number of "
        "transactions (simulator.long_lived), each against a production-shaped dump of the "
        "same size, in one table",
    )
    ap.add_argument(
        "--faults",
        action="store_true",
        help="with --long-lived: the faults variant (late split outcome, missing marker, "
        "write outside any transaction), whose findings are checked against its truth",
    )
    ap.add_argument(
        "--copies-apart",
        type=float,
        metavar="FRACTION",
        help="with --long-lived: also audit each dump as copied with its output partition, "
        "then its coordinator's partition, ending at FRACTION of its bytes (copies_apart.py)",
    )
    ap.add_argument(
        "--compacted-from",
        type=float,
        metavar="FRACTION",
        help="with --copies-apart: also audit each dump with its coordinator's partition "
        "compacted (the bytes before FRACTION gone, as the cleaner leaves a long-lived "
        "producer's) and copied at the --copies-apart fraction (copies_apart.py)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="with --long-lived: audit each dump of a pair N times, alternating, and show the "
        "median wall time, its range and the ratio of the medians",
    )
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    if args.child:
        child(*args.child)
        return
    os.makedirs(args.data, exist_ok=True)
    if args.long_lived:
        bench_long_lived(args)
        return
    dumps = make_dumps(args)
    scratch = os.path.join(args.data, "bench-out")
    shutil.rmtree(scratch, ignore_errors=True)
    startup = startup_floor(dumps[0][1], scratch)
    head = (
        "| dump | GB | M batches | what | wall s | wall - start-up s | s/GB | s/M batches | CPU s "
        "| CPU s/GB | CPU s/M batches | driver peak RSS MB (JVM + Python) | worker peak RSS MB |"
    )
    print("\n" + head)
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape, dump in dumps:
        bench_dump(args, scratch, startup, shape, dump)
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nload average at end {os.getloadavg()[0]:.2f} (2 cores, shared)")


def long_lived_dump(args, transactions: int) -> str:
    """The long-lived producer's dump of ``transactions`` (generated once under --data)."""
    from simulator.long_lived import TRANSACTIONS_PER_SCALE, history

    name = "long_lived_producer_faults" if args.faults else "long_lived_producer"
    path = os.path.join(args.data, f"{name}-{transactions}")
    if not os.path.exists(path + ".complete"):
        print(f"generating {path}", file=sys.stderr)
        t = time.perf_counter()
        truth = history(path, 1, transactions, args.faults, name, "")
        truth.write(os.path.join(path, "truth.json"))
        open(path + ".complete", "w").close()
        print(f"  {time.perf_counter() - t:.0f} s ({transactions / TRANSACTIONS_PER_SCALE:g} "
              f"units of --scale)", file=sys.stderr)  # fmt: skip
    return path


def bench_long_lived(args) -> None:
    """One table: each long-lived producer's dump and a production-shaped dump of the same size
    audited in this run: wall time, the largest Python worker's peak RSS (the task that judges
    the producer), the driver's, and the findings (the faults variant's against its truth).
    With ``--rounds N``, each dump of a pair audited N times, the pair's audits alternating
    (the machine is shared, and a neighbour's load lasts seconds to minutes: alternating puts
    both sides under it alike): the median wall time with the range, and the ratio of the
    medians against the production-shaped dump."""
    from replay.truthcheck import compare

    scratch = os.path.join(args.data, "bench-out")
    shutil.rmtree(scratch, ignore_errors=True)
    rounds = max(1, args.rounds)
    wall = "wall s" if rounds == 1 else f"wall s (median of {rounds}, range)"
    print(
        f"\n| dump | transactions | MB | {wall} | vs production-shaped | worker peak RSS MB "
        "| driver peak RSS MB (JVM + Python) | findings warning+ | truth |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in args.long_lived:
        dump = long_lived_dump(args, n)
        size = prodshape.dump_size(dump)
        peer = os.path.join(args.data, f"prod-{size / 1e9:.2f}gb")
        if not os.path.exists(peer + ".complete"):
            print(f"generating {peer}", file=sys.stderr)
            prodshape.generate(peer, size / 1e9)
            open(peer + ".complete", "w").close()
        dumps = [("long-lived TV1 producer", dump, f"{n:,}"), ("production-shaped", peer, ""),
                 *_copied_early(args, dump, n)]  # fmt: skip
        runs: dict[str, list[tuple[measure.Measured, int, str]]] = {p: [] for _, p, _ in dumps}
        for _ in range(rounds):
            for _what, path, _txns in dumps:
                out = os.path.join(scratch, os.path.basename(path))
                m = logreplay(["audit", path, "--out", out])
                runs[path].append((m, *_audit_verdict(out, path, compare)))
                shutil.rmtree(out, ignore_errors=True)
        peer_wall = statistics.median(m.wall for m, _, _ in runs[peer])
        for what, path, txns in dumps:
            measured = [m for m, _, _ in runs[path]]
            walls = sorted(m.wall for m in measured)
            median = statistics.median(walls)
            shown = (
                f"{median:.1f}" if rounds == 1 else f"{median:.1f} ({walls[0]:.1f}-{walls[-1]:.1f})"
            )
            verdicts = sorted({(loud, verdict) for _, loud, verdict in runs[path]})
            loud, verdict = verdicts[0]
            if len(verdicts) > 1:  # the rounds' findings differ: shown, never one picked
                loud = "/".join(str(v[0]) for v in verdicts)
                verdict = "differ between rounds"
            print(
                f"| {what} | {txns} | {prodshape.dump_size(path) / 1e6:,.0f} | {shown} | "
                f"{median / peer_wall:.2f}x | {mb(max(m.peak('python_worker') for m in measured))} | "
                f"{mb(max(m.peak('jvm') + m.peak('python_driver') for m in measured))} "
                f"| {loud} | {verdict} |",
                flush=True,
            )
    print(f"\nload average at end {os.getloadavg()[0]:.2f} (2 cores, shared)")


def _copied_early(args, dump: str, n: int) -> list[tuple[str, str, str]]:
    """With ``--copies-apart``: the long-lived dump as copied with its output partition, then
    its coordinator's `__transaction_state` partition, ending early, and with
    ``--compacted-from`` that partition also compacted (benchmarks/copies_apart.py)."""
    import copies_apart

    if args.copies_apart is None:
        return []
    rows = []
    for what, topic in (("output partition", "enriched"), ("coordinator", "__transaction_state")):
        target = f"{dump}-{topic.strip('_')}-at-{args.copies_apart:g}"
        copies_apart.copied_early(dump, target, copies_apart.largest_partition(dump, topic),
                                  args.copies_apart)  # fmt: skip
        rows.append((f"the same, its {what} copied at {args.copies_apart:.0%}", target, f"{n:,}"))
    if args.compacted_from is not None:
        start, end = args.compacted_from, args.copies_apart
        target = f"{dump}-transaction_state-from-{start:g}-at-{end:g}"
        partition = copies_apart.largest_partition(dump, "__transaction_state")
        copies_apart.compacted_and_copied_early(dump, target, partition, start, end)
        what = f"the same, its coordinator compacted to {start:.0%} and copied at {end:.0%}"
        rows.append((what, target, f"{n:,}"))
    return rows


def _audit_verdict(out: str, dump: str, compare) -> tuple[int, str]:
    """Findings of warning or above an audit wrote, and (with a truth.json) whether they are
    exactly the truth's anomalies."""
    import pyarrow.dataset as ds

    from replay.findings import at_least

    rows = ds.dataset(os.path.join(out, "findings"), format="parquet").to_table().to_pylist()
    loud = sum(at_least(r["severity"], "warning") for r in rows)
    truth_file = os.path.join(dump, "truth.json")
    if not os.path.exists(truth_file):
        return loud, ""
    with open(truth_file) as f:
        res = compare(json.load(f), rows)
    return loud, f"missed {len(res['missed'])}, unexpected {len(res['unexpected'])}"


def startup_floor(dump: str, scratch: str) -> float:
    """Spark's own start-up, measured once and printed: what every job's wall time is also
    shown without, so the jobs compare by the work they do."""
    load = os.getloadavg()[0]
    start, sm = spawn_child("startup", dump, os.path.join(scratch, "startup"))
    startup = start["session"] + start["first_action"] + start["python_job"]
    print(
        f"\nSpark start-up (local[2]): session {start['session']:.1f} s, first action "
        f"{start['first_action']:.1f} s, first Python job writing Parquet "
        f"{start['python_job']:.1f} s = {startup:.1f} s; driver peak RSS "
        f"{mb(sm.peak('jvm') + sm.peak('python_driver'))} MB; load average at start {load:.2f}"
    )
    return startup


def bench_dump(args, scratch: str, startup: float, shape: str, dump: str) -> None:
    """The table's rows of one dump: its single-process floors, each job, and (with
    ``--source``) the data source alone and its Parquet peer."""
    gb = prodshape.dump_size(dump) / 1e9
    fl = floors(dump)
    mbat = fl["header scan"]["rows"].get("batches", 0) / 1e6

    def row(what, wall, beyond, cpu, driver="", worker=""):
        print(
            f"| {shape} | {gb:.2f} | {mbat:.3f} | {what} | {wall:.1f} | {beyond} | "
            f"{(wall if beyond == '' else beyond) / gb:.1f} | "
            f"{(wall if beyond == '' else beyond) / mbat:.1f} | {cpu:.1f} | "
            f"{cpu / gb:.1f} | {cpu / mbat:.1f} | {driver} | {worker} |",
            flush=True,
        )

    for name in ("header scan", "deep decode", "deep decode, records"):
        f = fl[name]
        row(f"floor: {name}, 1 process", f["wall"], "", f["cpu"])
    runs = [(job, []) for job in args.jobs]
    if args.small_driver and shape == "production" and "audit" in args.jobs:
        small = os.path.join(scratch, "small-driver.yaml")
        with open(small, "w") as f:
            f.write(f"spark:\n  config:\n    spark.driver.memory: {args.small_driver}\n")
        runs.append(("audit", ["--conf", small]))
    decoded = ""  # the records `logreplay decode` wrote: the data source's Parquet peer
    for job, extra in runs:
        out = os.path.join(scratch, f"{job}-{os.path.basename(dump)}")
        bench_job(args, job, extra, dump, out, startup, row)
        if job == "decode" and args.source:
            decoded = os.path.join(out, "records")
        else:
            shutil.rmtree(out, ignore_errors=True)
    if args.source:
        res, _m = spawn_child("source", dump, os.path.join(scratch, "source"), decoded)
        print_source_rows(f"| {shape} | {gb:.2f} | {mbat:.3f} |", fl, res)
        shutil.rmtree(os.path.join(scratch, "source"), ignore_errors=True)
        if decoded:
            shutil.rmtree(os.path.dirname(decoded), ignore_errors=True)


def bench_job(args, job: str, extra: list[str], dump: str, out: str, startup: float, row) -> None:
    """One ``logreplay`` job over the dump, its row with the CPU seconds of each kind of
    process (an audit's with its findings: a clean production-shaped dump must give none)."""
    m = logreplay([job, dump, "--out", out, *extra])
    roles = {
        r: sum(p.cpu for p in m.procs.values() if p.role == r)
        for r in ("jvm", "python_driver", "python_worker")
    }
    found = ""
    if job == "audit":
        summary = json.loads(m.stdout.strip().splitlines()[-1])
        found = f", {summary['findings']['total']} findings"
    if extra:
        found += f", spark.driver.memory {args.small_driver}"
    row(
        f"logreplay {job}"
        + (" (all tables)" if job == "decode" else found)
        + f" [CPU s: JVM {roles['jvm']:.0f}, Python driver {roles['python_driver']:.0f}"
        + f", Python workers {roles['python_worker']:.0f}]",
        m.wall,
        round(m.wall - startup, 1),
        m.cpu,
        mb(m.peak("jvm") + m.peak("python_driver")),
        mb(m.peak("python_worker")),
    )


def print_source_rows(lead: str, fl: dict, res: dict) -> None:
    """The data source's rows (``lead``: the dump's first cells): its rates in a user's session
    per core against the single-process decode, then its peer, Spark's own Parquet source."""
    single = fl["deep decode, records"]["rows"]["records"] / fl["deep decode, records"]["cpu"]
    rates = {
        k: res["rows"] / res[k]
        for k in ("count", "count_again", "write", "columns", "columns_again")
    }
    print(
        f"{lead} data source, records, user's session: "
        + ", ".join(
            f"{label} {rates[k] / 1e6:.2f} M rows/s ({rates[k] / 2e6:.2f} M per core, "
            f"{rates[k] / 2 / single:.2f} of single)"
            for k, label in (
                ("count", ".count() first query"),
                ("count_again", ".count() again"),
                ("write", ".write.parquet"),
                ("columns", "offsets and timestamps (columns option)"),
                ("columns_again", "the same again"),
            )
        )
        + f"; single process {single / 1e6:.2f} M rows per CPU s | {res['count']:.1f} "
        "|  |  |  |  |  |  |  |  |",
        flush=True,
    )
    if "passthrough_count" in res:  # the API's floor: the same rows handed over undecoded
        floor = {k: res["passthrough_rows"] / res[k]
                 for k in ("passthrough_count", "passthrough_count_again")}  # fmt: skip
        print(
            f"{lead} peer: a Python data source handing over the same records as Arrow, "
            "undecoded (decode's Parquet read back), same session: "
            + ", ".join(
                f"{label} {floor[k] / 1e6:.2f} M rows/s ({floor[k] / 2 / single:.2f} of "
                "single per core)"
                for k, label in (
                    ("passthrough_count", ".count() first query"),
                    ("passthrough_count_again", ".count() again"),
                )
            )  # fmt: skip
            + f" | {res['passthrough_count_again']:.1f} |  |  |  |  |  |  |  |  |",
            flush=True,
        )
    if "parquet_write" in res:  # the same rows through Spark's own Parquet source
        peer = res["parquet_rows"] / res["parquet_write"]
        print(
            f"{lead} peer: the same records read from "
            f"`logreplay decode`'s Parquet, same session: .count() "
            f"{res['parquet_rows'] / res['parquet_count'] / 1e6:.2f} M rows/s, "
            f".write.parquet {peer / 1e6:.2f} M rows/s; the data source's .write.parquet "
            f"is {rates['write'] / peer:.2f} of Spark's own Parquet-to-Parquet "
            f"| {res['parquet_write']:.1f} |  |  |  |  |  |  |  |  |",
            flush=True,
        )


if __name__ == "__main__":
    main()
