"""``minibroker chaos run|soak|scenario|matrix``: break a real cluster and let the audit judge.

Each subcommand's exit status is the audit's: 0 clean, 1 violations, 2 the run could not
start or be judged (one line says why); ``chaos run`` (and a matrix of runs) says 3, nothing
tested, when the audit is clean but no fault struck. The subcommands live in their own
modules; this one only registers them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from chaos.backend import BackendUnavailableError
from chaos.nemesis import NEMESES, TRANSACTION_DEFAULT_NEMESES
from chaos.run_dir import EXIT_CANNOT_RUN, RunDirError
from chaos.scenario import cli as scenario_cli
from chaos.schedule import ScheduleError
from chaos.workload import CLIENTS, GRPC, PLAIN, TRANSACTIONS, WORKLOADS
from client.cli.common import compression_type_argument
from deploy.local_cluster import LocalClusterError

if TYPE_CHECKING:
    from chaos.runner import RunSettings

__all__ = ["add_parser", "default_out"]

CHAOS_RUNS_DIR = Path("chaos-runs")


def default_out(kind: str) -> Path:
    """``chaos-runs/<kind>-<timestamp>``: a new run directory for each run."""
    return CHAOS_RUNS_DIR / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "chaos",
        help="break a real cluster on a schedule and audit its replica logs",
        description="Break a real cluster (nemeses) while a workload records what it was "
        "told, then let the Spark audit judge the replica logs. Exit status: 0 clean, 1 "
        "violations, 2 could not run, 3 nothing tested (clean, but no fault struck).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_run(actions)
    _add_soak(actions)
    scenario_cli.add_parser(actions)
    _add_matrix(actions)


def _nemesis_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one nemesis, or all")
    if "all" in names:
        if names != ["all"]:
            raise argparse.ArgumentTypeError("all stands alone")
        return names
    unknown = [n for n in names if n not in NEMESES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown nemesis {unknown[0]!r}: choose from {', '.join(NEMESES)} (or all)"
        )
    return names


def _add_run(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = actions.add_parser(
        "run",
        help="faults on a schedule under a recorded workload, then the audit",
        description="Start a cluster (or use the running one --data-dir or --project names), "
        "run producers and consumers that record every outcome, inject faults one at a "
        "time on a seeded schedule, heal, read everything once more, stop a cluster it "
        "started cleanly (one it was given is left running, healed) and audit the data dirs "
        "with the history. --duration is the fault window: set-up before it, and the final "
        "read, the copies and the Spark audit after it, add a minute or more. Exit status: "
        "0 clean, 1 violations, 2 could not run or be judged, 3 nothing tested (the audit "
        "found nothing but no fault struck: every one skipped, or none fitted in "
        "--duration).",
    )
    _options(run, what="the fault window", duration=60.0, interval=10.0)
    run.add_argument(
        "--replay", type=Path, default=None, metavar="FILE", help="a run's schedule.json"
    )
    run.add_argument(
        "--data-dir", type=Path, default=None, metavar="DIR",
        help="a running local cluster (cluster up) instead of a new one; left running",
    )  # fmt: skip
    run.add_argument(
        "--project", default=None, metavar="P",
        help="a running Docker cluster's compose project (make up) instead of a new one; "
        "left running",
    )  # fmt: skip
    run.set_defaults(run=_run)


def _options(
    parser: argparse.ArgumentParser, *, what: str, duration: float, interval: float
) -> None:
    """The options of ``chaos run`` that ``chaos soak`` shares (``--duration`` is ``what``
    it says, with its default)."""
    parser.add_argument("--backend", choices=["local", "docker"], default="local")
    parser.add_argument(
        "--nemesis",
        type=_nemesis_list,
        default=None,
        metavar="N1,N2,...|all",
        help=f"faults to draw from: {', '.join(NEMESES)}; all: every one this backend, "
        "cluster and workload can do (the default of the plain workload; the transactions "
        f"workload's is {','.join(TRANSACTION_DEFAULT_NEMESES)})",
    )
    parser.add_argument(
        "--duration", type=float, default=duration, metavar="S", help=f"{what} (default "
        f"{duration:g}); a fault whose predecessor's heal ran late strikes late and may end "
        "it late"
    )  # fmt: skip
    parser.add_argument(
        "--interval", type=float, default=interval, metavar="S", help="about this long "
        f"between faults (default {interval:g})"
    )  # fmt: skip
    parser.add_argument("--producers", type=int, default=3, help="producer processes (default 3)")
    parser.add_argument(
        "--rate", type=float, default=100.0, help="records/s per producer (default 100)"
    )
    parser.add_argument(
        "--compression-type",
        type=compression_type_argument,
        default="none",
        metavar="CODEC",
        help="the producers' compression.type: none (default), gzip, snappy, lz4 or zstd",
    )
    parser.add_argument(
        "--compacted",
        action="store_true",
        help="compacted topics (cleanup.policy=compact, small segments, a low dirty ratio): "
        "the producers write keys from a small set and tombstones, a cluster the run starts "
        "cleans often, and the audit judges what the cleanings kept; cleaner-crash needs it",
    )
    parser.add_argument(
        "--keys",
        type=int,
        default=None,
        metavar="N",
        help="with --compacted: the keys the producers draw from (default 20)",
    )
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default=PLAIN,
        help="plain (default): idempotent producers, read_uncommitted consumers; "
        "transactions: transactional producers (each transaction several partitions, "
        "committed or aborted), read_committed consumers",
    )
    parser.add_argument(
        "--client",
        choices=CLIENTS,
        default=GRPC,
        help="the workload's clients: grpc (default): minibroker's own; kafka: Kafka's own "
        "through the brokers' Kafka listeners (idempotent confluent-kafka and aiokafka "
        "producers, confluent-kafka members of the consumer group chaos-kafka-readers, an "
        "aiokafka reader of every partition); mixed: both side by side (producers of the "
        "three clients, both groups, both readers). Not with --workload transactions",
    )
    parser.add_argument(
        "--transaction-records",
        type=int,
        default=None,
        metavar="N",
        help="with --workload transactions: records per transaction (default 5)",
    )
    parser.add_argument(
        "--abort-probability",
        type=float,
        default=None,
        metavar="P",
        help="with --workload transactions: how often a producer aborts a transaction it "
        "could commit (default 0.2)",
    )
    parser.add_argument(
        "--transaction-timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="with --workload transactions: the producers' transaction.timeout.ms (default "
        "10000); the end of the run waits it out, plus the coordinators' abort check",
    )
    parser.add_argument(
        "--copiers",
        type=int,
        default=None,
        metavar="N",
        help="with --workload transactions: consume-transform-produce processes copying the "
        "producers' topics to a topic of their own, their input offsets committed in each "
        "transaction (default 1; 0: none)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="the schedule's seed (default: time)"
    )
    parser.add_argument(
        "--truncation-mode",
        choices=["leader-epoch", "high-watermark"],
        default=None,
        help="replication.truncation.mode of a cluster the run starts (default "
        "leader-epoch); a given cluster must run it (left out: whichever it runs)",
    )
    parser.add_argument(
        "--unclean", action="store_true", help="unclean.leader.election.enable on the topics"
    )
    parser.add_argument("--out", type=Path, default=None, metavar="DIR", help="run directory")
    parser.add_argument("--master", default=None, metavar="URL", help="the audit's Spark master")


def _settings(args: argparse.Namespace, command: str) -> RunSettings | None:
    """The run settings the options say (None, after one line on stderr: they are
    wrong)."""
    from chaos.runner import COMPACTED_KEYS, RunSettings, kafka_clients_problem

    if args.producers < 1 or args.rate <= 0 or args.duration <= 0 or args.interval <= 0:
        print(
            f"minibroker chaos {command}: --producers, --rate, --duration and --interval "
            "must be > 0",
            file=sys.stderr,
        )
        return None
    if args.keys is not None and (args.keys < 1 or not args.compacted):
        print(
            f"minibroker chaos {command}: --keys takes a number > 0, with --compacted",
            file=sys.stderr,
        )
        return None
    problem = _transaction_options_problem(args) or kafka_clients_problem(
        args.client, args.workload
    )
    if problem is not None:
        print(f"minibroker chaos {command}: {problem}", file=sys.stderr)
        return None
    return RunSettings(
        out=args.out or default_out(command),
        backend=args.backend,
        nemeses=args.nemesis if args.nemesis is not None else _default_nemeses(args.workload),
        duration_s=args.duration,
        interval_s=args.interval,
        producers=args.producers,
        rate=args.rate,
        compression_type=args.compression_type,
        compacted=args.compacted,
        keys=args.keys if args.keys is not None else COMPACTED_KEYS,
        seed=args.seed if args.seed is not None else int(time.time()),
        truncation_mode=args.truncation_mode,
        unclean=args.unclean,
        replay=getattr(args, "replay", None),
        data_dir=getattr(args, "data_dir", None),
        project=getattr(args, "project", None),
        spark_master=args.master,
        workload=args.workload,
        client=args.client,
        **{
            field: value
            for field, value in (
                ("transaction_records", args.transaction_records),
                ("abort_probability", args.abort_probability),
                ("transaction_timeout_ms", args.transaction_timeout_ms),
                ("copiers", args.copiers),
            )
            if value is not None  # else RunSettings' default
        },
    )


def _run(args: argparse.Namespace) -> int:
    from chaos.runner import run_chaos

    settings = _settings(args, "run")
    if settings is None:
        return EXIT_CANNOT_RUN
    return _cannot_run_is_two(run_chaos, settings)


def _add_soak(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    soak = actions.add_parser(
        "soak",
        help="one cluster broken for hours, audited window by window",
        description="Start one cluster and run `chaos run` against it window after window "
        "(--duration each), every window with topics, workload processes and a schedule of "
        "its own (seed --seed + window), audited when it ends from copies of its own "
        "topics' data. Stops at the first window with violations (its run directory kept "
        "whole), at the first that cannot run, once --faults faults have struck, or after "
        "--max-hours. OUT/soak.json has each window's and the total figures. Exit status: "
        "0 clean, 1 violations, 2 could not run, 3 no fault struck.",
    )
    _options(soak, what="each window's fault window", duration=300.0, interval=5.0)
    soak.add_argument(
        "--faults", type=int, default=1000, metavar="N", help="stop after N faults (1000)"
    )
    soak.add_argument(
        "--max-hours", type=float, default=None, metavar="H", help="stop after H hours"
    )
    soak.add_argument(
        "--max-windows", type=int, default=None, metavar="N", help="stop after N windows"
    )
    soak.add_argument(
        "--keep-going",
        action="store_true",
        help="go on past windows with violations (each kept whole): for high-watermark "
        "mode, whose anomalies are expected",
    )
    soak.set_defaults(run=_soak)


def _soak(args: argparse.Namespace) -> int:
    from chaos.soak import SoakSettings, run_soak

    settings = _settings(args, "soak")
    if settings is None:
        return EXIT_CANNOT_RUN
    if args.faults < 1 or (args.max_windows is not None and args.max_windows < 1):
        print(
            "minibroker chaos soak: --faults and --max-windows take a number > 0", file=sys.stderr
        )
        return EXIT_CANNOT_RUN
    soak = SoakSettings(
        settings,
        faults=args.faults,
        max_hours=args.max_hours,
        max_windows=args.max_windows,
        keep_going=args.keep_going,
    )
    return _cannot_run_is_two(lambda: run_soak(soak).status())


def _default_nemeses(workload: str) -> list[str]:
    """``--nemesis`` left out: ``all`` for the plain workload, the transaction path's and
    the broker faults for the transactions one."""
    return list(TRANSACTION_DEFAULT_NEMESES) if workload == TRANSACTIONS else ["all"]


def _transaction_options_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the transaction options (None: nothing)."""
    given = [
        flag
        for flag, value in (
            ("--transaction-records", args.transaction_records),
            ("--abort-probability", args.abort_probability),
            ("--transaction-timeout-ms", args.transaction_timeout_ms),
            ("--copiers", args.copiers),
        )
        if value is not None
    ]
    if given and args.workload != TRANSACTIONS:
        return f"{', '.join(given)} needs --workload transactions"
    if args.transaction_records is not None and args.transaction_records < 1:
        return "--transaction-records takes a number > 0"
    if args.abort_probability is not None and not 0 <= args.abort_probability <= 1:
        return "--abort-probability takes a number from 0 to 1"
    if args.transaction_timeout_ms is not None and args.transaction_timeout_ms < 1:
        return "--transaction-timeout-ms takes a number > 0"
    if args.copiers is not None and args.copiers < 0:
        return "--copiers takes a number >= 0"
    return None


