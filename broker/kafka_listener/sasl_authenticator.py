"""Authentication on the Kafka listener: SSL and SASL (Kafka's ``SaslServerAuthenticator``).

A connection of an SSL or SASL_SSL listener completes its TLS handshake first (asyncio's,
with the broker's ``ssl.keystore.location``); one of a SASL listener then authenticates
before the listener reads its first request (:meth:`ListenerAuthenticator.authenticate`).
Until it succeeds only ApiVersions, SaslHandshake (v0-1) and SaslAuthenticate (v0-2,
KIP-152) are served; any other request closes the connection, as Kafka's
``IllegalSaslStateException`` does. The TLS handshake has a deadline, and the SASL
exchange another after it; a connection past either is closed. A failed authentication is answered
SASL_AUTHENTICATION_FAILED, with Kafka's message, and the connection closed.

After a SaslHandshake v0 the SASL tokens travel unwrapped, a size and the bytes, as
Kafka's v0 clients send them; after v1 each is a SaslAuthenticate request.

The principal (``User:<name>``) then goes into every request of the connection: the SASL
user, else the client certificate's subject mapped by ``ssl.principal.mapping.rules``
(SSL), else ``User:ANONYMOUS``. Mechanisms: PLAIN (the JAAS users of the broker's
config) and SCRAM-SHA-256/512 (:mod:`proto.transport.scram`, credentials read from
ZooKeeper for each exchange, :mod:`proto.config.scram_credentials`). See
docs/security.md.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import ssl
from collections.abc import Awaitable, Callable

from cryptography import x509

from broker.kafka_listener.apis import API_VERSIONS, SUPPORTED_VERSIONS, UNSUPPORTED_VERSION
from broker.kafka_listener.messages import Tree
from broker.kafka_listener.request_codec import (
    MalformedFrameError,
    decode_request,
    encode_response,
    peek_header,
    request_schema,
    response_schema,
)
from broker.kafka_listener.wire_request import Answer, CloseConnection, KafkaRequest, done
from proto.config.kafka_listener_security import KafkaListenerSecurity
from proto.transport.scram import (
    ScramAuthenticationError,
    ScramCredential,
    ScramMechanism,
    ScramServer,
)
from proto.transport.ssl_principal import NoMatchingRuleError
from proto.transport.tls import ANONYMOUS_PRINCIPAL
from proto.zk.session import ZkError

__all__ = [
    "AUTHENTICATION_TIMEOUT_S",
    "SASL_VERSIONS",
    "ListenerAuthenticator",
    "peer_certificate_principal",
]

logger = logging.getLogger(__name__)

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_VERSIONS: dict[int, tuple[int, int]] = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}
"""What a SASL listener adds to :data:`~broker.kafka_listener.apis.SUPPORTED_VERSIONS`."""
ILLEGAL_SASL_STATE, UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 34, 33, 58
AUTHENTICATION_TIMEOUT_S = 10.0
"""How long a connection may take for its TLS handshake and its authentication."""
MAX_UNAUTHENTICATED_FRAME = 524_288
"""Kafka's ``sasl.server.max.receive.size`` default: a larger frame before authentication
closes the connection (an unauthenticated client may not make the broker allocate more)."""

CredentialLookup = Callable[[str, ScramMechanism], Awaitable[ScramCredential | None]]


def peer_certificate_principal(
    ssl_object: ssl.SSLObject | None, security: KafkaListenerSecurity
) -> str:
    """``User:<mapped subject>`` of the client certificate, ``User:ANONYMOUS`` without one.
    NoMatchingRuleError when no mapping rule applies (the connection is refused)."""
    if ssl_object is None:
        return ANONYMOUS_PRINCIPAL
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS_PRINCIPAL
    subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return "User:" + security.principal_mapper.name(subject)


class ListenerAuthenticator:
    """One listener's security: its TLS context and each connection's authentication."""

    def __init__(
        self,
        broker_id: int,
        security: KafkaListenerSecurity,
        *,
        scram_credential: CredentialLookup | None = None,
        keystore: str = "",
        truststore: str = "",
        timeout_s: float = AUTHENTICATION_TIMEOUT_S,
    ) -> None:
        self.broker_id = broker_id
        self.security = security
        self._scram_credential = scram_credential
        self.timeout_s = timeout_s
        self.ssl_context: ssl.SSLContext | None = None
        """The server TLS context of an SSL or SASL_SSL listener."""
        if security.tls:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=truststore)
            context.load_cert_chain(keystore)
            context.verify_mode = {
                "required": ssl.CERT_REQUIRED,
                "requested": ssl.CERT_OPTIONAL,
            }.get(security.client_auth, ssl.CERT_NONE)
            self.ssl_context = context
        self.versions: dict[int, tuple[int, int]] = dict(SUPPORTED_VERSIONS)
        """What ApiVersions lists on this listener."""
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {}
        """The listener's own answers after authentication (ApiVersions with the SASL
        APIs, and those APIs refused ILLEGAL_SASL_STATE, as Kafka's ``KafkaApis``)."""
        if security.sasl:
            self.versions.update(SASL_VERSIONS)
            self.handlers = {
                API_VERSIONS: self._api_versions,
                SASL_HANDSHAKE: self._after_authentication,
                SASL_AUTHENTICATE: self._after_authentication,
            }

    def api_versions_tree(self, code: int) -> Tree:
        return {
            "error_code": code,
            "api_keys": [
                {"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(self.versions.items())
            ],
        }

    async def _api_versions(self, request: KafkaRequest) -> Answer:
        return done(self.api_versions_tree(0))

    async def _after_authentication(self, request: KafkaRequest) -> Answer:
        return done(
            {
                "error_code": ILLEGAL_SASL_STATE,
                "error_message": "Authentication already completed on this connection",
            }
        )

    def _log(self, level: int, event: str, peer: object, **fields: object) -> None:
        text = " ".join(f"{k}={v}" for k, v in fields.items())
        logger.log(level, "event=%s broker=%d peer=%s %s", event, self.broker_id, peer, text)

    async def authenticate(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: object
    ) -> str:
        """The connection's principal once it authenticated; CloseConnection when it must
        be closed (a failure, a request out of turn, the deadline)."""
        ssl_object = writer.get_extra_info("ssl_object")
        try:
            tls_principal = peer_certificate_principal(ssl_object, self.security)
        except NoMatchingRuleError as err:
            raise CloseConnection(f"no principal for the client certificate: {err}") from None
        if not self.security.sasl:
            if tls_principal != ANONYMOUS_PRINCIPAL:
                self._log(logging.INFO, "kafka_authenticated", peer, principal=repr(tls_principal))
            return tls_principal
        try:
            async with asyncio.timeout(self.timeout_s):
                exchange = _SaslExchange(self, reader, writer)
                principal = await exchange.run()
        except TimeoutError:
            raise CloseConnection(
                f"no authentication within {self.timeout_s:g}s of connecting"
            ) from None
        self._log(
            logging.INFO,
            "kafka_authenticated",
            peer,
            principal=repr(principal),
            mechanism=exchange.mechanism,
        )
        return principal


class _SaslExchange:
    """The SASL exchange of one connection (the states of Kafka's authenticator)."""

    def __init__(
        self,
        owner: ListenerAuthenticator,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.owner = owner
        self.reader = reader
        self.writer = writer
        self.mechanism = ""
        self.scram: ScramServer | None = None
        self.principal: str | None = None

    async def _frame(self) -> bytes:
        size = int.from_bytes(await self.reader.readexactly(4), "big", signed=True)
        if size < 0 or size > MAX_UNAUTHENTICATED_FRAME:
            raise CloseConnection(
                f"an unauthenticated frame of {size} bytes (sasl.server.max.receive.size is "
                f"{MAX_UNAUTHENTICATED_FRAME})"
            )
        return await self.reader.readexactly(size)

    async def _reply(self, api_key: int, version: int, correlation_id: int, tree: Tree) -> None:
        schema = response_schema(api_key, version)
        assert schema is not None
        self.writer.write(encode_response(schema, correlation_id, tree))
        await self.writer.drain()

    async def run(self) -> str:
        while True:
            frame = await self._frame()
            try:
                api_key, version, correlation_id = peek_header(frame)
            except MalformedFrameError as err:
                raise CloseConnection(str(err)) from err
            if api_key == API_VERSIONS and not self.mechanism:
                await self._api_versions(frame, version, correlation_id)
            elif api_key == SASL_HANDSHAKE and not self.mechanism:
                request = self._decode(frame, api_key, version)
                await self._handshake(request)
                if version == 0:
                    return await self._unwrapped()
            elif api_key == SASL_AUTHENTICATE and self.mechanism:
                request = self._decode(frame, api_key, version)
                token = await self._step(bytes(request.body.auth_bytes), request)
                await self._reply(
                    api_key, version, correlation_id, {"error_code": 0, "auth_bytes": token}
                )
                if self.principal is not None:
                    return self.principal
            else:
                raise CloseConnection(
                    f"unexpected Kafka request of API {api_key} during SASL "
                    f"{'authentication' if self.mechanism else 'handshake'}"
                )

    def _decode(self, frame: bytes, api_key: int, version: int) -> KafkaRequest:
        low, high = SASL_VERSIONS[api_key]
        schema = request_schema(api_key, version)
        if schema is None or not low <= version <= high:
            raise CloseConnection(f"API {api_key} version {version} is not served")
        try:
            return decode_request(frame, schema)
        except MalformedFrameError as err:
            raise CloseConnection(str(err)) from err

    async def _api_versions(self, frame: bytes, version: int, correlation_id: int) -> None:
        low, high = self.owner.versions[API_VERSIONS]
        if not low <= version <= high or request_schema(API_VERSIONS, version) is None:
            await self._reply(
                API_VERSIONS, 0, correlation_id, self.owner.api_versions_tree(UNSUPPORTED_VERSION)
            )
            return
        self._decode_api_versions(frame, version)
        await self._reply(API_VERSIONS, version, correlation_id, self.owner.api_versions_tree(0))

    @staticmethod
    def _decode_api_versions(frame: bytes, version: int) -> None:
        schema = request_schema(API_VERSIONS, version)
        assert schema is not None
        try:
            decode_request(frame, schema)
        except MalformedFrameError as err:
            raise CloseConnection(str(err)) from err

    async def _handshake(self, request: KafkaRequest) -> None:
        mechanism = str(request.body.mechanism)
        enabled = list(self.owner.security.mechanisms)
        if mechanism not in enabled:
            await self._reply(
                SASL_HANDSHAKE,
                request.api_version,
                request.correlation_id,
                {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled},
            )
            raise CloseConnection(f"unsupported SASL mechanism {mechanism!r}")
        self.mechanism = mechanism
        scram = ScramMechanism.by_name(mechanism)
        self.scram = None if scram is None else ScramServer(scram)
        await self._reply(
            SASL_HANDSHAKE,
            request.api_version,
            request.correlation_id,
            {"error_code": 0, "mechanisms": enabled},
        )

    async def _unwrapped(self) -> str:
        """After a SaslHandshake v0: tokens as bare frames until the exchange is done."""
        while True:
            token = await self._step(await self._frame(), None)
            size = len(token).to_bytes(4, "big")
            self.writer.write(size + token)
            await self.writer.drain()
            if self.principal is not None:
                return self.principal

    async def _step(self, token: bytes, request: KafkaRequest | None) -> bytes:
        """The server's token for the client's ``token``; on a failure the client is told
        (SaslAuthenticate's error) and CloseConnection raised."""
        try:
            if self.scram is None:
                return self._plain(token)
            return await self._scram_step(self.scram, token)
        except ScramAuthenticationError as err:
            message = str(err)
            if not message.startswith("Authentication failed:"):
                message = (
                    "Authentication failed during authentication due to invalid credentials "
                    f"with SASL mechanism {self.mechanism}"
                )
            if request is not None:
                await self._reply(
                    SASL_AUTHENTICATE,
                    request.api_version,
                    request.correlation_id,
                    {"error_code": SASL_AUTHENTICATION_FAILED, "error_message": message},
                )
            raise CloseConnection(f"authentication failed ({self.mechanism}): {err}") from None

    def _plain(self, token: bytes) -> bytes:
        """PLAIN (RFC 4616, Kafka's ``PlainSaslServer``): ``authzid NUL user NUL password``."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise ScramAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise ScramAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise ScramAuthenticationError("Authentication failed: username not specified")
        expected = self.owner.security.plain_users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise ScramAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise ScramAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self.principal = f"User:{user}"
        return b""

    async def _scram_step(self, scram: ScramServer, token: bytes) -> bytes:
        if scram.username is None:
            user = scram.client_first(token)
            lookup = self.owner._scram_credential
            try:
                credential = None if lookup is None else await lookup(user, scram.mechanism)
            except (ZkError, TimeoutError) as err:
                # Kafka's "Credentials could not be obtained": the client may retry.
                logger.warning(
                    "event=scram_credential_unavailable broker=%d user=%r error=%r",
                    self.owner.broker_id,
                    user,
                    str(err),
                )
                raise ScramAuthenticationError(
                    "Authentication failed: Credentials could not be obtained"
                ) from None
            return scram.server_first(credential)
        final = scram.client_final(token)
        self.principal = f"User:{scram.username}"
        return final
