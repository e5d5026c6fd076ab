"""Running a scenario into a run directory (:mod:`chaos.run_dir`) and judging it.

One run: create the run directory (refused if it holds a run), start the scenario's
ZooKeeper, play the steps (each narrated; acknowledgements to ``history.d/0.jsonl``, faults
to ``timeline.jsonl``), stop the brokers cleanly, copy their data dirs and logs into the run,
merge the history, audit, and print the verdict against the design notes' prediction. The
exit status is the audit's: 0 clean, 1 violations, 2 the run could not be judged (then the
cluster's directory and logs stay in ``<run>/cluster``).

Every process the run started is stopped on every way out, an exception or a
KeyboardInterrupt included; the CLI turns SIGTERM into the latter.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from kazoo.exceptions import KazooException

from broker.replication.truncation import TruncationMode
from chaos.audit.report import JSON_NAME
from chaos.history_recorder import HistoryRecorder, TimelineRecorder
from chaos.run_dir import EXIT_CANNOT_RUN, RunDir
from chaos.scenario import hw_data_loss, hw_divergence
from chaos.scenario.cluster import ScenarioCluster, ScenarioError
from chaos.scenario.play import Narrator, Play, Scenario
from chaos.scenario.verdict import judge, read_findings
from chaos.scripted_controller import LeadershipError
from deploy.broker_process import BrokerProcessError
from deploy.zookeeper import ZooKeeperError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SCENARIOS", "ScenarioResult", "run_scenario"]

SCENARIOS: dict[str, Scenario] = {
    s.name: s for s in (hw_data_loss.SCENARIO, hw_divergence.SCENARIO)
}

_HARNESS_ERRORS = (
    BrokerProcessError,
    ZooKeeperError,
    LeadershipError,
    TimeoutError,
    KazooException,
    grpc.RpcError,
)
"""What a step may raise when the cluster misbehaves: the run cannot be judged."""


@dataclass(frozen=True)
class ScenarioResult:
    status: int
    """The audit's exit status: 0 clean, 1 violations, 2 not judged."""
    as_predicted: bool | None
    """Whether the audit found what the design notes predict (None: not judged)."""
    run: RunDir


def run_scenario(
    name: str,
    mode: TruncationMode,
    out: Path,
    *,
    spark: SparkSession | None = None,
) -> ScenarioResult:
    """Run scenario ``name`` in ``mode`` into the new run directory ``out`` and judge it.

    RunDirError if ``out`` holds a run already; ScenarioError if the scenario could not run
    to its end. With ``spark`` the audit runs on that session (left running).
    """
    scenario = SCENARIOS[name]
    run = RunDir.create(out)
    say = Narrator(sys.stdout)
    say.line(f"minibroker chaos scenario {name}, replication.truncation.mode={mode}")
    say.line(scenario.setting)
    say.line(f"run directory: {run.path}")
    cluster_dir = run.path / "cluster"
    with (
        HistoryRecorder(run.history_part(0), 0) as history,
        TimelineRecorder(run.timeline) as timeline,
    ):
        cluster = ScenarioCluster(
            cluster_dir,
            timeline,
            {"replication.truncation.mode": str(mode)},
            scenario.broker_properties,
        )
        timeline.event("roles", None, names=dict(scenario.roles))
        try:
            cluster.open()
            say(f"ZooKeeper is up on {cluster.zookeeper.connect_string}")
            scenario.play(Play(cluster, mode, history, say))
            cluster.stop_brokers()
            say("stop A and B cleanly (SIGTERM): their checkpoints are written")
        except _HARNESS_ERRORS as e:
            raise ScenarioError(
                f"{name} could not run to its end: {_one_line(e)} (logs in {cluster_dir})"
            ) from None
        except ScenarioError as e:
            raise ScenarioError(
                f"{name} could not run to its end: {e} (logs in {cluster_dir})"
            ) from None
        finally:
            cluster.close()
    cluster.collect(run)
    lines = run.merge_history()
    say(f"data dirs and logs copied into {run.path}; {lines} history lines; auditing")
    status = run.audit(spark=spark)
    as_predicted: bool | None = None
    report_json = run.audit_dir / JSON_NAME
    if status == EXIT_CANNOT_RUN or not report_json.exists():
        say.line("the audit could not judge the run (see its message above)")
    else:
        verdict = judge(scenario.predictions[mode], str(mode), read_findings(report_json))
        as_predicted = verdict.as_predicted
        say.line(verdict.line)
        if scenario.note:
            say.line(scenario.note)
    say.line(f"report: {run.report}")
    return ScenarioResult(status, as_predicted, run)


def _one_line(error: Exception) -> str:
    """The error's first line (a broker's start failure carries its log tail, a gRPC error
    its whole debug string)."""
    if isinstance(error, grpc.Call):
        return f"{error.code().name}: {error.details()}"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
