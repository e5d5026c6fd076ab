"""client.reachability against real sockets on 127.0.0.1: what a refused port, a listening
one, a Kafka-speaking one and a gRPC-ish one look like to the command line's probes."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from client.reachability import all_refused, kafka_listener_hint, speaks_kafka


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def answers_like_kafka(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads one request and answers with its correlation id, as any Kafka broker does."""
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    request = await reader.readexactly(size)
    api_key, version, correlation_id = struct.unpack(">hhi", request[:8])
    assert (api_key, version) == (18, 0)
    body = struct.pack(">ih", correlation_id, 35)  # UNSUPPORTED_VERSION and nothing else
    writer.write(struct.pack(">i", len(body)) + body)
    await writer.drain()
    writer.close()


async def closes_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A gRPC server reading a Kafka frame sees no HTTP/2 preface and hangs up."""
    await reader.read(64)
    writer.close()


def test_a_port_nobody_listens_on_is_refused_and_a_listening_one_is_not() -> None:
    async def scenario() -> None:
        assert await all_refused(f"127.0.0.1:{closed_port()}")
        assert await all_refused(f"127.0.0.1:{closed_port()},localhost:{closed_port()}")
        async with serving(closes_at_once) as port:
            assert not await all_refused(f"127.0.0.1:{port}")
            assert not await all_refused(f"127.0.0.1:{closed_port()},127.0.0.1:{port}")
        assert not await all_refused("")
        assert not await all_refused("no-port-here")

    asyncio.run(scenario())


def test_only_a_kafka_answer_counts_as_a_kafka_listener() -> None:
    async def scenario() -> None:
        async with serving(answers_like_kafka) as kafka, serving(closes_at_once) as other:
            assert await speaks_kafka("127.0.0.1", kafka)
            assert not await speaks_kafka("127.0.0.1", other)
            assert not await speaks_kafka("127.0.0.1", closed_port())
            hint = await kafka_listener_hint(
                [f"127.0.0.1:{kafka}", f"127.0.0.1:{other}", "nonsense"]
            )
            assert f"127.0.0.1:{kafka} is a Kafka listener" in hint
            assert f":{other}" not in hint
            assert await kafka_listener_hint([f"127.0.0.1:{other}"]) == ""

    asyncio.run(scenario())
