"""The report's time axis as inline SVG: the faults in lanes above the operations per second.

One lane per broker (titled with a scenario's names, ``A: broker 1``), one for the faults
as a whole (``nemesis``) and one for ZooKeeper when a node of it was a target. Each interval
of :mod:`chaos.audit.timeline` is a shaded bar from its start to its heal, labelled with its
nemesis; a label never spills over the next bar or past the plot (it is cut short with an
ellipsis, the whole text in the bar's ``<title>`` tooltip). A fault that could not strike
is hatched and labelled ``skipped: <nemesis>``, its reason in the tooltip. Below, the
operations per time bucket as stacked bars with a scaled y axis, lost acknowledgements as
red triangles, and a scenario's key events named under the time axis.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

from chaos.audit.model import AuditResult
from chaos.audit.timeline import Span, Timeline, clock, read_timeline

__all__ = ["CHAR_W", "draw_timeline", "fit_label", "text_width"]

WIDTH = 1000
LEFT, RIGHT = 120, 24
PLOT_W = WIDTH - LEFT - RIGHT
ROW_H = 22
"""Height of one row of bars in a lane (overlapping bars of a lane take a row each)."""
LANE_GAP = 6
BARS_H = 150
CHAR_W = 6.3
"""Width of a character of the 11 px sans-serif labels, a little over the average, so that
an estimated width is not short of the drawn one."""

KIND_COLOURS = {
    "fault": "#4a5a6a",
    "skipped": "#777777",
    "down": "#d62728",
    "paused": "#ff7f0e",
    "session expired": "#9467bd",
    "disk full": "#8c564b",
    "cut off": "#1f77b4",
}
_ZOOKEEPER_COLOUR = "#7f7f7f"
_KEY = {
    "fault": "a fault, strike to heal",
    "skipped": "a fault skipped",
    "down": "broker down",
    "paused": "paused (SIGSTOP)",
    "session expired": "ZooKeeper session expired",
    "disk full": "log dir full",
    "cut off": "cut off from ZooKeeper",
}
_OPS = (("ok", "#2ca02c"), ("info", "#999999"), ("fail", "#d62728"))


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _colour(kind: str) -> str:
    return KIND_COLOURS.get(kind, _ZOOKEEPER_COLOUR)


def text_width(text: str) -> float:
    return len(text) * CHAR_W


def fit_label(text: str, room: float) -> str:
    """``text`` cut short with an ellipsis to fit ``room`` pixels; empty when not even two
    characters would."""
    if text_width(text) <= room:
        return text
    keep = int(room / CHAR_W) - 1
    return text[:keep].rstrip() + "\u2026" if keep >= 2 else ""


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Whole tick values (1, 2 or 5 times a power of ten apart) spanning [low, high]."""
    span = high - low if high > low else 1.0
    step = 10 ** max(math.floor(math.log10(span / count)), 0)
    for factor in (1, 2, 5, 10):
        if span / (step * factor) <= count:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _rows(spans: Sequence[Span], x: _Scale) -> list[int]:
    """A row per span so that the bars of one lane never overlap: the first row whose last
    bar ends before this one begins."""
    ends: list[float] = []
    rows = []
    for s in spans:
        start = x(s.start)
        for i, end in enumerate(ends):
            if end <= start:
                ends[i] = max(x(s.end), start + 6)
                rows.append(i)
                break
        else:
            ends.append(max(x(s.end), start + 6))
            rows.append(len(ends) - 1)
    return rows


class _Scale:
    def __init__(self, t0: float, t1: float) -> None:
        self.t0, self.t1 = t0, t1

    def __call__(self, t: float) -> float:
        return LEFT + (t - self.t0) / (self.t1 - self.t0) * PLOT_W


def _place(items: Sequence[tuple[float, str]], rows: int) -> list[tuple[int, float, str]]:
    """Labels centred at x, each in the first of ``rows`` rows where it clears the labels
    before it (cut short to fit the last row otherwise): (row, x of its left end, text)."""
    right_of: list[float] = [-math.inf] * rows
    placed = []
    for cx, text in sorted(items):
        w = text_width(text)
        left = min(max(cx - w / 2, LEFT), WIDTH - RIGHT - w)
        for row in range(rows):
            if left >= right_of[row] + 6:
                break
        else:
            row = min(range(rows), key=lambda r: right_of[r])
            left = max(left, right_of[row] + 6)
            text = fit_label(text, WIDTH - RIGHT - left)
            w = text_width(text)
        right_of[row] = left + w
        placed.append((row, left, text))
    return placed


