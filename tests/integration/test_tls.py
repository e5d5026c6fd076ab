"""An authenticated cluster: mutual TLS on every channel, broker principals alone
may act as brokers, and ZooKeeper's znodes only the brokers' digest may change.

Three brokers with certificates of a throw-away CA (``deploy.tls_certs``), replicating over
TLS. A client with its own certificate produces and consumes. Then the forged requests of
the attacker's probe are sent, each without a broker's certificate: on a plaintext channel
(the handshake fails), with a certificate of another CA (the handshake fails), with the
client's certificate (PERMISSION_DENIED), and with broker 2's certificate speaking for
broker 3 (PERMISSION_DENIED). A ZooKeeper client without the digest may read but not
write ``/controller_epoch``, ``/brokers`` or ``/admin``, nor create ``/controller``.
Afterwards every acknowledged record is still on all three replicas, the ISR is whole and no
broker restarted.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from client.cli.main import main as cli_main
from deploy.tls_certs import ClusterCertificates, generate
from proto.topic_partition import TopicPartition
from proto.transport.tls import TlsConfig, sync_channel
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from tests.cluster import Cluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TP = TopicPartition("guarded", 0)
BROKERS = (1, 2, 3)
ACKED = [b"acked-%d" % i for i in range(20)]
DIGEST = "minibroker:s3cret"


@dataclass
class TlsCluster:
    cluster: Cluster
    certs: ClusterCertificates
    rogue: ClusterCertificates
    """Certificates of another CA, with a broker-1 among them."""
    zookeeper_connect: str
    """The brokers' ``zookeeper.connect`` (their own chroot, with the secure ACL)."""

    def identity(self, name: str, *, rogue: bool = False) -> TlsConfig:
        certs = self.rogue if rogue else self.certs
        return TlsConfig.from_files(self.certs.ca, certs.directory / f"{name}.pem")

    def channel(self, broker_id: int, identity: TlsConfig | None) -> grpc.Channel:
        return sync_channel(self.cluster.brokers[broker_id].address, identity)


@contextmanager
def digest_client(connect: str) -> Iterator[KazooClient]:
    """A kazoo client authenticated with the brokers' digest, which removes what the
    brokers created at the end (the test's chroot cleanup has no credentials)."""
    client = KazooClient(hosts=connect, auth_data=[("digest", DIGEST)])
    with warnings.catch_warnings():
        # kazoo warns that the chroot is missing: the first broker creates it, secure.
        warnings.simplefilter("ignore", UserWarning)
        client.start(timeout=10)
    try:
        yield client
    finally:
        for child in client.get_children("/") if client.exists("/") else []:
            if child != "zookeeper":
                client.delete(f"/{child}", recursive=True)
        client.stop()
        client.close()


