"""The SASL exchange of the Kafka listener (``broker.kafka_listener.sasl_authenticator``)
on a real socket, without a broker: what is served before authentication, Kafka's errors,
the principal handed to the handlers, the deadline. The clients' side is
tests/integration/test_kafka_security.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.serial import entity_reader

from broker.kafka_listener.sasl_authenticator import ListenerAuthenticator
from broker.kafka_listener.server import KafkaListener
from broker.kafka_listener.wire_request import Answer, KafkaRequest, done
from proto.config.kafka_listener_security import KafkaListenerSecurity
from proto.transport.scram import ScramCredential, ScramMechanism
from tests.unit.test_kafka_listener import closed, frame, metadata_request, read_frame

SECURITY = KafkaListenerSecurity(
    "SASL_PLAINTEXT", ("PLAIN", "SCRAM-SHA-256"), {"alice": "alice-secret"}
)
METADATA = 3
Connect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


def run(
    scenario: Callable[[Connect, list[str]], Coroutine[Any, Any, None]], timeout_s: float = 10
) -> None:
    principals: list[str] = []

    async def metadata(request: KafkaRequest) -> Answer:
        principals.append(request.principal)
        return done({"brokers": [], "topics": []})

    async def lookup(user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return None

    async def main() -> None:
        authenticator = ListenerAuthenticator(
            1, SECURITY, scram_credential=lookup, timeout_s=timeout_s
        )
        listener = KafkaListener(
            1, {METADATA: metadata}, max_request_bytes=1 << 20, authenticator=authenticator
        )
        port = await listener.start("127.0.0.1", 0)
        writers: list[asyncio.StreamWriter] = []

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writers.append(writer)
            return reader, writer

        try:
            await scenario(connect, principals)
        finally:
            for writer in writers:
                writer.close()
            await listener.stop()

    asyncio.run(main())


def _body(schema: type[Any], data: bytes) -> Any:
    _, size = entity_reader(schema.__header_schema__)(data, 0)
    return entity_reader(schema)(data, size)[0]


async def _plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, password: str) -> Any:
    writer.write(frame(17, 1, 1, SaslHandshakeRequest(mechanism="PLAIN")))
    handshake = _body(SaslHandshakeResponse, await read_frame(reader))
    assert handshake.error_code == 0
    assert handshake.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    token = b"\0alice\0" + password.encode()
    writer.write(frame(36, 2, 2, SaslAuthenticateRequest(auth_bytes=token)))
    return _body(SaslAuthenticateResponse, await read_frame(reader))


def test_plain_then_requests_carry_the_principal_and_the_sasl_apis_are_refused() -> None:
    async def scenario(connect: Connect, principals: list[str]) -> None:
        reader, writer = await connect()
        writer.write(frame(18, 3, 9, ApiVersionsRequest(client_software_name="t",
                                                        client_software_version="1")))  # fmt: skip
        versions = _body(ApiVersionsResponse, await read_frame(reader))
        listed = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert (listed[17], listed[36]) == ((0, 1), (0, 2))
        authenticated = await _plain(reader, writer, "alice-secret")
        assert authenticated.error_code == 0
        writer.write(frame(METADATA, 12, 3, metadata_request()))
        await read_frame(reader)
        assert principals == ["User:alice"]
        writer.write(frame(17, 1, 4, SaslHandshakeRequest(mechanism="PLAIN")))
        again = _body(SaslHandshakeResponse, await read_frame(reader))
        assert again.error_code == 34  # ILLEGAL_SASL_STATE

    run(scenario)


def test_failures_are_answered_as_kafka_s_then_the_connection_closed() -> None:
    async def scenario(connect: Connect, principals: list[str]) -> None:
        reader, writer = await connect()
        failed = await _plain(reader, writer, "wrong")
        assert failed.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert failed.error_message == "Authentication failed: Invalid username or password"
        assert await closed(reader)

        reader, writer = await connect()
        writer.write(frame(17, 1, 1, SaslHandshakeRequest(mechanism="GSSAPI")))
        refused = _body(SaslHandshakeResponse, await read_frame(reader))
        assert refused.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert refused.mechanisms == ("PLAIN", "SCRAM-SHA-256")
        assert await closed(reader)

        reader, writer = await connect()  # SCRAM for a user without credentials
        writer.write(frame(17, 1, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256")))
        await read_frame(reader)
        writer.write(frame(36, 2, 2, SaslAuthenticateRequest(auth_bytes=b"n,,n=bob,r=abc")))
        unknown = _body(SaslAuthenticateResponse, await read_frame(reader))
        assert unknown.error_code == 58
        assert await closed(reader)

        reader, writer = await connect()  # a request before authentication
        writer.write(frame(METADATA, 12, 1, metadata_request()))
        assert await closed(reader)
        assert principals == []

    run(scenario)


def test_a_connection_that_does_not_authenticate_is_closed_at_the_deadline() -> None:
    async def scenario(connect: Connect, principals: list[str]) -> None:
        reader, _ = await connect()
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await closed(reader)
        assert 0.2 <= loop.time() - started < 5

    run(scenario, timeout_s=0.3)
