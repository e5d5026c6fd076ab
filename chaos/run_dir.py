"""The directory of one chaos run, scenario or matrix cell, and its verdict.

Layout (``--out DIR``)::

    history.jsonl        what the workload's producers were told and its consumers read
    history.d/           one file per workload process, merged into history.jsonl
    timeline.jsonl       the faults, injected and healed
    schedule.json        the nemesis schedule (``chaos run --replay DIR/schedule.json``)
    topics.json          the configs the run created its topics with: which are compacted
                         (the audit's ``--topic-config``, chaos.audit.topic_configs)
    logs/                the brokers' (and ZooKeeper's) logs
    data/broker-N/       each broker's data dir: copied after the clean stop of a cluster
                         the run started, after the final read of one it was given
    audit/               report.json, report.html and summary.txt (the audit's table)

A directory that already holds a run is refused: a second run would mix its history with
the first one's. The exit status of a run is the audit's (0 clean, 1 violations, 2 the run
could not be judged), except that a run in which no fault struck is 3, nothing tested.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chaos.history_recorder import merge_histories
from proto.errors import MinibrokerError

__all__ = ["EXIT_CANNOT_RUN", "EXIT_NOTHING_TESTED", "RunDir", "RunDirError"]

EXIT_CANNOT_RUN = 2
"""Exit status of a run that could not start or be judged (bad input, no backend)."""

EXIT_NOTHING_TESTED = 3
"""Exit status of a chaos run the audit found clean but in which no fault struck (every
fault skipped, or none scheduled): a clean audit of it says nothing about faults."""

_MARKERS = ("history.jsonl", "schedule.json", "timeline.jsonl", "history.d")


class RunDirError(MinibrokerError):
    """The run directory cannot be used (it holds a run already, or cannot be written)."""


class RunDir:
    """Paths of a run directory and the steps that fill it at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()

    @classmethod
    def create(cls, path: Path) -> RunDir:
        """A new run directory at ``path`` (created); RunDirError if one is there already."""
        run = cls(path)
        held = [m for m in _MARKERS if (run.path / m).exists()]
        if held:
            raise RunDirError(
                f"{run.path} already holds a run ({', '.join(held)}): choose another --out "
                "or remove it"
            )
        try:
            run.history_parts.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"cannot create the run directory {run.path}: {e}") from None
        return run

    @property
    def history(self) -> Path:
        return self.path / "history.jsonl"

    @property
    def history_parts(self) -> Path:
        return self.path / "history.d"

    def history_part(self, process: int | str) -> Path:
        """The history file of one workload process."""
        return self.history_parts / f"{process}.jsonl"

    @property
    def timeline(self) -> Path:
        return self.path / "timeline.jsonl"

    @property
    def schedule(self) -> Path:
        return self.path / "schedule.json"

    @property
    def topics(self) -> Path:
        return self.path / "topics.json"

    def record_topics(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Write the configs the run's topics were created with (``topics.json``: the
        audit judges the compacted ones by the compaction rules)."""
        data = {"version": 1, "topics": {t: dict(c) for t, c in sorted(configs.items())}}
        self.topics.write_text(json.dumps(data, indent=2) + "\n")

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def data(self) -> Path:
        return self.path / "data"

    @property
    def audit_dir(self) -> Path:
        return self.path / "audit"

    @property
    def report(self) -> Path:
        """The audit's HTML report, the file a run's last line names."""
        return self.audit_dir / "report.html"

    def merge_history(self) -> int:
        """Merge the workload processes' files into ``history.jsonl``; returns its lines."""
        return merge_histories(self.history_parts.glob("*.jsonl"), self.history)

    def collect(self, data_dirs: Mapping[int, Path], logs: Iterable[Path] = ()) -> None:
        """Copy each broker's data dir (after the clean stop) and the logs into the run."""
        for broker_id, source in sorted(data_dirs.items()):
            target = self.data / f"broker-{broker_id}"
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(".lock"))
        self.logs.mkdir(parents=True, exist_ok=True)
        for log in logs:
            if log.exists():
                shutil.copy2(log, self.logs / log.name)

    def broker_data_dirs(self) -> list[Path]:
        return sorted(p for p in self.data.glob("broker-*") if p.is_dir())

    def audit(
        self, *, master: str | None = None, with_history: bool = True, spark: Any = None
    ) -> int:
        """Run the Spark audit on the collected data dirs, the history, the timeline and
        the topics' configs; its table goes to stdout and to ``audit/summary.txt``. Returns
        its exit status.
        ``spark``: a running SparkSession to use (left running), else one is started."""
        from chaos.audit.cli import audit_command  # Spark-free until it runs

        table = io.StringIO()
        status = audit_command(
            data=self.broker_data_dirs(),
            report=self.audit_dir,
            history=self.history if with_history and self.history.exists() else None,
            timeline=self.timeline if self.timeline.exists() else None,
            topic_config=self.topics if self.topics.exists() else None,
            master=master,
            spark=spark,
            out=table,
        )
        self.audit_dir.mkdir(parents=True, exist_ok=True)
        (self.audit_dir / "summary.txt").write_text(table.getvalue())
        sys.stdout.write(table.getvalue())
        return status
