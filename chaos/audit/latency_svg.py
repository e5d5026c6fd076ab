"""The report's latency plot: the acknowledged writes' latency over the run, the faults
shaded behind it (Jepsen's latency plot), and the consumer groups' rebalance pauses in a
lane under it; and the plots' data as JSON for whoever reads the page with a program.

Drawn from :attr:`AuditResult.latency` (per second: the median, 99th percentile and
largest latency of the ``ok`` writes whose lines say when they were ``sent``), the fault
spans of the timeline (:mod:`chaos.audit.timeline`) and the group checks' rebalances. The
y axis is logarithmic: a run's latencies go from milliseconds to the tens of seconds a
leader's failover holds a write.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Any

from chaos.audit.latency import as_rows
from chaos.audit.model import AuditResult
from chaos.audit.timeline import NEMESIS_LANE, Span, clock, read_timeline
from chaos.audit.timeline_svg import LEFT, PLOT_W, WIDTH, time_axis

__all__ = ["draw_latency", "run_data", "run_data_script"]

PLOT_H = 180
PAUSE_LANE_H = 16
_SERIES = (("p50_ms", "#1f77b4", "median"), ("p99_ms", "#ff7f0e", "99th percentile"))


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _faults(result: AuditResult) -> list[Span]:
    timeline = read_timeline(result.timeline, result.brokers)
    return [s for s in timeline.spans if s.lane == NEMESIS_LANE]


def run_data(result: AuditResult) -> dict[str, Any]:
    """Every plot's data: each fault (nemesis, start, struck, end, healed), the latency and
    operations per second, and each rebalance."""
    return {
        "faults": [
            {
                "label": s.label,
                "kind": s.kind,
                "start": s.start,
                "struck": s.struck,
                "end": s.end,
                "healed": s.healed,
            }
            for s in _faults(result)
        ],
        "latency_per_second": as_rows(result.latency),
        "operations_per_second": [list(row) for row in result.acks_per_second],
        "rebalances": list((result.groups or {}).get("rebalances", [])),
    }


def run_data_script(result: AuditResult) -> str:
    """:func:`run_data` as a JSON data block (every ``<`` written ``\\u003c``, so no text
    in it can end the block or open a tag)."""
    text = json.dumps(run_data(result), separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="run-data">{text}</script>'


def draw_latency(result: AuditResult) -> str:
    """The plot as inline SVG, or a sentence saying why there is none."""
    latency = result.latency
    rebalances = [r for r in (result.groups or {}).get("rebalances", []) if r.get("resumed")]
    if not latency and not rebalances:
        return (
            "<p>No latency to draw: the history's writes do not say when they were sent "
            "(<code>sent</code>).</p>"
        )
    faults = _faults(result)
    times = [
        *(s.second for s in latency),
        *(s.second + 1 for s in latency),
        *(float(r["started"]) for r in rebalances),
        *(float(r["resumed"]) for r in rebalances),
        *(f.start for f in faults),
        *(f.end for f in faults),
    ]
    t0, t1 = math.floor(min(times)), math.ceil(max(times)) + 1

    def x(t: float) -> float:
        return LEFT + (t - t0) / (t1 - t0) * PLOT_W

    top = 24
    base = top + PLOT_H
    lane_top = base + 30
    height = int(lane_top + PAUSE_LANE_H + 40)
    values = [v for s in latency for v in (s.p50_ms, s.p99_ms, s.max_ms) if v > 0]
    low = 10 ** math.floor(math.log10(min(values))) if values else 1.0
    high = 10 ** math.ceil(math.log10(max(values))) if values else 10.0
    high = max(high, low * 10)

    def y(ms: float) -> float:
        ms = min(max(ms, low), high)
        share = (math.log10(ms) - math.log10(low)) / math.log10(high / low)
        return float(base - share * PLOT_H)

    out = [
        f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        'aria-label="write latency over time, faults shaded">',
        f'<text x="{LEFT}" y="{top - 8}">latency of acknowledged writes (ms, log scale): '
        '<tspan fill="#1f77b4">median</tspan>, <tspan fill="#ff7f0e">99th percentile</tspan>'
        ', <tspan fill="#999">largest</tspan> per second; faults shaded</text>',
    ]
    for f in faults:  # behind everything
        out.append(
            f'<rect class="fault" x="{x(f.start):.1f}" y="{top}" '
            f'width="{max(x(f.end) - x(f.start), 1):.1f}" height="{PLOT_H}" '
            f'fill="#d62728" fill-opacity="0.12"><title>{_e(f.tip)}</title></rect>'
        )
    decade = low
    while decade <= high * 1.0001:
        ty = y(decade)
        out.append(
            f'<line class="y-tick" x1="{LEFT - 4}" y1="{ty:.1f}" x2="{LEFT + PLOT_W}" '
            f'y2="{ty:.1f}" stroke="#e4e4e4"/>'
        )
        out.append(
            f'<text class="y-label" x="{LEFT - 7}" y="{ty + 4:.1f}" text-anchor="end">'
            f"{decade:g}</text>"
        )
        decade *= 10
    out.append(f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{base}" stroke="#999"/>')
    for s in latency:
        cx = x(s.second + 0.5)
        out.append(
            f'<circle cx="{cx:.1f}" cy="{y(s.max_ms):.1f}" r="1.2" fill="#999">'
            f"<title>{_e(clock(s.second))}: {s.count:,} writes, largest {s.max_ms:,.1f} ms"
            "</title></circle>"
        )
    for field, colour, name in _SERIES:
        points = " ".join(f"{x(s.second + 0.5):.1f},{y(getattr(s, field)):.1f}" for s in latency)
        if points:
            out.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.2">'
                f"<title>{name}</title></polyline>"
            )
    out += _pauses(rebalances, x, lane_top)
    out += time_axis(x, base, t0, t1)
    out.append(
        f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{height - 4}" text-anchor="middle">time (UTC)</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


def _pauses(rebalances: Sequence[dict[str, Any]], x: Any, top: float) -> list[str]:
    """Each rebalance's pause (from the group losing partitions to its first read in the
    new generation) as a band in a lane of its own."""
    if not rebalances:
        return []
    out = [
        f'<text class="lane-title" x="{LEFT - 8}" y="{top + PAUSE_LANE_H / 2 + 4:.1f}" '
        'text-anchor="end">rebalances</text>',
        f'<rect class="lane" x="{LEFT}" y="{top}" width="{PLOT_W}" height="{PAUSE_LANE_H}" '
        'fill="#f2f2f2"/>',
    ]
    for r in rebalances:
        start, end = float(r["started"]), float(r["resumed"])
        fault = f", after {r['fault']}" if r.get("fault") else ""
        out.append(
            f'<rect class="pause" x="{x(start):.1f}" y="{top + 2}" '
            f'width="{max(x(end) - x(start), 1.5):.1f}" height="{PAUSE_LANE_H - 4}" '
            f'fill="#9467bd"><title>{_e(r["group"])} generation {r["generation"]}: '
            f"{float(r['pause_s']):.1f} s without a read from {_e(clock(start))}{_e(fault)}"
            "</title></rect>"
        )
    return out
