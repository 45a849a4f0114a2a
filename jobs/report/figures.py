"""Plotly figure specifications (plain dicts, rendered by the plotly.js inlined in the page).

Every plot keeps to one clock or one order: a partition's transactions and LSO on that
partition's own offsets and its leader's timestamps; a group's commits and generations on the
offsets of the ``__consumer_offsets`` partition that holds them (its log order); a producer's
sequences against the offsets of the partition it wrote. Nothing lines up events of two logs
by their timestamps.
"""

from __future__ import annotations

from typing import Any

Figure = dict[str, Any]

OUTCOME_COLOURS = {"COMMIT": "#2e7d32", "ABORT": "#c62828", "OPEN": "#ef6c00"}
HIGHLIGHT = "#6a1b9a"
PALETTE = ["#1565c0", "#00838f", "#6d4c41", "#5e35b1", "#ad1457", "#558b2f", "#f9a825", "#37474f"]


def _layout(title: str, x: str, y: str, **extra: Any) -> dict:
    layout = {
        "title": {"text": title, "font": {"size": 14}, "x": 0.01, "xanchor": "left"},
        "xaxis": {"title": {"text": x}, "zeroline": False},
        "yaxis": {"title": {"text": y}, "zeroline": False},
        "margin": {"l": 70, "r": 20, "t": 40, "b": 50},
        "height": 320,
        "legend": {"orientation": "h", "y": -0.25},
        "template": None,
        "plot_bgcolor": "#fafafa",
    }
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(layout.get(k), dict):
            layout[k] = {**layout[k], **v}
        else:
            layout[k] = v
    return layout


def _segments(rows: list[dict], x0: str, x1: str, y0: str, y1: str) -> tuple[list, list]:
    xs: list = []
    ys: list = []
    for r in rows:
        xs += [r[x0], r[x1], None]
        ys += [r[y0], r[y1], None]
    return xs, ys


def transaction_timeline(
    txns: list[dict], lso: list[dict], end_timestamp: int | None, focus: dict, topic_partition: str
) -> Figure:
    """A partition's transactions as bars from their first batch to their marker (an open one
    to the end of the log) at the height of their first offset, with the LSO and log end offset
    stepping over the same leader's time; ``focus`` (first/last offset) is the finding's."""
    data = _outcome_traces(txns, end_timestamp)
    hit = _focus_transactions(txns, focus)
    focus_trace = _focus_trace(hit, lso, focus, end_timestamp)
    if focus_trace is not None:
        data.append(focus_trace)
    if lso:
        data += _lso_traces(lso)
    layout = _layout(
        f"{topic_partition}: transactions and LSO",
        "batch timestamp (this partition's leader clock)",
        f"offset in {topic_partition}",
        xaxis={"type": "date"},
    )
    zoom = _zoom(txns, hit, end_timestamp)
    if zoom is not None:  # open on the finding's neighbourhood; autoscale shows the window
        layout["xaxis"]["range"], layout["yaxis"]["range"] = zoom
    return {"data": data, "layout": layout}


def _outcome_traces(txns: list[dict], end_timestamp: int | None) -> list[dict]:
    """One trace per outcome (in OUTCOME_COLOURS' order, none for an outcome without
    transactions): a segment per transaction, hovering with its producer, offsets and size."""
    data = []
    for outcome, colour in OUTCOME_COLOURS.items():
        rows = []
        for t in txns:
            if t["outcome"] != outcome:
                continue
            end = t["marker_timestamp"] if outcome != "OPEN" else end_timestamp
            rows.append({**t, "_end": end if end is not None else t["first_timestamp"]})
        if not rows:
            continue
        xs, ys = _segments(rows, "first_timestamp", "_end", "first_offset", "first_offset")
        text = []
        for r in rows:
            label = (
                f"producer {r['producer_id']} epoch {r['producer_epoch']}: offsets "
                f"{r['first_offset']}–{r['marker_offset'] if r['marker_offset'] is not None else 'open'}"
                f" ({r['record_count']} records)"
            )
            text += [label, label, None]
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{outcome.lower()} transactions",
                "x": xs,
                "y": ys,
                "text": text,
                "hoverinfo": "text+x",
                "line": {"color": colour, "width": 5},
                "marker": {"size": 5, "color": colour},
            }
        )
    return data


def _focus_transactions(txns: list[dict], focus: dict) -> list[dict]:
    """The transactions whose offsets overlap the finding's (and of its producer, when it
    names one); an open transaction reaches to the end of the log."""
    return [
        t
        for t in txns
        if focus.get("first_offset") is not None
        and t["first_offset"] <= (focus.get("last_offset") or focus["first_offset"])
        and (t["marker_offset"] if t["marker_offset"] is not None else 2**62)
        >= focus["first_offset"]
        and (focus.get("producer_id") is None or t["producer_id"] == focus["producer_id"])
    ]


