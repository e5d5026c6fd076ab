"""The audit's outputs: ``report.json``, a summary on stdout and ``report.html``.

``report.html`` is one self-contained page (inline CSS and SVG, no script, no external
asset: it opens offline). Per partition it plots the leader epoch of each replica's batches
over the offsets, with divergent ranges shaded, other violations marked under the offset
axis and what consumers read wrongly (the read kinds) marked with a triangle at the top; with a
nemesis timeline it draws the faults on a time axis above the acknowledgements per second
(:mod:`chaos.audit.timeline_svg`).
Every piece of data (topic names, values, paths) is HTML-escaped.
"""

from __future__ import annotations

import html
import itertools
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from chaos.audit.latency_svg import draw_latency, run_data_script
from chaos.audit.model import KINDS, READ_KINDS, AuditResult, PartitionSummary, Violation
from chaos.audit.timeline_svg import draw_timeline, ticks

__all__ = [
    "HTML_NAME",
    "JSON_NAME",
    "STDOUT_ROWS",
    "print_summary",
    "render_html",
    "write_reports",
]

JSON_NAME = "report.json"
HTML_NAME = "report.html"
STDOUT_ROWS = 30
"""Rows of the stdout violations table (one per kind and partition); report.json and
report.html list every violation."""
STDOUT_EXCERPT = 100
"""Characters of the first violation's sentence shown per row."""
HTML_VIOLATIONS = 2000
"""Violations report.html lists in full (per partition, and in all); report.json has all."""

_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
_KIND_COLOURS = {
    "lost_ack": "#d62728",
    "divergence": "#ff7f0e",
    "duplicate": "#9467bd",
    "resent": "#c5b0d5",
    "gap": "#7f7f7f",
    "crc": "#000000",
    "epoch_cache": "#17becf",
    "hw_above_leo": "#8c564b",
    "phantom": "#e377c2",
    # The read kinds: darker tones, unlike the replicas' lines.
    "inconsistent_read": "#a50f15",
    "nonmonotonic_poll": "#d95f02",
    "poll_skip": "#54278f",
    # What a compacted topic's cleaning broke.
    "compaction_lost_latest": "#e6550d",
    "compaction_moved": "#31a354",
    "tombstone_dropped_early": "#636363",
}


