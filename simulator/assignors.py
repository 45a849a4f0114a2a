"""Partition assignors of the consumer client, plus the broadcast one the replay must catch.

range: per topic, members sorted by id take consecutive ranges (RangeAssignor);
roundrobin: all partitions sorted, dealt to members in turn (RoundRobinAssignor);
sticky / cooperative-sticky: balanced, keeping each member's previous partitions where the
balance allows (AbstractStickyAssignor's goal, not its exact algorithm); stream: the same for
Kafka Streams' tasks (one task per input partition here);
broadcast: every member gets every partition it subscribes to, so members overwrite each
other's commits.
"""

from __future__ import annotations

Assignment = dict[str, dict[str, list[int]]]


def assign(
    name: str,
    subscriptions: dict[str, list[str]],
    partitions: dict[str, int],
    previous: Assignment | None = None,
) -> Assignment:
    members = sorted(subscriptions)
    out: Assignment = {m: {} for m in members}
    if name == "broadcast":
        for m in members:
            out[m] = {t: list(range(partitions[t])) for t in sorted(subscriptions[m])}
        return out
    if name == "range":
        for t in sorted(partitions):
            subs = [m for m in members if t in subscriptions[m]]
            n, k = partitions[t], len(subs)
            start = 0
            for i, m in enumerate(subs):
                size = n // k + (1 if i < n % k else 0)
                if size:
                    out[m][t] = list(range(start, start + size))
                start += size
        return out
    all_tps = sorted((t, p) for t in partitions for p in range(partitions[t]))
    if name == "roundrobin":
        i = 0
        for t, p in all_tps:
            subs = [m for m in members if t in subscriptions[m]]
            for _ in range(len(members)):
                m = members[i % len(members)]
                i += 1
                if m in subs:
                    out[m].setdefault(t, []).append(p)
                    break
        return out
    if name in ("sticky", "cooperative-sticky", "stream"):
        quota = {m: 0 for m in members}
        total = len(all_tps)
        base, extra = divmod(total, len(members))
        for i, m in enumerate(members):
            quota[m] = base + (1 if i < extra else 0)
        taken: set[tuple[str, int]] = set()
        for m in members:  # keep what each member owned, up to its quota
            for t, ps in sorted((previous or {}).get(m, {}).items()):
                for p in ps:
                    if (
                        (t, p) in all_tps
                        and (t, p) not in taken
                        and quota[m] > 0
                        and t in subscriptions[m]
                    ):
                        out[m].setdefault(t, []).append(p)
                        taken.add((t, p))
                        quota[m] -= 1
        for t, p in all_tps:
            if (t, p) in taken:
                continue
            m = max((m for m in members if t in subscriptions[m]), key=lambda m: (quota[m], m))
            out[m].setdefault(t, []).append(p)
            quota[m] -= 1
        for m in members:
            out[m] = {t: sorted(ps) for t, ps in sorted(out[m].items())}
        return out
    raise ValueError(f"unknown assignor {name!r}")


def owners(assignment: Assignment) -> dict[tuple[str, int], list[str]]:
    """Members per partition; more than one means broadcast-style."""
    out: dict[tuple[str, int], list[str]] = {}
    for m, tps in assignment.items():
        for t, ps in tps.items():
            for p in ps:
                out.setdefault((t, p), []).append(m)
    return out
