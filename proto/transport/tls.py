"""Mutual TLS for every gRPC channel: PEM files under Kafka's ``ssl.*`` property names.

Kafka's PEM stores (``ssl.keystore.type=PEM``): ``ssl.keystore.location`` is one PEM file
holding this side's certificate chain and its unencrypted private key,
``ssl.truststore.location`` the CA certificates that peers' certificates must chain to.
gRPC takes PEM as it is, so nothing is converted. Host names are verified as Kafka's
``ssl.endpoint.identification.algorithm=https`` does: a broker's certificate must name the
address clients dial (``cluster up --tls`` puts 127.0.0.1, localhost and the host name in
its subject alternative names).

A peer's identity is its certificate's subject, as Kafka's default SSL principal builder
makes it: ``User:CN=broker-1``. Brokers are the principals listed in ``super.users``, and
broker N's certificate names ``CN=broker-N`` (:func:`broker_principal`), which is how a
replica fetch's ``replica_id`` is checked against the certificate that sent it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from proto.errors import MinibrokerError

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----\r?\n?", re.DOTALL)


class TlsConfigError(MinibrokerError):
    """A TLS file that is missing, unreadable or not the PEM it must be."""


ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"
"""The principal of a client nothing authenticated (a PLAINTEXT listener's), as Kafka's
``KafkaPrincipal.ANONYMOUS``."""


def broker_principal(broker_id: int) -> str:
    """The principal of broker ``broker_id``'s certificate (its subject ``CN=broker-<id>``)."""
    return f"User:CN=broker-{broker_id}"


@dataclass(frozen=True)
class TlsConfig:
    """The PEM material of one side of a mutual-TLS channel."""

    ca_pem: bytes
    """``ssl.truststore.location``: the CA certificates peers must chain to."""
    cert_pem: bytes | None = None
    """This side's certificate chain (``ssl.keystore.location``); None: no client
    certificate (a server asking for one refuses the handshake)."""
    key_pem: bytes | None = None
    """This side's private key, from the keystore file or its own file."""

    @classmethod
    def from_files(
        cls,
        truststore: Path | str,
        keystore: Path | str | None = None,
        key: Path | str | None = None,
    ) -> TlsConfig:
        """Load ``truststore`` (CA PEM) and ``keystore`` (certificate chain PEM, with the
        private key in it unless ``key`` names the key's own file)."""
        ca = _read_pem(truststore, "ssl.truststore.location")
        if not _blocks(ca, "CERTIFICATE"):
            raise TlsConfigError(f"{truststore}: no CERTIFICATE in the truststore")
        if keystore is None:
            if key is not None:
                raise TlsConfigError("a private key without a certificate (give the keystore)")
            return cls(ca)
        store = _read_pem(keystore, "ssl.keystore.location")
        certs = _blocks(store, "CERTIFICATE")
        if not certs:
            raise TlsConfigError(f"{keystore}: no CERTIFICATE in the keystore")
        keys = _private_keys(_read_pem(key, "the private key") if key is not None else store)
        if len(keys) != 1:
            where = key if key is not None else keystore
            raise TlsConfigError(
                f"{where}: expected one unencrypted PRIVATE KEY, found {len(keys)}"
            )
        return cls(ca, b"".join(certs), keys[0])

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> TlsConfig | None:
        """A client's TLS settings from Kafka's client properties (``--command-config``):
        ``security.protocol=SSL`` with ``ssl.truststore.location`` and, for mutual TLS,
        ``ssl.keystore.location`` (plus minibroker's ``ssl.key.location`` when the key has
        a file of its own). None for ``PLAINTEXT`` (the default)."""
        protocol = properties.get("security.protocol", "PLAINTEXT").upper()
        if protocol == "PLAINTEXT":
            return None
        if protocol != "SSL":
            raise TlsConfigError(
                f"security.protocol={protocol} is not supported (PLAINTEXT or SSL)"
            )
        truststore = properties.get("ssl.truststore.location")
        if not truststore:
            raise TlsConfigError("security.protocol=SSL needs ssl.truststore.location")
        return cls.from_files(
            truststore, properties.get("ssl.keystore.location"), properties.get("ssl.key.location")
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_pem, private_key=self.key_pem, certificate_chain=self.cert_pem
        )

    def server_credentials(self, require_client_auth: bool) -> grpc.ServerCredentials:
        if self.cert_pem is None or self.key_pem is None:
            raise TlsConfigError("a TLS server needs ssl.keystore.location (certificate and key)")
        return grpc.ssl_server_credentials(
            [(self.key_pem, self.cert_pem)],
            root_certificates=self.ca_pem,
            require_client_auth=require_client_auth,
        )


def aio_channel(
    address: str, tls: TlsConfig | None, options: Sequence[tuple[str, object]] = ()
) -> grpc.aio.Channel:
    """An asyncio channel to ``address``: TLS with ``tls``, plaintext without."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, tls.channel_credentials(), options=options)


def sync_channel(
    address: str, tls: TlsConfig | None, options: Sequence[tuple[str, object]] = ()
) -> grpc.Channel:
    """A blocking channel to ``address``: TLS with ``tls``, plaintext without."""
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, tls.channel_credentials(), options=options)


def peer_principal(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The authenticated peer's principal (``User:CN=...``), or None when the channel is
    not TLS or the peer sent no certificate (gRPC's auth context: ``x509_subject``, or only
    ``x509_common_name`` in older gRPC)."""
    if b"ssl" not in list(auth_context.get("transport_security_type", ())):
        return None
    subject = list(auth_context.get("x509_subject", ()))
    if subject:
        return "User:" + subject[0].decode()
    common_name = list(auth_context.get("x509_common_name", ()))
    if common_name:
        return "User:CN=" + common_name[0].decode()
    return None


def _read_pem(path: Path | str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise TlsConfigError(f"cannot read {what} {path}: {err.strerror or err}") from err


def _blocks(pem: bytes, kind: str) -> list[bytes]:
    return [m.group(0) for m in _PEM_BLOCK.finditer(pem) if m.group(1) == kind.encode()]


def _private_keys(pem: bytes) -> list[bytes]:
    if _blocks(pem, "ENCRYPTED PRIVATE KEY"):
        raise TlsConfigError("encrypted private keys are not supported (ssl.key.password)")
    return [
        m.group(0)
        for m in _PEM_BLOCK.finditer(pem)
        if m.group(1) in (b"PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY")
    ]
