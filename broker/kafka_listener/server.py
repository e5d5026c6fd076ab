"""The Kafka listener: Kafka's binary protocol over TCP on the broker's event loop.

One connection is one reader and one writer. The reader takes a frame at a time and runs
its handler's stage (:mod:`broker.kafka_listener.apis`) before reading the next, so
what must keep the connection's order (a Produce's append) does; the answers are queued and
the writer writes each, in request order, when it is ready. A client may thus keep several
requests in flight on a connection, as librdkafka and the Java client do, and the broker
still sees them one after the other, as Kafka's muted channel has it. The queue is bounded:
a client that sends faster than it reads its answers is held back by TCP, as Kafka's
``queued.max.requests`` holds it.

Hostile input closes that connection only, with a log line: a size over
``socket.request.max.bytes`` (a TLS ClientHello or an HTTP request read as a size is one),
a frame that does not decode as the version it names, a handler's ``CloseConnection``. An
API or version not served gets Kafka's answer: ApiVersions says UNSUPPORTED_VERSION in
version 0 with the list of what is served (KIP-511); an API Kafka knows whose response
has a top-level error code gets that response with every error code UNSUPPORTED_VERSION
(SaslHandshake among them); anything else (an API whose errors are per partition, an API
or version Kafka does not have) closes the connection, as Kafka does with a request it
cannot parse.

Security (:mod:`broker.kafka_listener.sasl_authenticator`): on an SSL or SASL listener the
TLS handshake, then the SASL exchange, happen before the first request is read, and every
request carries the principal the connection authenticated as.

Resource limits (docs/resource-limits.md): connections are accepted within
``max.connections`` and ``max.connections.per.ip``
(:mod:`broker.kafka_listener.connection_quotas`); each frame is read within
``connections.max.idle.ms``, ``socket.request.read.timeout.ms`` and the memory pool of
``queued.max.request.bytes`` (:mod:`broker.kafka_listener.frame_reader`).

Client quotas (:mod:`broker.kafka_listener.throttling`): a response to a client over its
quota carries its throttle time and is sent at once; the connection then reads no further
request until that time has passed (KIP-219's muted channel). Requests the reader had
already taken from the connection (a pipelining client's) are still served meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.index import api_key_map

from broker.kafka_listener.apis import (
    API_VERSIONS,
    SUPPORTED_VERSIONS,
    UNSUPPORTED_VERSION,
    api_versions_tree,
)
from broker.kafka_listener.connection_quotas import Acceptor, ConnectionQuotas
from broker.kafka_listener.frame_reader import FrameReader, IdleConnectionError, ListenerLimits
from broker.kafka_listener.messages import Tree
from broker.kafka_listener.request_codec import (
    MalformedFrameError,
    decode_request,
    encode_response,
    peek_header,
    request_schema,
    response_schema,
)
from broker.kafka_listener.sasl_authenticator import ListenerAuthenticator
from broker.kafka_listener.throttling import Throttler, TimedAnswer
from broker.kafka_listener.wire_request import Answer, CloseConnection, KafkaRequest
from proto.transport.tls import ANONYMOUS_PRINCIPAL
from proto.wire import minibroker_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = ["MAX_QUEUED_ANSWERS", "KafkaListener"]

MAX_QUEUED_ANSWERS = 64
"""Requests of one connection read but not yet answered before the reader waits."""
_TLS_HANDSHAKE = 0x16


@dataclass(frozen=True, slots=True)
class _Queued:
    """An answer owed, in the order the requests came."""

    api_key: int
    correlation_id: int
    schema: type[Any]
    answer: Awaitable[Tree | None]
    started: float
    error: int = 0
    request: KafkaRequest | None = None
    """The request, for the client quotas (None for an answer that is an error stub)."""
    stage_ns: int = 0
    """How long the handler's stage ran on the loop."""
    throttle_ms: int = 0
    """The throttle time decided when the request was staged (a Produce's)."""


