"""A run's report: the summary table (stdout), ``summary.json`` and ``report.html``.

The HTML page stands alone (uPlot, the dashboard's charting library, is inlined from
``node_modules``): a timeline of the run with the faults as coloured bands (one row per
kind), acknowledged messages per second, publish-to-ack latency, queue acks per second
and the anomalies at the time each first shows; then the summary, the schedule and every
anomaly with its history slice.
"""

from __future__ import annotations

import html
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.nemesis.checker import CATEGORIES
from tests.nemesis.history import Event
from tests.nemesis.run import Result
from tests.nemesis.schedule import KINDS

__all__ = ["html_report", "table", "write_reports"]

ROOT = Path(__file__).resolve().parents[2]
UPLOT = ROOT / "node_modules" / "uplot" / "dist"


def table(result: Result) -> str:
    s = result.settings
    rows = [
        f"Spool nemesis: seed {s.seed}, {s.instances} instances ({s.topology}), "
        f"{s.minutes:g} min nominal, {result.elapsed_s:.0f} s in all; network: {result.network}",
        f"replay: python -m tests.nemesis --seed {s.seed} --instances {s.instances} "
        f"--topology {s.topology} --minutes {s.minutes:g}"
        + (f" --pace {s.pace:g}" if s.pace != 1 else "")
        + (f" --faults {','.join(s.faults)}" if set(s.faults) != set(KINDS) else ""),
        "",
        f"{'fault':<14}{'injected':>9}{'recovery median s':>19}{'max s':>8}",
    ]
    for kind in s.faults:
        times = result.recovery_s.get(kind, [])
        med = f"{statistics.median(times):.2f}" if times else "-"
        top = f"{max(times):.2f}" if times else "-"
        note = f"  (skipped: {result.skipped[kind]})" if kind in result.skipped else ""
        rows.append(f"{kind:<14}{result.injected.get(kind, 0):>9}{med:>19}{top:>8}{note}")
    quiet = sum(1 for p in result.schedule.periods if p.quiet)
    rows += [
        f"{'quiet':<14}{quiet:>9}   (SOW snapshots compared: "
        f"{result.verdict.checked.get('SOW snapshots compared', 0)})",
        "",
        "messages: published "
        + ", ".join(f"{k} {v}" for k, v in result.published.items())
        + "; acked "
        + ", ".join(f"{k} {v}" for k, v in result.acked.items()),
        "records in each log: " + ", ".join(f"{k} {v}" for k, v in result.stored.items()),
        "checked: " + ", ".join(f"{k} {v}" for k, v in result.verdict.checked.items()),
        "notes: " + ", ".join(f"{k} {v}" for k, v in result.verdict.notes.items()),
        delayed_line(result.verdict.delayed),
        "",
    ]
    counts = result.verdict.counts()
    for cat in CATEGORIES:
        rows.append(f"{'FAIL' if counts.get(cat) else 'PASS'}  {cat:<18}{counts.get(cat, 0)}")
    for miss in result.misses:
        rows.append(f"WARN  fault without effect: {miss}")
    rows.append(
        f"{'PASS' if not result.leaked else 'FAIL'}  processes leaked: {len(result.leaked)}"
    )
    if result.verdict.anomalies:
        rows += ["", "anomalies:"]
        for a in result.verdict.anomalies[:30]:
            where = f" [{a.instance}]" if a.instance else ""
            sub = f"/{a.sub}" if a.sub else ""
            rows.append(f"  {a.category}{sub}{where} x{a.count}: {a.detail}")
            for e in a.slice[:8]:
                rows.append(
                    f"      {e['mono']:9.3f} {e['process']:<10} {e['type']:<6} {e['f']:<10} "
                    f"{e['node'] or '-':<2} {json.dumps(e['value'])[:110]}"
                )
    rows.append(
        f"verdict: {'PASS' if result.ok else 'FAIL'} (anomalies: {len(result.verdict.anomalies)})"
    )
    return "\n".join(rows)


