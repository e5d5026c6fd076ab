"""The nemesis timeline read as intervals: what the report's time axis draws.

A chaos run's ``timeline.jsonl`` is a list of point events (:class:`NemesisEvent`). A reader
wants intervals: broker 2 down from its kill to its start, paused from SIGSTOP to SIGCONT,
and each fault as a whole from the moment its strike began to the moment its heal finished,
named by its nemesis. :func:`read_timeline` turns the events into :class:`Span` (an
interval in one lane), :class:`Instant` (a point in one lane) and :class:`Mark` (a key event
of a scenario, named on the time axis).

Lanes: ``nemesis`` (one span per fault, and the faults that could not strike, drawn as
skipped), one per broker (``broker N``: down, paused, session expired, disk full, cut off
from ZooKeeper) and ``zookeeper`` (ensemble nodes down).

The events a fault writes (chaos/runner.py, chaos/nemesis.py)::

    strike   (nemesis, hold_s)       the strike begins
    kill 2   (nemesis)               ... per-broker steps, some carrying ``nemesis``
    fault 2  (nemesis, hold_s)       the strike is done; the hold begins
    start 2                          ... the heal's steps
    healed 2 (nemesis)               the heal is done
    skipped  (nemesis, reason)       a fault that could not strike (older runs wrote
                                     f=<nemesis>, type "fail", error=<reason>)

Timelines written before ``strike`` and ``healed`` existed are read too: a fault then starts
at the first event carrying its nemesis (or at its ``fault`` event) and ends at the last
heal step (``start``, ``resume``, ``heal``...) before the next fault begins.

A scenario (``chaos scenario``) writes ``roles`` (``names``: {"A": 1, "B": 2}), which
titles the broker lanes with the narration's names, and ``mark`` (``label``: "B truncates
m1"), its key events.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from chaos.audit.history import NemesisEvent

__all__ = [
    "NEMESIS_LANE",
    "SKIPPED_LANE",
    "ZOOKEEPER_LANE",
    "Instant",
    "Mark",
    "Span",
    "Timeline",
    "read_timeline",
]

NEMESIS_LANE = "nemesis"
SKIPPED_LANE = "skipped"
"""Faults that could not strike, in a lane of their own under the nemesis lane: their
labels then have room up to the next skipped fault."""
ZOOKEEPER_LANE = "zookeeper"

STATES: dict[str, tuple[str, str]] = {
    # event that opens -> (state, event that closes)
    "kill": ("down", "start"),
    "stop": ("down", "start"),
    "pause": ("paused", "resume"),
    "zk-expire": ("session expired", "zk-registered"),
    "disk-full": ("disk full", "disk-freed"),
}
"""A broker's states between two events of the timeline."""
_CLOSES = {close: state for state, close in STATES.values()}
_NETWORK = ("partition", "split")
"""Network faults: target the groups, the last one cut off from ZooKeeper; ``heal`` ends."""
HEAL_STEPS = frozenset({"start", "resume", "zk-registered", "disk-freed", "heal", "zk-start"})
"""Events of a heal: in old timelines the last one before the next fault ends the fault."""
_INSTANTS = {
    "torn-write": "segment torn",
    "zk-session-closed": "ZooKeeper session closed",
    "elect": "elected leader",
    "unclean-elect": "elected leader uncleanly",
}
_RUN = ("run-start", "run-end")


@dataclass(frozen=True, slots=True)
class Span:
    """An interval in one lane."""

    lane: str
    start: float
    end: float
    kind: str
    """``fault``, ``skipped``, a broker state (``down``, ``paused``, ``session expired``,
    ``disk full``, ``cut off``) or ``zookeeper down``: the colour."""
    label: str
    """What the report writes on it: the nemesis (with its target in the nemesis lane)."""
    tip: str
    """The whole story, for the tooltip."""
    healed: bool = True
    """False when the timeline ends before its heal (drawn open-ended)."""
    struck: float | None = None
    """A fault's: when its strike was done and its hold began (the ``fault`` event)."""


@dataclass(frozen=True, slots=True)
class Instant:
    """A point in one lane: a segment torn, a session closed, an election, the ISR whole
    again after a heal."""

    lane: str
    time: float
    kind: str
    tip: str


@dataclass(frozen=True, slots=True)
class Mark:
    """A scenario's key event, named on the time axis."""

    time: float
    label: str


