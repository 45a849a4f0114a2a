"""Dumps laid out as real brokers leave their directories (docs/layouts.md).

``production_layouts`` writes, side by side under one dump root:

- ``east/``: a three-broker cluster whose broker 1 has two log directories (JBOD: one
  ``cluster.id`` and ``node.id``, a ``directory.id`` each) with a partition moving between
  them (a lagging ``<topic>-<p>.<uuid>-future`` copy in the other directory), and a topic
  ``events`` that a transactional producer writes, that is deleted (its replicas renamed
  ``-delete``, but one broker was offline and keeps its plain directory) and re-created under
  the same name with a new topic id, the producer writing on;
- ``west/``: an unrelated single-broker cluster that happens to carry the same ``cluster.id``
  (container images ship one): its node 1 holds the same internal partitions as east's;
- ``copies/``: a two-broker cluster copied without its ``meta.properties`` (no cluster id, no
  node ids), its replicas to be compared all the same.

It is healthy. ``production_layouts_faults`` adds a real divergence between two replicas of
one incarnation, a ``-future`` copy that disagrees with its source, and an unclean leader
election in the copy without ``meta.properties``.
"""

from __future__ import annotations

import os
import uuid

from simulator.clients import Consumer, Producer, TransactionalProducer
from simulator.cluster import Cluster, TopicConfig
from simulator.copies import copy_dir
from simulator.log import READ_COMMITTED
from simulator.scenarios import _clean_topic, _group, _rewrite_values, _txn_fact, scenario
from simulator.truth import Truth
from simulator.writer import meta_properties_text

REPLICAS = 2
OFFSET_CHECKPOINTS = (
    "replication-offset-checkpoint",
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
)


def _uuid_hex(rng) -> str:
    return uuid.UUID(int=rng.getrandbits(128)).hex


def _directory_id(rng) -> str:
    import base64

    return base64.urlsafe_b64encode(rng.getrandbits(128).to_bytes(16, "big")).rstrip(b"=").decode()


def delete_topic(c: Cluster, name: str, offline: int) -> dict[int, list[int]]:
    """Delete topic ``name`` as the controller does while broker ``offline`` is down: every
    replica's files written, each online replica's directory renamed
    `<topic>-<p>.<uuid>-delete` (UnifiedLog.logDeleteDirName), the offline broker's left as
    it was. Returns each partition's replicas."""
    cfg = c.topics.pop(name)
    c.group_coordinator.delete_offsets(name)
    placed = {}
    for p in range(cfg.partitions):
        log = c.logs.pop((name, p))
        log.close()
        placed[p] = list(log.replicas)
        for b, d in zip(log.replicas, log.log_dirs, strict=True):
            if b != offline:
                src = os.path.join(d, f"{name}-{p}")
                os.rename(src, os.path.join(d, f"{name}-{p}.{_uuid_hex(c.rng)}-delete"))
    return placed


def recreate_topic(c: Cluster, cfg: TopicConfig, offline: int) -> None:
    """The topic created again under its name with a new topic id. Where the offline broker,
    back, is a replica of the new incarnation, it finds its old directory holding another
    topic id and renames it `-stray` (KRaft's stray detection) before creating the new one;
    elsewhere the old directory stays, plain, beside nothing."""
    held = os.path.join(c.broker_dirs[offline - 1], "_held")
    os.makedirs(held)
    old = [n for n in os.listdir(c.broker_dirs[offline - 1]) if n.startswith(f"{cfg.name}-")]
    for n in old:
        os.rename(os.path.join(c.broker_dirs[offline - 1], n), os.path.join(held, n))
    c.create_topic(cfg)
    for n in old:
        p = int(n.rsplit("-", 1)[1])
        mine = offline in c.log(cfg.name, p).replicas
        dst = f"{n}.{_uuid_hex(c.rng)}-stray" if mine else n
        os.rename(os.path.join(held, n), os.path.join(c.broker_dirs[offline - 1], dst))
    os.rmdir(held)