def delayed_line(d: dict[str, Any]) -> str:
    """The delayed messages: counts, the early tolerance and how late they came."""
    if not d:
        return "delayed: none checked"
    late = ", ".join(f"{k} {v:g}" for k, v in d.get("lateness ms", {}).items()) or "-"
    dues = ", ".join(f"{k} {v}" for k, v in d.get("due records", {}).items())
    return (
        f"delayed: acknowledged {d['acknowledged']}, received {d['distinct received']} "
        f"({d['received']} deliveries); due records {dues}; early within the clock "
        f"tolerance ({d['early tolerance s']:g} s) {d['early within the clock tolerance']}, "
        f"beyond it {d['early beyond it']}; lateness ms: {late}"
    )


def _series(events: Sequence[Event], end: float) -> dict[str, Any]:
    """Per-second buckets: acked messages, p50 publish-to-ack latency, queue acks;
    fault bands; anomaly times."""
    seconds = int(end) + 2
    acked = [0.0] * seconds
    queue = [0.0] * seconds
    latency: dict[int, list[float]] = defaultdict(list)
    last_ok: dict[str, int] = {}
    open_invokes: dict[str, list[Event]] = defaultdict(list)
    bands: list[dict[str, Any]] = []
    starts: dict[int, Event] = {}
    for e in events:
        t = int(max(0.0, min(e.mono, end)))
        if e.f == "publish" and e.type == "invoke":
            open_invokes[e.process].append(e)
        elif e.f == "publish" and e.type == "ok":
            upto = e.value["upto"]
            acked[t] += upto - last_ok.get(e.process, 0)
            last_ok[e.process] = upto
            waiting = open_invokes[e.process]
            while waiting and waiting[0].value["last"] <= upto:
                latency[t].append((e.mono - waiting.pop(0).mono) * 1000)
        elif e.f == "ack" and e.type == "ok" and e.process.startswith("qc-"):
            queue[t] += 1
        elif e.process == "nemesis" and e.f == "start":
            starts[e.value["index"]] = e
        elif e.process == "nemesis" and e.f == "end":
            s = starts.pop(e.value["index"], None)
            if s is not None:
                bands.append(
                    {"kind": s.value["kind"], "from": s.mono, "to": e.mono,
                     "label": f"#{s.value['index']} {s.value['kind']} "
                              f"{s.value['shape']} [{','.join(s.value['targets'])}]"}
                )  # fmt: skip
    lat = [statistics.median(latency[t]) if latency.get(t) else None for t in range(seconds)]
    return {
        "t": list(range(seconds)),
        "acked": acked,
        "latency": lat,
        "queue": queue,
        "bands": bands,
        "kinds": list(KINDS),
    }


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Spool nemesis: seed {seed}</title>
<style>{uplot_css}
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.15em; margin-top: 1.6em; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; }}
.pass {{ color: #1a7f37; font-weight: 600; }} .fail {{ color: #cf222e; font-weight: 600; }}
pre {{ background: #f6f8fa; padding: .6em; overflow-x: auto; font-size: 12px; }}
.legend-band {{ display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; vertical-align: middle; }}
</style></head><body>
<h1>Spool nemesis &mdash; seed {seed}: <span class="{verdict_class}">{verdict}</span></h1>
<p>{subtitle}</p>
<div id="bands-legend"></div>
<div id="chart-acked"></div><div id="chart-latency"></div><div id="chart-queue"></div>
<h2>Summary</h2><pre>{table}</pre>
<h2>Schedule</h2><table><tr><th>#</th><th>kind</th><th>shape</th><th>targets</th><th>s</th><th>params</th></tr>{schedule}</table>
<h2>Anomalies ({anomaly_count})</h2>{anomalies}
<script>{uplot_js}</script>
<script>
const D = {data};
const palette = ["#e6194b","#3cb44b","#ffe119","#4363d8","#f58231","#911eb4","#46f0f0",
  "#f032e6","#bcf60c","#fabebe","#008080","#e6beff","#9a6324","#800000","#808000"];
const color = k => palette[D.kinds.indexOf(k) % palette.length] + "55";
document.getElementById("bands-legend").innerHTML = "faults: " + D.kinds.map(k =>
  `<span class="legend-band" style="background:${{color(k)}}"></span>${{k}}`).join("");
function bandsPlugin() {{
  return {{ hooks: {{ drawClear: [u => {{
    const ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
    const rows = D.kinds.length, rowH = h / rows;
    for (const b of D.bands) {{
      const x0 = u.valToPos(b.from, "x", true), x1 = u.valToPos(b.to, "x", true);
      const row = D.kinds.indexOf(b.kind);
      ctx.fillStyle = color(b.kind);
      ctx.fillRect(x0, top + row * rowH, Math.max(1, x1 - x0), rowH);
    }}
    ctx.fillStyle = "#cf222e";
    for (const a of D.anomalies) {{
      const x = u.valToPos(a, "x", true);
      ctx.fillRect(x - 1, top, 2, h);
    }}
  }}] }} }};
}}
function chart(id, title, label, values, stroke, log) {{
  const y = log ? {{ distr: 3, log: 10 }} : {{}};
  new uPlot({{ title, width: Math.min(1400, window.innerWidth - 60), height: 220,
    plugins: [bandsPlugin()], scales: {{ x: {{ time: false }}, y }},
    axes: [{{ label: "run time (s)" }}, {{ label }}],
    series: [{{}}, {{ label, stroke, width: 1.5, spanGaps: false }}] }},
    [D.t, values], document.getElementById(id));
}}
chart("chart-acked", "Acknowledged messages per second (bands: faults by kind, red lines: anomalies)", "msgs/s", D.acked, "#4363d8");
chart("chart-latency", "Publish-to-ack latency, median per second (log scale)", "ms",
  D.latency.map(v => v === null ? null : Math.max(v, 0.1)), "#f58231", true);
chart("chart-queue", "Queue acks confirmed per second", "acks/s", D.queue, "#3cb44b");
</script></body></html>
"""


def html_report(result: Result, events: Sequence[Event]) -> str:
    end = max((e.mono for e in events), default=0.0)
    data = _series(events, end)
    data["anomalies"] = [a.time for a in result.verdict.anomalies if a.time is not None]
    css = (UPLOT / "uPlot.min.css").read_text() if (UPLOT / "uPlot.min.css").exists() else ""
    js_path = UPLOT / "uPlot.iife.min.js"
    js = (
        js_path.read_text()
        if js_path.exists()
        else "document.body.prepend('uPlot missing: run make install');"
    )
    schedule = "".join(
        f"<tr><td>{p.index}</td><td>{p.kind}</td><td>{p.shape}</td>"
        f"<td>{','.join(p.targets)}</td><td>{p.duration:.1f}</td>"
        f"<td>{html.escape(json.dumps(p.params))}</td></tr>"
        for p in result.schedule.periods
    )
    anomalies = (
        "".join(
            f"<h3>{html.escape(a.category)}{'/' + a.sub if a.sub else ''}"
            f"{' on ' + a.instance if a.instance else ''} &times;{a.count}</h3>"
            f"<p>{html.escape(a.detail)}</p><pre>"
            + html.escape("\n".join(json.dumps(e) for e in a.slice))
            + "</pre>"
            for a in result.verdict.anomalies
        )
        or "<p>none</p>"
    )
    s = result.settings
    return _PAGE.format(
        seed=s.seed,
        verdict="PASS" if result.ok else "FAIL",
        verdict_class="pass" if result.ok else "fail",
        subtitle=html.escape(
            f"{s.instances} instances, topology {s.topology}, {s.minutes:g} min nominal, "
            f"{result.elapsed_s:.0f} s in all; {sum(result.injected.values())} faults injected; "
            f"network: {result.network}"
        ),
        uplot_css=css,
        uplot_js=js,
        data=json.dumps(data),
        table=html.escape(table(result)),
        schedule=schedule,
        anomaly_count=len(result.verdict.anomalies),
        anomalies=anomalies,
    )


def write_reports(result: Result, events: Sequence[Event], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "summary.json", "html": out / "report.html"}
    paths["json"].write_text(json.dumps(result.to_json(), indent=2) + "\n")
    paths["html"].write_text(html_report(result, events))
    return paths