def write_reports(result: AuditResult, out_dir: Path) -> tuple[Path, Path]:
    """Write report.json and report.html into ``out_dir`` (created if missing)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / JSON_NAME
    json_path.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    html_path = out_dir / HTML_NAME
    html_path.write_text(render_html(result))
    return json_path, html_path


# -- stdout ----------------------------------------------------------------------------------


def _per_replica(part: PartitionSummary, value: str) -> str:
    cells = []
    for r in part.replicas:
        if value == "leo":
            shown = str(r.log_end_offset)
        elif value == "hw":
            shown = "-" if r.high_watermark is None else str(r.high_watermark)
        else:
            shown = ",".join(str(e) for e, _ in r.epoch_starts) or "-"
        cells.append(f"{r.broker}:{shown}")
    return " ".join(cells) or "-"


def print_summary(result: AuditResult, out: IO[str], *, report_dir: Path | None = None) -> None:
    """The per-partition table and the violations per kind and partition (at most
    STDOUT_ROWS rows)."""
    console = Console(file=out, width=160 if not out.isatty() else None, highlight=False)
    table = Table(title="minibroker audit", title_justify="left")
    table.add_column("partition")
    table.add_column("replicas")
    table.add_column("LEO (broker:offset)")
    table.add_column("HW (broker:offset)")
    table.add_column("committed end", justify="right")
    table.add_column("epochs (broker:epochs)")
    table.add_column("acked checked", justify="right")
    reads = any(part.reads for part in result.partitions)
    if reads:
        table.add_column("reads", justify="right")
    table.add_column("violations", justify="right")
    for part in result.partitions:
        table.add_row(
            Text(f"{part.topic}-{part.partition}"),
            ",".join(str(r.broker) for r in part.replicas) or "none",
            _per_replica(part, "leo"),
            _per_replica(part, "hw"),
            str(part.committed_end),
            _per_replica(part, "epochs"),
            f"{part.acked_checked:,}" if result.history else "-",
            *([f"{part.reads:,}"] if reads else []),
            str(part.violations) if part.violations else "0",
            style="red" if part.violations else None,
        )
    console.print(table)
    for part in result.partitions:
        for r in part.replicas:
            if r.torn_tail is not None:
                console.print(
                    f"note: {part.topic}-{part.partition} broker {r.broker}: torn tail in "
                    f"{r.torn_tail.segment} at position {r.torn_tail.position} "
                    f"({r.torn_tail.remaining_bytes} bytes, {r.torn_tail.reason}); recovery "
                    "truncates it"
                )
    if result.history is None:
        console.print(
            "note: no --history given: lost_ack, phantom and what consumers read were not checked"
        )
    if result.transactions is not None:
        console.print(f"transactions: {_transaction_counts(result.transactions)}")
    if result.groups is not None:
        console.print(f"consumer groups: {_group_counts(result.groups)}")
    if result.violations:
        console.print(_violations_table(result.violations, report_dir))
    counts = ", ".join(f"{k} {n}" for k, n in result.by_kind().items() if n)
    console.print(
        f"{'VIOLATIONS: ' + counts if result.violations else 'clean: no violations'}; "
        f"{result.records_decoded:,} records decoded in {result.seconds:.1f} s"
        + (f"; reports in {report_dir}" if report_dir else "")
    )


def _transaction_counts(counts: dict[str, int]) -> str:
    """The transaction checks' counts as a sentence's words."""
    names = {
        "committed": "committed",
        "aborted": "aborted",
        "unknown": "of unknown outcome",
        "writes_checked": "transactional writes checked",
        "reads_checked": "read_committed reads checked",
        "open_in_log": "open in the logs",
    }
    return ", ".join(f"{counts.get(k, 0):,} {name}" for k, name in names.items())


def _group_counts(groups: dict[str, Any]) -> str:
    """The consumer group checks' figures as a sentence's words."""
    commits = groups.get("commits", {})
    said = (
        f"{groups.get('groups', 0)} group(s), {groups.get('members', 0)} members, "
        f"{groups.get('generations', 0)} generations, {groups.get('reads', 0):,} reads of "
        f"{groups.get('delivered', 0):,} records ({groups.get('redelivered', 0):,} "
        f"redelivered), commits {commits.get('ok', 0):,} ok / {commits.get('fail', 0):,} "
        f"refused / {commits.get('info', 0):,} unknown ({groups.get('commits_checked', 0):,} "
        f"partition commits checked), {groups.get('rebalance_count', 0)} rebalances"
    )
    longest = groups.get("rebalance_pause_max_s")
    if longest is not None:
        said += (
            f" (pause median {groups.get('rebalance_pause_median_s', 0):.1f} s, "
            f"longest {longest:.1f} s)"
        )
    return said


def _violations_table(violations: Sequence[Violation], report_dir: Path | None) -> Table:
    """One row per kind and partition: how many findings, over which offsets and brokers,
    and the start of the first one's sentence. Bounded whatever the audit found: thousands
    of findings are for report.json and report.html."""
    groups: dict[tuple[str, str, int], list[Violation]] = defaultdict(list)
    for v in violations:
        groups[(v.kind, v.topic, v.partition)].append(v)
    ordered = sorted(groups.items(), key=lambda g: (KINDS.index(g[0][0]), g[0][1], g[0][2]))
    where = f" in {report_dir}" if report_dir else ""
    table = Table(
        title=f"{len(violations)} violations (every one in report.json and report.html{where})",
        title_justify="left",
    )
    for column in ("kind", "partition", "findings", "offsets", "brokers"):
        table.add_column(column, justify="right" if column == "findings" else "left")
    table.add_column("first", overflow="fold")
    for (kind, topic, partition), found in ordered[:STDOUT_ROWS]:
        first = min(v.offset for v in found)
        last = max(v.last_offset for v in found)
        brokers = sorted({b for v in found for b in v.brokers})
        detail = _printable(found[0].detail)
        if len(detail) > STDOUT_EXCERPT:
            detail = detail[: STDOUT_EXCERPT - 3] + "..."
        table.add_row(
            Text(kind),
            Text(f"{topic}-{partition}"),
            f"{len(found):,}",
            str(first) if first == last else f"{first}..{last}",
            ",".join(map(str, brokers)),
            Text(detail),
        )
    if len(ordered) > STDOUT_ROWS:
        rest = ordered[STDOUT_ROWS:]
        table.add_row(
            Text(f"... {len(rest)} more rows"),
            "",
            f"{sum(len(found) for _, found in rest):,}",
            "",
            "",
            "",
        )
    return table


def _printable(text: str) -> str:
    """``text`` with any non-printable character escaped: a terminal gets no control codes
    (the sentences show values escaped already; this holds whatever they say)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _range(v: Violation) -> str:
    if v.offset == v.last_offset:
        return str(v.offset)
    return f"{v.offset}..{v.last_offset} ({v.count})"


