"""`make up-metrics`: the compose profile "metrics" adds a Prometheus that scrapes every
broker's ``metrics.prometheus.port`` inside the network.

Run on the session's Docker cluster (already up): `make up-metrics` only adds the
Prometheus container, then Prometheus' own query API must show the three brokers scraped
and exactly one active controller among them. The container is removed at the end.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from tests.docker.conftest import DockerCluster, _free_ports, profile_up
from tests.helpers import wait_for


@pytest.fixture
def prometheus_port(docker_cluster: DockerCluster) -> Iterator[int]:
    (port,) = _free_ports(1)
    env = {**docker_cluster.env, "MINIBROKER_METRICS": "1", "MINIBROKER_PROMETHEUS_PORT": str(port)}
    with profile_up(docker_cluster, "up-metrics", env, ["prometheus"]) as up:
        assert f"http://127.0.0.1:{port}/graph" in up.stdout
        yield port


def query(port: int, promql: str) -> list[dict[str, object]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    result: list[dict[str, object]] = body["data"]["result"]
    return result


def scalar(port: int, promql: str) -> float | None:
    result = query(port, promql)
    if not result:
        return None
    value = result[0]["value"]
    assert isinstance(value, list)
    return float(value[1])


ACTIVE_CONTROLLERS = "sum(kafka_controller_kafkacontroller_activecontrollercount)"
UNDER_REPLICATED = "sum(kafka_server_replicamanager_underreplicatedpartitions)"


def test_prometheus_scrapes_every_broker(prometheus_port: int) -> None:
    wait_for(
        lambda: scalar(prometheus_port, 'count(up{job="minibroker"} == 1)') == 3,
        90,
        message=lambda: f"3 brokers scraped: {query(prometheus_port, 'up')}",
    )
    wait_for(
        lambda: scalar(prometheus_port, ACTIVE_CONTROLLERS) == 1,
        60,
        message="one active controller among the scraped brokers",
    )
    assert scalar(prometheus_port, UNDER_REPLICATED) is not None
