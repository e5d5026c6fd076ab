"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them (KIP-84).

The credential a server keeps is Kafka's ``ScramCredential``: salt, stored key, server key
and iterations, stored in ZooKeeper under the mechanism's name in ``/config/users/<user>``
as ``ScramCredentialUtils`` formats it::

    SCRAM-SHA-256=salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=4096

:class:`ScramServer` is one server side of an exchange (Kafka's ``ScramSaslServer``): the
client-first message names the user, the server answers with its nonce, the salt and the
iterations, the client proves it knows the salted password, the server proves it knows
the server key. The password never reaches the server. See docs/security.md.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from proto.errors import MinibrokerError

__all__ = [
    "ScramAuthenticationError",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "client_proof",
    "format_credential",
    "parse_credential",
    "salted_password",
]


class ScramMechanism(enum.Enum):
    """The two SCRAM mechanisms; the value is KIP-554's mechanism type (Kafka's
    ``ScramMechanism.type()``), as DescribeUserScramCredentials and AlterUserScramCredentials
    carry it."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def by_name(cls, name: str) -> ScramMechanism | None:
        for mechanism in cls:
            if mechanism.mechanism_name == name:
                return mechanism
        return None

    @classmethod
    def by_type(cls, value: int) -> ScramMechanism | None:
        for mechanism in cls:
            if mechanism.value == value:
                return mechanism
        return None


MIN_ITERATIONS = 4096
"""Kafka's ``ScramMechanism.minIterations()`` for both hashes (RFC 7677's 4096)."""
MAX_ITERATIONS = 16384
"""Kafka's upper bound on the iterations of a credential set through AlterUserScramCredentials."""
DEFAULT_ITERATIONS = 4096
"""What ``kafka-configs --add-config 'SCRAM-SHA-256=[password=...]'`` uses without
``iterations=``."""


class ScramAuthenticationError(MinibrokerError):
    """The exchange failed; the message is safe to send to the client (it names no secret
    and does not tell an unknown user from a wrong password)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """Kafka's ``ScramCredential``: what the server stores instead of the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_password(
        cls,
        mechanism: ScramMechanism,
        password: str,
        iterations: int = DEFAULT_ITERATIONS,
        salt: bytes | None = None,
    ) -> ScramCredential:
        """A new credential for ``password`` (a random 32-byte salt unless given)."""
        salt = secrets.token_bytes(32) if salt is None else salt
        return cls.from_salted_password(
            mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
        )

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
    ) -> ScramCredential:
        """The credential of an already salted password (AlterUserScramCredentials sends
        the salted password, never the password)."""
        client_key = _hmac(mechanism, salted, b"Client Key")
        server_key = _hmac(mechanism, salted, b"Server Key")
        stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
        return cls(salt, stored_key, server_key, iterations)


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """RFC 5802's SaltedPassword: Hi(Normalize(password), salt, i), Hi being PBKDF2 with
    HMAC of the mechanism's hash. Kafka does not SASLprep the password: neither do we."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def format_credential(credential: ScramCredential) -> str:
    """``salt=...,stored_key=...,server_key=...,iterations=...`` (``ScramCredentialUtils``)."""
    return (
        f"salt={_b64(credential.salt)},stored_key={_b64(credential.stored_key)},"
        f"server_key={_b64(credential.server_key)},iterations={credential.iterations}"
    )


def parse_credential(text: str) -> ScramCredential:
    """The inverse of :func:`format_credential`; ValueError as Kafka's "Credentials not
    valid" for anything else (a missing or extra key, bad base64, a bad count)."""
    props: dict[str, str] = {}
    for token in text.split(","):
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise ValueError(f"Credentials not valid: {text}")
        props[key] = value
    if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
        raise ValueError(f"Credentials not valid: {text}")
    try:
        return ScramCredential(
            base64.b64decode(props["salt"], validate=True),
            base64.b64decode(props["stored_key"], validate=True),
            base64.b64decode(props["server_key"], validate=True),
            int(props["iterations"]),
        )
    except (binascii.Error, ValueError):
        raise ValueError(f"Credentials not valid: {text}") from None


