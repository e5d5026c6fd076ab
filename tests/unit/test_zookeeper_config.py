"""deploy.zookeeper without a JVM: an ensemble member's zoo.cfg, myid and command line, the
connect string, quorum sizes and ``srvr`` modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.zookeeper import (
    MAIN_CLASS,
    NOT_SERVING,
    QUORUM_MAIN_CLASS,
    QuorumPeer,
    ZooKeeperConfig,
    ZooKeeperEnsemble,
    ZooKeeperInstallation,
    ZooKeeperServer,
    ensemble_connect_string,
    member_config,
    parse_mode,
    quorum_size,
    quorum_zoo_cfg,
)

PEERS = (
    QuorumPeer(1, 2181, 2888, 3888),
    QuorumPeer(2, 2182, 2889, 3889),
    QuorumPeer(3, 2183, 2890, 3890),
)
INSTALLATION = ZooKeeperInstallation(Path("/usr/bin/java"), ("/zk.jar",), "3.8.0")


def test_member_zoo_cfg_names_every_server_and_listens_on_its_own_client_port(
    tmp_path: Path,
) -> None:
    config = member_config(ZooKeeperConfig(tick_time_ms=200), PEERS, 2, tmp_path / "zk-2")
    server = ZooKeeperServer(config, INSTALLATION)
    server._prepare_data_dir()
    cfg = server._zoo_cfg()
    assert server.port == 2182
    assert server.connect_string == "127.0.0.1:2182"
    assert cfg["clientPort"] == "2182"
    assert cfg["dataDir"] == str((tmp_path / "zk-2").resolve())
    assert cfg["server.1"] == "127.0.0.1:2888:3888"
    assert cfg["server.2"] == "127.0.0.1:2889:3889"
    assert cfg["server.3"] == "127.0.0.1:2890:3890"
    assert (cfg["initLimit"], cfg["syncLimit"]) == ("50", "25")
    assert cfg["tickTime"] == "200"


def test_member_runs_quorum_peer_main_and_a_standalone_server_runs_server_main(
    tmp_path: Path,
) -> None:
    member = ZooKeeperServer(member_config(ZooKeeperConfig(), PEERS, 1, tmp_path / "m"))
    member._prepare_data_dir()
    command = member._command(INSTALLATION)
    assert QUORUM_MAIN_CLASS in command
    assert "-Dzookeeper.fastleader.maxNotificationInterval=1000" in command
    assert command[-1] == str((tmp_path / "m" / "zoo.cfg").resolve())

    alone = ZooKeeperServer(ZooKeeperConfig(data_dir=tmp_path / "s", port=2181))
    alone._prepare_data_dir()
    command = alone._command(INSTALLATION)
    assert MAIN_CLASS in command
    assert QUORUM_MAIN_CLASS not in command
    assert not any("server." in key for key in alone._zoo_cfg())


def test_member_config_keeps_the_templates_settings_and_sets_its_identity(tmp_path: Path) -> None:
    template = ZooKeeperConfig(tick_time_ms=100, heap_mb=64, stop_at_exit=False)
    config = member_config(template, reversed(PEERS), 3, tmp_path, tmp_path / "zk-3.log")
    assert (config.tick_time_ms, config.heap_mb, config.stop_at_exit) == (100, 64, False)
    assert config.server_id == 3
    assert config.peer == PEERS[2]
    assert config.quorum_peers == PEERS  # in id order, whatever order they came in
    assert config.log_path == tmp_path / "zk-3.log"


def test_config_refuses_an_id_outside_the_ensemble_or_another_members_port() -> None:
    with pytest.raises(ValueError, match="server_id 4 is not one of the peers' ids"):
        ZooKeeperConfig(server_id=4, quorum_peers=PEERS)
    with pytest.raises(ValueError, match="port 2181 is not member 2's client port 2182"):
        ZooKeeperConfig(server_id=2, quorum_peers=PEERS, port=2181)
    with pytest.raises(ValueError, match="standalone server has no id"):
        ZooKeeperConfig(server_id=1)


def test_quorum_lines_refuse_duplicate_or_out_of_range_ids() -> None:
    with pytest.raises(ValueError, match="distinct"):
        quorum_zoo_cfg([PEERS[0], PEERS[0]], 10, 5)
    with pytest.raises(ValueError, match=r"1\.\.255"):
        quorum_zoo_cfg([QuorumPeer(0, 1, 2, 3)], 10, 5)


def test_connect_string_lists_every_member_in_id_order() -> None:
    assert ensemble_connect_string(reversed(PEERS)) == (
        "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"
    )


def test_a_quorum_is_a_majority() -> None:
    assert [quorum_size(n) for n in (1, 2, 3, 4, 5, 7)] == [1, 2, 2, 3, 3, 4]


def test_srvr_mode_is_the_servers_role_or_not_serving() -> None:
    assert parse_mode("Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0/0\nMode: leader\n") == (
        "leader"
    )
    assert parse_mode("Mode: follower\nNode count: 5\n") == "follower"
    assert parse_mode("Mode: standalone\n") == "standalone"
    assert parse_mode("This ZooKeeper instance is not currently serving requests\n") == (
        NOT_SERVING
    )


def test_ensemble_chooses_ports_and_dirs_itself() -> None:
    with pytest.raises(ValueError, match="as its arguments"):
        ZooKeeperEnsemble(3, ZooKeeperConfig(port=2181))
    with pytest.raises(ValueError, match="2 client ports for 3 members"):
        ZooKeeperEnsemble(3, client_ports=[1, 2])
    with pytest.raises(ValueError, match="at least one member"):
        ZooKeeperEnsemble(0)
