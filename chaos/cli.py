"""``minibroker chaos run|scenario|matrix``: break a real cluster and let the audit judge.

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

from chaos.backend import BackendUnavailableError
from chaos.nemesis import NEMESES, TRANSACTION_DEFAULT_NEMESES
from chaos.run_dir import EXIT_CANNOT_RUN, RunDirError
from chaos.scenario import cli as scenario_cli
from chaos.schedule import ScheduleError
from chaos.workload import CLIENTS, GRPC, PLAIN, TRANSACTIONS, WORKLOADS
from client.cli.common import compression_type_argument
from deploy.local_cluster import LocalClusterError

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
    run.add_argument("--backend", choices=["local", "docker"], default="local")
    run.add_argument(
        "--nemesis",
        type=_nemesis_list,
        default=None,
        metavar="N1,N2,...|all",
        help=f"faults to draw from: {', '.join(NEMESES)}; all: every one this backend, "
        "cluster and workload can do (the default of the plain workload; the transactions "
        f"workload's is {','.join(TRANSACTION_DEFAULT_NEMESES)})",
    )
    run.add_argument(
        "--duration", type=float, default=60.0, metavar="S", help="the fault window (default "
        "60); a fault whose predecessor's heal ran late strikes late and may end it late"
    )  # fmt: skip
    run.add_argument(
        "--interval", type=float, default=10.0, metavar="S", help="about this long between "
        "faults (default 10)"
    )  # fmt: skip
    run.add_argument("--producers", type=int, default=3, help="producer processes (default 3)")
    run.add_argument(
        "--rate", type=float, default=100.0, help="records/s per producer (default 100)"
    )
    run.add_argument(
        "--compression-type",
        type=compression_type_argument,
        default="none",
        metavar="CODEC",
        help="the producers' compression.type: none (default), gzip, snappy, lz4 or zstd",
    )
    run.add_argument(
        "--compacted",
        action="store_true",
        help="compacted topics (cleanup.policy=compact, small segments, a low dirty ratio): "
        "the producers write keys from a small set and tombstones, a cluster the run starts "
        "cleans often, and the audit judges what the cleanings kept; cleaner-crash needs it",
    )
    run.add_argument(
        "--keys",
        type=int,
        default=None,
        metavar="N",
        help="with --compacted: the keys the producers draw from (default 20)",
    )
    run.add_argument(
        "--workload",
        choices=WORKLOADS,
        default=PLAIN,
        help="plain (default): idempotent producers, read_uncommitted consumers; "
        "transactions: transactional producers (each transaction several partitions, "
        "committed or aborted), read_committed consumers",
    )
    run.add_argument(
        "--client",
        choices=CLIENTS,
        default=GRPC,
        help="the workload's clients: grpc (default): minibroker's own; kafka: Kafka's own "
        "through the brokers' Kafka listeners (idempotent confluent-kafka and aiokafka "
        "producers, confluent-kafka members of the consumer group chaos-kafka-readers, an "
        "aiokafka reader of every partition); mixed: both side by side (producers of the "
        "three clients, both groups, both readers). Not with --workload transactions",
    )
    run.add_argument(
        "--transaction-records",
        type=int,
        default=None,
        metavar="N",
        help="with --workload transactions: records per transaction (default 5)",
    )
    run.add_argument(
        "--abort-probability",
        type=float,
        default=None,
        metavar="P",
        help="with --workload transactions: how often a producer aborts a transaction it "
        "could commit (default 0.2)",
    )
    run.add_argument(
        "--transaction-timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="with --workload transactions: the producers' transaction.timeout.ms (default "
        "10000); the end of the run waits it out, plus the coordinators' abort check",
    )
    run.add_argument(
        "--copiers",
        type=int,
        default=None,
        metavar="N",
        help="with --workload transactions: consume-transform-produce processes copying the "
        "producers' topics to a topic of their own, their input offsets committed in each "
        "transaction (default 1; 0: none)",
    )
    run.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: time)")
    run.add_argument(
        "--truncation-mode", choices=["leader-epoch", "high-watermark"], default="leader-epoch"
    )
    run.add_argument(
        "--unclean", action="store_true", help="unclean.leader.election.enable on the topics"
    )
    run.add_argument("--out", type=Path, default=None, metavar="DIR", help="run directory")
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
    run.add_argument("--master", default=None, metavar="URL", help="the audit's Spark master")
    run.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from chaos.runner import COMPACTED_KEYS, RunSettings, kafka_clients_problem, run_chaos

    if args.producers < 1 or args.rate <= 0 or args.duration <= 0 or args.interval <= 0:
        print(
            "minibroker chaos run: --producers, --rate, --duration and --interval must be > 0",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    if args.keys is not None and (args.keys < 1 or not args.compacted):
        print("minibroker chaos run: --keys takes a number > 0, with --compacted", file=sys.stderr)
        return EXIT_CANNOT_RUN
    problem = _transaction_options_problem(args) or kafka_clients_problem(
        args.client, args.workload
    )
    if problem is not None:
        print(f"minibroker chaos run: {problem}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    settings = RunSettings(
        out=args.out or default_out("run"),
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
        replay=args.replay,
        data_dir=args.data_dir,
        project=args.project,
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
    return _cannot_run_is_two(run_chaos, settings)


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
    matrix.set_defaults(run=_matrix)


def _matrix(args: argparse.Namespace) -> int:
    from chaos.matrix import run_matrix

    return _cannot_run_is_two(
        lambda: run_matrix(
            args.out or default_out("matrix"),
            backend=args.backend,
            cell_duration_s=args.cell_duration,
        )
    )