def draw_timeline(result: AuditResult) -> str:
    """The faults on a time axis above the operations per time bucket: inline SVG, after a
    line naming a scenario's brokers and before one listing the faults skipped."""
    timeline = read_timeline(result.timeline, result.brokers)
    seconds = [s for s, _, _ in result.acks_per_second]
    times = [*seconds, *(e.time for e in result.timeline)]
    if not times:
        return "<p>No timed operations or faults to draw.</p>"
    parts = []
    if timeline.roles:
        parts.append(
            '<p class="roles">Who is who: '
            + ", ".join(
                f"<b>{_e(name)}</b> = broker {broker}"
                for broker, name in sorted(timeline.roles.items(), key=lambda r: r[1])
            )
            + (". Its key events are named under the time axis" if timeline.marks else "")
            + ".</p>"
        )
    parts.append(_svg(result, timeline, times))
    skipped = [s for s in timeline.spans if s.kind == "skipped"]
    if skipped:
        parts.append(
            f'<p class="skipped">{len(skipped)} fault{"s" if len(skipped) > 1 else ""} '
            "skipped (hatched above):</p><ul>"
            + "".join(f"<li>{_e(s.tip)}</li>" for s in skipped)
            + "</ul>"
        )
    return "\n".join(parts)


def _svg(result: AuditResult, timeline: Timeline, times: Sequence[float]) -> str:
    t0, t1 = math.floor(min(times)), math.ceil(max(times)) + 1
    x = _Scale(t0, t1)
    out: list[str] = []
    lanes = timeline.lanes
    by_lane = {lane: [s for s in timeline.spans if s.lane == lane] for lane in lanes}
    rows = {lane: _rows(spans, x) for lane, spans in by_lane.items()}
    lane_rows = {lane: max([0, *rows[lane]]) + 1 for lane in lanes}
    legend, legend_h = _legend(timeline)
    top = legend_h + 8
    lane_top: dict[str, float] = {}
    y = float(top)
    for lane in lanes:
        lane_top[lane] = y
        y += lane_rows[lane] * ROW_H + LANE_GAP
    lanes_end = y
    bars_top = lanes_end + 22
    base = bars_top + BARS_H
    # A row per key event at most: a name is cut short only past the plot's right edge.
    marks = _place([(x(m.time), m.label) for m in timeline.marks], max(len(timeline.marks), 1))
    mark_rows = max([-1, *(row for row, _, _ in marks)]) + 1
    height = int(base + 34 + mark_rows * 15 + 18)

    out.append(
        f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        'aria-label="faults and acknowledgements over time">'
    )
    out += legend
    # Lanes: a faint band each, its title on the left.
    for i, lane in enumerate(lanes):
        h = lane_rows[lane] * ROW_H
        fill = "#f2f2f2" if i % 2 == 0 else "#fafafa"
        out.append(
            f'<rect class="lane" x="{LEFT}" y="{lane_top[lane]:.1f}" width="{PLOT_W}" '
            f'height="{h}" fill="{fill}"/>'
        )
        out.append(
            f'<text class="lane-title" x="{LEFT - 8}" y="{lane_top[lane] + h / 2 + 4:.1f}" '
            f'text-anchor="end">{_e(timeline.title(lane))}</text>'
        )
    # Where the run began and ended.
    for t, what in zip(timeline.run, ("run start", "run end"), strict=True):
        if t is not None:
            out.append(
                f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{base}" stroke="#bbb">'
                f"<title>{what} at {clock(t)}</title></line>"
            )
    for lane in lanes:
        out += _lane(by_lane[lane], rows[lane], lane_top[lane], x)
    out += _instants(timeline, lane_top, lane_rows, x)
    out += _bars(result, x, bars_top, base, t0, t1)
    out += time_axis(x, base, t0, t1)
    # A scenario's key events: a line through the lanes, the name under the time axis.
    for m in timeline.marks:
        mx = x(m.time)
        out.append(
            f'<line x1="{mx:.1f}" y1="{top}" x2="{mx:.1f}" y2="{base + 30}" stroke="#222" '
            f'stroke-dasharray="2 3"><title>{_e(m.label)} at {clock(m.time)}</title></line>'
        )
    for row, left, text in marks:
        ty = base + 42 + row * 15
        out.append(
            f'<text class="mark" x="{left:.1f}" y="{ty:.1f}" font-weight="bold">{_e(text)}</text>'
        )
    out.append(
        f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{height - 4}" text-anchor="middle">time (UTC)</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


def _legend(timeline: Timeline) -> tuple[list[str], int]:
    """The key to the colours and symbols drawn, in rows as wide as the plot; its lines
    and height."""
    kinds = [k for k in _KEY if any(s.kind == k for s in timeline.spans)]
    if any(s.kind not in _KEY for s in timeline.spans):
        kinds.append("zookeeper")
    entries = [(kind, _KEY.get(kind, "ZooKeeper node down")) for kind in kinds]
    symbols = {i.kind for i in timeline.instants}
    entries += [(kind, text) for kind, text in _SYMBOLS if kind in symbols]
    if symbols - {"isr-whole", "isr-not-whole"}:
        entries.append(("step", "a step (see its tooltip)"))
    out = []
    lx, row = float(LEFT), 0
    for kind, text in entries:
        w = 23 + text_width(text)
        if lx + w > WIDTH - RIGHT and lx > LEFT:
            lx, row = float(LEFT), row + 1
        y = 13 + row * 18
        if kind == "step":
            out.append(f'<path d="{_caret(lx + 9, y + 5)}" fill="#222"/>')
        elif kind in ("isr-whole", "isr-not-whole"):
            out.append(f'<circle cx="{lx + 9:.1f}" cy="{y:.1f}" r="4" fill="{_ISR[kind]}"/>')
        else:
            out.append(_swatch(kind, lx, y - 5, 18, 10))
        out.append(f'<text x="{lx + 23:.1f}" y="{y + 4}">{_e(text)}</text>')
        lx += w + 14
    return out, 8 + (row + 1) * 18


_ISR = {"isr-whole": "#2ca02c", "isr-not-whole": "#ff7f0e"}
_SYMBOLS = (
    ("isr-whole", "every ISR whole again"),
    ("isr-not-whole", "ISRs not yet whole at the next fault"),
)


def _hatched(x: float, y: float, w: float, h: float, tip: str = "", cls: str = "") -> str:
    """A skipped fault's box: white, outlined with dashes, hatched with diagonal strokes
    (drawn one by one: no pattern to refer to)."""
    strokes = []
    step = 5.0
    k = x - h
    while k < x + w:
        # The stroke from (k, y + h) to (k + h, y), cut to the box.
        x1, y1 = k, y + h
        x2, y2 = k + h, y
        if x1 < x:
            y1 -= x - x1
            x1 = x
        if x2 > x + w:
            y2 += x2 - (x + w)
            x2 = x + w
        if x2 > x1:
            strokes.append(f"M{x1:.1f},{y1:.1f}L{x2:.1f},{y2:.1f}")
        k += step
    attr = f' class="{cls}"' if cls else ""
    return (
        f'<rect{attr} x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="#fff" '
        f'stroke="#555" stroke-dasharray="3 2">{tip}</rect>'
        f'<path d="{"".join(strokes)}" stroke="#999" stroke-width="1.2">{tip}</path>'
    )


def _swatch(kind: str, x: float, y: float, w: float, h: float) -> str:
    if kind == "skipped":
        return _hatched(x, y, w, h)
    colour = _colour(kind)
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h}" fill="{colour}" '
        f'fill-opacity="0.3" stroke="{colour}"/>'
    )


