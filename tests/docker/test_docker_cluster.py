"""End to end in Docker: `make up`, the CLI from the host, a leader's container killed.

Everything a user does, as the user does it: the cluster from `make up` (ZooKeeper and
three broker containers), and from the host the `minibroker` CLI against the published
ports and the addresses Metadata returns. A topic with replication factor 3 gets 10,000
lines with acks=all; the container of a partition leader is killed (`docker kill`, SIGKILL
of the whole container); 10,000 more lines go in while the controller fails the partition
over; `consume --from-beginning` then returns exactly the 20,000 acknowledged lines; the
killed container is started again and its broker rejoins the ISR of every partition.
"""

from __future__ import annotations

import subprocess
import uuid
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

import grpc
import pytest

from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from tests.docker.conftest import DockerCluster, minibroker
from tests.helpers import wait_for

T = TypeVar("T")

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

PARTITIONS = 3
LINES = 10_000
REJOIN_TIMEOUT_S = 180


def metadata(cluster: DockerCluster, topic: str) -> pb.MetadataResponse:
    """Metadata from the first broker that answers, through the published ports."""
    problems = []
    for port in cluster.broker_ports.values():
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                response: pb.MetadataResponse = pb_grpc.BrokerStub(channel).Metadata(
                    pb.MetadataRequest(topics=[topic]), timeout=5
                )
                return response
            except grpc.RpcError as err:
                problems.append(f"{port}: {err}")
    raise AssertionError(f"no broker answered Metadata: {problems}")


def partitions(cluster: DockerCluster, topic: str) -> dict[int, pb.PartitionMetadata]:
    found = [t for t in metadata(cluster, topic).topics if t.name == topic]
    assert found, f"topic {topic} is not in the metadata"
    return {p.partition_index: p for p in found[0].partitions}


def wait_until(check: Callable[[], T | None], timeout: float, what: str) -> T:
    """``wait_for`` for checks that may fail with an AssertionError while a broker is
    between answers: that counts as "not yet"."""
    last: list[object] = [None]

    def attempt() -> T | None:
        try:
            return check()
        except AssertionError as err:
            last[0] = err
            return None

    found = wait_for(attempt, timeout, interval=0.5, message=lambda: f"{what} (last: {last[0]})")
    assert found is not None
    return found


def docker(*args: str) -> None:
    subprocess.run(["docker", *args], check=True, capture_output=True, timeout=120)


def test_cluster_status_with_the_project_shows_the_containers_and_zookeepers_view(
    docker_cluster: DockerCluster,
) -> None:
    status = minibroker("cluster", "status", "--project", docker_cluster.project).stdout
    assert f"ZooKeeper {docker_cluster.zookeeper}: running" in status
    assert status.count("container running") == 3, status
    assert status.count("yes") == 3, status
    assert "Controller: none" not in status


