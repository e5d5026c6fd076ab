"""Free ports for the processes a harness starts, chosen where nothing else will take them.

A port picked by binding port 0 comes from the kernel's ephemeral range, the same range
every outgoing connection's local port comes from. A broker restarted on its old port (the
harness keeps ports across kill and start, as a real deployment does) would then find it
taken, now and then, by some client's connection made while the broker was down. So ports
are chosen below the ephemeral range, where only listeners live.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

from proto.errors import MinibrokerError

__all__ = ["NoFreePortError", "base_port_or_free", "free_port_block", "port_is_free"]

_LINUX_DEFAULT_EPHEMERAL = (32768, 60999)


class NoFreePortError(MinibrokerError, RuntimeError):
    """No run of free ports could be found."""


def free_port_block(count: int = 1, host: str = "127.0.0.1") -> int:
    """A base port such that ``count`` consecutive ports on ``host`` are free right now,
    all below the ephemeral port range."""
    low, _ = ephemeral_port_range()
    ceiling = max(low - count, 2048)
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(1024, ceiling)
        if all(port_is_free(port, host) for port in range(base, base + count)):
            return base
    raise NoFreePortError(f"no run of {count} free ports found on {host}")


def base_port_or_free(base: int, count: int, what: str) -> int:
    """``base`` if ``count`` ports from it are real port numbers, or, for 0, a free run of
    ``count`` ports picked now (as ``kafka.port=0`` asks the kernel for one); ValueError
    naming ``what`` for anything else, so ``--base-port 0`` never means ports 1, 2, 3."""
    if base == 0:
        return free_port_block(count)
    if not 1 <= base <= 65536 - count:
        raise ValueError(
            f"{what} {base}: the {count} port(s) from it must lie in 1-65535 (0: free ones)"
        )
    return base


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _LINUX_DEFAULT_EPHEMERAL


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Nothing listens on ``port`` (TIME_WAIT leftovers do not count, as for a server that
    sets SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True