def _cannot_run_is_two(action: object, *args: object) -> int:
    """Run ``action``; a run that cannot start is one line and exit status 2."""
    assert callable(action)
    try:
        status: int = action(*args)
    except (BackendUnavailableError, RunDirError, ScheduleError, LocalClusterError) as e:
        print(f"minibroker chaos: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return status


def _add_matrix(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    matrix = actions.add_parser(
        "matrix",
        help="Kafka's replication test matrix, judged by the audit",
        description="Clean and hard shutdowns and bounces of the partition leader and of the "
        "controller (Kafka's replication_test.py), each a short run of its own on a new "
        "cluster of 3 brokers, RF 3, min.insync.replicas 2, judged by the audit. Prints a "
        "table and writes it to OUT/matrix.json. Exit status: 0 every cell clean, 1 a "
        "violation, 2 a cell could not run, 3 a cell's fault did not strike (nothing tested).",
    )
    matrix.add_argument("--backend", choices=["local", "docker"], default="local")
    matrix.add_argument("--out", type=Path, default=None, metavar="DIR")
    matrix.add_argument(
        "--cell-duration", type=float, default=20.0, metavar="S", help="each cell's run (20)"
    )
    matrix.add_argument(
        "--cells",
        default=None,
        metavar="N1,N2,...",
        help="run only these cells, by failure mode: clean-shutdown-leader, "
        "hard-bounce-controller, ... (default: all eight)",
    )
    matrix.set_defaults(run=_matrix)


def _matrix(args: argparse.Namespace) -> int:
    from chaos.matrix import run_matrix

    return _cannot_run_is_two(
        lambda: run_matrix(
            args.out or default_out("matrix"),
            backend=args.backend,
            cell_duration_s=args.cell_duration,
            only=[c.strip() for c in args.cells.split(",") if c.strip()] if args.cells else None,
        )
    )
