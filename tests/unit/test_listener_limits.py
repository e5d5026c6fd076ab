"""The Kafka listener's resource limits: the memory pool and connection quotas as logic,
and the listener against real sockets (connection limits, idle connections, half-sent
frames, requests waiting for the pool)."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest

from broker.grpc_listener.server_limits import grpc_server_limits
from broker.kafka_listener.apis import METADATA
from broker.kafka_listener.connection_quotas import ConnectionQuotas, TooManyConnectionsError
from broker.kafka_listener.frame_reader import ListenerLimits
from broker.kafka_listener.memory_pool import MemoryPool
from broker.kafka_listener.server import KafkaListener
from proto.config.broker_config import BrokerConfig, connection_overrides
from tests.unit.test_kafka_listener import (
    Handler,
    closed,
    correlation_of,
    frame,
    metadata_handler,
    metadata_request,
    read_frame,
)

# -- the memory pool ----------------------------------------------------------------------


def test_the_pool_grants_what_fits_and_makes_the_rest_wait() -> None:
    async def main() -> None:
        pool = MemoryPool(100)
        assert pool.try_acquire(60)
        waiting = asyncio.create_task(pool.acquire(50))
        await asyncio.sleep(0)
        assert not waiting.done()
        assert pool.waiting == 1
        small = asyncio.create_task(pool.acquire(40))  # fits now: not queued behind 50
        await asyncio.wait_for(small, 1)
        assert pool.used == 100
        pool.release(60)
        await asyncio.wait_for(waiting, 1)
        assert pool.used == 90
        assert pool.waiting == 0
        pool.release(40)
        pool.release(50)
        assert pool.used == 0

    asyncio.run(main())


def test_a_cancelled_wait_takes_nothing() -> None:
    async def main() -> None:
        pool = MemoryPool(10)
        pool.try_acquire(10)
        waiting = asyncio.create_task(pool.acquire(5))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        pool.release(10)
        assert pool.used == 0
        assert pool.waiting == 0

    asyncio.run(main())


def test_a_size_over_the_whole_pool_never_fits_and_unbounded_always_does() -> None:
    assert not MemoryPool(100).fits(101)
    assert MemoryPool(100).fits(100)
    unbounded = MemoryPool(None)
    assert unbounded.fits(2**40)
    assert unbounded.try_acquire(2**40)
    with pytest.raises(ValueError, match="a memory pool of 0 bytes"):
        MemoryPool(0)


# -- connection quotas --------------------------------------------------------------------


def test_per_ip_limit_counts_then_refuses_with_overrides_by_address() -> None:
    quotas = ConnectionQuotas(10, 2, {"127.0.0.2": 0, "localhost": 3})
    quotas.inc("10.0.0.1")
    quotas.inc("10.0.0.1")
    with pytest.raises(TooManyConnectionsError, match="maximum = 2"):
        quotas.inc("10.0.0.1")
    assert quotas.count("10.0.0.1") == 3  # counted until the refused socket is closed
    quotas.dec("10.0.0.1")
    assert quotas.count("10.0.0.1") == 2
    assert quotas.total == 2
    with pytest.raises(TooManyConnectionsError):
        quotas.inc("127.0.0.2")
    quotas.dec("127.0.0.2")
    assert quotas.limit("127.0.0.1") == 3  # a host name resolved, as Kafka's getByName
    with pytest.raises(ValueError, match=r"no connection from 10\.9\.9\.9"):
        quotas.dec("10.9.9.9")


def test_the_broker_wide_limit_makes_the_acceptor_wait_for_a_slot() -> None:
    async def main() -> None:
        quotas = ConnectionQuotas(2, 100)
        quotas.inc("a")
        quotas.inc("b")
        waiting = asyncio.create_task(quotas.wait_for_slot())
        await asyncio.sleep(0.01)
        assert not waiting.done()
        quotas.dec("a")
        await asyncio.wait_for(waiting, 1)

    asyncio.run(main())


def test_overrides_parse_as_kafka_writes_them() -> None:
    assert connection_overrides("") == {}
    assert connection_overrides(" hostA:100 , 10.0.0.1:5,::1:7") == {
        "hostA": 100,
        "10.0.0.1": 5,
        "::1": 7,
    }
    for bad in ("hostA", "hostA:x", "hostA:-1", ":4"):
        with pytest.raises(ValueError, match=r"max\.connections\.per\.ip\.overrides"):
            connection_overrides(bad)


def test_the_limits_parse_validate_and_reach_grpc() -> None:
    base = {"broker.id": "1", "zookeeper.connect": "zk:2181", "log.dirs": "/tmp/x"}
    config = BrokerConfig.from_properties(
        {
            **base,
            "max.connections": "50",
            "max.connections.per.ip": "5",
            "max.connections.per.ip.overrides": "127.0.0.1:20",
            "connections.max.idle.ms": "1000",
            "queued.max.request.bytes": "-1",
            "socket.request.read.timeout.ms": "500",
            "connections.handshake.timeout.ms": "700",
            "group.max.size": "3",
            "group.max.protocol.metadata.bytes": "4096",
        }
    )
    limits = ListenerLimits.from_config(config)
    assert limits.overrides == {"127.0.0.1": 20}
    assert limits.memory_pool().capacity is None
    assert dict(grpc_server_limits(config)) == {
        "grpc.server_handshake_timeout_ms": 700,
        "grpc.max_connection_idle_ms": 1000,
        "grpc.max_allowed_incoming_connections": 50,
    }
    assert BrokerConfig.from_properties(config.to_properties()) == config
    default = BrokerConfig.from_properties(base)
    assert default.queued_max_request_bytes == 2 * default.socket_request_max_bytes
    assert "grpc.max_allowed_incoming_connections" not in dict(grpc_server_limits(default))
    with pytest.raises(ValueError, match="can be set to zero only if"):
        BrokerConfig.from_properties({**base, "max.connections.per.ip": "0"})
    with pytest.raises(ValueError, match=r"queued\.max\.request\.bytes"):
        BrokerConfig.from_properties({**base, "queued.max.request.bytes": "0"})
    with pytest.raises(ValueError, match=r"group\.max\.size"):
        BrokerConfig.from_properties({**base, "group.max.size": "0"})


# -- the listener -------------------------------------------------------------------------

Connect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


def run_limited(
    handlers: dict[int, Handler],
    limits: ListenerLimits,
    scenario: Callable[[KafkaListener, int, Connect], Awaitable[None]],
    *,
    max_request_bytes: int = 1 << 20,
) -> None:
    async def main() -> None:
        listener = KafkaListener(1, handlers, max_request_bytes=max_request_bytes, limits=limits)
        port = await listener.start("127.0.0.1", 0)
        writers: list[asyncio.StreamWriter] = []

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writers.append(writer)
            return reader, writer

        try:
            async with asyncio.timeout(20):
                await scenario(listener, port, connect)
        finally:
            for writer in writers:
                writer.close()
            await listener.stop()

    asyncio.run(main())


def answered_handlers() -> dict[int, Handler]:
    release = {n: asyncio.Event() for n in ("ok",)}
    release["ok"].set()
    return {METADATA: metadata_handler(release)}


async def serves(connect: Connect, correlation_id: int = 1) -> bool:
    reader, writer = await connect()
    writer.write(frame(METADATA, 12, correlation_id, metadata_request("ok")))
    await writer.drain()
    return correlation_of(await read_frame(reader)) == correlation_id


async def wait_until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not check():  # noqa: ASYNC110 - polling a counter of another task
            await asyncio.sleep(0.01)


def test_a_connection_over_max_connections_per_ip_is_closed_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(listener: KafkaListener, port: int, connect: Connect) -> None:
        held = [await connect() for _ in range(2)]
        reader, _ = await connect()
        assert await closed(reader)
        assert listener.quotas.count("127.0.0.1") == 2
        held[0][1].close()
        await wait_until(lambda: listener.quotas.total == 1)
        assert await serves(connect)

    caplog.set_level(logging.INFO)
    run_limited(answered_handlers(), ListenerLimits(max_connections_per_ip=2), scenario)
    assert "event=kafka_connection_refused" in caplog.text
    assert "Too many connections from 127.0.0.1 (maximum = 2)" in caplog.text


def test_at_max_connections_the_next_client_waits_until_one_closes() -> None:
    async def scenario(listener: KafkaListener, port: int, connect: Connect) -> None:
        first = await connect()
        await connect()
        await wait_until(lambda: listener.quotas.total == 2)
        waiting = asyncio.create_task(serves(connect, 9))
        await asyncio.sleep(0.3)
        assert not waiting.done(), "served past max.connections"
        assert listener.quotas.total == 2
        first[1].close()
        assert await asyncio.wait_for(waiting, 5)

    run_limited(answered_handlers(), ListenerLimits(max_connections=2), scenario)


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(listener: KafkaListener, port: int, connect: Connect) -> None:
        idle, _ = await connect()
        slow_reader, slow_writer = await connect()
        slow_writer.write(frame(METADATA, 12, 5, metadata_request("slow")))
        await slow_writer.drain()
        assert await closed(idle)
        await asyncio.sleep(0.3)  # past the idle time while its answer is owed
        release["slow"].set()
        assert correlation_of(await read_frame(slow_reader)) == 5
        assert await closed(slow_reader)  # then idle

    release = {"slow": asyncio.Event(), "ok": asyncio.Event()}
    caplog.set_level(logging.INFO)
    run_limited(
        {METADATA: metadata_handler(release)},
        ListenerLimits(connections_max_idle_ms=200),
        scenario,
    )
    assert "event=kafka_connection_idle" in caplog.text


def test_a_half_sent_frame_is_closed_after_the_read_timeout_and_frees_the_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(listener: KafkaListener, port: int, connect: Connect) -> None:
        reader, writer = await connect()
        writer.write(struct.pack(">i", 4000) + b"\x00\x03")
        await writer.drain()
        await wait_until(lambda: listener.memory_pool.used == 4000)
        assert await closed(reader)
        await wait_until(lambda: listener.memory_pool.used == 0)
        assert await serves(connect)

    run_limited(answered_handlers(), ListenerLimits(socket_request_read_timeout_ms=300), scenario)
    assert "not complete after socket.request.read.timeout.ms (300)" in caplog.text


def test_a_request_waits_for_the_pool_rather_than_being_read() -> None:
    async def scenario(listener: KafkaListener, port: int, connect: Connect) -> None:
        _, hog = await connect()
        hog.write(struct.pack(">i", 9000) + b"\x00")  # holds 9000 of 10000 bytes
        await hog.drain()
        await wait_until(lambda: listener.memory_pool.used == 9000)
        assert await serves(connect, 2)  # small requests still fit
        reader, writer = await connect()
        big = frame(METADATA, 12, 3, metadata_request("ok" * 1000))
        assert 1000 < len(big) - 4 < 9000
        writer.write(big)
        await writer.drain()
        await wait_until(lambda: listener.memory_pool.waiting == 1)
        hog.close()  # its bytes given back: the waiting request is read and answered
        assert correlation_of(await read_frame(reader)) == 3
        assert listener.memory_pool.used == 0

    release = {"ok" * 1000: asyncio.Event(), "ok": asyncio.Event()}
    for event in release.values():
        event.set()
    run_limited(
        {METADATA: metadata_handler(release)},
        ListenerLimits(queued_max_request_bytes=10_000),
        scenario,
    )


def test_a_frame_larger_than_the_whole_pool_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(listener: KafkaListener, port: int, connect: Connect) -> None:
        reader, writer = await connect()
        writer.write(struct.pack(">i", 20_000))
        await writer.drain()
        assert await closed(reader)
        assert await serves(connect)

    run_limited(answered_handlers(), ListenerLimits(queued_max_request_bytes=10_000), scenario)
    assert "is over queued.max.request.bytes (10000)" in caplog.text


def test_the_listener_binds_like_asyncio_did() -> None:
    async def scenario(listener: KafkaListener, port: int, connect: Connect) -> None:
        probe = socket.socket()
        with pytest.raises(OSError, match="in use"):
            probe.bind(("127.0.0.1", port))
        probe.close()

    run_limited(answered_handlers(), ListenerLimits(), scenario)


def test_grpc_closes_connections_past_max_connections_and_unfinished_handshakes() -> None:
    """The channel arguments do what docs/resource-limits.md says, on this grpcio."""
    import grpc

    config = BrokerConfig.from_properties(
        {
            "broker.id": "1",
            "zookeeper.connect": "zk:2181",
            "log.dirs": "/tmp/x",
            "max.connections": "3",
            "connections.handshake.timeout.ms": "3000",
        }
    )

    async def main() -> None:
        server = grpc.aio.server(options=grpc_server_limits(config))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]
        loop = asyncio.get_running_loop()
        started = loop.time()
        closed_at: list[float] = []
        try:
            for sock in socks:
                sock.setblocking(False)
            async with asyncio.timeout(15):
                while len(closed_at) < len(socks):
                    for sock in socks:
                        if sock.fileno() >= 0 and _peer_closed(sock):
                            sock.close()
                            closed_at.append(loop.time() - started)
                    await asyncio.sleep(0.02)
        finally:
            for sock in socks:
                sock.close()
            await server.stop(0)
        closed_at.sort()
        # 3 past max.connections at once, the others only once the handshake timeout (3 s
        # from their accept, a little before ``started``) passed: bounds wide apart, so
        # that a busy machine's delays cannot blur the two (they failed at 0.4 s / 0.6 s).
        assert closed_at[2] < 2, closed_at
        assert closed_at[3] > 2.5, closed_at

    asyncio.run(main())


def _peer_closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_large_requests_have_the_free_memory_released_twice_after_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from proto.process import tuning

    calls: list[float] = []

    def release() -> bool:
        calls.append(0.0)
        return True

    monkeypatch.setattr(tuning, "RELEASE_DELAYS_S", (0.05, 0.1))
    monkeypatch.setattr(tuning, "release_free_memory", release)

    async def main() -> None:
        tuning.release_free_memory_soon(tuning.LARGE_REQUEST_BYTES - 1)
        await asyncio.sleep(0.2)
        assert calls == []
        tuning.release_free_memory_soon(tuning.LARGE_REQUEST_BYTES)
        await asyncio.sleep(0.01)
        tuning.release_free_memory_soon(tuning.LARGE_REQUEST_BYTES)  # the same burst
        await wait_until(lambda: len(calls) == 2)
        await asyncio.sleep(0.2)
        assert len(calls) == 2

    asyncio.run(main())