@dataclass(slots=True)
class Timeline:
    spans: list[Span] = field(default_factory=list)
    instants: list[Instant] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    roles: dict[int, str] = field(default_factory=dict)
    """Broker id -> the scenario's name for it (``A``)."""
    brokers: list[int] = field(default_factory=list)
    zookeeper: bool = False
    """Whether a ZooKeeper node was a target (the lane is drawn only then)."""
    run: tuple[float | None, float | None] = (None, None)
    """``run-start`` and ``run-end``, when the timeline has them."""

    @property
    def lanes(self) -> list[str]:
        lanes = [
            lane for lane in (NEMESIS_LANE, SKIPPED_LANE) if any(s.lane == lane for s in self.spans)
        ]
        lanes += [broker_lane(b) for b in self.brokers]
        return lanes + ([ZOOKEEPER_LANE] if self.zookeeper else [])

    def title(self, lane: str) -> str:
        """The lane's name at the left of the plot: ``faults``, ``broker 2``, ``A: broker 1``."""
        if lane == ZOOKEEPER_LANE:
            return "ZooKeeper"
        if lane == NEMESIS_LANE:
            return "faults"
        if lane == SKIPPED_LANE:
            return "skipped faults"
        if lane.startswith("broker "):
            broker = int(lane.split()[1])
            role = self.roles.get(broker)
            return f"{role}: broker {broker}" if role else lane
        return lane


def broker_lane(broker: int) -> str:
    return f"broker {broker}"


def clock(t: float) -> str:
    """Wall time of day, to the tenth of a second (faults a second apart stay apart)."""
    return time.strftime("%H:%M:%S", time.gmtime(t)) + f".{int(t * 10) % 10}"


def _broker(target: str) -> int | None:
    try:
        return int(target)
    except ValueError:
        return None


def _brokers(target: str) -> list[int]:
    """The broker ids a target names: ``2``, ``[2, 3]`` (a cascade's), ``[[1, 2], [3]]``."""
    try:
        value = json.loads(target) if target else None
    except ValueError:
        return []
    found: list[int] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            found.append(item)
        elif isinstance(item, list):
            stack.extend(item)
    return sorted(set(found))


def _cut_off(target: str) -> list[int]:
    """The brokers a network fault cuts off from ZooKeeper: its last group."""
    try:
        groups = json.loads(target)
    except ValueError:
        return []
    if isinstance(groups, list) and groups and isinstance(groups[-1], list):
        return sorted(b for b in groups[-1] if isinstance(b, int) and not isinstance(b, bool))
    return []


def _compact(target: str) -> str:
    """A fault's target for a label: ``2``, ``2,3``, ``1,2|3``."""
    try:
        value = json.loads(target) if target else None
    except ValueError:
        return target
    if isinstance(value, list):
        if all(isinstance(g, list) for g in value):
            return "|".join(",".join(map(str, g)) for g in value)
        return ",".join(map(str, value))
    return target


def _seconds(a: float, b: float) -> str:
    return f"{b - a:.1f} s"


@dataclass(slots=True)
class _Fault:
    nemesis: str
    start: float
    hold_s: float | None = None
    struck: float | None = None
    """When the strike was done (the ``fault`` event)."""
    target: str = ""
    last_heal: float | None = None
    """The last heal step seen after the strike (old timelines: the fault's end)."""
    steps: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Open:
    start: float
    label: str
    how: str
    nemesis: str


