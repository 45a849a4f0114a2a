"""A partition replay's state carried through JSON (replay.carried) loses nothing: replaying a
log whole, or its first part, carrying the state and replaying the rest from it, gives the same
findings, transactions and LSO changes (the two parts' together), and the same open
transactions, producer states and summary at the end. Over production-shaped traffic, every
simulated scenario and the same batches damaged at random, each cut at random points (inside
transactions, runs of plain batches, stretches of one transactional producer). No Spark."""

from __future__ import annotations

import contextlib
import functools
import json
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import decoders
from decoders.planning import ByteRange
from replay.carried import STATE_VERSION, carry, resume
from replay.grouped import COORDINATOR_COLUMNS
from replay.partition import Config, PartitionReplay, _replay_columns, cleaner_leftovers_end
from tests.test_partition_runs import SAME_PARTITIONS, _damaged, _partitions, _table
from tests.whole_tables import production_dump

CONFIG = Config(producer_id_expiration_ms=86_400_000)


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    return production_dump(tmp_path_factory, seed=6)


def _ordered(bt: pa.Table) -> pa.Table:
    t = _replay_columns(bt)
    return t.take(pc.sort_indices(t, [("base_offset", "ascending")]))  # stable, as run()


def _summary(r: PartitionReplay) -> dict:
    """What a replay gives at the end besides the rows it handed on."""
    return {
        "open": r.open_transactions(),
        "states": r.states(),
        "complete_from": r.complete_from(),
        "copy_end": r.copy_end_timestamp(),
        "lso": r.lso(),
        **{k: getattr(r, k) for k in ("log_start", "log_end", "data_records", "first_timestamp",
                                      "sequence_batches", "cleaned_markers", "overlaps")},
        # the batch that reaches the log end, but its file: the path as a run names it
        "highest": tuple(v for i, v in enumerate(r.highest) if i != 1),
    }  # fmt: skip


def _rows(*replays: PartitionReplay) -> dict[str, list[dict]]:
    return {
        kind: [row for r in replays for row in getattr(r, kind)]
        for kind in ("findings", "transactions", "lso_changes")
    }


def _same_when_carried(topic: str, partition: int, t: pa.Table, cuts: list[int]) -> None:
    cleaned = cleaner_leftovers_end(t)
    for k in cuts:
        # the same two pieces in one replay: a replica's first piece (its first segment read)
        # gives its first timestamp
        pieces = [t.slice(0, k), t.slice(k)]
        whole = PartitionReplay(topic, partition, CONFIG, cleaned).run_in_order(pieces)
        first = PartitionReplay(topic, partition, CONFIG, cleaned).run_in_order([t.slice(0, k)])
        state = json.loads(json.dumps(carry(first)))
        rest = resume(state, CONFIG).run_in_order([t.slice(k)])
        where = (topic, partition, k, t.num_rows)
        assert _rows(first, rest) == _rows(whole), where
        assert _summary(rest) == _summary(whole), where


def _cuts(n: int, rng: random.Random, most: int = 4) -> list[int]:
    return sorted(rng.sample(range(1, n), min(most, n - 1))) if n > 1 else []


def _check_dump(root: str, rng: random.Random) -> int:
    checked = 0
    for (_broker, topic, partition), (bt, _side) in sorted(_partitions(root).items()):
        t = _ordered(bt)
        _same_when_carried(topic, partition, t, _cuts(t.num_rows, rng))
        checked += t.num_rows > 1
    return checked


def test_production_shaped_partitions_carry_their_state(production):
    assert _check_dump(production, random.Random(1)) > 10


@pytest.mark.sweep  # every scenario: in ./dev test, not the inner loop
def test_every_scenario_s_partitions_carry_their_state(sim_all):
    rng = random.Random(2)
    checked = sum(_check_dump(str(d), rng) for d in sorted(sim_all.iterdir())
                  if d.is_dir() and d.name not in SAME_PARTITIONS)  # fmt: skip
    assert checked > 100