# -- HTML ------------------------------------------------------------------------------------

_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1100px; }
h1 { font-size: 1.5em; } h2 { margin-top: 1.5em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } .bad { color: #b00; font-weight: bold; } .ok { color: #080; }
.kind { font-family: monospace; white-space: nowrap; }
svg { background: #fcfcfc; border: 1px solid #ddd; margin: 0.5em 0; }
svg text { font-family: sans-serif; font-size: 11px; fill: #333; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ticks(low: int, high: int, count: int = 5) -> list[int]:
    """Whole-number ticks over offsets (:func:`chaos.audit.timeline_svg.ticks`)."""
    return [int(t) for t in ticks(low, high, count)]


def _epoch_plot(part: PartitionSummary, violations: Sequence[Violation]) -> str:
    """Leader epoch over offset for each replica, as an inline SVG."""
    width, height, left, right, top, bottom = 940, 230, 55, 190, 20, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    x0 = min((r.log_start_offset for r in part.replicas), default=0)
    ends = [r.log_end_offset for r in part.replicas] + [part.committed_end]
    ends += [v.last_offset + 1 for v in violations]
    x1 = max([x0 + 1, *ends])
    epochs = [e for r in part.replicas for e, _ in r.epoch_starts]
    y_max = max([1, *epochs])

    def x(offset: float) -> float:
        return left + (offset - x0) / (x1 - x0) * plot_w

    def y(epoch: float) -> float:  # a little room above and below for the nudged lines
        return top + plot_h - (epoch + 0.15) / (y_max + 0.3) * plot_h

    out = [
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="leader epoch over offset, {_e(part.topic)}-{part.partition}">'
    ]
    # Violations first, so the replicas' lines are drawn over them.
    for v in violations:
        colour = _KIND_COLOURS.get(v.kind, "#d62728")
        vx, vw = x(v.offset), max(x(v.last_offset + 1) - x(v.offset), 2)
        tip = f"<title>{_e(v.kind)} at {_e(_range(v))}: {_e(v.detail)}</title>"
        if v.kind in READ_KINDS:
            # What a consumer read wrongly: a faint band over the offsets, a triangle on top.
            out.append(
                f'<rect x="{vx:.1f}" y="{top}" width="{vw:.1f}" height="{plot_h}" '
                f'fill="{colour}" fill-opacity="0.1">{tip}</rect>'
            )
            out.append(
                f'<path class="read-marker" d="{_triangle(vx + vw / 2, top + 10)}" '
                f'fill="{colour}">{tip}</path>'
            )
        elif v.kind == "divergence":
            out.append(
                f'<rect x="{vx:.1f}" y="{top}" width="{vw:.1f}" height="{plot_h}" '
                f'fill="{colour}" fill-opacity="0.25">{tip}</rect>'
            )
            out.append(f'<text x="{vx + 2:.1f}" y="{top + 12}" fill="{colour}">divergent</text>')
        else:
            out.append(
                f'<rect x="{vx:.1f}" y="{top + plot_h + 3}" width="{vw:.1f}" height="6" '
                f'fill="{colour}">{tip}</rect>'
            )
    # Axes and ticks.
    out.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#999"/>'
    )
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#999"/>')
    for tick in _ticks(x0, x1):
        tx = x(tick)
        out.append(
            f'<line x1="{tx:.1f}" y1="{top + plot_h}" x2="{tx:.1f}" y2="{top + plot_h + 12}" '
            'stroke="#999"/>'
        )
        out.append(
            f'<text x="{tx:.1f}" y="{top + plot_h + 24}" text-anchor="middle">{tick:,}</text>'
        )
    for tick in _ticks(0, y_max, min(y_max, 6)):
        ty = y(tick)
        out.append(f'<line x1="{left - 4}" y1="{ty:.1f}" x2="{left}" y2="{ty:.1f}" stroke="#999"/>')
        out.append(f'<text x="{left - 7}" y="{ty + 4:.1f}" text-anchor="end">{tick}</text>')
    out.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 3}" text-anchor="middle">offset</text>'
    )
    mid = top + plot_h / 2
    out.append(
        f'<text x="12" y="{mid:.0f}" transform="rotate(-90 12 {mid:.0f})" '
        'text-anchor="middle">leader epoch</text>'
    )
    # The committed end.
    cx = x(part.committed_end)
    out.append(
        f'<line x1="{cx:.1f}" y1="{top}" x2="{cx:.1f}" y2="{top + plot_h}" stroke="#555" '
        'stroke-dasharray="4 3"><title>committed end (largest checkpointed high watermark, '
        f"bounded by the replicas' log end offsets): {part.committed_end}</title></line>"
    )
    # One step line per replica, nudged apart so that equal lines stay visible, and broken
    # where the replica has a gap.
    for i, r in enumerate(part.replicas):
        colour = _COLOURS[i % len(_COLOURS)]
        nudge = (i - (len(part.replicas) - 1) / 2) * 3
        holes = [
            (v.offset, v.last_offset + 1)
            for v in violations
            if v.kind == "gap" and v.brokers == (r.broker,)
        ]
        tip = (
            f"<title>broker {r.broker}: epochs "
            f"{_e(', '.join(f'{e}@{o}' for e, o in r.epoch_starts))}, log end offset "
            f"{r.log_end_offset}</title>"
        )
        for piece in _pieces(r.epoch_starts, r.log_end_offset, holes):
            points = " ".join(f"{x(o):.1f},{y(e) + nudge:.1f}" for o, e in piece)
            out.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" '
                f'stroke-width="2.5">{tip}</polyline>'
            )
        ly = top + 12 + i * 16
        out.append(
            f'<line x1="{width - right + 12}" y1="{ly - 4}" x2="{width - right + 32}" '
            f'y2="{ly - 4}" stroke="{colour}" stroke-width="2.5"/>'
        )
        out.append(
            f'<text x="{width - right + 37}" y="{ly}">broker {r.broker} (LEO '
            f"{r.log_end_offset:,})</text>"
        )
    # A key for the violations drawn, under the brokers'.
    kinds = sorted({v.kind for v in violations}, key=KINDS.index)
    for j, kind in enumerate(kinds):
        ly = top + 12 + (len(part.replicas) + j) * 16 + 6
        colour = _KIND_COLOURS.get(kind, "#d62728")
        if kind in READ_KINDS:
            out.append(f'<path d="{_triangle(width - right + 22, ly)}" fill="{colour}"/>')
            out.append(
                f'<text x="{width - right + 37}" y="{ly}">{kind} (a read)<title>a consumer '
                "read there (report.json: the process, its session and history lines)"
                "</title></text>"
            )
            continue
        opacity = ' fill-opacity="0.25"' if kind == "divergence" else ""
        out.append(
            f'<rect x="{width - right + 12}" y="{ly - 9}" width="20" height="8" '
            f'fill="{colour}"{opacity}/>'
        )
        out.append(f'<text x="{width - right + 37}" y="{ly}">{kind}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _triangle(cx: float, tip_y: float) -> str:
    """The path of a triangle pointing down at (cx, tip_y): the read kinds' marker."""
    return f"M{cx:.1f},{tip_y:.1f} l-5,-9 l10,0 z"


def _pieces(
    starts: Sequence[tuple[int, int]], end: int, holes: Sequence[tuple[int, int]]
) -> list[list[tuple[int, int]]]:
    """The points (offset, epoch) of a replica's step line, cut into pieces around
    ``holes`` ([from, to) offset ranges it does not hold)."""
    runs = [
        (start, starts[j + 1][1] if j + 1 < len(starts) else end, epoch)
        for j, (epoch, start) in enumerate(starts)
    ]
    cuts = sorted({o for hole in holes for o in hole if o > 0})
    pieces: list[list[tuple[int, int]]] = [[]]
    for start, stop, epoch in runs:
        bounds = [start, *(c for c in cuts if start < c < stop), max(stop, start)]
        for low, high in itertools.pairwise(bounds):
            if any(a <= low and high <= b for a, b in holes):
                if pieces[-1]:
                    pieces.append([])
                continue
            pieces[-1] += [(low, epoch), (high, epoch)]
    return [p for p in pieces if p]


_LINE_NUMBERS = re.compile(r"\blines? (\d+(?:(?:, | and |-)\d+)*)")
"""Where a finding's sentence names history lines: ``line 7``, ``lines 40 and 41``."""
LINES_SHOWN = 12
"""History lines quoted under one violation at most."""


def cited_lines(detail: str) -> list[int]:
    """The history line numbers a finding's sentence names, in order, once each."""
    found: list[int] = []
    for match in _LINE_NUMBERS.finditer(detail):
        for number in re.split(r", | and |-", match.group(1)):
            if int(number) not in found:
                found.append(int(number))
    return found[:LINES_SHOWN]


def history_lines(history: str | None, numbers: set[int]) -> dict[int, str]:
    """The text of the history file's lines ``numbers`` (1-based); none when it cannot be
    read (the report of a copied audit dir names a history that may be gone)."""
    if not history or not numbers:
        return {}
    found: dict[int, str] = {}
    last = max(numbers)
    try:
        with open(history, "rb") as f:
            for number, text in enumerate(f, 1):
                if number in numbers:
                    found[number] = text.decode("utf-8", "replace").rstrip("\n")
                if number >= last:
                    break
    except OSError:
        return {}
    return found


def _violation_rows(
    violations: Sequence[Violation], quoted: dict[int, str], *, ids: bool = False
) -> str:
    """A table of the violations, the first HTML_VIOLATIONS of them (report.json has all):
    each with the offsets and brokers it concerns and the history lines its sentence names
    (``ids``: each row anchored ``v-<n>``, which the counts at the top link to)."""
    rows = [
        "<table><tr><th>kind</th><th>partition</th><th>offsets</th><th>brokers</th>"
        "<th>detail</th></tr>"
    ]
    for n, v in enumerate(violations[:HTML_VIOLATIONS]):
        lines = [(k, quoted[k]) for k in cited_lines(v.detail) if k in quoted]
        shown = (
            '<details><summary>history lines</summary><pre class="lines">'
            + "\n".join(f"{k}: {_e(text)}" for k, text in lines)
            + "</pre></details>"
            if lines
            else ""
        )
        anchor = f' id="v-{n}"' if ids else ""
        rows.append(
            f'<tr{anchor}><td class="kind">{_e(v.kind)}</td><td>{_e(v.topic)}-{v.partition}</td>'
            f"<td>{_e(_range(v))}</td><td>{_e(', '.join(map(str, v.brokers)))}</td>"
            f"<td>{_e(v.detail)}{shown}</td></tr>"
        )
    rows.append("</table>")
    if len(violations) > HTML_VIOLATIONS:
        rows.append(
            f"<p>... and {len(violations) - HTML_VIOLATIONS:,} more, listed in {JSON_NAME}.</p>"
        )
    return "\n".join(rows)


def _kind_counts(result: AuditResult) -> str:
    """The count of each kind; a count that is not 0 links to its first violation."""
    first: dict[str, int] = {}
    for n, v in enumerate(result.violations[:HTML_VIOLATIONS]):
        first.setdefault(v.kind, n)
    cells = []
    for kind, n in result.by_kind().items():
        shown = f'<a href="#v-{first[kind]}">{n}</a>' if n and kind in first else str(n)
        cells.append(f'<td class="{"bad" if n else "ok"}">{shown}</td>')
    return (
        "<table><tr>"
        + "".join(f'<th class="kind">{k}</th>' for k in KINDS)
        + "</tr><tr>"
        + "".join(cells)
        + "</tr></table>"
    )


def render_html(result: AuditResult) -> str:
    """The one-page report."""
    by_partition: dict[tuple[str, int], list[Violation]] = defaultdict(list)
    for v in result.violations:
        by_partition[(v.topic, v.partition)].append(v)
    status = (
        f'<span class="bad">{len(result.violations)} violations</span>'
        if result.violations
        else '<span class="ok">clean: no violations</span>'
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>minibroker audit</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>minibroker audit: {status}</h1>",
        "<p>Brokers: "
        + ", ".join(f"{b} ({_e(path)})" for b, path in sorted(result.brokers.items()))
        + ". History: "
        + _e(result.history or "none (lost_ack, phantom and consumers' reads not checked)")
        + (
            ". Operations: "
            + ", ".join(f"{_e(k)} {n:,}" for k, n in sorted(result.operations.items()))
            if result.operations
            else ""
        )
        + (
            ". Transactions: " + _e(_transaction_counts(result.transactions))
            if result.transactions is not None
            else ""
        )
        + (
            ". Consumer groups: " + _e(_group_counts(result.groups))
            if result.groups is not None
            else ""
        )
        + f". {result.records_decoded:,} records decoded in {result.seconds:.1f} s.</p>",
        _kind_counts(result),
    ]
    quoted = history_lines(
        result.history,
        {k for v in result.violations[:HTML_VIOLATIONS] for k in cited_lines(v.detail)},
    )
    if result.timeline:
        parts += ["<h2>Faults and acknowledgements</h2>", draw_timeline(result)]
    if result.timeline or result.latency:
        parts += ["<h2>Latency and rebalances</h2>", draw_latency(result)]
    parts.append("<h2>Partitions</h2>")
    for part in result.partitions:
        found = by_partition.get((part.topic, part.partition), [])
        anchor = _e(f"p-{part.topic}-{part.partition}")
        parts.append(f'<h3 id="{anchor}">{_e(part.topic)}-{part.partition}</h3>')
        parts.append(
            f"<p>Committed end {part.committed_end:,} (the largest checkpointed high "
            f"watermark, bounded by the replicas' log end offsets); log start "
            f"{part.log_start_offset:,}; acknowledged records checked {part.acked_checked:,}"
            f" of {part.acked:,}; "
            + (f"consumers' reads {part.reads:,}; " if part.reads else "")
            + (
                f'<span class="bad">{len(found)} violations</span>'
                if found
                else '<span class="ok">no violations</span>'
            )
            + ".</p>"
        )
        parts.append(
            "<table><tr><th>broker</th><th>log start</th><th>log end offset</th>"
            "<th>high watermark</th><th>batches</th><th>records</th>"
            "<th>epochs (epoch@first offset)</th><th>leader-epoch-checkpoint</th>"
            "<th>notes</th></tr>"
        )
        for r in part.replicas:
            notes = []
            if r.torn_tail is not None:
                notes.append(
                    f"torn tail in {r.torn_tail.segment} at {r.torn_tail.position} "
                    f"({r.torn_tail.remaining_bytes} bytes): {r.torn_tail.reason}"
                )
            if r.compressed_batches:
                notes.append(f"{r.compressed_batches:,} compressed batches, read inflated")
            parts.append(
                f"<tr><td>{r.broker}</td><td>{r.log_start_offset:,}</td>"
                f"<td>{r.log_end_offset:,}</td>"
                f"<td>{'-' if r.high_watermark is None else f'{r.high_watermark:,}'}</td>"
                f"<td>{r.batches:,}</td><td>{r.records:,}</td>"
                f"<td>{_e(', '.join(f'{e}@{o}' for e, o in r.epoch_starts))}</td>"
                f"<td>{_e(', '.join(f'{e}@{o}' for e, o in r.checkpoint_epochs))}</td>"
                f"<td>{_e('; '.join(notes))}</td></tr>"
            )
        parts.append("</table>")
        if part.replicas:
            parts.append(_epoch_plot(part, found))
        if found:
            parts.append(_violation_rows(found, quoted))
    if result.violations:
        parts += ["<h2>All violations</h2>", _violation_rows(result.violations, quoted, ids=True)]
    parts.append(run_data_script(result))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
