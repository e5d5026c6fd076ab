"""A throw-away certificate authority and the certificates of a TLS cluster (``cluster up
--tls``, the tests), made with ``cryptography``.

Files, in one directory (keys mode 0600), in Kafka's PEM store layout (:mod:`proto.transport.tls`):

- ``ca.pem``: the CA certificate, every side's ``ssl.truststore.location``;
- ``ca-key.pem``: its key, kept so that more certificates can be signed later;
- ``broker-<id>.pem``: broker ``<id>``'s certificate (subject ``CN=broker-<id>``, the name
  :func:`proto.transport.tls.broker_principal` expects) followed by its key: its
  ``ssl.keystore.location``;
- ``client.pem``: a client's certificate (``CN=client``) and key: not a broker, so it may
  produce and consume but not send control requests or replica fetches.

Every certificate names the hosts it may be reached at (``127.0.0.1``, ``localhost`` and the
given host names) for host-name verification. EC P-256 keys: fast handshakes, small files.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
CLIENT_FILE = "client.pem"
VALIDITY = datetime.timedelta(days=365)
DEFAULT_HOSTS = ("127.0.0.1", "localhost")


_SERVER_AND_CLIENT = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]


def broker_file(broker_id: int) -> str:
    return f"broker-{broker_id}.pem"


@dataclass(frozen=True)
class ClusterCertificates:
    """Where a cluster's TLS files are."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / CA_FILE

    @property
    def client(self) -> Path:
        return self.directory / CLIENT_FILE

    def broker(self, broker_id: int) -> Path:
        return self.directory / broker_file(broker_id)

    def broker_ids(self) -> list[int]:
        """The brokers that have a certificate here."""
        ids = []
        for path in self.directory.glob("broker-*.pem"):
            suffix = path.stem.removeprefix("broker-")
            if suffix.isdigit():
                ids.append(int(suffix))
        return sorted(ids)

    def broker_properties(self, broker_id: int, broker_ids: Iterable[int]) -> dict[str, str]:
        """The TLS properties of broker ``broker_id`` in a cluster of ``broker_ids``."""
        return {
            "ssl.keystore.location": str(self.broker(broker_id)),
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": "required",
            "super.users": ";".join(f"User:CN=broker-{i}" for i in sorted(broker_ids)),
        }

    def client_properties(self, name: str = "client") -> dict[str, str]:
        """Kafka client properties (``--command-config``) for the certificate ``name``."""
        return {
            "security.protocol": "SSL",
            "ssl.truststore.location": str(self.ca),
            "ssl.keystore.location": str(self.directory / f"{name}.pem"),
        }


def generate(
    directory: Path,
    broker_ids: Iterable[int],
    hosts: Iterable[str] = (),
    *,
    clients: Iterable[str] = ("client",),
) -> ClusterCertificates:
    """A new CA in ``directory`` and a certificate for every broker and client."""
    directory.mkdir(parents=True, exist_ok=True)
    names = [*DEFAULT_HOSTS, *(h for h in hosts if h not in DEFAULT_HOSTS)]
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "minibroker throw-away CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write_file(directory / CA_FILE, _pem(ca_cert), private=False)
    write_file(directory / CA_KEY_FILE, _key_pem(ca_key), private=True)
    for broker_id in broker_ids:
        _issue(directory / broker_file(broker_id), f"broker-{broker_id}", names, ca_cert, ca_key)
    for client in clients:
        _issue(directory / f"{client}.pem", client, names, ca_cert, ca_key)
    return ClusterCertificates(directory)


def _issue(
    path: Path,
    common_name: str,
    hosts: list[str],
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
) -> None:
    """A certificate for ``common_name`` valid as server and client, with its key, at
    ``path``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    alt_names: list[x509.GeneralName] = []
    for host in [*hosts, common_name]:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write_file(path, _pem(cert) + _key_pem(key), private=True)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_file(path: Path, data: bytes | str, *, private: bool = True) -> None:
    """Write ``data`` to ``path`` atomically, readable by its owner only unless not
    ``private`` (keys, the ZooKeeper digest, client properties naming them)."""
    if isinstance(data, str):
        data = data.encode()
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)
