"""When each fault strikes, for how long, and which target it picks: a seeded, replayable plan.

A schedule is a list of faults, one at a time: each strikes ``at_s`` seconds into the run,
is held ``hold_s`` seconds, then healed; the next one comes after a pause. ``pick`` (in
[0, 1)) chooses the target among the candidates of the moment (see :mod:`chaos.nemesis`).
The whole schedule is written to ``schedule.json``; ``chaos run --replay FILE`` runs the
same faults at the same times with the same picks. Generating it from the same seed and
settings gives the same schedule too.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos.nemesis import NEMESES, nemesis_named
from proto.errors import MinibrokerError

__all__ = ["Schedule", "ScheduleError", "ScheduledFault", "make_schedule"]

FORMAT_VERSION = 1


class ScheduleError(MinibrokerError):
    """A schedule file that cannot be replayed (the message names what is wrong)."""


@dataclass(frozen=True)
class ScheduledFault:
    at_s: float
    """Seconds after the workload started."""
    nemesis: str
    hold_s: float
    pick: float


@dataclass(frozen=True)
class Schedule:
    seed: int
    duration_s: float
    interval_s: float
    faults: tuple[ScheduledFault, ...]

    def to_json(self) -> str:
        data = {"version": FORMAT_VERSION, **asdict(self)}
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def read(cls, path: Path) -> Schedule:
        """Read ``path``; ScheduleError (naming the file) if it is not a schedule."""
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise ScheduleError(f"cannot read the schedule {path}: {e.strerror}") from None
        except ValueError as e:
            raise ScheduleError(f"{path} is not JSON: {e}") from None
        try:
            return cls._from(data)
        except (KeyError, TypeError, ValueError) as e:
            raise ScheduleError(f"{path} is not a chaos schedule: {e}") from None

    @classmethod
    def _from(cls, data: Any) -> Schedule:
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ValueError(f"version must be {FORMAT_VERSION}")
        faults = []
        for entry in data["faults"]:
            fault = ScheduledFault(
                float(entry["at_s"]), str(entry["nemesis"]), float(entry["hold_s"]),
                float(entry["pick"]),
            )  # fmt: skip
            if not 0 <= fault.pick < 1 or fault.at_s < 0 or fault.hold_s < 0:
                raise ValueError(f"a fault out of range: {entry}")
            if fault.nemesis not in NEMESES:  # unknown names fail here, before a run
                raise ValueError(
                    f"unknown nemesis {fault.nemesis!r}: choose from {', '.join(NEMESES)}"
                )
            faults.append(fault)
        return cls(
            int(data["seed"]),
            float(data["duration_s"]),
            float(data["interval_s"]),
            tuple(sorted(faults, key=lambda f: f.at_s)),
        )

    @property
    def nemeses(self) -> list[str]:
        return sorted({f.nemesis for f in self.faults})


def make_schedule(
    nemeses: Sequence[str],
    duration_s: float,
    interval_s: float,
    seed: int,
    session_timeout_s: float,
) -> Schedule:
    """Faults one after another over ``duration_s``: a pause of about ``interval_s`` (0.5 to
    1.5 times), then a nemesis chosen at random from ``nemeses``, held as long as it needs
    (:meth:`chaos.nemesis.Nemesis.hold_s`), then healed. Nothing is scheduled that could not
    be healed before the end."""
    rng = random.Random(seed)
    faults: list[ScheduledFault] = []
    t = interval_s * rng.uniform(0.5, 1.0)
    while True:
        name = rng.choice(list(nemeses))
        hold = nemesis_named(name).hold_s(interval_s, session_timeout_s)
        if t + hold > duration_s:
            break
        faults.append(ScheduledFault(round(t, 3), name, round(hold, 3), rng.random()))
        t += hold + interval_s * rng.uniform(0.5, 1.5)
    return Schedule(seed, duration_s, interval_s, tuple(faults))
