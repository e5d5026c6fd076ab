"""A scenario's verdict: what the audit found, set against what the design notes predict.

A prediction is the exact set of (kind, offset) violations the audit should report; anything
missing or more is UNEXPECTED. The comparison is pure, for unit tests; the findings come from
the audit's ``report.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = ["Found", "Prediction", "Verdict", "judge", "read_findings"]


class Found(NamedTuple):
    """One offset the audit reported, with the violation's kind."""

    kind: str
    offset: int

    def __str__(self) -> str:
        return f"{self.kind} at offset {self.offset}"


@dataclass(frozen=True)
class Prediction:
    """What the design notes predict the audit finds after a scenario in one mode."""

    violations: frozenset[Found]
    """Every violation expected; the audit must find these and nothing else."""
    says: str
    """The outcome in the notes' words, for the verdict line."""


class Verdict(NamedTuple):
    as_predicted: bool
    line: str


def read_findings(report_json: Path) -> list[Found]:
    """Every (kind, offset) of the audit's report, a run of offsets spelled out."""
    report = json.loads(report_json.read_text())
    return [
        Found(v["kind"], offset)
        for v in report["violations"]
        for offset in range(int(v["offset"]), int(v.get("last_offset", v["offset"])) + 1)
    ]


def _listed(findings: Iterable[Found]) -> str:
    found = sorted(set(findings))
    return ", ".join(map(str, found)) if found else "no violation"


def judge(prediction: Prediction, mode: str, findings: Iterable[Found]) -> Verdict:
    """The verdict line for an audit that found ``findings`` after a run in ``mode``."""
    found = set(findings)
    if found == prediction.violations:
        return Verdict(
            True, f"as the design notes predict for {mode} truncation: {prediction.says}"
        )
    missing = prediction.violations - found
    extra = found - prediction.violations
    differences = [
        *([f"missing {_listed(missing)}"] if missing else []),
        *([f"also {_listed(extra)}"] if extra else []),
    ]
    return Verdict(
        False,
        f"UNEXPECTED: for {mode} truncation the design notes predict "
        f"{_listed(prediction.violations)} ({prediction.says}); the audit found "
        f"{_listed(found)} ({'; '.join(differences)})",
    )