def split_jbod(broker_dir: str, rng, moving: str | None, cut_share: float = 0.6) -> tuple[str, str]:
    """Broker directory ``broker_dir`` as two log directories of one broker (JBOD):
    ``data-1`` and ``data-2``, each with the broker's meta.properties and its own
    ``directory.id``, the partitions dealt between them and the offset checkpoints split
    with them. ``moving``: a partition directory of data-1 being moved to data-2, whose
    `-future` copy there has reached ``cut_share`` of its log (ReplicaAlterLogDirsThread)."""
    with open(os.path.join(broker_dir, "meta.properties")) as f:
        props = f.read()
    node = next(ln.split("=", 1)[1] for ln in props.splitlines() if ln.startswith("node.id="))
    cid = next(ln.split("=", 1)[1] for ln in props.splitlines() if ln.startswith("cluster.id="))
    names = sorted(n for n in os.listdir(broker_dir) if os.path.isdir(os.path.join(broker_dir, n)))
    dirs = [os.path.join(broker_dir, "data-1"), os.path.join(broker_dir, "data-2")]
    for d in dirs:
        os.makedirs(d)
        with open(os.path.join(d, "meta.properties"), "w") as f:
            f.write(meta_properties_text(int(node), cid) + f"directory.id={_directory_id(rng)}\n")
    for i, n in enumerate(names):
        target = dirs[0] if n == moving or i % 2 == 0 else dirs[1]
        os.rename(os.path.join(broker_dir, n), os.path.join(target, n))
    for name in OFFSET_CHECKPOINTS:
        src = os.path.join(broker_dir, name)
        if not os.path.exists(src):
            continue
        with open(src) as f:
            lines = f.read().splitlines()
        entries = [ln for ln in lines[2:] if ln.strip()]
        for d in dirs:
            held = set(os.listdir(d))
            mine = [e for e in entries if f"{e.split()[0]}-{e.split()[1]}" in held]
            with open(os.path.join(d, name), "w") as f:
                f.write("\n".join([lines[0], str(len(mine)), *mine]) + "\n")
        os.remove(src)
    os.remove(os.path.join(broker_dir, "meta.properties"))
    if moving is not None:
        src = os.path.join(dirs[0], moving)
        end = _log_end(src)
        copy_dir(
            src, os.path.join(dirs[1], f"{moving}.{_uuid_hex(rng)}-future"), int(end * cut_share)
        )
    return dirs[0], dirs[1]


def _log_end(part_dir: str) -> int:
    return max((last + 1 for _, last in _batches_of(part_dir)), default=0)


def _east(out: str, seed: int, truth: Truth) -> Cluster:
    c = Cluster(out, seed, brokers=3, internal_replicas=REPLICAS)
    c.create_topic(TopicConfig("orders", 3, replicas=REPLICAS, segment_bytes=16 << 10))
    c.create_topic(TopicConfig("events", 2, replicas=REPLICAS, segment_bytes=16 << 10))
    source = Producer(c)
    app = TransactionalProducer(c, "events-app", version=2, timeout_ms=30_000)
    g = _group(c, "billing", "range", READ_COMMITTED, truth)
    readers = [Consumer.join(c, g, f"billing-c{i}", ["orders"]) for i in range(2)]
    # a group reading the re-created topic through both incarnations
    watch = _group(c, "events-watch", "range", READ_COMMITTED, truth)
    readers.append(Consumer.join(c, watch, "events-watch-c0", ["events"]))

    def rounds(n: int, tag: str) -> None:
        for r in range(n):
            for p in range(3):
                source.send("orders", p, c.rng.randint(2, 5), tag=f"{tag}{r}")
            for p in range(2):
                app.send("events", p, c.rng.randint(1, 4), tag=f"{tag}{r}")
            app.commit() if c.rng.random() < 0.85 else app.abort()
            for m in readers:
                m.poll(max_batches=4)
                m.commit()
            c.clock.tick(c.rng.randint(50, 400))

    rounds(20, "a")
    offline = c.log("events", 0).replicas[-1]  # a follower of events-0 is down
    delete_topic(c, "events", offline)
    readers[-1].forget_positions()  # no committed offset left: auto.offset.reset=earliest
    c.clock.tick(60_000)
    # placed anew with one replica: the offline broker, back, holds the old incarnation's
    # directory plainly where it is no replica of the new one, as -stray where it is
    recreate_topic(c, TopicConfig("events", 2, replicas=1, segment_bytes=16 << 10,
                                  topic_id=uuid.UUID(int=c.rng.getrandbits(128))), offline)  # fmt: skip
    rounds(20, "b")
    _txn_fact(truth, app)
    c.close()
    _clean_topic(truth, c, "orders", "JBOD, a move between log dirs")
    _clean_topic(truth, c, "events", "re-created: the old incarnation is audited apart")
    truth.clean_group("billing", "read_committed")
    truth.clean_group("events-watch", "read_committed, across the topic's two incarnations")
    return c


def _west(out: str, seed: int, cluster_id: str) -> Cluster:
    c = Cluster(out, seed, brokers=1, cluster_id=cluster_id)
    c.create_topic(TopicConfig("orders", 2))
    app = TransactionalProducer(c, "west-app", version=1)
    for r in range(15):
        for p in range(2):
            app.send("orders", p, c.rng.randint(1, 4), tag=f"w{r}")
        app.commit()
    c.close()
    return c


