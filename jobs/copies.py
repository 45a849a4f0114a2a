"""Output tables that are a scratch table's rows, filtered and projected: copied by pyarrow in
one Spark job, not each planned, shuffled and sorted as a Spark query.

Most of the audit's tables come out of the scan's tasks already made (replay.replicas: the
producer states, LSO changes, partitions, coordinator transactions, group generations and
offset timeline of every replica; the decoder's segments and errors): what their output needs
is to keep the chosen replicas' rows of one kind and lay them out in the table's columns. As
Spark queries each was two or three small jobs (read, shuffle, sort, write) whose cost is the
driver's planning and scheduling, several seconds of a small dump's audit. Here each table is
one task or a few (``files``), each reading its share of the scratch files in order, a batch
at a time (memory bounded by a batch, not by the table), and writing through the same
whole-or-nothing task files as every output (jobs.output._TaskFiles): the rows keep the scan's
order (its tasks and the replicas within them follow from the input and the configuration),
so a rerun of the same run id writes the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from decoders.planning import TaskPlans
from replay.plan import LOOKUP_KEYS, Copied
from replay.tables import CLUSTER

BATCH_ROWS = 65_536
# a task reads, decodes and compresses on its own thread: Spark runs a task on each core, and
# Arrow's pool threads add only their hand-offs (the cross-log judgement of a long-lived
# producer's million transactions, on the audit's longest chain: 2.29-2.33 -> 2.08-2.23 CPU
# s without them; a Parquet read ~10% less)
THREADS = False


@dataclass(frozen=True)
class CopyTask:
    """One output file's worth of a copied table: scratch files read in order."""

    table: str
    part: int  # the output file's number within its table
    copied: Copied
    files: tuple[tuple[str, str | None], ...]  # (scratch path, its partition value)
    partition_by: str | None  # the scratch files' partition column, if they are partitioned
    schema: object  # the output's Arrow schema
    lookup: tuple[str, ...] = ()  # the files of its lookup table (Copied.lookup), if any
    # of a table the scan's tasks wrote in part (jobs.scan.ScanWritten): the partitions
    # several brokers hold, the only ones whose rows it copies
    shared: frozenset | None = None


def plan_copies(scratch, wanted: dict[str, tuple[Copied, int]],
                lookups: dict[str, dict] | None = None) -> list[CopyTask]:  # fmt: skip
    """Tasks of every table of ``wanted`` (name -> (how, files)): each table's scratch files
    split in order into at most ``files`` runs of about equal rows; ``lookups``: the entries
    (jobs.output.write_table) of the lookup tables written in the scratch area."""
    from pyspark.sql.pandas.types import to_arrow_schema

    tasks = []
    written = scratch.opts.written
    for table, (copied, files) in wanted.items():
        shared = written.shared if written is not None and table in written.tables else None
        if shared is not None and not shared:
            continue  # every row written by the scan's tasks
        entry = scratch.entries[copied.source]
        # a replay table's files are each of one kind of row, its partition (jobs.scan)
        read = [f for f in entry["files"]
                if f["rows"] and (copied.out is None or f.get("partition") == copied.out)]  # fmt: skip
        listed = [(f["path"], f.get("partition")) for f in read]
        rows = [f["rows"] for f in read]
        arrow = to_arrow_schema(copied.schema, timezone="UTC")
        lookup = ()
        if copied.lookup is not None:
            lookup = tuple(f["path"] for f in (lookups or {})[copied.lookup]["files"])
        for part, run in enumerate(in_runs(listed, rows, max(1, files))):
            tasks.append(CopyTask(table, part, copied, tuple(run), entry.get("partition_by"),
                                  arrow, lookup, shared))  # fmt: skip
    return tasks


def in_runs(listed: list, rows: list[int], n: int) -> list[list]:
    """``listed`` cut in order into at most ``n`` runs of about equal ``rows``."""
    total = sum(rows)
    if total == 0:
        return []
    runs: list[list] = [[]]
    done = 0
    for item, r in zip(listed, rows, strict=True):
        if runs[-1] and done >= total * len(runs) / n:
            runs.append([])
        runs[-1].append(item)
        done += r
    return runs