def _focus_trace(
    hit: list[dict], lso: list[dict], focus: dict, end_timestamp: int | None
) -> dict | None:
    """The finding highlighted: its transactions drawn over their bars, or without one a mark
    at its first offset at the LSO's last time; None when the finding has no offsets."""
    if hit:
        rows = [
            {**t, "_end": t["marker_timestamp"] or end_timestamp or t["first_timestamp"]}
            for t in hit
        ]
        xs, ys = _segments(rows, "first_timestamp", "_end", "first_offset", "first_offset")
        return {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "this finding's transaction",
            "x": xs,
            "y": ys,
            "line": {"color": HIGHLIGHT, "width": 9},
            "marker": {"size": 10, "color": HIGHLIGHT, "symbol": "diamond"},
            "opacity": 0.6,
        }
    if focus.get("first_offset") is not None and lso:
        return {
            "type": "scatter",
            "mode": "markers",
            "name": "this finding's offsets",
            "x": [lso[-1]["timestamp"]],
            "y": [focus["first_offset"]],
            "marker": {"size": 12, "color": HIGHLIGHT, "symbol": "x"},
        }
    return None


def _lso_traces(lso: list[dict]) -> list[dict]:
    """The last stable offset and the log end offset as steps over the leader's time."""
    return [
        {
            "type": "scatter",
            "mode": "lines",
            "name": name,
            "x": [r["timestamp"] for r in lso],
            "y": [r[col] for r in lso],
            "line": {"shape": "hv", "color": "#455a64", "dash": dash, "width": 1.5},
        }
        for col, name, dash in (("lso", "last stable offset", "solid"),
                                ("log_end_offset", "log end offset", "dot"))
    ]  # fmt: skip


def _zoom(txns: list[dict], hit: list[dict], end: int | None, around: int = 12):
    """(x range, y range) of the ``around`` transactions on each side of the finding's."""
    if not hit:
        return None
    at = txns.index(hit[0]) if hit[0] in txns else 0
    near = txns[max(0, at - around) : at + around + 1]
    t0 = [t["first_timestamp"] for t in near if t["first_timestamp"] is not None]
    t1 = [t["marker_timestamp"] or end for t in near]
    t1 = [t for t in t1 if t is not None]
    if not t0 or not t1:
        return None
    lo, hi = min(t0), max(t1 + t0)
    pad = max(50, (hi - lo) // 20)
    o0 = min(t["first_offset"] for t in near)
    o1 = max(t["marker_offset"] or t["last_offset"] for t in near)
    opad = max(2, (o1 - o0) // 20)
    return [lo - pad, hi + pad], [o0 - opad, o1 + opad]


def commits_against_transactions(
    commits: list[dict], txns: list[dict], marks: list[int], group: str, topic_partition: str
) -> Figure:
    """A group's committed offsets of one partition, in the order its ``__consumer_offsets``
    partition holds them, drawn against the bands of the data partition's open and aborted
    transactions: a commit whose offset passes an aborted band read data that was aborted."""
    shapes = []
    for t in txns:
        if t["outcome"] == "COMMIT":
            continue
        top = t["marker_offset"] if t["marker_offset"] is not None else t["last_offset"]
        shapes.append(
            {
                "type": "rect",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": t["first_offset"] - 0.5,
                "y1": top + 0.5,
                "fillcolor": OUTCOME_COLOURS[t["outcome"]],
                "opacity": 0.18,
                "line": {"width": 0},
            }
        )
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": f"{group} committed offset",
            "x": [c["effective_log_offset"] for c in commits],
            "y": [c["committed_offset"] for c in commits],
            "line": {"shape": "hv", "color": PALETTE[0]},
            "marker": {"size": 6},
        }
    ]
    # legend entries for the bands (shapes have none)
    for outcome in ("ABORT", "OPEN"):
        if any(t["outcome"] == outcome for t in txns):
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{outcome.lower()} transaction (band: first offset to marker)",
                    "x": [None],
                    "y": [None],
                    "marker": {"symbol": "square", "size": 12, "color": OUTCOME_COLOURS[outcome]},
                }
            )
    marked = [c for c in commits if _is_marked(c, marks)]
    if marked:
        data.append(
            _highlight(
                "the commit the finding proves (evidence)",
                [c["effective_log_offset"] for c in marked],
                [c["committed_offset"] for c in marked],
                14,
            )
        )
    return {
        "data": data,
        "layout": _layout(
            f"group {group} on {topic_partition}",
            "offset in __consumer_offsets (the commit log's order)",
            f"offset in {topic_partition}",
            shapes=shapes,
        ),
    }


def _is_marked(commit: dict, marks: list[int]) -> bool:
    return commit["effective_log_offset"] in marks or commit.get("commit_log_offset") in marks


