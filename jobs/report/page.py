"""The report as one HTML file: styles, plotly.js and every figure's data inlined, so the file
opens the same on a machine without network as where it was made."""

from __future__ import annotations

import datetime as dt
import html
import json
from importlib import resources
from typing import Any

from jobs.report.selection import rank
from replay.tables import NEW, PROVISIONAL

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#212121;
 background:#f4f5f7}
header{background:#263238;color:#fff;padding:18px 28px}
header h1{margin:0 0 6px;font-size:22px}
main{padding:16px 28px;max-width:1500px}
#overview-plots{grid-template-columns:repeat(auto-fit,minmax(560px,1fr))}
.verdict{display:inline-block;padding:3px 10px;border-radius:4px;font-weight:600}
.pass{background:#2e7d32}.fail{background:#c62828}.nogate{background:#546e7a}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(400px,1fr));gap:14px}
.panel,.finding-card{background:#fff;border-radius:6px;box-shadow:0 1px 3px #0002;padding:12px 16px;
 margin-bottom:14px}
table{border-collapse:collapse;font-size:13px}
td,th{padding:3px 8px;border-bottom:1px solid #eceff1;text-align:left;vertical-align:top}
th{color:#546e7a;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.sev{display:inline-block;border-radius:3px;padding:0 6px;font-size:12px;color:#fff}
.sev-critical{background:#6a1b9a}.sev-error{background:#c62828}.sev-warning{background:#ef6c00}
.sev-info{background:#1565c0}
.finding-card{border-left:5px solid #90a4ae}
.finding-card.critical{border-left-color:#6a1b9a}.finding-card.error{border-left-color:#c62828}
.finding-card.warning{border-left-color:#ef6c00}.finding-card.info{border-left-color:#1565c0}
.finding-card{overflow-x:auto}
.finding-card h3{margin:2px 0 6px;font-size:15px}
.where{color:#546e7a;font-size:12px;margin-bottom:6px}
pre{background:#263238;color:#eceff1;padding:6px 10px;border-radius:4px;overflow-x:auto;font-size:12px}
.evidence td:first-child{color:#546e7a;white-space:nowrap}
.evidence td{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
.plot{min-height:320px}
.note{color:#546e7a;font-size:12px}
nav a{margin-right:12px;color:#1565c0;text-decoration:none;font-size:13px}
h2{font-size:18px;margin:22px 0 8px}
"""

SCRIPT = """
(function(){
  // plots in the first screen are drawn first (reportFirstViewMs: from the start of navigation
  // to them drawn), the others one by one after, so the page is usable at once
  var figs = JSON.parse(document.getElementById('figures').textContent);
  var nodes = Array.prototype.slice.call(document.querySelectorAll('div.plot[data-fig]'));
  var cfg = {displaylogo:false, responsive:true, displayModeBar:'hover'};
  var seen = function(el){ var r = el.getBoundingClientRect();
    return r.top < window.innerHeight && r.bottom > 0; };
  var first = nodes.filter(seen), rest = nodes.filter(function(el){ return !seen(el); });
  var done = 0;
  function draw(el){ var f = figs[+el.dataset.fig];
    return Plotly.newPlot(el, f.data, f.layout, cfg).then(function(){ done += 1; }); }
  function finish(){ window.reportRenderedMs = performance.now();
    document.body.dataset.rendered = String(done); }
  function next(){ if (!rest.length) { finish(); return; }
    draw(rest.shift()).then(function(){ setTimeout(next, 0); }); }
  Promise.all(first.map(draw)).then(function(){
    requestAnimationFrame(function(){
      window.reportFirstViewMs = performance.now();
      document.body.dataset.firstView = String(first.length);
      setTimeout(next, 0);
    });
  });
})();
"""


def _esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _script_safe(text: str) -> str:
    """Text that cannot end the inline <script> it sits in."""
    return text.replace("</", "<\\/")


def _ms(v: int | None) -> str:
    if v is None:
        return "–"
    try:
        t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=int(v))
    except OverflowError:
        return f"{v} ms"
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _n(v: int | None) -> str:
    return "–" if v is None else f"{v:,}"


def _cell(v: Any) -> str:
    text = json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else str(v)
    if len(text) > 1500:
        text = text[:1500] + f"… ({len(text):,} characters)"
    return _esc(text)


def _value(key: str, v: Any) -> str:
    """An evidence value; a timestamp also as ISO-8601 (the number stays: it is what the log
    holds)."""
    if key.endswith("timestamp") and isinstance(v, int) and not isinstance(v, bool):
        return f"{_ms(v)} ({v})"
    return _cell(v)


class Page:
    """Collects sections and figures; :meth:`render` gives the whole document."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.parts: list[str] = []
        self.figures: list[dict] = []

    def figure(self, fig: dict | None, note: str = "") -> str:
        if fig is None:
            return ""
        self.figures.append(fig)
        extra = f'<div class="note">{_esc(note)}</div>' if note else ""
        return f'<div class="plot" data-fig="{len(self.figures) - 1}"></div>{extra}'

    def add(self, text: str) -> None:
        self.parts.append(text)

    def render(self) -> str:
        plotly = resources.files("plotly").joinpath("package_data/plotly.min.js").read_text()
        figs = json.dumps(self.figures, separators=(",", ":"), default=str)
        return "".join(
            [
                "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
                "<meta name='viewport' content='width=device-width,initial-scale=1'>",
                f"<title>{_esc(self.title)}</title><style>{CSS}</style>",
                f"<script>{_script_safe(plotly)}</script></head><body>",
                *self.parts,
                f'<script type="application/json" id="figures">{_script_safe(figs)}</script>',
                f"<script>{SCRIPT}</script></body></html>",
            ]
        )


EXPIRED = " <b class='sev sev-error'>expired</b>"


def _seen(f: dict) -> str:
    """A card's mark of a run given --since: new, or known since the day first seen."""
    if f.get("status") in (NEW, PROVISIONAL):
        return f"<span class='sev sev-error'>{_esc(f['status'])}</span> "
    if f.get("status"):
        return f"<span class='sev sev-info'>known since {_esc(f.get('first_seen'))}</span> "
    return ""


def _statuses(summary: dict) -> str:
    """ " (N new, P provisional, M known, K gone)" of a run given --since (findings_history),
    else ""."""
    by = (summary.get("findings") or {}).get("by_status")
    if not by:
        return ""
    return (f" ({_n(by['new'])} new, {_n(by.get(PROVISIONAL, 0))} provisional, "
            f"{_n(by['still present'])} known, {_n(by['gone'])} gone)")  # fmt: skip


def header(summary: dict, inputs: dict, counts: dict[str, dict[str, int]], order: list[str]) -> str:
    gate = summary.get("gate")
    if gate is None:
        verdict = '<span class="verdict nogate">not gated</span>'
    elif gate.get("success"):
        verdict = (
            f'<span class="verdict pass">gate PASS ({gate.get("evaluated")} expectations)</span>'
        )
    else:
        verdict = (
            f'<span class="verdict fail">gate FAIL: {len(gate.get("failed") or [])} of '
            f"{gate.get('evaluated')} expectations failed</span>"
        )
    total = sum(sum(v.values()) for v in counts.values())
    head = (
        f"<header><h1>logreplay audit report</h1>{verdict} "
        f"<span style='margin-left:14px'>{_n(total)} findings{_statuses(summary)} · run "
        f"{_esc(summary.get('run_id'))}"
        f"{' · logical date ' + _esc(summary['logical_date']) if summary.get('logical_date') else ''}"
        "</span></header><main>"
    )
    nav = "<nav>" + "".join(f"<a href='#kind-{_esc(k)}'>{_esc(k)}</a>" for k in order) + "</nav>"
    return (
        head
        + gate_panels(gate)
        + f"<div class='grid'>{kinds_panel(counts, order)}{inputs_panels(summary, inputs)}"
        f"{coverage_panel(summary)}{since_panel(summary)}</div>"
        f"{nav}<h2 id='overview'>Overview</h2>"
    )


def gate_panels(gate: dict | None) -> str:
    """The gate's failed expectations and its waivers, where there are any."""
    failed = "".join(f"<li>{_esc(f)}</li>" for f in (gate or {}).get("failed") or [])
    gate_panel = (
        f"<div class='panel' id='gate'><b>Failed expectations</b><ul>{failed}</ul>"
        "<div class='note'>The gate's <a href='../gate/data_docs/index.html'>Data Docs</a> "
        "(gate/data_docs/ of the run) hold every expectation's result.</div></div>"
        if failed
        else ""
    )
    waivers = "".join(
        f"<tr><td>{_esc(w['waiver'])}</td><td>{_esc(w['expires'])}"
        f"{EXPIRED if w['expired'] else ''}</td>"
        f"<td class='num'>{_n(w['matched'])}</td><td class='num'>{_n(w['waived'])}</td>"
        f"<td>{_esc(w.get('sample') or '')}</td></tr>"
        for w in (gate or {}).get("waivers") or []
    )
    waiver_panel = (
        "<div class='panel' id='waivers'><b>Waivers (gate.waivers)</b><table><tr><th>waiver</th>"
        "<th>expires</th><th>matches</th><th>waived</th><th>waived findings</th></tr>"
        f"{waivers}</table><div class='note'>Waived findings are still in the sections below; "
        "they do not fail the gate until their waiver expires.</div></div>"
        if waivers
        else ""
    )
    return gate_panel + waiver_panel


def kinds_panel(counts: dict[str, dict[str, int]], order: list[str]) -> str:
    """The findings by kind and severity."""
    sevs = ("critical", "error", "warning", "info")
    rows = "".join(
        f"<tr><td><a href='#kind-{_esc(k)}'>{_esc(k)}</a></td>"
        + "".join(
            f"<td class='num'>{_n(counts[k].get(s)) if counts[k].get(s) else ''}</td>" for s in sevs
        )  # fmt: skip
        + f"<td class='num'><b>{_n(sum(counts[k].values()))}</b></td></tr>"
        for k in order
    )
    kinds = (
        "<div class='panel' id='by-kind'><b>Findings by kind and severity</b><table>"
        "<tr><th>kind</th>"
        + "".join(f"<th><span class='sev sev-{s}'>{s}</span></th>" for s in sevs)
        + f"<th>total</th></tr>{rows or '<tr><td colspan=6>no findings</td></tr>'}</table></div>"
    )
    return kinds


def inputs_panels(summary: dict, inputs: dict) -> str:
    """What was read and how its bytes were accounted for."""
    i = inputs
    inp = (
        "<div class='panel' id='inputs'><b>Inputs</b><table>"
        f"<tr><td>dump</td><td>{_esc(', '.join(summary.get('inputs') or []))}</td></tr>"
        f"<tr><td>brokers / topics / partitions</td><td>{i['brokers']} / {i['topics']} / "
        f"{_n(i['partitions'])}</td></tr>"
        f"<tr><td>files / bytes</td><td>{_n(i['files'])} / {_n(i['bytes'])}</td></tr>"
        f"<tr><td>log bytes / data records</td><td>{_n(i['log_bytes'])} / {_n(i['records'])}</td></tr>"
        f"<tr><td>time span (batch timestamps)</td><td>{_ms(i['first_timestamp'])} → "
        f"{_ms(i['last_timestamp'])}</td></tr></table></div>"
    )
    errors = ", ".join(f"{k}: {_n(v)}" for k, v in sorted(i["errors"].items())) or "none"
    acct = (
        "<div class='panel' id='accounting'><b>Decoding accounting</b><table>"
        f"<tr><td>valid bytes</td><td class='num'>{_n(i['bytes_valid'])}</td></tr>"
        f"<tr><td>padding bytes</td><td class='num'>{_n(i['bytes_padding'])}</td></tr>"
        f"<tr><td>corrupt bytes</td><td class='num'>{_n(i['bytes_corrupt'])}</td></tr>"
        f"<tr><td>error rows</td><td>{_n(sum(i['errors'].values()))} ({_esc(errors)})</td></tr>"
        "</table></div>"
    )
    return inp + acct


def coverage_panel(summary: dict) -> str:
    """What the audit could judge per check family (summary.json's `coverage`) and how the
    dump's directories were grouped into clusters (its `dump_layout`): a finding count means
    little without what was looked at."""
    coverage = summary.get("coverage") or {}
    if not coverage:
        return ""

    def row(family: str, f: dict) -> str:
        share = "-" if f.get("share") is None else f"{f['share']:.1%}"
        reasons = "; ".join(f"{r}: {n}" for r, n in list((f.get("reasons") or {}).items())[:2])
        weak = "; ".join(f"{r}: {n}" for r, n in (f.get("weakened") or {}).items())
        reasons += f"{'; ' if reasons and weak else ''}{'judged weaker, ' + weak if weak else ''}"
        return (
            f"<tr><td>{_esc(family)}</td><td class='num'>{share}</td>"
            f"<td class='num'>{_n(f.get('seen'))} {_esc(f.get('unit'))}</td>"
            f"<td>{_esc(reasons)}</td></tr>"
        )

    from replay.coverage import FAMILY_ORDER

    ordered = sorted(coverage.items(), key=lambda kv: (FAMILY_ORDER.get(kv[0], 99), kv[0]))
    rows = "".join(row(family, f) for family, f in ordered)
    layout = summary.get("dump_layout") or {}
    clusters = layout.get("clusters") or {}
    why = "".join(f"<li>{_esc(r)}</li>" for r in layout.get("reasons") or [])
    return (
        "<div class='panel' id='coverage'><b>Coverage: what the audit could judge</b><table>"
        "<tr><th>family</th><th>judged</th><th>of</th><th>not judged, largest reasons; judged by a weaker rule</th></tr>"
        f"{rows}</table><div class='note'>{_n(len(clusters))} cluster(s): "
        f"{_esc(', '.join(clusters))}</div>{f'<ul class=note>{why}</ul>' if why else ''}</div>"
    )


def since_panel(summary: dict) -> str:
    """How the logs went on since the previous run's points (summary.json's `since_points`,
    a run given --since; docs/incremental.md): what a later run would read, what changed
    below the points, the logs truncated below them by name."""
    p = summary.get("since_points")
    if not p:
        return ""
    changes = ", ".join(f"{k}: {_n(v)}" for k, v in (p.get("changes") or {}).items()) or "none"
    truncated = ", ".join(p.get("truncated") or []) or "none"
    return (
        "<div class='panel' id='since'><b>Since the previous run</b><table>"
        f"<tr><td>replicas going on from their points</td><td>{_n(p['went_on'])} of "
        f"{_n(p['points'])}</td></tr>"
        f"<tr><td>bytes past the points, read</td><td>{_n(p['bytes_after'])} of "
        f"{_n(p['log_bytes'])}"
        "</td></tr>"
        f"<tr><td>changed below the points</td><td>{_esc(changes)}</td></tr>"
        f"<tr><td>truncated below them</td><td>{_esc(truncated)}</td></tr>"
        f"<tr><td>points not in this dump</td><td>{_n(p['points_without_replica'])}</td></tr>"
        "</table></div>"
    )


def kind_heading(kind: str, counts: dict[str, int], shown: int) -> str:
    total = sum(counts.values())
    worst = max(counts, key=rank)
    rest = (
        f" <span class='note rest'>showing {shown}; {total - shown:,} more not shown</span>"
        if total > shown
        else ""
    )
    return (
        f"<section class='kind' id='kind-{_esc(kind)}' data-kind='{_esc(kind)}' "
        f"data-total='{total}' data-shown='{shown}'>"
        f"<h2><span class='sev sev-{worst}'>{worst}</span> {_esc(kind)} · {_n(total)}</h2>{rest}"
    )


def card(f: dict, ev: dict, command: str | None, plot: str, n: int = 0,
         related: list[tuple[int, str]] = ()) -> str:  # fmt: skip
    """One finding: where, its evidence, the dump command, its context plot, and the findings
    that share its open transaction (cause and effect), linked."""
    where = ", ".join(
        f"{label} {_esc(f[col])}"
        for label, col in (
            ("topic", "topic"),
            ("partition", "partition"),
            ("group", "group_id"),
            ("producer", "producer_id"),
            ("epoch", "producer_epoch"),
            ("transactional id", "transactional_id"),
        )  # fmt: skip
        if f.get(col) is not None
    )
    if f.get("first_offset") is not None:
        where += f", offsets {f['first_offset']}–{f.get('last_offset')}"
    rows = "".join(f"<tr><td>{_esc(k)}</td><td>{_value(k, v)}</td></tr>" for k, v in ev.items())
    cmd = f"<pre><code>{_esc(command)}</code></pre>" if command else ""
    if f.get("remediation"):  # the next step (replay.remediation): never run by logreplay
        cmd = (f"<div class='remediation'><b>next step</b><pre><code>{_esc(f['remediation'])}"
               f"</code></pre></div>{cmd}")  # fmt: skip
    if related:
        links = ", ".join(f"<a href='#card-{m}'>{_esc(kind)}</a>" for m, kind in related)
        where += f"<div class='related'>same open transaction: {links}</div>"
    return (
        f"<article class='finding-card {_esc(f['severity'])}' id='card-{n}' "
        f"data-kind='{_esc(f['kind'])}'>"
        f"<h3><span class='sev sev-{_esc(f['severity'])}'>{_esc(f['severity'])}</span> "
        f"{_seen(f)}{_esc(f['message'])}</h3><div class='where'>{where}</div>"
        f"<table class='evidence'>{rows}</table>{cmd}{plot}</article>"
    )
