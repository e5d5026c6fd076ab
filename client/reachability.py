"""What is (or is not) listening at an address, for the command line's error messages.

Two questions a failed connection leaves open and a user needs answered at once:

- *Is anything listening at all?* kazoo keeps retrying a refused ZooKeeper connection for
  the whole connection timeout (10 s on the command line), so a ZooKeeper command run with
  no cluster would sit silent that long before saying what a refused TCP connect says in a
  millisecond. :func:`all_refused` asks first.
- *Is it a Kafka listener?* minibroker's own clients speak gRPC; pointed at a broker's
  Kafka port (``kafka.port``) they see only a closed connection ("unavailable").
  :func:`speaks_kafka` sends Kafka's ApiVersions v0 request (the one request every Kafka
  broker answers before any other, whatever its version) and checks the answer's
  correlation id, so the message can name the mistake (docs/cli.md, "Where the cluster is").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import struct
from collections.abc import Sequence

__all__ = ["all_refused", "kafka_listener_hint", "speaks_kafka"]

PROBE_TIMEOUT_S = 1.0
"""A connect or an answer slower than this is not refused: the caller goes on as before."""

_API_VERSIONS = 18
_PROBE_CORRELATION_ID = 0x6D62  # "mb"
_CLIENT_ID = b"minibroker-probe"


async def _refused(host: str, port: int) -> bool:
    """True only when the host answers the connect with a refusal (nothing listens)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return True
    except OSError as e:
        return e.errno in (errno.ECONNREFUSED, errno.EADDRNOTAVAIL)
    except TimeoutError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False


async def all_refused(hosts: str) -> bool:
    """Whether every ``host:port`` of a comma-separated list (a ZooKeeper connect string
    without its chroot) refuses a TCP connection. A host that cannot be resolved, accepts
    or does not answer within :data:`PROBE_TIMEOUT_S` counts as not refused."""
    addresses = []
    for entry in hosts.split(","):
        host, _, port = entry.strip().rpartition(":")
        if not host or not port.isdigit():
            return False
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        return False
    answers = await asyncio.gather(*(_refused(h, p) for h, p in addresses))
    return all(answers)


def _api_versions_v0_request() -> bytes:
    """ApiVersions v0: request header v1 (key, version, correlation id, client id), no body."""
    body = (
        struct.pack(">hhih", _API_VERSIONS, 0, _PROBE_CORRELATION_ID, len(_CLIENT_ID)) + _CLIENT_ID
    )
    return struct.pack(">i", len(body)) + body


async def speaks_kafka(host: str, port: int) -> bool:
    """Whether ``host:port`` answers Kafka's ApiVersions v0 with a response to it (its size
    and our correlation id). Anything else (refused, closed, silent, HTTP/2) is False."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(_api_versions_v0_request())
                await writer.drain()
                head = await reader.readexactly(8)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False
    size: int
    correlation_id: int
    size, correlation_id = struct.unpack(">ii", head)
    return correlation_id == _PROBE_CORRELATION_ID and 4 <= size < 1 << 20


async def kafka_listener_hint(addresses: Sequence[str]) -> str:
    """A sentence for an unreachable-broker error when some of ``addresses`` (``host:port``)
    are Kafka listeners, else ''."""
    parsed = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        if host and port.isdigit():
            parsed.append((host.strip("[]"), int(port), address))
    answers = await asyncio.gather(*(speaks_kafka(h, p) for h, p, _ in parsed))
    kafka = [address for (_, _, address), yes in zip(parsed, answers, strict=True) if yes]
    if not kafka:
        return ""
    what = "is a Kafka listener" if len(kafka) == 1 else "are Kafka listeners"
    return (
        f"; {', '.join(kafka)} {what}"
        " (Kafka's protocol, for Kafka's clients): minibroker's own commands speak gRPC, so "
        "give a broker's gRPC port (`port`, e.g. 9091; `minibroker cluster status` lists them)"
    )