def commits_and_generations(
    commits: list[dict], generations: list[dict], overwrites: list[int], group: str,
    topic_partition: str,
) -> Figure:  # fmt: skip
    """A group's commits of one partition and its generations, both records of the same
    ``__consumer_offsets`` partition and so drawn on its offsets; each generation line names
    the members its assignment gave the partition to (commit records name no member)."""
    data = []
    by_gen: dict[object, list[dict]] = {}
    for c in commits:
        by_gen.setdefault(c["generation"], []).append(c)
    for i, (gen, rows) in enumerate(sorted(by_gen.items(), key=lambda kv: (kv[0] is None, kv[0]))):
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"commits in generation {gen}",
                "x": [c["effective_log_offset"] for c in rows],
                "y": [c["committed_offset"] for c in rows],
                "marker": {"size": 7, "color": PALETTE[i % len(PALETTE)]},
            }
        )
    hit = [c for c in commits if _is_marked(c, overwrites)]
    if hit:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "overwrite / regression",
                "x": [c["effective_log_offset"] for c in hit],
                "y": [c["committed_offset"] for c in hit],
                "marker": {"size": 15, "color": HIGHLIGHT, "symbol": "x"},
            }
        )
    shapes, notes = [], []
    for g in generations:
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": g["log_offset"],
                "x1": g["log_offset"],
                "y0": 0,
                "y1": 1,
                "line": {"color": "#90a4ae", "dash": "dash", "width": 1},
            }
        )
        owners = ", ".join(g["owners"]) or "nobody"
        notes.append(
            {
                "x": g["log_offset"],
                "xref": "x",
                "y": 1,
                "yref": "paper",
                "yanchor": "bottom",
                "showarrow": False,
                "textangle": -30,
                "font": {"size": 9},
                "text": f"gen {g['generation']} {g['state']}: {owners[:60]}",
            }
        )
    return {
        "data": data,
        "layout": _layout(
            f"group {group}: generations and commits of {topic_partition}",
            "offset in __consumer_offsets (the group log's order)",
            f"committed offset of {topic_partition}",
            shapes=shapes,
            annotations=notes[:40],
            margin={"t": 90},
            height=360,
        ),
    }


def sequences(batches: list[dict], focus: dict, producer: object, topic_partition: str) -> Figure:
    """A producer's batches in a partition: sequence range against offset range, one trace
    per producer epoch, the batch the finding is about marked."""
    data = []
    epochs = sorted({b.get("producer_epoch") for b in batches}, key=lambda e: (e is None, e))
    for i, epoch in enumerate(epochs):
        rows = [b for b in batches if b.get("producer_epoch") == epoch]
        xs, ys = _segments(rows, "base_offset", "last_offset", "base_sequence", "last_sequence")
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"epoch {epoch} batches (sequence over offsets)",
                "x": xs,
                "y": ys,
                "line": {"color": PALETTE[i % len(PALETTE)], "width": 3},
                "marker": {"size": 5},
            }
        )
    hit = [b for b in batches if b["base_offset"] == focus.get("first_offset")]
    if hit:
        data.append(
            _highlight(
                "the finding's batch",
                [b["base_offset"] for b in hit],
                [b["base_sequence"] for b in hit],
                15,
            )
        )
    return {
        "data": data,
        "layout": _layout(
            f"producer {producer} on {topic_partition}",
            f"offset in {topic_partition}",
            "producer sequence number",
        ),
    }


def bars(title: str, x_title: str, y_title: str, series: dict[str, dict], stacked: bool = False,
         date_x: bool = False) -> Figure:  # fmt: skip
    """Grouped or stacked bars: ``series`` maps a name to {"x": [...], "y": [...]}."""
    data = []
    for i, (name, s) in enumerate(series.items()):
        data.append(
            {
                "type": "bar",
                "name": name,
                "x": s["x"],
                "y": s["y"],
                "marker": {"color": s.get("color") or PALETTE[i % len(PALETTE)]},
            }
        )
    layout = _layout(title, x_title, y_title, barmode="stack" if stacked else "group")
    if date_x:
        layout["xaxis"]["type"] = "date"
    else:
        layout["xaxis"]["type"] = "category"
    return {"data": data, "layout": layout}


def lines(title: str, x_title: str, y_title: str, series: dict[str, dict],
          date_x: bool = False) -> Figure:  # fmt: skip
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": name,
            "x": s["x"],
            "y": s["y"],
            "line": {"shape": "hv", "color": PALETTE[i % len(PALETTE)]},
        }
        for i, (name, s) in enumerate(series.items())
    ]
    layout = _layout(title, x_title, y_title)
    if date_x:
        layout["xaxis"]["type"] = "date"
    return {"data": data, "layout": layout}


def _highlight(name: str, xs: list, ys: list, size: int) -> dict:
    """The points a finding's evidence names, drawn as crosses over a context plot."""
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": xs,
        "y": ys,
        "marker": {"size": size, "color": HIGHLIGHT, "symbol": "x"},
    }
