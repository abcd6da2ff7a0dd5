"""The table printed at the end of a run (plain text or Markdown) and the Spool/peer ratios.

Everything here reads the JSON-shaped run record, so a stored run prints exactly as it did
when it was measured (``python -m tests.bench --show``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tests.bench.catalog import COMPARISONS, Comparison, format_number


def compare(
    scenarios: Sequence[dict[str, Any]], comparisons: Iterable[Comparison] = COMPARISONS
) -> list[dict[str, Any]]:
    """Spool/peer ratios of medians for the comparisons whose two scenarios ran.

    Comparisons with a side that was not selected are left out; one whose side failed or
    is missing says why (``reason``) and has no ratio.
    """
    by_name = {s["name"]: s for s in scenarios}
    out: list[dict[str, Any]] = []
    for c in comparisons:
        row: dict[str, Any] = {
            "label": c.label,
            "spool": c.spool,
            "peer": c.peer,
            "metric": c.metric,
            "peer_metric": c.peer_metric or c.metric,
            "goal": c.goal,
            "goal_ratio": c.goal_ratio,
        }
        sides = [by_name.get(c.spool), by_name.get(c.peer)]
        if sides[0] is None or sides[1] is None:
            continue  # not selected in this run: nothing to say
        values: list[float] = []
        reasons: list[str] = []
        metrics = (c.metric, c.peer_metric or c.metric)
        for name, sc, metric in zip((c.spool, c.peer), sides, metrics, strict=True):
            if sc is None:
                reasons.append(f"{name} not run")
            elif sc["status"] != "ok":
                reasons.append(f"{name} {sc['status']}: {sc['reason']}")
            elif metric not in sc["metrics"]:
                reasons.append(f"{name} has no {metric}")
            else:
                values.append(float(sc["metrics"][metric]["median"]))
        if reasons:
            row.update(
                spool_value=None,
                peer_value=None,
                ratio=None,
                goal_met=None,
                reason="; ".join(reasons),
            )
        else:
            ratio = values[0] / values[1] if values[1] else None
            row.update(
                spool_value=values[0],
                peer_value=values[1],
                ratio=ratio,
                goal_met=(ratio >= c.goal_ratio) if (c.goal and ratio is not None) else None,
                reason="",
            )
        out.append(row)
    return out


_NOT_OK = ("ERROR", "MISSING", "SKIPPED")


def _spread(m: dict[str, Any]) -> str:
    sp = m.get("spread_pct")
    if sp is None:
        return "inf" if m.get("min") != m.get("max") else "-"
    if len(m.get("values", [])) < 2:
        return "-"
    return f"{sp:.1f}%"


def _rows(record: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """(scenario, metric, median, spread, runs, target) per headline metric."""
    rows: list[tuple[str, str, str, str, str, str]] = []
    for sc in record["scenarios"]:
        name = sc["name"]
        if sc["status"] != "ok":
            rows.append((name, sc["status"].upper(), _clip(sc["reason"], 70), "", "", ""))
            continue
        metrics: dict[str, Any] = sc["metrics"]
        headline = sc.get("headline") or list(metrics)
        targets = {t["metric"]: t for t in sc.get("targets", [])}
        for metric in headline:
            m = metrics.get(metric)
            if m is None:
                continue
            t = targets.get(metric)
            verdict = ""
            if t is not None:
                met = "met" if t.get("met") else "MISSED"
                verdict = f"{t['op']} {format_number(t['value'])} {met}"
            rows.append(
                (
                    name,
                    metric,
                    format_number(m["median"]),
                    _spread(m),
                    str(len(m["values"])),
                    verdict,
                )
            )
            name = ""
    return rows


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _comparison_lines(record: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for c in record.get("comparisons", []):
        if c["ratio"] is None:
            lines.append(f"  {c['label']}: n/a ({_clip(c['reason'], 90)})")
            continue
        goal = ""
        if c["goal_met"] is not None:
            goal = f"  goal >= {c.get('goal_ratio', 1.0):.2f}x " + (
                "met" if c["goal_met"] else "MISSED"
            )
        lines.append(
            f"  {c['label']}: {format_number(c['spool_value'])} / "
            f"{format_number(c['peer_value'])} = {c['ratio']:.2f}x{goal}"
        )
    return lines


def header_lines(record: dict[str, Any]) -> list[str]:
    m = record.get("machine", {})
    g = record.get("git", {})
    commit = (g.get("commit") or "unknown")[:12]
    dirty = " (uncommitted changes)" if g.get("dirty") else ""
    mode = (
        "QUICK mode (reduced message counts; smoke use only)"
        if record.get("quick")
        else "full mode"
    )
    lines = [
        f"Spool benchmark, {mode}",
        f"{record.get('started_at', '?')}  commit {commit}{dirty}  "
        f"{record.get('duration_s', 0):.0f} s",
        f"{m.get('cpu_model', '?')}, {m.get('logical_cpus', '?')} CPUs, "
        f"{(m.get('memory_bytes') or 0) / 2**30:.0f} GiB, Python {m.get('python', '?')}, "
        f"{m.get('platform', '?')}",
    ]
    start, end = m.get("loadavg_at_start"), m.get("loadavg_at_end")
    if start and end:
        # the load at the end includes the suite's own processes; at the start it does not
        busy = start[0] > 0.5 * (m.get("logical_cpus") or 1)
        note = "  (other work was running: numbers are pessimistic)" if busy else ""
        lines.append(f"load average at start {start[0]:.2f}, at end {end[0]:.2f}{note}")
    return lines


def format_table(record: dict[str, Any]) -> str:
    """The plain-text report: header, one row per headline metric, ratios, hot spots."""
    rows = _rows(record)
    head = ("scenario", "metric", "median", "spread", "runs", "target")
    data = [r for r in rows if r[1] not in _NOT_OK]
    widths = [max([len(head[i]), *(len(r[i]) for r in data)]) for i in range(6)]
    widths[0] = max([widths[0], *(len(r[0]) for r in rows)])
    widths[2] = max(widths[2], 10)

    def fmt(r: Sequence[str]) -> str:
        if r[1] in _NOT_OK:
            return f"{r[0]:<{widths[0]}}  {r[1]}: {r[2]}"
        return (
            f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  "
            f"{r[3]:>{widths[3]}}  {r[4]:>{widths[4]}}  {r[5]}"
        ).rstrip()

    lines = [*header_lines(record), "", fmt(head), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    comp = _comparison_lines(record)
    if comp:
        lines += ["", "Spool / peer (ratio of medians, higher is better for Spool):", *comp]
    hot = hot_spot_lines(record)
    if hot:
        lines += ["", "Broker hot spots (py-spy, share of busy samples):", *hot]
    return "\n".join(lines)


def hot_spot_lines(record: dict[str, Any], top: int = 8) -> list[str]:
    lines: list[str] = []
    for sc in record["scenarios"]:
        prof = sc.get("detail", {}).get("profile")
        if not prof:
            continue
        lines.append(f"  {sc['name']} ({prof['samples']} samples, {prof['file']})")
        for h in prof["top_self"][:top]:
            lines.append(
                f"    self {h['self_pct']:5.1f}%  incl {h['inclusive_pct']:5.1f}%  {h['function']}"
            )
        proj = prof.get("top_project", [])[:top]
        if proj:
            lines.append("    project functions, library time they call included:")
            for h in proj:
                lines.append(
                    f"    own+libs {h['self_pct']:5.1f}%  incl {h['inclusive_pct']:5.1f}%  "
                    f"{h['function']}"
                )
    return lines


def format_markdown(record: dict[str, Any]) -> str:
    """The same report as Markdown (for docs/performance.md)."""
    out = [f"_{line}_  " for line in header_lines(record)]
    out += [
        "",
        "| scenario | metric | median | spread | runs | target |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in _rows(record):
        if r[1] in _NOT_OK:
            out.append(f"| `{r[0]}` | {r[1]} | {r[2]} | | | |")
        else:
            name = f"`{r[0]}`" if r[0] else ""
            out.append(f"| {name} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} |")
    comps = record.get("comparisons", [])
    if comps:
        out += ["", "| Spool / peer | Spool | peer | ratio | goal |", "|---|---:|---:|---:|---|"]
        for c in comps:
            if c["ratio"] is None:
                out.append(f"| {c['label']} | | | n/a | {_clip(c['reason'], 80)} |")
                continue
            goal = (
                ""
                if c["goal_met"] is None
                else f">= {c.get('goal_ratio', 1.0):g}: " + ("met" if c["goal_met"] else "MISSED")
            )
            out.append(
                f"| {c['label']} | {format_number(c['spool_value'])} | "
                f"{format_number(c['peer_value'])} | {c['ratio']:.2f}x | {goal} |"
            )
    return "\n".join(out)