def _caret(cx: float, bottom: float) -> str:
    """A small triangle pointing up from a lane's bottom edge, under the labels."""
    return f"M{cx:.1f},{bottom - 6:.1f} l4,6 l-8,0 z"


def _lane(spans: Sequence[Span], rows: Sequence[int], top: float, x: _Scale) -> list[str]:
    """A lane's bars, each labelled within the room it has: to the next bar of its row, or
    the plot's right edge."""
    out = []
    for i, (s, row) in enumerate(zip(spans, rows, strict=True)):
        sx = x(s.start)
        sw = max(x(s.end) - sx, 6.0 if s.kind == "skipped" else 2.0)
        ry = top + row * ROW_H + 2
        tip = f"<title>{_e(s.tip)}</title>"
        if s.kind == "skipped":
            shape = _hatched(sx, ry, sw, ROW_H - 4, tip, "skipped")
        else:
            colour = _colour(s.kind)
            dash = "" if s.healed else ' stroke-dasharray="5 3"'
            shape = (
                f'<rect class="span" x="{sx:.1f}" y="{ry:.1f}" width="{sw:.1f}" '
                f'height="{ROW_H - 4}" fill="{colour}" fill-opacity="0.3" stroke="{colour}"'
                f"{dash}>{tip}</rect>"
            )
        out.append(shape)
        if s.struck is not None and x(s.struck) - sx >= 1:
            # The strike itself (a cascade's kills and elections): darker than the hold.
            out.append(
                f'<rect class="strike" x="{sx:.1f}" y="{ry:.1f}" width="{x(s.struck) - sx:.1f}" '
                f'height="{ROW_H - 4}" fill="{_colour(s.kind)}" fill-opacity="0.45">{tip}</rect>'
            )
        following = [x(n.start) for n, r in zip(spans[i + 1 :], rows[i + 1 :], strict=True)]
        following = [fx for fx, r in zip(following, rows[i + 1 :], strict=True) if r == row]
        room_end = min([WIDTH - RIGHT, *following]) - 3
        text = fit_label(s.label, room_end - (sx + 3))
        if text:
            out.append(
                f'<text class="span-label" x="{sx + 3:.1f}" y="{ry + ROW_H / 2 + 2:.1f}">'
                f"{_e(text)}{tip}</text>"
            )
    return out