class _Mute:
    """A connection's muting (KIP-219): no request is read while an answer known to be
    throttled is still to be written, nor before ``until`` (loop time), which each
    throttled answer moves to its throttle time after it was written."""

    __slots__ = ("_held", "_released", "until")

    def __init__(self) -> None:
        self.until = 0.0
        self._held = 0
        self._released = asyncio.Event()
        self._released.set()

    def hold(self) -> None:
        """A throttled answer is owed: read nothing more until it is written."""
        self._held += 1
        self._released.clear()

    def extend(self, throttle_ms: int, held: bool = False) -> None:
        """A throttled answer was written (``held``: one :meth:`hold` announced)."""
        loop = asyncio.get_running_loop()
        self.until = max(self.until, loop.time() + throttle_ms / 1000)
        if held:
            self._held -= 1
            if self._held == 0:
                self._released.set()

    async def wait(self) -> None:
        await self._released.wait()
        loop = asyncio.get_running_loop()
        # A deadline, not an event: another throttled answer may move it while we sleep.
        while (left := self.until - loop.time()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left)


class KafkaListener:
    """Serves Kafka clients on ``host:port`` until :meth:`stop`."""

    def __init__(
        self,
        broker_id: int,
        handlers: Mapping[int, Callable[[KafkaRequest], Awaitable[Answer]]],
        *,
        max_request_bytes: int,
        observe: Callable[[str, float], None] | None = None,
        throttler: Throttler | None = None,
        authenticator: ListenerAuthenticator | None = None,
        limits: ListenerLimits | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._authenticator = authenticator
        """SSL and SASL (:mod:`broker.kafka_listener.sasl_authenticator`); None: PLAINTEXT."""
        self.versions = SUPPORTED_VERSIONS if authenticator is None else authenticator.versions
        """What ApiVersions lists and the listener serves."""
        self.handlers = (
            handlers if authenticator is None else {**handlers, **authenticator.handlers}
        )
        """By API key, the stage of each API in :attr:`versions`."""
        self.max_request_bytes = max_request_bytes
        """``socket.request.max.bytes``: a larger size field closes the connection."""
        self._observe = observe
        self._throttler = throttler
        """Client quotas: None for none (the tests' listeners)."""
        self.limits = limits or ListenerLimits()
        """Connections, idle time, request reads and their memory (docs/resource-limits.md)."""
        self.memory_pool = self.limits.memory_pool()
        self.quotas = ConnectionQuotas(
            self.limits.max_connections,
            self.limits.max_connections_per_ip,
            self.limits.overrides,
        )
        tls = authenticator.ssl_context if authenticator is not None else None
        self._acceptor = Acceptor(
            broker_id,
            self.quotas,
            self._connection,
            ssl=tls,
            ssl_handshake_timeout_s=None
            if tls is None or authenticator is None
            else authenticator.timeout_s,
        )
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Bind and serve; returns the bound port. Raises OSError when it cannot bind."""
        return await self._acceptor.start(host, port)

    async def stop(self) -> None:
        """Stop accepting and close every connection (their pending answers are dropped:
        the clients retry elsewhere, as after a broker crash)."""
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections))
        await self._acceptor.stop()

    def _log(self, level: int, event: str, peer: object, **fields: object) -> None:
        text = " ".join(f"{k}={v}" for k, v in fields.items())
        logger.log(level, "event=%s broker=%d peer=%s %s", event, self.broker_id, peer, text)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        queue: asyncio.Queue[_Queued | None] = asyncio.Queue()
        room = asyncio.Semaphore(MAX_QUEUED_ANSWERS)
        mute = _Mute()
        reading: asyncio.Task[None] | None = None
        writing: asyncio.Task[None] | None = None
        frames: FrameReader | None = None
        try:
            principal = ANONYMOUS_PRINCIPAL
            if self._authenticator is not None:
                principal = await self._authenticator.authenticate(reader, writer, peer)
            frames = FrameReader(
                reader, self.limits, self.memory_pool, self.max_request_bytes, _misdirected
            )
            reading = asyncio.create_task(
                self._read_requests(frames, queue, room, peer, mute, principal)
            )
            writing = asyncio.create_task(
                self._write_answers(queue, room, writer, peer, mute, frames)
            )
            done, _ = await asyncio.wait({reading, writing}, return_when=asyncio.FIRST_COMPLETED)
            if reading in done:
                reading.result()
                queue.put_nowait(None)  # the client is done sending: answer what it sent
            await writing
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except IdleConnectionError as err:
            self._log(logging.INFO, "kafka_connection_idle", peer, reason=repr(str(err)))
        except CloseConnection as err:
            self._log(logging.WARNING, "kafka_connection_closed", peer, reason=repr(str(err)))
        except Exception:
            logger.exception(
                "event=kafka_connection_failed broker=%d peer=%s", self.broker_id, peer
            )
        finally:
            for part in (reading, writing):
                if part is None:
                    continue
                part.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await part
            if frames is not None:
                frames.close()
            while not queue.empty():  # answers never to be written: their coroutines closed
                if (queued := queue.get_nowait()) is not None:
                    _discard(queued.answer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._connections.discard(task)

    async def _read_requests(
        self,
        frames: FrameReader,
        queue: asyncio.Queue[_Queued | None],
        room: asyncio.Semaphore,
        peer: object,
        mute: _Mute,
        principal: str = ANONYMOUS_PRINCIPAL,
    ) -> None:
        """Read requests until the client closes; stage each in turn, none while the
        connection is muted. A request is read only once it could be staged (the
        connection is not muted, its answer queue has room): its bytes wait in the
        client's socket meanwhile, not in the memory pool. Each request carries the
        connection's ``principal``."""
        client_host = _client_host(peer)
        while True:
            await mute.wait()
            await room.acquire()
            try:
                frame = await frames.next_frame()
            except asyncio.IncompleteReadError:
                self._log(logging.WARNING, "kafka_truncated_frame", peer)
                return
            if frame is None:
                return
            started = time.perf_counter()
            try:
                queued = await self._stage(frame, started, client_host, principal)
            except MalformedFrameError as err:
                raise CloseConnection(str(err)) from err
            finally:
                del frame
                frames.staged()
            if queued.throttle_ms > 0:
                mute.hold()
            queue.put_nowait(queued)

    async def _stage(
        self,
        frame: bytes,
        started: float,
        client_host: str = "",
        principal: str = ANONYMOUS_PRINCIPAL,
    ) -> _Queued:
        api_key, version, correlation_id = peek_header(frame)
        versions = self.versions.get(api_key)
        schema = request_schema(api_key, version)
        if versions is not None and versions[0] <= version <= versions[1] and schema is not None:
            staging = time.perf_counter_ns()
            request = decode_request(frame, schema, client_host, principal)
            if self._throttler is not None and self._throttler.active:
                request = self._throttler.adjust(request)
            answer = await self.handlers[api_key](request)
            reply = response_schema(api_key, version)
            assert reply is not None
            stage_ns = time.perf_counter_ns() - staging
            throttle_ms = 0
            if self._throttler is not None and self._throttler.active:
                throttle_ms = self._throttler.on_stage(request, len(frame), stage_ns)
            return _Queued(
                api_key,
                correlation_id,
                reply,
                answer,
                started,
                request=request,
                stage_ns=stage_ns,
                throttle_ms=throttle_ms,
            )
        if api_key == API_VERSIONS:
            reply = response_schema(API_VERSIONS, 0)
            assert reply is not None
            answer = _ready(
                api_versions_tree(UNSUPPORTED_VERSION)
                if self._authenticator is None
                else self._authenticator.api_versions_tree(UNSUPPORTED_VERSION)
            )
            return _Queued(api_key, correlation_id, reply, answer, started)
        reply = response_schema(api_key, version)
        if reply is None or schema is None:
            raise MalformedFrameError(f"Kafka has no API {api_key} version {version}")
        if not any(f.name == "error_code" for f in dataclasses.fields(reply)):
            # Its errors are per partition, of partitions we would have to decode: Kafka
            # closes the connection on a version it cannot parse.
            raise MalformedFrameError(f"API {api_key} version {version} is not served here")
        return _Queued(
            api_key, correlation_id, reply, _ready({}), started, error=UNSUPPORTED_VERSION
        )

    async def _write_answers(
        self,
        queue: asyncio.Queue[_Queued | None],
        room: asyncio.Semaphore,
        writer: asyncio.StreamWriter,
        peer: object,
        mute: _Mute,
        frames: FrameReader,
    ) -> None:
        while (queued := await queue.get()) is not None:
            room.release()
            try:
                await self._write_answer(queued, writer, peer, mute)
            finally:
                frames.activity.answered()

    async def _write_answer(
        self, queued: _Queued, writer: asyncio.StreamWriter, peer: object, mute: _Mute
    ) -> None:
        throttler = self._throttler
        if throttler is not None and queued.request is not None and throttler.active:
            try:
                await self._write_throttled(throttler, queued, writer, mute)
            finally:
                if queued.throttle_ms > 0:
                    mute.extend(queued.throttle_ms, held=True)
            return
        try:
            tree = await queued.answer
            error = queued.error
        except CloseConnection:
            raise
        except Exception:
            logger.exception(
                "request failed event=kafka_request_error broker=%d peer=%s api_key=%d",
                self.broker_id,
                peer,
                queued.api_key,
            )
            tree, error = {}, pb.UNKNOWN_SERVER_ERROR
        if tree is not None:
            writer.write(encode_response(queued.schema, queued.correlation_id, tree, error=error))
            await writer.drain()
        if self._observe is not None:
            name = api_name(queued.api_key)
            self._observe(name, (time.perf_counter() - queued.started) * 1000)

    async def _write_throttled(
        self, throttler: Throttler, queued: _Queued, writer: asyncio.StreamWriter, mute: _Mute
    ) -> None:
        """Write an answer with the client quotas applied, then mute the connection for the
        throttle time (after the write: the client learns of it at once, KIP-219)."""
        assert queued.request is not None
        timed = TimedAnswer(queued.answer)
        try:
            tree = await timed
        except CloseConnection:
            raise
        except Exception:
            logger.exception(
                "request failed event=kafka_request_error broker=%d api_key=%d",
                self.broker_id,
                queued.api_key,
            )
            writer.write(
                encode_response(
                    queued.schema, queued.correlation_id, {}, error=pb.UNKNOWN_SERVER_ERROR
                )
            )
            await writer.drain()
            return
        frame, throttle_ms = throttler.respond(
            queued.request, queued.schema, tree, queued.stage_ns + timed.ns, queued.throttle_ms
        )
        if frame is not None:
            writer.write(frame)
            await writer.drain()
        if throttle_ms > 0 and queued.throttle_ms == 0:
            mute.extend(throttle_ms)  # a staged throttle is the caller's to apply
        if self._observe is not None:
            self._observe(api_name(queued.api_key), (time.perf_counter() - queued.started) * 1000)


def _client_host(peer: object) -> str:
    """A peer's address as Kafka shows a member's ``client_host`` (``/127.0.0.1``)."""
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        return f"/{peer[0]}"
    return ""


def _misdirected(head: bytes) -> str:
    """What a client that reads as an impossible size most likely is, for the log line."""
    if head[0] == _TLS_HANDSHAKE:
        return " (a TLS handshake: this listener is PLAINTEXT)"
    if head == b"PRI ":
        return " (HTTP/2: a gRPC client, such as minibroker's own CLI, on the Kafka port)"
    if head[:3] in (b"GET", b"POS", b"PUT", b"HEA"):
        return " (an HTTP request)"
    return ""


@functools.cache
def api_name(api_key: int) -> str:
    """Kafka's name of an API (``ApiVersions``), as the request metrics label it."""
    name = api_key_map.get(api_key)
    return str(api_key) if name is None else "".join(w.title() for w in name.split("_"))


def _discard(answer: Awaitable[Tree | None]) -> None:
    if isinstance(answer, Coroutine):
        answer.close()


async def _ready(tree: Tree) -> Tree:
    return tree
