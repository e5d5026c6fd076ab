"""``minibroker chaos scenario hw-data-loss|hw-divergence --truncation-mode MODE``: the two
failure scenarios of docs/replication.md as a user command, to watch each bug happen with
``high-watermark`` truncation and disappear with ``leader-epoch`` truncation.

Exit status: the audit's (0 clean, 1 violations), 2 when the run could not be judged (a
``--out`` that holds a run, a process that did not start, a state not reached in time), 130
or 143 after Ctrl-C or SIGTERM, once every process the run started is stopped.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from broker.replication.truncation import TruncationMode
from chaos.run_dir import EXIT_CANNOT_RUN, RunDirError
from chaos.scenario.cluster import ScenarioError
from chaos.scenario.runner import SCENARIOS, run_scenario
from proto.errors import UsageError

__all__ = ["DEFAULT_RUNS_DIR", "add_parser"]

DEFAULT_RUNS_DIR = Path("chaos-runs")
BACKENDS = ("local",)


def add_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listed = "; ".join(f"{s.name}: {s.summary}" for s in SCENARIOS.values())
    parser = actions.add_parser(
        "scenario",
        help="replay a failure scenario of the design notes on real processes, then audit it",
        description=(
            "Reproduce a failure scenario of the design notes (docs/replication.md) step by "
            f"step ({listed}) on its own ZooKeeper and two brokers, started as processes on "
            "free ports under the run directory, telling each step as it happens; then stop "
            "them, audit their logs and "
            "print the verdict against what the design notes predict. Exit status: the "
            "audit's (0 clean, 1 violations), 2 if the run could not be judged."
        ),
    )
    parser.add_argument("scenario", choices=list(SCENARIOS), help="the scenario")
    parser.add_argument(
        "--truncation-mode",
        required=True,
        choices=[m.value for m in TruncationMode],
        help="the brokers' replication.truncation.mode: high-watermark (Kafka < 0.11, "
        "shows the bug) or leader-epoch (KIP-101, shows it fixed)",
    )
    parser.add_argument(
        "--backend",
        default="local",
        help="where the processes run: only local (ZooKeeper and two brokers as processes "
        "on this machine) is supported for scenarios",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"the run directory, which must not hold a run (default: a new "
        f"./{DEFAULT_RUNS_DIR}/<scenario>-<mode>-<time>)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.backend not in BACKENDS:
        raise UsageError(
            f"--backend {args.backend}: scenarios run on the local backend only "
            "(ZooKeeper and two brokers as processes on this machine)"
        )
    mode = TruncationMode(args.truncation_mode)
    out = args.out if args.out is not None else default_out(args.scenario, mode)
    with _signals_as_interrupt() as received:
        try:
            return run_scenario(args.scenario, mode, out).status
        except (RunDirError, ScenarioError) as e:
            print(f"minibroker chaos scenario: {e}", file=sys.stderr)
            return EXIT_CANNOT_RUN
        except KeyboardInterrupt:
            signum = received[0] if received else signal.SIGINT
            print(
                f"minibroker chaos scenario: interrupted ({signal.Signals(signum).name}); "
                "every process it started is stopped",
                file=sys.stderr,
            )
            return 128 + signum


def default_out(scenario: str, mode: TruncationMode, runs: Path = DEFAULT_RUNS_DIR) -> Path:
    """``runs/<scenario>-<mode>-<local time>``, with a suffix if that one exists."""
    base = f"{scenario}-{mode}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = runs / base, 1
    while candidate.exists():
        n += 1
        candidate = runs / f"{base}-{n}"
    return candidate


@contextmanager
def _signals_as_interrupt() -> Iterator[list[int]]:
    """Make the first SIGINT or SIGTERM a KeyboardInterrupt, and ignore later ones while
    the run stops what it started. Without this SIGTERM would end the process at once and
    leave its brokers and ZooKeeper running (they are in sessions of their own, out of
    reach of the terminal's signals). Yields the signals received."""
    received: list[int] = []

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if received:
            return
        received.append(signum)
        raise KeyboardInterrupt

    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, interrupt) for s in signals}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
