"""Base ports of a local cluster: 0 picks free ones, anything off the port range is refused."""

from __future__ import annotations

import pytest

from deploy.ports import base_port_or_free, port_is_free


def test_zero_picks_a_run_of_free_ports() -> None:
    base = base_port_or_free(0, 3, "--base-port")
    assert base >= 1024
    assert all(port_is_free(port) for port in range(base, base + 3))


def test_a_real_base_is_kept() -> None:
    assert base_port_or_free(9091, 3, "--base-port") == 9091
    assert base_port_or_free(65533, 3, "--base-port") == 65533


@pytest.mark.parametrize("base", [-1, 65534, 70000])
def test_a_base_whose_run_leaves_the_port_range_is_refused(base: int) -> None:
    with pytest.raises(ValueError, match=r"--kafka-base-port .*1-65535 \(0: free ones\)"):
        base_port_or_free(base, 3, "--kafka-base-port")