@pytest.fixture
def tls_cluster(zk_connect: str, tmp_path: Path) -> Iterator[TlsCluster]:
    certs = generate(tmp_path / "tls", BROKERS)
    rogue = generate(tmp_path / "rogue", (1,))
    digest_file = tmp_path / "zookeeper-digest"
    digest_file.write_text(DIGEST + "\n")
    acl = {"zookeeper.set.acl": "true", "zookeeper.auth.digest.file": str(digest_file)}
    per_broker = {i: {**certs.broker_properties(i, BROKERS), **acl} for i in BROKERS}
    client = TlsConfig.from_files(certs.ca, certs.client)
    # A chroot the brokers create themselves, with the secure ACL; the harness's own
    # ZooKeeper client has the digest, as an operator's would.
    connect = zk_connect + "/secure"
    with (
        digest_client(connect) as zk,
        running_cluster(
            zk, connect, tmp_path, BROKERS, broker_overrides=per_broker, tls=client
        ) as cluster,
    ):
        cluster.create_topic(TP.topic, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        cluster.wait_for_isr(TP, {1, 2, 3})
        for value in ACKED:
            assert cluster.produce(1, TP, [value]).error_code == pb.NONE
        yield TlsCluster(cluster, certs, rogue, connect)


def denied(send: Callable[[grpc.Channel], object], channel: grpc.Channel) -> grpc.RpcError:
    """The error ``send(channel)`` fails with; it must fail."""
    with pytest.raises(grpc.RpcError) as refused:
        send(channel)
    return refused.value


def metadata(channel: grpc.Channel) -> object:
    return pb_grpc.BrokerStub(channel).Metadata(pb.MetadataRequest(topics=[TP.topic]), timeout=5)


def forged_requests(
    controller_epoch: int, broker_epoch: int
) -> dict[str, Callable[[grpc.Channel], object]]:
    """The probe's forged requests, each well-formed and carrying valid-looking epochs."""
    stop = pb.StopReplicaRequest(
        controller_id=2, controller_epoch=controller_epoch, broker_epoch=broker_epoch
    )
    stop.partition_states.add(
        topic_name=TP.topic, partition_index=TP.partition, leader_epoch=-2, delete_partition=True
    )
    hijack = pb.LeaderAndIsrRequest(
        controller_id=2, controller_epoch=controller_epoch, broker_epoch=broker_epoch
    )
    hijack.partition_states.add(
        topic_name=TP.topic,
        partition_index=TP.partition,
        controller_epoch=controller_epoch,
        leader=1,
        leader_epoch=2**31 - 1,
        isr=[1],
        replicas=[1, 2, 3],
    )
    shutdown = pb.ControlledShutdownRequest(broker_id=3, broker_epoch=broker_epoch)
    fetch = pb.FetchRequest(replica_id=3, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20)
    fetch.topics.add(topic=TP.topic).partitions.add(
        partition=TP.partition, fetch_offset=len(ACKED), partition_max_bytes=1 << 20
    )
    return {
        "StopReplica": lambda ch: pb_grpc.ControlStub(ch).StopReplica(stop, timeout=10),
        "LeaderAndIsr": lambda ch: pb_grpc.ControlStub(ch).LeaderAndIsr(hijack, timeout=10),
        "ControlledShutdown": lambda ch: pb_grpc.ControlStub(ch).ControlledShutdown(
            shutdown, timeout=10
        ),
        "Fetch": lambda ch: pb_grpc.BrokerStub(ch).Fetch(fetch, timeout=10),
    }


def check_intact(tls: TlsCluster, pids: dict[int, int | None]) -> None:
    cluster = tls.cluster
    state = cluster.state(TP)
    assert state is not None
    assert (state.leader, sorted(state.isr)) == (1, [1, 2, 3])
    assert [v for _, v in cluster.consume_all(1, TP)] == ACKED
    for i in BROKERS:
        assert [v for _, v in cluster.replica_records(i, TP)] == ACKED
        assert cluster.brokers[i].pid == pids[i], f"broker {i} restarted"


def test_brokers_replicate_over_mutual_tls_and_clients_need_a_certificate(
    tls_cluster: TlsCluster,
) -> None:
    cluster = tls_cluster.cluster
    assert [v for _, v in cluster.consume_all(1, TP)] == ACKED
    # A plaintext client, or one whose CA the broker does not trust, fails the handshake.
    for identity in (None, tls_cluster.identity("broker-1", rogue=True)):
        with tls_cluster.channel(1, identity) as channel:
            error = denied(metadata, channel)
        assert error.code() == grpc.StatusCode.UNAVAILABLE


def test_forged_control_requests_and_replica_fetches_are_refused_without_a_broker_certificate(
    tls_cluster: TlsCluster,
) -> None:
    cluster = tls_cluster.cluster
    pids = {i: cluster.brokers[i].pid for i in BROKERS}
    registration = cluster.zk.get("/brokers/ids/1")[1]
    forged = forged_requests(cluster.controller_epoch(), registration.czxid)
    controller = cluster.wait_for_controller()
    attackers = {
        "plaintext": None,
        "another CA's broker-1": tls_cluster.identity("broker-1", rogue=True),
        "a client certificate": tls_cluster.identity("client"),
        "broker 2 speaking for broker 3": tls_cluster.identity("broker-2"),
    }
    for attacker, identity in attackers.items():
        for name, send in forged.items():
            if attacker.startswith("broker 2") and name in ("StopReplica", "LeaderAndIsr"):
                continue  # a broker may send control requests: the controller's epoch guards those
            target = controller if name == "ControlledShutdown" else 1
            with tls_cluster.channel(target, identity) as channel:
                error = denied(send, channel)
            code = error.code()
            details = str(error.details())
            if identity is None or attacker.startswith("another CA"):
                assert code == grpc.StatusCode.UNAVAILABLE, (attacker, name, code, details)
            else:
                assert code == grpc.StatusCode.PERMISSION_DENIED, (attacker, name, code, details)
                assert "CLUSTER_AUTHORIZATION_FAILED" in details
    log = cluster.brokers[1].log_path.read_text()
    assert "event=cluster_action_denied" in log
    assert 'principal="User:CN=client"' in log
    check_intact(tls_cluster, pids)


def test_the_cli_speaks_tls_with_a_client_certificate(
    tls_cluster: TlsCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tls_cluster.cluster
    bootstrap = ",".join(cluster.brokers[i].address for i in BROKERS)
    certs = tls_cluster.certs
    args = ["--bootstrap-server", bootstrap, "--tls-ca", str(certs.ca)]
    args += ["--tls-cert", str(certs.client)]
    consume = ["consume", TP.topic, "--from-beginning", "--max-messages", str(len(ACKED))]
    assert cli_main([*consume, "--timeout-ms", "10000", *args]) == 0
    assert capsys.readouterr().out.split() == [v.decode() for v in ACKED]
    config = certs.directory / "client.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in certs.client_properties().items()))
    assert (
        cli_main(
            [
                *consume,
                "--timeout-ms",
                "10000",
                "--bootstrap-server",
                bootstrap,
                "--command-config",
                str(config),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.split() == [v.decode() for v in ACKED]
    # Without a certificate the CLI says it cannot reach the cluster, in one line.
    assert cli_main([*consume, "--timeout-ms", "3000", "--bootstrap-server", bootstrap]) != 0
    assert "cannot reach" in capsys.readouterr().err

    # A ZooKeeper group of a TLS cluster (no Kafka listener: every broker may coordinate
    # it) is deleted by its coordinator, as on any cluster.
    zookeeper = ["--zookeeper", tls_cluster.zookeeper_connect]
    grouped = [*consume, "--group", "tls-readers", "--timeout-ms", "10000", *args, *zookeeper]
    assert cli_main(grouped) == 0
    capsys.readouterr()
    delete = ["consumer-groups", "--delete", "--group", "tls-readers", *args, *zookeeper]
    assert cli_main(delete) == 0, capsys.readouterr().err
    assert "was successful" in capsys.readouterr().out
    assert cli_main(delete) != 0
    assert "GROUP_ID_NOT_FOUND" in capsys.readouterr().err


def test_zookeeper_znodes_cannot_be_written_without_the_brokers_digest(
    tls_cluster: TlsCluster,
) -> None:
    cluster = tls_cluster.cluster
    pids = {i: cluster.brokers[i].pid for i in BROKERS}
    epoch = cluster.controller_epoch()
    outsider = KazooClient(hosts=tls_cluster.zookeeper_connect)
    outsider.start(timeout=10)
    try:
        assert outsider.get("/controller_epoch")[0] == str(epoch).encode()  # readable
        state_path = f"/brokers/topics/{TP.topic}/partitions/{TP.partition}/state"
        writes: dict[str, Callable[[], object]] = {
            "set /controller_epoch": lambda: outsider.set("/controller_epoch", b"999"),
            "create /controller": lambda: outsider.create(
                "/controller", b'{"brokerid":9}', ephemeral=True
            ),
            "set /brokers/ids/1": lambda: outsider.set("/brokers/ids/1", b"{}"),
            "create a topic": lambda: outsider.create("/brokers/topics/evil", b"{}"),
            "set a partition state": lambda: outsider.set(state_path, b"{}"),
            "delete a topic": lambda: outsider.create(f"/admin/delete_topics/{TP.topic}"),
            "reassign": lambda: outsider.create("/admin/reassign_partitions", b"{}"),
            # Pre-created with the secure ACL, as Kafka's persistent paths: no one without
            # the digest sets a client's or a user's quota.
            "set a client quota": lambda: outsider.create("/config/clients/evil", b"{}"),
            "set a user quota": lambda: outsider.create("/config/users/evil", b"{}"),
        }
        for what, write in writes.items():
            with pytest.raises(NoAuthError):
                write()
            assert what
        # ZooKeeper consumer groups stay open to clients without credentials, as Kafka's.
        outsider.create("/consumers/g/ids/c1", b"{}", ephemeral=True, makepath=True)
    finally:
        outsider.stop()
        outsider.close()
    assert cluster.controller_epoch() == epoch
    check_intact(tls_cluster, pids)