def copy_tables(spark, scratch, wanted: dict[str, tuple[Copied, int]], out, key: str,
                kill: str | None = None, lookups: dict[str, dict] | None = None
                ) -> dict[str, dict]:  # fmt: skip
    """Write every table of ``wanted`` under ``out`` from the scratch area, in one Spark job
    (one task per output file); each table's entry for the commit record, as
    jobs.output.write_table gives it. ``lookups``: the scratch entries of the lookup tables
    the copies join (:attr:`replay.plan.Copied.lookup`)."""
    from jobs.output import described, table_entry

    tasks = plan_copies(scratch, wanted, lookups)
    base, area = out.uri, scratch.area.uri
    plans = TaskPlans(tasks)  # each task unpickles its own

    def run(batches):  # no hints: Spark infers its UDF type from them
        import pyarrow as pa
        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()
        for b in batches:
            for i in b.column(0).to_pylist():
                reports = copy_task(plans[i], area, base, key, attempt, kill)
                yield pa.RecordBatch.from_arrays(
                    [pa.array([json.dumps(r) for r in reports], pa.string())], names=["report"]
                )

    listed: dict[str, list[dict]] = {t: [] for t in wanted}
    if tasks:
        n = len(tasks)
        names = ", ".join(wanted)
        with described(spark, f"logreplay: copy {names}"):
            rows = spark.range(0, n, 1, n).mapInArrow(run, "report string").collect()
        for r in rows:
            rep = json.loads(r["report"])
            listed[rep["table"]].append({"path": rep["path"], "rows": rep["rows"]})
    return {  # the files the scan's tasks wrote first (jobs.scan.ScanWritten)
        table: table_entry(
            base, table, key, copied.schema, scratch.written.get(table, []) + listed[table]
        )  # fmt: skip
        for table, (copied, _files) in wanted.items()
    }


def copy_task(task: CopyTask, area: str, base: str, key: str, attempt: int,
              kill: str | None = None) -> list[dict]:  # fmt: skip
    """One task: its scratch files' rows, kept and projected, into one output file."""
    import pyarrow.parquet as pq

    from decoders import seams
    from jobs.output import OutputDir, _TaskFiles, task_files

    scratch = OutputDir(area)
    lookup = Lookup.read(scratch, task.lookup) if task.lookup else None
    sink = _TaskFiles(base, task.table, task.part, attempt, key, task.schema, None)
    first = True
    try:
        for path, value in task.files:
            with scratch.fs.open_input_file(scratch.path(path)) as f:
                file = pq.ParquetFile(f)
                wanted = read_columns(task, file.schema_arrow.names)
                for batch in file.iter_batches(BATCH_ROWS, columns=wanted, use_threads=THREADS):
                    rows = project(batch, task, value, lookup)
                    if rows.num_rows:
                        sink.write(rows)
                        if first and kill:
                            seams.reached(kill)
                        first = False
    except BaseException:
        sink.abort()
        raise
    return [{"table": task.table, **f} for f in task_files(sink.close())]


class Lookup:
    """A copy's lookup table (:attr:`replay.plan.Copied.lookup`), held whole by the task: one
    row per key (:data:`replay.plan.LOOKUP_KEYS`, a transactional producer id of a cluster:
    as many as the coordinators' producer ids, not their transactions). A lookup written by
    several tasks (the cross-log runs: replay.crosslog_runs.ProducerIds) may have a key's row
    in several files: they combine as its query (replay.plan._txn_ids) would have made it
    whole, the greatest of each column (replay.tables.greatest_by)."""

    def __init__(self, table) -> None:
        import pyarrow.compute as pc

        from replay.tables import greatest_by

        self.table = greatest_by(table, LOOKUP_KEYS)
        self.clusters = pc.unique(self.table.column(LOOKUP_KEYS[0]).combine_chunks())
        self.keys = _int_keys(self.table, self.clusters)  # None: a producer id out of span
        self.text_keys = None

    @classmethod
    def read(cls, scratch, paths: tuple[str, ...]) -> Lookup:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pieces = []
        for path in paths:
            with scratch.fs.open_input_file(scratch.path(path)) as f:
                pieces.append(pq.read_table(f))
        return cls(pa.concat_tables(pieces))

    def columns(self, batch) -> dict:
        """The lookup's other columns for each row of ``batch`` (null where its key has no
        row), as a left join by key gives them, in the batch's order."""
        import pyarrow.compute as pc

        keys = None if self.keys is None else _int_keys(batch, self.clusters)
        if keys is not None:
            at = pc.index_in(keys, value_set=self.keys)
        else:
            if self.text_keys is None:
                self.text_keys = _keys(self.table)
            at = pc.index_in(_keys(batch), value_set=self.text_keys)
        return {
            name: self.table.column(name).take(at)
            for name in self.table.column_names
            if name not in LOOKUP_KEYS
        }