def _copies(out: str, seed: int) -> Cluster:
    c = Cluster(out, seed, brokers=2, cluster_id="Y29waWVzLXdpdGhvdXQtaWQ", internal_replicas=2)
    c.create_topic(TopicConfig("metrics", 2, replicas=2))
    p = Producer(c)
    for r in range(25):
        for part in range(2):
            p.send("metrics", part, c.rng.randint(2, 5), tag=f"m{r}")
    c.close()
    for d in c.broker_dirs:  # copied without meta.properties
        os.remove(os.path.join(d, "meta.properties"))
    return c


def _batches_of(part_dir: str) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch of a partition directory."""
    from decoders.framing import batch_header, iter_entries

    out = []
    for n in sorted(os.listdir(part_dir)):
        if n.endswith(".log"):
            with open(os.path.join(part_dir, n), "rb") as f:
                data = f.read()
            for pos, base, _ in iter_entries(data):
                out.append((base, base + batch_header(data, pos).last_offset_delta))
    return out


def _diverge(truth: Truth, part_dir: str, topic: str, partition: int, note: str,
             share: tuple[float, float] = (0.5, 0.6)) -> None:  # fmt: skip
    """Rewrite the batches of ``part_dir`` between two shares of its log (valid batches with
    other content, as after an unclean election) and record the divergence."""
    batches = _batches_of(part_dir)
    a, b = int(len(batches) * share[0]), max(int(len(batches) * share[1]), int(len(batches) * share[0]) + 1)  # fmt: skip
    first, last = batches[a][0], batches[b - 1][1]
    _rewrite_values(part_dir, first, last)
    truth.add("replica_divergence", topic=topic, partition=partition, first_offset=first,
              last_offset=last, record_count=last - first + 1, note=note)  # fmt: skip


def layouts(out: str, seed: int, faults: bool, name: str, doc: str) -> Truth:
    truth = Truth(name, seed, 0.0, doc)
    east = _east(os.path.join(out, "east"), seed, truth)
    _west(os.path.join(out, "west"), seed + 1, east.cluster_id)
    copies = _copies(os.path.join(out, "copies"), seed + 2)
    b1 = east.broker_dirs[0]
    moving = next(f"orders-{p}" for p in range(3) if os.path.isdir(os.path.join(b1, f"orders-{p}")))
    _, data2 = split_jbod(b1, east.rng, moving)
    if faults:
        future = next(n for n in os.listdir(data2) if n.endswith("-future"))
        _diverge(truth, os.path.join(data2, future), "orders", int(moving.split("-")[1]),
                 "a -future copy disagrees with its source", (0.2, 0.3))  # fmt: skip
        other = next(p for p in range(3) if f"orders-{p}" != moving)
        follower = east.log("orders", other).log_dirs[-1]
        part = os.path.join(follower, f"orders-{other}")
        if not os.path.isdir(part):  # broker 1's replica moved into one of its log dirs
            part = next(os.path.join(b1, d, f"orders-{other}") for d in ("data-1", "data-2")
                        if os.path.isdir(os.path.join(b1, d, f"orders-{other}")))  # fmt: skip
        _diverge(truth, part, "orders", other, "two replicas of one incarnation disagree")
        follower = copies.log("metrics", 1).log_dirs[-1]
        _diverge(truth, os.path.join(follower, "metrics-1"), "metrics", 1,
                 "an unclean election in a copy without meta.properties")  # fmt: skip
    else:
        _clean_topic(truth, copies, "metrics", "a copy without meta.properties")
    truth.facts["layout"] = {
        "clusters": 3,
        "jbod": os.path.relpath(b1, out),
        "moving": moving,
        "recreated": "events",
    }
    return truth


@scenario
def production_layouts(out: str, seed: int, scale: float) -> Truth:
    """Directories as brokers leave them: a JBOD broker moving a partition between its log
    dirs (-future), a topic deleted and re-created while a broker was offline (-delete, a
    stale plain directory or a -stray one), an unrelated cluster sharing the cluster.id, and a
    cluster copied without meta.properties. Healthy."""
    return layouts(out, seed, False, "production_layouts", production_layouts.__doc__)


@scenario
def production_layouts_faults(out: str, seed: int, scale: float) -> Truth:
    """production_layouts with a real divergence between two replicas of one incarnation, a
    -future copy that disagrees with its source, and an unclean election in the copy without
    meta.properties."""
    return layouts(out, seed, True, "production_layouts_faults", production_layouts_faults.__doc__)
