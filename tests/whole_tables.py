"""The replays' output as whole tables, for tests that compare a streamed replay with the same
rows held at once (the audit itself hands rows on a block at a time and never holds them)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from decoders.constants import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from replay.grouped import (
    COORDINATOR_COLUMNS,
    COORDINATOR_SCHEMA,
    GROUP_SCHEMA,
    LOG_ORDER,
    PARTITION_SCHEMA,
    TXN_LOG_ORDER,
    Facts,
    InOrder,
    commit_events,
    marker_events,
    metadata_events,
    replay_coordinator,
    replay_groups,
    replay_partition,
    txn_latest_epochs,
)
from replay.replicas import REPLAY_TABLES, ReplicaReplay, ReplicaRow


def collected(schema: pa.Schema, run: Callable[[Callable[[pa.Table], None]], None]) -> pa.Table:
    """The output of a replay that hands on its rows (``run(flush)``) as one table."""
    parts: list[pa.Table] = []
    run(parts.append)
    return pa.concat_tables(parts) if parts else schema.empty_table()


def partition_tables(topic: str, partition: int, bt: pa.Table | InOrder, side: list[dict],
                     facts: Facts, cleaned_upto: int = 0) -> pa.Table:  # fmt: skip
    """replay_partition's rows as one table (PARTITION_SCHEMA)."""
    return collected(
        PARTITION_SCHEMA,
        lambda flush: replay_partition(topic, partition, bt, side, facts, cleaned_upto, flush),
    )


def coordinator_tables(records: pa.Table, complete_from: dict[int, int]) -> pa.Table:
    """`__transaction_state` records in any order, of one transactional id or of a whole
    partition, replayed in log order: the rows as one table (COORDINATOR_SCHEMA)."""
    records = records.select(list(COORDINATOR_COLUMNS))
    records = records.take(pc.sort_indices(records, TXN_LOG_ORDER))  # stable, as sorted()
    latest = txn_latest_epochs(records)
    return collected(
        COORDINATOR_SCHEMA,
        lambda flush: replay_coordinator([records], complete_from, latest, flush),
    )


def group_partition_tables(partition: int, commits: pa.Table, metadata: pa.Table,
                           markers: pa.Table, broadcast) -> pa.Table:  # fmt: skip
    """Every group of one `__consumer_offsets` partition, its events in any order, replayed in
    log order: the rows as one table (GROUP_SCHEMA)."""
    events = pa.concat_tables(
        [commit_events(commits), metadata_events(metadata), marker_events(partition, markers)],
        promote_options="permissive",
    )
    events = events.take(pc.sort_indices(events, LOG_ORDER))  # stable, as sorted()
    return collected(GROUP_SCHEMA, lambda flush: replay_groups([events], broadcast, flush))


def replica_result(replica: ReplicaReplay) -> tuple[dict[str, pa.Table], ReplicaRow] | None:
    """A replica's replayed rows as one table per scan table, and its row."""
    parts: dict[str, list[pa.Table]] = {}
    row = replica.replay(lambda table, rows: parts.setdefault(table, []).append(rows))
    if row is None:
        return None
    wanted = ["replayed"] + {TRANSACTION_STATE_TOPIC: ["coordinated"],
                             CONSUMER_OFFSETS_TOPIC: ["grouped"]}.get(replica.topic, [])  # fmt: skip
    return {
        t: pa.concat_tables(parts[t]) if t in parts else REPLAY_TABLES[t].empty_table()
        for t in wanted
    }, row


def production_dump(tmp_path_factory, seed: int) -> str:
    """A few MB of production-shaped traffic (benchmarks/prodshape.py) under a module's tmp."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "benchmarks"))  # fmt: skip
    import prodshape

    out = str(tmp_path_factory.mktemp("prod") / "dump")
    prodshape.generate(out, 0.004, seed=seed)
    return out


def dump_roots(sim_all, *more: str) -> list[str]:
    """Every simulated scenario's dump, then ``more``."""
    return [str(d) for d in sorted(sim_all.iterdir()) if d.is_dir()] + list(more)