def test_leader_container_killed_and_restarted(docker_cluster: DockerCluster) -> None:
    cluster = docker_cluster
    topic = f"docker-e2e-{uuid.uuid4().hex[:8]}"
    connect = ["--bootstrap-server", cluster.bootstrap]

    # The advertised addresses are the host's published ports, and every broker is listed.
    brokers = {b.node_id: (b.host, b.port) for b in metadata(cluster, topic).brokers}
    assert brokers == {i: ("127.0.0.1", port) for i, port in cluster.broker_ports.items()}

    minibroker(
        "topics", "create", topic,
        "--partitions", str(PARTITIONS), "--replication-factor", "3",
        *connect, "--zookeeper", cluster.zookeeper,
    )  # fmt: skip
    wait_until(
        lambda: (
            all(p.leader_id >= 0 for p in partitions(cluster, topic).values())
            and len(partitions(cluster, topic)) == PARTITIONS
        ),
        60,
        "a leader for every partition",
    )

    first = [f"{topic}-a-{i}" for i in range(LINES)]
    minibroker("produce", topic, "--acks", "all", *connect, stdin="\n".join(first) + "\n")

    victim = partitions(cluster, topic)[0].leader_id
    assert victim in cluster.broker_ports
    docker("kill", cluster.container(victim))

    # The producer starts right away: it has to ride through the failover (the victim's
    # ZooKeeper session expiring, the controller electing a new leader from the ISR).
    second = [f"{topic}-b-{i}" for i in range(LINES)]
    minibroker("produce", topic, "--acks", "all", *connect, stdin="\n".join(second) + "\n")
    after = partitions(cluster, topic)
    assert after[0].leader_id != victim, f"partition 0 is still led by the killed broker {victim}"

    consumed = minibroker(
        "consume", topic, "--from-beginning", "--timeout-ms", "10000", *connect
    ).stdout.splitlines()
    counts = Counter(consumed)
    missing = [v for v in first + second if v not in counts]
    duplicated = [v for v, n in counts.items() if n > 1]
    phantom = [v for v in counts if not v.startswith(f"{topic}-")]
    assert not missing, f"{len(missing)} acknowledged lines missing, e.g. {missing[:5]}"
    assert not duplicated, f"{len(duplicated)} lines consumed twice, e.g. {duplicated[:5]}"
    assert not phantom, f"lines nobody produced: {phantom[:5]}"
    assert len(consumed) == 2 * LINES

    docker("start", cluster.container(victim))

    def rejoined() -> bool:
        return all(victim in p.isr_nodes for p in partitions(cluster, topic).values())

    wait_until(rejoined, REJOIN_TIMEOUT_S, f"broker {victim} back in every ISR")

    def healthy() -> bool:
        status = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Health.Status}}", cluster.container(victim)],
            capture_output=True,
            text=True,
            check=True,
        )
        return status.stdout.strip() == "healthy"

    wait_until(healthy, 60, f"the container of broker {victim} to be healthy again")


def test_make_up_says_when_it_reuses_data_volumes(docker_cluster: DockerCluster) -> None:
    cluster = docker_cluster
    assert "new, empty data volumes" in cluster.up_messages[0]
    topic = f"kept-{uuid.uuid4().hex[:8]}"
    connect = ["--bootstrap-server", cluster.bootstrap, "--zookeeper", cluster.zookeeper]
    minibroker("topics", "create", topic, "--replication-factor", "3", *connect)

    down = cluster.make("down")
    assert down.returncode == 0, down.stderr
    up = cluster.make("up", timeout=600)
    cluster.up_messages.append(up.stderr)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}"
    assert "reusing data volumes from an earlier run" in up.stderr, up.stderr
    assert "make down-volumes" in up.stderr
    # What the message promises: the earlier run's topics are still there.
    listed = minibroker("topics", "list", *connect[:2]).stdout.split()
    assert topic in listed


def test_pause_without_a_freezer_stops_every_process_and_resume_continues_them(
    docker_cluster: DockerCluster,
) -> None:
    """Where the engine cannot freeze a container (CI's could not), the chaos backend's
    pause SIGSTOPs every process of it but init; resume continues them and the broker
    serves again."""
    from chaos.docker_backend import DockerBackend

    backend = DockerBackend(docker_cluster.project)
    backend.use_freezer = False  # as after "OCI runtime pause failed: unable to freeze"
    container = backend._brokers[3]

    def states() -> dict[str, set[str]]:
        top = container.top(ps_args="-o pid,stat,comm")
        stat, comm = top["Titles"].index("STAT"), top["Titles"].index("COMMAND")
        seen: dict[str, set[str]] = {}
        for row in top["Processes"]:
            if row[comm] not in ("tini", "docker-init"):
                seen.setdefault(row[stat][0], set()).add(row[comm])
        return seen

    backend.pause(3)
    try:
        paused = states()
        assert set(paused) == {"T"}, f"processes not stopped: {paused}"
        assert backend.is_running(3)
    finally:
        backend.resume(3)
    assert "T" not in states(), states()

    def broker_3_answers() -> bool:
        with grpc.insecure_channel(f"127.0.0.1:{docker_cluster.broker_ports[3]}") as channel:
            try:
                pb_grpc.BrokerStub(channel).Metadata(pb.MetadataRequest(), timeout=5)
                return True
            except grpc.RpcError as err:
                raise AssertionError(str(err)) from None

    wait_until(broker_3_answers, 60, "broker 3 to answer Metadata again")