def test_damaged_partitions_carry_their_state(production):
    rng = random.Random(3)
    parts = _partitions(production)
    keys = sorted(k for k, (bt, _) in parts.items() if bt.num_rows > 20)
    for n in range(40):
        key = keys[n % len(keys)]
        rows = _damaged(parts[key][0].to_pylist(), rng)
        t = _ordered(_table(rows))
        _same_when_carried(key[1], key[2], t, _cuts(t.num_rows, rng, 2))


def test_a_state_of_another_layout_is_refused():
    state = carry(PartitionReplay("t", 0, CONFIG))
    assert resume(json.loads(json.dumps(state)), CONFIG).producers == {}
    with pytest.raises(ValueError, match="layout"):
        resume({**state, "version": STATE_VERSION + 1}, CONFIG)


# -- a later copy of the same logs goes on from the state a run published --------------------------


def _headers(f) -> list[dict]:
    rows = []
    for table, b in decoders.iter_file(f, ["batches"], deep=False):
        if table == "batches":
            rows += b.select(["base_offset", "position"]).to_pylist()
    return rows


def _earlier_copy(later: str, earlier: str, rng: random.Random) -> None:
    """``earlier``: the same dump as ``later`` copied at an earlier moment: each partition's
    log cut at a random batch (the segment that held it ends there, later segments and the cut
    segment's indexes are not there yet)."""
    import os
    import shutil

    shutil.copytree(later, earlier)
    logs: dict[tuple, list] = {}
    for f in decoders.discover([later]):
        if f.kind == "log" and f.info.topic is not None:
            logs.setdefault((f.log_dir, f.info.topic, f.info.partition), []).append(f)
    for segments in logs.values():
        segments.sort(key=lambda f: f.info.base_offset)
        batches = [(f, h["position"]) for f in segments for h in _headers(f)]
        if len(batches) < 4:
            continue
        f, position = batches[rng.randrange(len(batches) // 3, len(batches))]
        mine = os.path.join(earlier, os.path.relpath(f.path, later))
        os.truncate(mine, position)
        stem = mine[: -len(".log")]
        for ext in (".index", ".timeindex", ".txnindex"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(stem + ext)
        for g in segments:
            if g.info.base_offset > f.info.base_offset:
                gone = os.path.join(earlier, os.path.relpath(g.path, later))[: -len(".log")]
                for ext in (".log", ".index", ".timeindex", ".txnindex"):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(gone + ext)


def _batches_in(ranges) -> pa.Table:
    from tests.test_partition_runs import _millis

    parts = [
        b
        for r in ranges
        for table, b in decoders.iter_file(
            r.file, ["batches"], deep=False, start=r.start, stop=r.stop
        )  # fmt: skip
        if table == "batches"
    ]
    if not parts:
        return None
    return _ordered(_millis(pa.Table.from_batches(parts)))


def test_a_later_copy_goes_on_from_the_state_a_run_published(production, tmp_path):
    from replay.local import audit_local
    from replay.points import resume_from

    earlier = str(tmp_path / "earlier")
    _earlier_copy(production, earlier, random.Random(4))
    states = audit_local([earlier])["replay_states"]
    before, after = _partitions(earlier), _partitions(production)
    files = decoders.discover([production])
    went_on = internal = 0
    for row in states:
        key = (row["broker"], row["topic"], row["partition"])
        logs = [f for f in files if f.kind == "log" and (f.info.broker, f.info.topic,
                                                          f.info.partition) == key]  # fmt: skip
        where = resume_from(row, logs)
        assert where.carried and where.reason is None, (key, where.reason)
        first = _ordered(before[key][0])
        whole = _ordered(after[key][0])
        new = _batches_in(where.ranges)
        # what the later copy holds past the published point, and nothing else
        assert (new.num_rows if new is not None else 0) == whole.num_rows - first.num_rows, key
        cleaned = cleaner_leftovers_end(whole)
        topic, partition = row["topic"], row["partition"]
        judged = PartitionReplay(topic, partition, CONFIG, cleaned).run_in_order([first])
        rest = resume(json.loads(row["state"]), CONFIG, cleaned_upto=cleaned)
        if new is not None:
            rest.run_in_order([new])
            went_on += 1
        full = PartitionReplay(topic, partition, CONFIG, cleaned).run_in_order(
            [whole.slice(0, first.num_rows), whole.slice(first.num_rows)]
        )
        assert _rows(judged, rest) == _rows(full), key
        assert _summary(rest) == _summary(full), key
        if row["topic"] in ("__transaction_state", "__consumer_offsets"):
            internal += _records_went_on(row, earlier, production, where.ranges)
        else:
            assert row["records_state"] is None
    assert went_on > 10
    assert internal > 0


def _decoded(ranges, tables: list[str]) -> dict[str, pa.Table]:
    """The decoded tables of byte ranges (deep)."""
    parts: dict[str, list] = {t: [] for t in tables}
    for r in ranges:
        for table, b in decoders.iter_file(r.file, tables, start=r.start, stop=r.stop):
            if table in parts:
                parts[table].append(b)
    return {t: pa.Table.from_batches(b, schema=decoders.TABLES[t]) for t, b in parts.items()}


@functools.lru_cache(maxsize=4)
def _txn_log_of(root: str) -> pa.Table:
    """A dump's `__transaction_state` records, decoded once for all its partitions."""
    from tests.test_partition_runs import _millis

    return _millis(decoders.read_dump([root], ["txn_log"])["txn_log"])


@functools.lru_cache(maxsize=4)
def _groups_of(root: str) -> list:
    """A dump's `__consumer_offsets` partitions (tests.test_group_blocks._of_dump), decoded
    once for all of them."""
    from tests.test_group_blocks import _of_dump

    return _of_dump(root)


def _records_went_on(row: dict, earlier: str, later: str, ranges) -> int:
    """An internal topic's partition: the coordinator's (or the groups') replay goes on from
    the state the run published, over the records past the point in the later copy, to the
    rows a replay of the later copy's records gives past those the earlier copy's gave (its
    replay without handing on what was still open at its end)."""

    from replay.carried import resume_coordinator, resume_groups
    from replay.coordinator import CoordinatorReplay
    from replay.grouped import (
        LOG_ORDER,
        commit_events,
        marker_events,
        metadata_events,
        txn_latest_epochs,
        txn_log_blocks,
    )
    from replay.groups import GroupsReplay
    from tests.test_group_blocks import of_tables
    from tests.test_partition_runs import _millis

    state = json.loads(row["records_state"])
    key = (row["broker"], row["partition"])
    runs: list[dict[str, list]] = []

    def emit(kind, r):
        runs[-1].setdefault(kind, []).append(r)

    def emit_table(kind, t):
        runs[-1].setdefault(kind, []).extend(t.to_pylist())

    def fed(replay, blocks, finish: bool) -> dict:
        runs.append({})
        for block in blocks:
            replay.block(block)
        if finish:
            replay.finish()
        return runs[-1]

    if row["topic"] == "__transaction_state":

        def mine(root):
            t = _txn_log_of(root)
            t = t.filter(pc.and_(pc.equal(t.column("broker"), key[0]),
                                 pc.equal(t.column("log_partition"), key[1])))  # fmt: skip
            return t.select(list(COORDINATOR_COLUMNS)) if t.num_rows else None

        before, whole = mine(earlier), mine(later)
        new = _millis(_decoded(ranges, ["txn_log"])["txn_log"]).select(list(COORDINATOR_COLUMNS))
        if whole is None:
            return 0
        latest = txn_latest_epochs(whole)
        complete_from = {p: o for p, o in state["complete_from"]}
        full = fed(CoordinatorReplay(complete_from, latest, emit, emit_table),
                   txn_log_blocks([whole]), True)  # fmt: skip
        first = fed(CoordinatorReplay(complete_from, latest, emit, emit_table),
                    [] if before is None else txn_log_blocks([before]), False)  # fmt: skip
        rest = fed(resume_coordinator(state, txn_latest_epochs(new), emit, emit_table),
                   txn_log_blocks([new]), True)  # fmt: skip
    else:

        def events(parts):
            if not parts:
                return None
            part, commits, metadata, markers = parts[0]
            t = pa.concat_tables([commit_events(commits), metadata_events(metadata),
                                  marker_events(part, markers)], promote_options="permissive")  # fmt: skip
            return t.take(pc.sort_indices(t, LOG_ORDER))

        def mine(parts):
            return [p for p in parts if p[0] == row["partition"]]

        before = events(mine(_groups_of(earlier)))
        whole = events(mine(_groups_of(later)))
        decoded = _decoded(ranges, ["offset_commits", "group_metadata", "batches"])
        new = events(mine(of_tables(decoded)))
        if whole is None:
            return 0

        def blocks(t):
            import replay.tables as T

            return [] if t is None else t.to_batches(max_chunksize=T.COLUMN_BLOCK_ROWS)

        groups = {"broadcast-app"}
        full = fed(GroupsReplay(groups, emit, emit_table), blocks(whole), True)
        first = fed(GroupsReplay(groups, emit, emit_table), blocks(before), False)
        rest = fed(resume_groups(state, groups, emit, emit_table), blocks(new), True)
    for kind in set(full) | set(first) | set(rest):
        n = len(first.get(kind, []))
        assert first.get(kind, []) == full.get(kind, [])[:n], (key, kind)
        assert rest.get(kind, []) == full.get(kind, [])[n:], (key, kind)
    return 1


# -- the log changed between the two copies ---------------------------------------------------------


def _log(root, n: int = 24) -> None:
    """One idempotent producer's ``n`` batches in segments of about five batches."""
    from simulator.writer import PartitionWriter, Record, build_batch

    w = PartitionWriter(str(root), "t", 0, segment_bytes=5 * 90)
    for i in range(n):
        recs = [Record(b"k", b"v" * 8, timestamp=1_000 + i)]
        w.append(build_batch(recs, producer_id=7, producer_epoch=0, base_sequence=i))
    w.close()


def _segments(root) -> list:
    return sorted((f for f in decoders.discover([str(root)]) if f.kind == "log"),
                  key=lambda f: f.info.base_offset)  # fmt: skip


def _published(root, upto: int) -> dict:
    """The replay_states row of a run that read the log's first ``upto`` batches."""
    from replay.carried import carried_row

    t = _batches_in([ByteRange(f, 0, f.size) for f in _segments(root)]).slice(0, upto)
    return carried_row(PartitionReplay("t", 0, CONFIG).run_in_order([t]), None)


def _offsets(where) -> list[int]:
    t = _batches_in(where.ranges)
    return [] if t is None else t.column("base_offset").to_pylist()


def test_the_log_rolled_on_after_the_point(tmp_path):
    from replay.points import resume_from

    _log(tmp_path)
    row = _published(tmp_path, 7)
    where = resume_from(row, _segments(tmp_path))
    assert (where.carried, where.reason) == (True, None)
    assert _offsets(where) == list(range(7, 24))
    nothing_new = resume_from(_published(tmp_path, 24), _segments(tmp_path))
    assert (nothing_new.carried, nothing_new.reason, _offsets(nothing_new)) == (True, None, [])


def test_retention_deleted_the_segment_of_the_point(tmp_path):
    """Retention deleted the point's segment: where the log goes on right after the point,
    the carried state holds and the replay goes on; where offsets after the point were deleted
    before any run read them, the carried producer states miss what they held, and the
    replica is replayed from its log start (as a full audit of the copy replays it)."""
    import os

    from replay.points import resume_from

    _log(tmp_path)
    bases = [f.info.base_offset for f in _segments(tmp_path)]
    for upto in (7, bases[2]):  # inside the second segment; at the end of the second
        root = tmp_path / str(upto)
        _log(root)
        row = _published(root, upto)
        segments = _segments(root)
        at = next(f for f in segments if f.info.base_offset == row["segment_base_offset"])
        for f in segments:
            if f.info.base_offset <= at.info.base_offset:
                os.remove(f.path)
        where = resume_from(row, _segments(root))
        following = min(f.info.base_offset for f in _segments(root))
        assert where.change == "retention" and "retention" in where.reason
        assert _offsets(where) == list(range(following, 24))
        if following > upto:  # offsets no run read: said, and the state does not hold
            assert not where.carried, where.reason
            assert f"offsets {upto}..{following - 1} were gone" in where.reason
            assert "replayed from its start" in where.reason
        else:
            assert where.carried and following == upto


def test_the_cleaner_rewrote_the_segment_of_the_point(tmp_path):
    from replay.points import resume_from

    _log(tmp_path)
    row = {**_published(tmp_path, 7), "last_batch_crc": 12345}  # the batch there differs
    where = resume_from(row, _segments(tmp_path))
    assert where.carried and "cleaner" in where.reason
    assert _offsets(where) == list(range(7, 24))


def test_the_cleaner_merged_the_segment_of_the_point_into_an_earlier_one(tmp_path):
    """The cleaner groups small cleaned segments into one named by the first's base offset
    (`LogCleaner.groupSegmentsBySize`): the point's segment file is gone while an earlier one
    is still there, which retention never leaves. Not retention: a rewrite."""
    import os

    from replay.points import resume_from

    _log(tmp_path)
    row = _published(tmp_path, 7)
    segments = _segments(tmp_path)
    first, at = segments[0], next(f for f in segments
                                  if f.info.base_offset == row["segment_base_offset"])  # fmt: skip
    assert first.info.base_offset < at.info.base_offset
    with open(first.path, "ab") as merged:  # the point's segment appended to the first one
        for f in segments[1:]:
            if f.info.base_offset > at.info.base_offset:
                break
            with open(f.path, "rb") as src:
                merged.write(src.read())
            os.remove(f.path)
    where = resume_from(row, _segments(tmp_path))
    assert where.carried and where.change == "rewritten" and "merged" in where.reason
    assert _offsets(where) == list(range(7, 24))


def test_a_log_truncated_below_the_point_is_replayed_from_its_start(tmp_path):
    import os

    from replay.points import resume_from

    _log(tmp_path)
    row = _published(tmp_path, 20)
    segments = _segments(tmp_path)
    for f in segments:
        if f.info.base_offset > 10:
            os.remove(f.path)
    where = resume_from(row, _segments(tmp_path))
    assert not where.carried and "truncated" in where.reason
    assert _offsets(where)[0] == 0


# -- the coordinator's state: every transactional id of a `__transaction_state` partition -----------


def _coordinator_rows(records: pa.Table, complete_from: dict, cut: int | None,
                      complete_from_after: dict | None = None) -> tuple[dict, dict]:  # fmt: skip
    """The coordinator replay's rows (by table, in order) of the records whole; or those of a
    run that read the first ``cut`` records (its producers' latest epochs: of those) and those
    of a run that goes on from its state, carried through JSON, over the rest (with
    ``complete_from_after``: where the later copy's history is whole from)."""
    from replay.carried import carry_coordinator, resume_coordinator
    from replay.coordinator import CoordinatorReplay
    from replay.grouped import txn_latest_epochs, txn_log_blocks

    records = records.select(list(COORDINATOR_COLUMNS))
    runs: list[dict[str, list]] = [{}, {}]

    def emit(kind, row):
        runs[-1].setdefault(kind, []).append(row)

    def emit_table(kind, t):
        runs[-1].setdefault(kind, []).extend(t.to_pylist())

    first = records if cut is None else records.slice(0, cut)
    replay = CoordinatorReplay(complete_from, txn_latest_epochs(first), emit, emit_table)
    if cut is not None:
        for block in txn_log_blocks([first]):
            replay.block(block)
        runs.append({})
        state = json.loads(json.dumps(carry_coordinator(replay)))
        records = records.slice(cut)
        replay = resume_coordinator(state, txn_latest_epochs(records), emit, emit_table,
                                    complete_from_after)  # fmt: skip
    for block in txn_log_blocks([records]):
        replay.block(block)
    replay.finish()
    for rows in runs:
        for row in rows.get("coord_txn", []):
            row["partitions"] = [(p["topic"], p["partition"]) for p in row["partitions"] or []]
    return runs[-2], runs[-1]


def _coordinator_carried(records: pa.Table, complete_from: dict, cuts: list[int]) -> None:
    """The two runs give the whole replay's rows; the first run's transactions report the
    latest epochs it knew, the second's the latest of both."""
    whole = _coordinator_rows(records, complete_from, None)[1]
    for k in cuts:
        before, after = _coordinator_rows(records, complete_from, k)
        for kind in ("coord_txn", "finding"):
            n = len(before.get(kind, []))
            known = [{**r, "latest_epoch": None} for r in before.get(kind, [])]
            assert known == [{**r, "latest_epoch": None} for r in whole.get(kind, [])[:n]], k
            assert after.get(kind, []) == whole.get(kind, [])[n:], (k, kind)


def test_the_coordinator_carries_its_state(production, monkeypatch):
    import replay.tables as T
    from tests.test_coordinator_blocks import _txn_logs

    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 53)  # transactions across blocks and cuts
    rng = random.Random(5)
    logs = _txn_logs(production)
    assert logs
    for records in logs:
        half = {p: int(pc.max(records.column("log_offset")).as_py()) // 2
                for p in set(records.column("log_partition").to_pylist())}  # fmt: skip
        for complete_from in ({}, half):
            _coordinator_carried(records, complete_from, _cuts(records.num_rows, rng))


def test_random_coordinator_histories_carry_their_state(monkeypatch):
    import replay.tables as T
    from tests.test_coordinator_blocks import _damaged as damaged
    from tests.test_coordinator_blocks import _table as table
    from tests.test_coordinator_blocks import history

    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 41)
    rng = random.Random(29)
    for n in range(30):
        rows = history(rng, rng.randint(100, 800), rng.randint(1, 5))
        rows = damaged(rows, rng) if n % 3 else rows
        cleaned = {3: rng.randrange(len(rows))} if n % 4 == 0 else {}
        _coordinator_carried(table(rows), cleaned, _cuts(len(rows), rng, 3))


def test_the_cleaner_past_the_point_leaves_the_coordinator_as_a_full_audit_of_the_copy():
    """Between two copies the cleaner passed the point of a `__transaction_state` partition:
    of the records from the point to its reach only each id's latest survives (whole
    transactions gone with the others). Going on from the carried state with this copy's
    ``complete_from`` (the cleaner's reach) gives, from the reach on, the findings and the
    transactions of a full replay of this copy (cleaned to the reach from its start), and no
    finding before it: no transition across the cleaned records is judged, and no later
    record completes the transaction in flight at the point."""
    from tests.test_coordinator_blocks import _table as table
    from tests.test_coordinator_blocks import history

    def cleaned(rows: list[dict], lo: int, hi: int) -> list[dict]:
        latest = {
            r["transactional_id"]: r["log_offset"] for r in rows if lo <= r["log_offset"] < hi
        }
        return [r for r in rows if not lo <= r["log_offset"] < hi
                or latest[r["transactional_id"]] == r["log_offset"]]  # fmt: skip

    def later(rows: dict, upto: int) -> dict:  # (the latest epochs: what each run knew)
        return {k: [{**r, "latest_epoch": None} for r in rows.get(k, []) if _at(r) >= upto]
                for k in ("coord_txn", "finding")}  # fmt: skip

    rng = random.Random(41)
    checked = 0
    for _ in range(12):
        rows = history(rng, rng.randint(200, 600), rng.randint(1, 4))
        cut = rng.randrange(len(rows) // 4, len(rows) // 2)
        upto = rng.randrange(cut + 1, len(rows) - 10)
        copy = rows[:cut] + cleaned(
            rows[cut:], cut, upto
        )  # what the later copy holds past the point
        resumed = _coordinator_rows(table(copy), {}, cut, {3: upto})[1]
        full = _coordinator_rows(table(cleaned(rows, 0, upto)), {3: upto}, None)[1]
        assert not [f for f in resumed.get("finding", []) if _at(f) < upto]
        # the transactions in flight at the point, handed on as a full audit sees a cleaned
        # range's: partitions unknown (no later record completes them)
        assert all(t["maybe"] and not t["partitions"]
                   for t in resumed.get("coord_txn", []) if _at(t) < cut)  # fmt: skip
        assert later(resumed, upto) == later(full, upto)
        checked += len(later(full, upto)["coord_txn"])
    assert checked


def _at(row: dict) -> int:
    """Where a coordinator replay's row is: its transaction's first record, its finding's."""
    if "first_log_offset" in row:
        return row["first_log_offset"] if row["first_log_offset"] is not None else -1
    return json.loads(row["evidence"]).get("log_offset", -1)


# -- the groups' state: every group of a `__consumer_offsets` partition -----------------------------


def _group_runs(events: pa.Table, cut: int | None) -> tuple[dict, dict]:
    """The groups replay's rows (by table, in order) of the events whole; or those of a run
    that read the first ``cut`` events and those of a run that goes on from its state, carried
    through JSON, over the rest."""
    from replay.carried import carry_groups, resume_groups
    from replay.groups import GroupsReplay

    broadcast = {"broadcast-app"}
    runs: list[dict[str, list]] = [{}, {}]

    def emit(kind, row):
        runs[-1].setdefault(kind, []).append(row)

    def emit_table(kind, t):
        runs[-1].setdefault(kind, []).extend(t.to_pylist())

    def feed(replay, t):
        import replay.tables as T

        for block in t.to_batches(max_chunksize=T.COLUMN_BLOCK_ROWS):
            replay.block(block)

    replay = GroupsReplay(broadcast, emit, emit_table)
    if cut is not None:
        feed(replay, events.slice(0, cut))
        runs.append({})
        replay = resume_groups(json.loads(json.dumps(carry_groups(replay))), broadcast, emit,
                               emit_table)  # fmt: skip
        events = events.slice(cut)
    feed(replay, events)
    replay.finish()
    return runs[-2], runs[-1]


def _groups_carried(partition: int, commits, metadata, markers, cuts: list[int]) -> None:
    from replay.grouped import LOG_ORDER, commit_events, marker_events, metadata_events

    events = pa.concat_tables(
        [commit_events(commits), metadata_events(metadata), marker_events(partition, markers)],
        promote_options="permissive",
    )
    events = events.take(pc.sort_indices(events, LOG_ORDER))
    whole = _group_runs(events, None)[1]
    for k in cuts:
        before, after = _group_runs(events, k)
        for kind in ("generation", "timeline", "finding"):
            n = len(before.get(kind, []))
            assert before.get(kind, []) == whole.get(kind, [])[:n], (k, kind)
            assert after.get(kind, []) == whole.get(kind, [])[n:], (k, kind)


def test_the_groups_carry_their_state(production, monkeypatch):
    import replay.tables as T
    from tests.test_group_blocks import _of_dump

    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 59)
    rng = random.Random(6)
    parts = _of_dump(production)
    assert parts
    for part, commits, metadata, markers in parts:
        n = commits.num_rows + metadata.num_rows + markers.num_rows
        _groups_carried(part, commits, metadata, markers, _cuts(n, rng))


def test_random_group_histories_carry_their_state(monkeypatch):
    import replay.tables as T
    from tests.test_group_blocks import history

    monkeypatch.setattr(T, "COLUMN_BLOCK_ROWS", 43)
    rng = random.Random(31)
    for n in range(24):
        commits, metadata, markers = history(rng, rng.randint(200, 1500), broken=n % 2 == 1)
        total = commits.num_rows + metadata.num_rows + markers.num_rows
        _groups_carried(5, commits, metadata, markers, _cuts(total, rng, 3))


def test_retention_that_left_only_an_empty_active_segment_is_not_a_truncation(tmp_path):
    import os

    from replay.points import resume_from

    _log(tmp_path)
    row = _published(tmp_path, 24)  # the previous run saw the whole log: it ends at 24
    for f in _segments(tmp_path):
        os.remove(f.path)
    (tmp_path / "t-0" / "00000000000000000024.log").write_bytes(b"")  # rolled, still empty
    where = resume_from(row, _segments(tmp_path))
    assert (where.carried, where.change, _offsets(where)) == (True, None, [])


def test_only_a_truncation_below_the_checkpointed_high_watermark_is_a_finding():
    from replay.points import truncation_finding

    point = {"high_watermark": 100, "log_end_offset": 120, "last_batch_offset": 119}
    below = {"change": "truncated", "log_end_offset": 90}
    f = truncation_finding(point, below, "t", 3)
    assert (f["kind"], f["severity"], f["first_offset"], f["last_offset"]) == (
        "committed_data_truncated", "error", 90, 99)  # fmt: skip
    # above the high watermark: records never acknowledged, truncated as Kafka intends
    assert truncation_finding(point, {"change": "truncated", "log_end_offset": 105}, "t", 3) is None
    # no checkpoint in the previous copy: cannot tell
    assert truncation_finding({**point, "high_watermark": None}, below, "t", 3) is None
    # not truncated (retention, the cleaner): no finding
    assert truncation_finding(point, {**below, "change": "retention"}, "t", 3) is None


def test_the_rows_handed_on_are_written_a_slice_at_a_time(production, tmp_path, monkeypatch):
    """What a scan task holds of the rows a run hands on from the previous one is one slice
    (replay.previous.HAND_ON_ROWS), written to the task's files at once (ScanTask's
    ``sink_now``: jobs.scan.TaskTables.write_now), never gathered up to the flush limits with
    the replay's own rows: a task's memory does not grow with the days a chain carried."""
    from dataclasses import replace

    from decoders.spark import _struct
    from jobs import scan
    from replay import previous
    from replay.local import audit_local
    from replay.plan import replay_spec
    from replay.replicas import REPLAY_TABLES
    from replay.scan_task import AUDIT_DECODED, audit_schema, replica_units
    from replay.settings import AuditConfig

    earlier = str(tmp_path / "earlier")
    _earlier_copy(production, earlier, random.Random(4))
    points, before = previous.in_memory(audit_local([earlier]))
    spec = replace(replay_spec([production], AuditConfig.from_conf(None)),
                   points=points, previous=before)  # fmt: skip
    conf = {"verify_crc": True, "window_bytes": 64 << 10, "memory_budget_mb": 64}
    opts = scan.scan_options(lambda t, a: _struct(audit_schema(t)),
                             [*AUDIT_DECODED, *REPLAY_TABLES], False, conf, None, spec)  # fmt: skip
    slice_rows = 7
    monkeypatch.setattr(previous, "HAND_ON_ROWS", slice_rows)
    handed, largest, held = [0], [0], []
    write_now = scan.TaskTables.write_now

    def spied(self, table, batch):
        handed[0] += batch.num_rows
        largest[0] = max(largest[0], batch.num_rows)
        write_now(self, table, batch)
        held.append(self.held[table][0])

    monkeypatch.setattr(scan.TaskTables, "write_now", spied)
    files = decoders.discover([production])
    for i, unit in enumerate(replica_units(files)):
        scan.scan_ranges(unit, opts, str(tmp_path / "out"), "0123456789ab", i, 0)
    carried = sum(len(before.tables[t]) for t in ("transactions", "offset_timeline"))
    assert handed[0] >= carried // 2 > slice_rows  # most of the previous rows went on
    assert largest[0] <= slice_rows
    assert held and max(held) == 0  # nothing of them left waiting in the task