class _Reader:
    def __init__(self, brokers: Iterable[int]) -> None:
        self.out = Timeline(brokers=sorted(set(brokers)))
        self.fault: _Fault | None = None
        self.states: dict[tuple[str, str], _Open] = {}
        """(lane, state) -> when and how it began."""
        self.last = -math.inf

    # -- faults (the nemesis lane) --------------------------------------------------------

    def begin(self, nemesis: str, t: float, hold_s: float | None = None) -> _Fault:
        self.end_fault(t)
        self.fault = _Fault(nemesis, t, hold_s)
        return self.fault

    def end_fault(
        self, t: float, *, healed_at: float | None = None, unhealed: bool = False
    ) -> None:
        """End the fault in progress: at ``healed_at``, or (an old timeline) at its last heal
        step, or where its strike was done when it had none (a bounce's restarts are part
        of its strike); ``unhealed``: the timeline ends at ``t`` before its heal."""
        fault, self.fault = self.fault, None
        if fault is None:
            return
        end = healed_at
        if end is None and not unhealed:
            end = fault.last_heal if fault.last_heal is not None else fault.struck
        if end is None:  # the timeline stops inside it
            target = _compact(fault.target)
            self.out.spans.append(
                Span(
                    NEMESIS_LANE,
                    fault.start,
                    max(t, fault.start),
                    "fault",
                    f"{fault.nemesis} {target}".strip(),
                    f"{fault.nemesis}{' on ' + target if target else ''}: began at "
                    f"{clock(fault.start)}; "
                    + (
                        "the timeline ends before its strike was done"
                        if fault.struck is None
                        else f"strike done at {clock(fault.struck)}; not healed when the "
                        "timeline ends"
                    ),
                    healed=False,
                    struck=fault.struck,
                )
            )
            return
        target = _compact(fault.target)
        hold = f", planned hold {fault.hold_s:g} s" if fault.hold_s is not None else ""
        struck = (
            f"; strike done at {clock(fault.struck)} ({_seconds(fault.start, fault.struck)})"
            if fault.struck is not None and fault.struck > fault.start + 0.05
            else ""
        )
        steps = f"; steps: {', '.join(fault.steps)}" if fault.steps else ""
        self.out.spans.append(
            Span(
                NEMESIS_LANE,
                fault.start,
                max(end, fault.start),
                "fault",
                f"{fault.nemesis} {target}".strip(),
                f"{fault.nemesis}{' on ' + target if target else ''}: from "
                f"{clock(fault.start)} to {clock(end)} ({_seconds(fault.start, end)}"
                f"{hold}){struck}; healed at {clock(end)}{steps}",
                struck=fault.struck,
            )
        )

    def skipped(self, e: NemesisEvent, nemesis: str, reason: str) -> None:
        start = e.time
        if self.fault is not None and self.fault.nemesis == nemesis and self.fault.struck is None:
            start = self.fault.start
            self.fault = None
        else:
            self.end_fault(e.time)
        self.out.spans.append(
            Span(
                SKIPPED_LANE,
                start,
                e.time,
                "skipped",
                f"skipped: {nemesis}",
                f"{nemesis} skipped at {clock(e.time)}: {reason or 'no reason given'}",
            )
        )

    # -- per-lane states ------------------------------------------------------------------

    def open(self, lane: str, state: str, e: NemesisEvent) -> None:
        if (lane, state) in self.states:
            return  # already down (a disk-full heal kills a broker whose dir is offline)
        nemesis = e.nemesis or (self.fault.nemesis if self.fault is not None else "")
        label = nemesis or e.f  # no nemesis (a scenario's steps): what was done, "kill"
        if lane == ZOOKEEPER_LANE:  # which node: the lane holds them all
            label = f"{state.removesuffix(' down')}: {label}"
        self.states[(lane, state)] = _Open(e.time, label, f"{e.f} at {clock(e.time)}", nemesis)

    def close(self, lane: str, state: str, e: NemesisEvent) -> None:
        began = self.states.pop((lane, state), None)
        if began is None:
            return
        self.out.spans.append(
            Span(
                lane,
                began.start,
                e.time,
                state,
                began.label,
                f"{self.out.title(lane)} {state}{_why(began)}: {began.how}, {e.f} at "
                f"{clock(e.time)} ({_seconds(began.start, e.time)})",
            )
        )

    def lane_of(self, broker: int) -> str:
        if broker not in self.out.brokers:
            self.out.brokers = sorted([*self.out.brokers, broker])
        return broker_lane(broker)

    # -- the events -----------------------------------------------------------------------

    def read(self, e: NemesisEvent) -> None:
        self.last = max(self.last, e.time)
        extra = e.extra()
        f = e.f
        if f in _RUN:
            start, end = self.out.run
            self.out.run = (e.time, end) if f == "run-start" else (start, e.time)
            return
        if f == "roles":
            names = extra.get("names")
            if isinstance(names, dict):
                self.out.roles.update({b: str(n) for n, b in names.items() if isinstance(b, int)})
                for b in self.out.roles:
                    self.lane_of(b)
            return
        if f == "mark":
            self.out.marks.append(Mark(e.time, str(extra.get("label") or e.target)))
            return
        if f == "strike":
            self.begin(e.nemesis or "?", e.time, _float(extra.get("hold_s")))
            return
        if f == "skipped":
            self.skipped(e, e.nemesis or "?", str(extra.get("reason", "")))
            return
        if e.type == "fail" and f not in STATES and f not in _CLOSES:
            self.skipped(e, f, str(extra.get("error", "")))  # an old run's skipped fault
            return
        if f == "fault":
            fault = self.fault
            if (
                fault is None
                or fault.struck is not None
                or (e.nemesis and fault.nemesis != e.nemesis)
            ):
                fault = self.begin(e.nemesis or "?", e.time)
            fault.struck, fault.target = e.time, e.target
            if fault.hold_s is None:
                fault.hold_s = _float(extra.get("hold_s"))
            return
        if f == "healed":
            if self.fault is not None:
                if e.target:
                    self.fault.target = self.fault.target or e.target
                self.end_fault(e.time, healed_at=e.time)
            return
        if f in ("isr-whole", "isr-not-whole"):
            after = extra.get("after_heal_s")
            what = "every ISR whole again" if f == "isr-whole" else "not every ISR whole yet"
            self.out.instants.append(
                Instant(
                    NEMESIS_LANE,
                    e.time,
                    f,
                    f"{what} at {clock(e.time)}"
                    + (f", {after} s after the heal" if after is not None else ""),
                )
            )
            return
        # A step of a fault (or of its heal).
        fault = self.fault
        if e.nemesis and (fault is None or fault.nemesis != e.nemesis or fault.struck is not None):
            self.begin(e.nemesis, e.time)  # an old timeline: the fault's first step
        if self.fault is not None:
            self.fault.steps.append(f"{f} {e.target}".strip())
            if f in HEAL_STEPS and self.fault.struck is not None:
                self.fault.last_heal = e.time
        self.step(e)

    def step(self, e: NemesisEvent) -> None:
        f = e.f
        if f in ("zk-kill", "zk-start"):
            self.out.zookeeper = True
            state = f"{e.target.replace('zookeeper-', 'node ')} down"
            if f == "zk-kill":
                self.open(ZOOKEEPER_LANE, state, e)
            else:
                self.close(ZOOKEEPER_LANE, state, e)
            return
        if f in _NETWORK:
            for b in _cut_off(e.target):
                self.open(self.lane_of(b), "cut off", e)
            return
        if f == "heal":
            for b in _brokers(e.target):
                self.close(self.lane_of(b), "cut off", e)
            return
        broker = _broker(e.target)
        if broker is None:
            brokers = _brokers(e.target)
            tip = f"{f} {e.target} at {clock(e.time)}"
            extra = e.extra()
            if extra:
                tip += ": " + ", ".join(f"{k} {v}" for k, v in extra.items())
            lane = self.lane_of(brokers[0]) if len(brokers) == 1 else NEMESIS_LANE
            self.out.instants.append(Instant(lane, e.time, f, tip))
            return
        lane = self.lane_of(broker)
        if f in ("kill", "stop"):
            self.close(lane, "paused", e)  # a paused process killed is gone, not paused
        if f in STATES:
            self.open(lane, STATES[f][0], e)
        if f in _CLOSES:
            self.close(lane, _CLOSES[f], e)
        if f not in STATES and f not in _CLOSES:
            what = _INSTANTS.get(f, f)
            extra = e.extra()
            detail = f" ({extra['detail']})" if "detail" in extra else ""
            self.out.instants.append(
                Instant(lane, e.time, f, f"broker {broker}: {what} at {clock(e.time)}{detail}")
            )

    def finish(self) -> Timeline:
        end = self.out.run[1] if self.out.run[1] is not None else self.last
        fault = self.fault
        self.end_fault(
            end, unhealed=fault is not None and fault.last_heal is None and bool(self.states)
        )
        for (lane, state), began in sorted(self.states.items(), key=lambda s: s[1].start):
            self.out.spans.append(
                Span(
                    lane,
                    began.start,
                    max(end, began.start),
                    state,
                    began.label,
                    f"{self.out.title(lane)} {state}{_why(began)}: "
                    f"{began.how}; not healed when the timeline ends",
                    healed=False,
                )
            )
        self.out.spans.sort(key=lambda s: (s.start, s.end))
        return self.out


def _why(began: _Open) -> str:
    """`` (cascade)``: the fault a state is part of, when one is known."""
    return f" ({began.nemesis})" if began.nemesis else ""


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def read_timeline(events: Sequence[NemesisEvent], brokers: Iterable[int] = ()) -> Timeline:
    """The spans, instants and marks of ``events`` (in time order); ``brokers`` get a lane
    each even when no fault touched them."""
    reader = _Reader(brokers)
    for e in sorted(events, key=lambda e: (e.time, e.line)):
        reader.read(e)
    return reader.finish()