# a producer id below this (Kafka's are allocated upwards from 0, a block at a time) and its
# cluster's rank among a lookup's few make one int64 key (:func:`_int_keys`)
PRODUCER_ID_SPAN = 1 << 56


def _int_keys(t, clusters):
    """Each row's :data:`replay.plan.LOOKUP_KEYS` as one int64: its cluster's rank among
    ``clusters`` (a lookup's own) times :data:`PRODUCER_ID_SPAN`, plus its producer id; null
    where the cluster is not among them (no row of the lookup has it) or the producer id is
    null. None where a producer id is outside [0, span): then :func:`_keys`'s text, the same
    join (a long-lived producer's five million transactions: the text keys were a sixth of
    their copy)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cluster, producer = (t.column(k) for k in LOOKUP_KEYS)
    low, high = pc.min_max(producer).values()
    if low.is_valid and (low.as_py() < 0 or high.as_py() >= PRODUCER_ID_SPAN):
        return None
    rank = pc.index_in(cluster, value_set=clusters).cast(pa.int64())
    return pc.add(pc.multiply(rank, PRODUCER_ID_SPAN), producer.cast(pa.int64()))


def _keys(t):
    """Each row's :data:`replay.plan.LOOKUP_KEYS` as one text (a cluster label holds no NUL)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cluster, producer = (t.column(k) for k in LOOKUP_KEYS)
    return pc.binary_join_element_wise(cluster, pc.cast(producer, pa.string()), "\0")


def read_columns(task: CopyTask, present: list[str]) -> list[str]:
    """The scratch file's columns :func:`project` reads, in the file's order: a copied table
    keeps a few of them; the others are never decoded."""
    from replay.replicas import REPLICA_BROKER

    wanted = set(task.schema.names)
    if task.copied.replicas is not None or task.shared is not None:
        wanted |= {CLUSTER, "replica_topic", "replica_partition", REPLICA_BROKER}
    return [c for c in present if c in wanted]


def project(batch, task: CopyTask, partition_value, lookup: Lookup | None = None):
    """The rows of ``batch`` (of a file of the table's kind of row, if it has one:
    :func:`plan_copies`) the table keeps, in its output columns and types; with a ``lookup``,
    its columns joined by key."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from decoders.columns import const
    from replay.replicas import held_once, kept_mask

    keep = kept_mask(batch, task.copied.replicas)
    if task.shared is not None:  # the rows the scan's tasks did not write
        apart = pc.invert(held_once(batch, task.shared))
        keep = apart if keep is None else pc.and_(keep, apart)
    if keep is not None:
        keep = pc.fill_null(keep, False)
        if keep.true_count < len(keep):  # (every row kept: no copy)
            batch = batch.filter(keep)
    n = batch.num_rows
    joined = lookup.columns(batch) if lookup is not None else {}
    columns = []
    for field in task.schema:
        if field.name == task.partition_by and field.name not in batch.schema.names:
            col = const(partition_value, n, pa.string())
        elif field.name in joined:
            col = joined[field.name]
        else:
            col = batch.column(field.name)
        columns.append(_as(col, field.type))
    return pa.Table.from_arrays(columns, schema=task.schema)


def _as(col, target):
    """``col`` as ``target``: epoch milliseconds become UTC timestamps (as Spark's
    ``timestamp_millis`` makes them, overflow an error); the rest a plain cast."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from decoders.columns import as_type

    if pa.types.is_timestamp(target) and pa.types.is_integer(col.type):
        return pc.multiply_checked(pc.cast(col, pa.int64()), 1000).cast(target)
    return as_type(col, target)
