"""``minibroker audit``: the Spark consistency audit of replica logs (docs/audit.md).

Exit status 0 when the replicas and the history are consistent, 1 when the audit found a
violation, 2 on bad input (a data dir that is missing, unreadable or not a broker's, a
checkpoint that does not parse, a malformed history or timeline line: the message names
the file and line) or when Spark cannot start. This module imports no Spark until the
command runs, so that ``minibroker --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from chaos.audit.data_dirs import AuditInputError, read_data_dirs
from chaos.audit.history import HistoryError, NemesisEvent, parse_timeline_line
from chaos.audit.topic_configs import read_topic_configs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["EXIT_BAD_INPUT", "EXIT_CLEAN", "EXIT_VIOLATIONS", "add_parser", "audit_command"]

EXIT_CLEAN = 0
EXIT_VIOLATIONS = 1
EXIT_BAD_INPUT = 2


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "audit",
        help="Spark audit of replica logs and an acknowledgement history",
        description=(
            "Read every broker data dir's segments and checkpoints (and the producers' "
            "history) with Spark and report lost acknowledged records, divergent replicas, "
            "duplicates, gaps, CRC failures, epoch caches that contradict the log, high "
            "watermarks above the log end, phantom records, consumers' reads that the "
            "log contradicts, go back or skip committed records, and, on compacted topics "
            "(--topic-config), latest records or tombstones a cleaning lost or moved. "
            "Writes report.json and report.html to --report and a summary to stdout. Exit "
            "status: 0 clean, 1 violations found, 2 bad input."
        ),
    )
    parser.add_argument(
        "--data",
        nargs="+",
        type=Path,
        required=True,
        metavar="DIR",
        help="broker data dirs, one per broker (broker id from meta.properties)",
    )
    parser.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="the workload's history (JSON lines, docs/audit.md); without it lost_ack, "
        "phantom and the consumers' reads are not checked",
    )
    parser.add_argument(
        "--report", type=Path, required=True, metavar="OUT", help="directory for the reports"
    )
    parser.add_argument(
        "--timeline", type=Path, metavar="FILE", help="the nemesis timeline (JSON lines)"
    )
    parser.add_argument(
        "--topic-config",
        type=Path,
        metavar="FILE",
        help="the topics' configs as a chaos run records them (its topics.json, docs/audit.md):"
        " the partitions of topics with cleanup.policy=compact are judged by the compaction "
        "rules; without it every topic is taken as not compacted",
    )
    parser.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="Spark master: local[*] (default), local[N] or spark://host:7077",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.driver.memory=4g (repeatable)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return audit_command(
        data=args.data,
        history=args.history,
        report=args.report,
        timeline=args.timeline,
        topic_config=args.topic_config,
        master=args.master,
        conf=args.conf,
    )


def _read_timeline(path: Path) -> list[NemesisEvent]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise AuditInputError(f"cannot read timeline {path}: {e.strerror}") from None
    events = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        try:
            event = parse_timeline_line(number, line)
        except HistoryError as e:
            raise AuditInputError(f"timeline {path}, line {number}: {e.reason}") from None
        if event is not None:
            events.append(event)
    return events


def _check_history(path: Path) -> None:
    if not path.is_file():
        raise AuditInputError(f"history {path} is not a file")
    if not os.access(path, os.R_OK):
        raise AuditInputError(f"cannot read history {path}: permission denied")


def _prepare_report_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AuditInputError(f"cannot create report dir {path}: {e.strerror}") from None
    if not os.access(path, os.W_OK):
        raise AuditInputError(f"cannot write to report dir {path}: permission denied")


def _conf(pairs: Sequence[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise AuditInputError(f"--conf takes KEY=VALUE, got {pair!r}")
        conf[key.strip()] = value
    return conf


def audit_command(
    *,
    data: Sequence[Path],
    report: Path,
    history: Path | None = None,
    timeline: Path | None = None,
    topic_config: Path | None = None,
    master: str | None = None,
    conf: Sequence[str] = (),
    spark: SparkSession | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> int:
    """Run the audit and write its reports; return the exit status.

    With ``spark`` the audit runs on that session (left running); otherwise a session is
    started on ``master`` and stopped at the end. ``topic_config``: which topics are
    compacted (:mod:`chaos.audit.topic_configs`).
    """
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    own_session = spark is None
    try:
        dirs = read_data_dirs(list(data))
        if history is not None:
            _check_history(history)
        events = _read_timeline(timeline) if timeline is not None else []
        compacted = read_topic_configs(topic_config) if topic_config is not None else {}
        settings = _conf(conf)
        _prepare_report_dir(report)
        # Spark is imported only now: the checks above need none of it.
        from chaos.audit.job import audit
        from chaos.audit.report import print_summary, write_reports
        from chaos.audit.session import DEFAULT_MASTER, start_session

        if spark is None:
            try:
                spark = start_session(master or DEFAULT_MASTER, settings)
            except Exception as e:  # the JVM did not start: Java missing, a bad master...
                raise AuditInputError(
                    f"cannot start Spark on {master or DEFAULT_MASTER} (it needs Java 17 or "
                    f"newer): {e}"
                ) from None
        try:
            result = audit(spark, dirs, history, events, compacted=compacted)
        finally:
            if own_session:
                spark.stop()
    except AuditInputError as e:
        print(f"minibroker audit: {e}", file=err)
        return EXIT_BAD_INPUT
    write_reports(result, report)
    print_summary(result, out, report_dir=report)
    return EXIT_VIOLATIONS if result.violations else EXIT_CLEAN