def _instants(
    timeline: Timeline, lane_top: dict[str, float], lane_rows: dict[str, int], x: _Scale
) -> list[str]:
    out = []
    for i in timeline.instants:
        if i.lane not in lane_top:
            continue
        ix = x(i.time)
        bottom = lane_top[i.lane] + lane_rows[i.lane] * ROW_H
        tip = f"<title>{_e(i.tip)}</title>"
        if i.kind in ("isr-whole", "isr-not-whole"):
            colour = _ISR[i.kind]
            out.append(
                f'<circle cx="{ix:.1f}" cy="{bottom - 4:.1f}" r="3.5" fill="{colour}" '
                f'stroke="#fff">{tip}</circle>'
            )
        else:
            out.append(f'<path class="step" d="{_caret(ix, bottom)}" fill="#222">{tip}</path>')
    return out


def _bars(
    result: AuditResult, x: _Scale, bars_top: float, base: float, t0: float, t1: float
) -> list[str]:
    """Operations per time bucket, stacked ok/info/fail, with a scaled y axis."""
    buckets = min(120, max(1, int(t1 - t0)))
    size = (t1 - t0) / buckets
    counts: dict[str, list[int]] = {k: [0] * buckets for k, _ in _OPS}
    for second, op_type, n in result.acks_per_second:
        if op_type in counts:
            counts[op_type][min(int((second - t0) / size), buckets - 1)] += n
    peak = max([1, *(sum(counts[k][b] for k in counts) for b in range(buckets))])
    axis_ticks = ticks(0, peak, 5)
    if axis_ticks[-1] < peak and len(axis_ticks) > 1:  # a tick at or above the top bar
        axis_ticks.append(2 * axis_ticks[-1] - axis_ticks[-2])
    y_max = max(peak, axis_ticks[-1])

    def y(n: float) -> float:
        return base - n / y_max * (BARS_H - 8)

    out = [
        f'<text x="{LEFT}" y="{bars_top - 6:.1f}">operations per {size:.3g} s: '
        '<tspan fill="#2ca02c">ok</tspan> (acknowledged), <tspan fill="#777">info</tspan> '
        '(unknown), <tspan fill="#d62728">fail</tspan></text>'
    ]
    for tick in axis_ticks:
        ty = y(tick)
        out.append(
            f'<line class="y-tick" x1="{LEFT - 4}" y1="{ty:.1f}" x2="{LEFT + PLOT_W}" '
            f'y2="{ty:.1f}" stroke="#e4e4e4"/>'
        )
        out.append(
            f'<text class="y-label" x="{LEFT - 7}" y="{ty + 4:.1f}" text-anchor="end">'
            f"{tick:,.0f}</text>"
        )
    out.append(f'<line x1="{LEFT}" y1="{bars_top}" x2="{LEFT}" y2="{base}" stroke="#999"/>')
    mid = (bars_top + base) / 2
    out.append(
        f'<text x="{LEFT - 62}" y="{mid:.0f}" transform="rotate(-90 {LEFT - 62} {mid:.0f})" '
        f'text-anchor="middle">per {size:.3g} s</text>'
    )
    bar_w = PLOT_W / buckets
    for b in range(buckets):
        stacked = 0
        for op_type, colour in _OPS:
            n = counts[op_type][b]
            if not n:
                continue
            start = t0 + b * size
            out.append(
                f'<rect x="{x(start):.1f}" y="{y(stacked + n):.1f}" '
                f'width="{max(bar_w - 1, 1):.1f}" height="{y(stacked) - y(stacked + n):.1f}" '
                f'fill="{colour}"><title>{n:,} {op_type} from {_e(clock(start))}</title></rect>'
            )
            stacked += n
    for v in result.violations:
        if v.kind == "lost_ack" and v.time is not None:
            vx = x(v.time)
            out.append(
                f'<path d="M{vx:.1f},{base + 2} l-5,9 l10,0 z" fill="#d62728"><title>lost '
                f"acknowledgement: {_e(v.detail)}</title></path>"
            )
    return out


def time_axis(x: Callable[[float], float], base: float, t0: float, t1: float) -> list[str]:
    """The time axis under a plot: ``x`` maps unix seconds to the page."""
    out = [f'<line x1="{LEFT}" y1="{base}" x2="{LEFT + PLOT_W}" y2="{base}" stroke="#999"/>']
    for tick in ticks(t0, t1, 10):
        tx = x(tick)
        out.append(f'<line x1="{tx:.1f}" y1="{base}" x2="{tx:.1f}" y2="{base + 5}" stroke="#999"/>')
        out.append(
            f'<text x="{tx:.1f}" y="{base + 18}" text-anchor="middle">{_e(clock(tick)[:-2])}</text>'
        )
    return out