def client_proof(mechanism: ScramMechanism, salted: bytes, auth_message: bytes) -> bytes:
    """RFC 5802's ClientProof (a client's side; the tests' and the RFC vectors')."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    signature = _hmac(mechanism, stored_key, auth_message)
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


_ATTRIBUTE = re.compile(r"([a-zA-Z][a-zA-Z0-9]*)=(.*)", re.DOTALL)
_PRINTABLE_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")


class ScramServer:
    """The server side of one SCRAM exchange (Kafka's ``ScramSaslServer``).

    :meth:`client_first` parses the client's first message and names the user, whose
    credential (None for an unknown user: the same failure as a wrong password)
    :meth:`server_first` answers with; :meth:`client_final` checks the proof. After it
    :attr:`username` is authenticated. Every failure is a ScramAuthenticationError and ends
    the exchange."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        server_nonce: Callable[[], str] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._server_nonce = server_nonce or (lambda: secrets.token_urlsafe(24))
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.complete = False

    def client_first(self, message: bytes) -> str:
        """Parse the client-first message; returns the user name to look up."""
        text = _text(message)
        # gs2-header: gs2-cbind-flag "," [authzid] ","
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            # "p=": channel binding, which Kafka does not support either
            raise ScramAuthenticationError("Invalid SCRAM client first message")
        authzid = parts[1]
        bare = parts[2]
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise ScramAuthenticationError("Invalid SCRAM client first message")
        username = _sasl_name(attributes[0][1])
        if authzid and (not authzid.startswith("a=") or _sasl_name(authzid[2:]) != username):
            raise ScramAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        nonce = attributes[1][1]
        if not _PRINTABLE_NONCE.fullmatch(nonce):
            raise ScramAuthenticationError("Invalid SCRAM client first message")
        self.username = username
        self._client_first_bare = bare
        self._nonce = nonce
        return username

    def server_first(self, credential: ScramCredential | None) -> bytes:
        """The server-first message, given the looked-up user's credential."""
        if credential is None:
            raise ScramAuthenticationError("Authentication failed: Invalid user credentials")
        if credential.iterations < MIN_ITERATIONS:
            raise ScramAuthenticationError("Authentication failed: Invalid user credentials")
        self._credential = credential
        self._nonce += self._server_nonce()
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode()

    def client_final(self, message: bytes) -> bytes:
        """Check the client's proof; returns the server-final message (``v=...``)."""
        credential = self._credential
        if credential is None:
            raise ScramAuthenticationError("Unexpected SCRAM client final message")
        self._credential = None
        text = _text(message)
        without_proof, sep, proof_attribute = text.rpartition(",p=")
        if not sep:
            raise ScramAuthenticationError("Invalid SCRAM client final message")
        attributes = dict(_attributes(without_proof))
        # Kafka checks that the nonce ends with the server-first's, not that it equals it,
        # and librdkafka depends on it: its final nonce repeats its own before the server's.
        if not attributes.get("r", "").endswith(self._nonce):
            raise ScramAuthenticationError("Invalid client nonce in the final client message.")
        try:
            proof = base64.b64decode(proof_attribute, validate=True)
        except binascii.Error:
            raise ScramAuthenticationError("Invalid SCRAM client final message") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramAuthenticationError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        computed = hashlib.new(self.mechanism.hash_name, client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key):
            raise ScramAuthenticationError("Invalid client credentials")
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        self.complete = True
        return f"v={_b64(server_signature)}".encode()


def _text(message: bytes) -> str:
    try:
        return message.decode()
    except UnicodeDecodeError:
        raise ScramAuthenticationError("Invalid SCRAM message: not UTF-8") from None


def _attributes(text: str) -> list[tuple[str, str]]:
    found = []
    for part in text.split(","):
        match = _ATTRIBUTE.fullmatch(part)
        if match is None:
            raise ScramAuthenticationError("Invalid SCRAM message")
        found.append((match.group(1), match.group(2)))
    return found


def _sasl_name(text: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is an
    error (Kafka's ``ScramFormatter.username``)."""
    if re.search(r"=(?!2C|3D)", text):
        raise ScramAuthenticationError("Invalid username")
    return text.replace("=2C", ",").replace("=3D", "=")


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.hash_name).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
