"""TLS material under Kafka's ssl.* names: loading PEM stores, client properties, principals."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.tls_certs import generate
from proto.config.broker_config import BrokerConfig
from proto.transport.tls import TlsConfig, TlsConfigError, broker_principal, peer_principal

REQUIRED = {"broker.id": "1", "zookeeper.connect": "localhost:2181", "log.dirs": "/tmp/x"}


def test_keystore_holds_the_chain_and_the_key(tmp_path: Path) -> None:
    certs = generate(tmp_path, [1])
    tls = TlsConfig.from_files(certs.ca, certs.broker(1))
    assert tls.cert_pem is not None
    assert tls.cert_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    assert tls.key_pem is not None
    assert b"PRIVATE KEY" in tls.key_pem
    assert b"PRIVATE KEY" not in tls.cert_pem
    assert oct(certs.broker(1).stat().st_mode & 0o777) == "0o600"


def test_a_key_in_its_own_file(tmp_path: Path) -> None:
    certs = generate(tmp_path, [1])
    text = certs.broker(1).read_text()
    split = text.index("-----BEGIN PRIVATE KEY-----")
    (tmp_path / "cert.pem").write_text(text[:split])
    (tmp_path / "key.pem").write_text(text[split:])
    tls = TlsConfig.from_files(certs.ca, tmp_path / "cert.pem", tmp_path / "key.pem")
    assert tls == TlsConfig.from_files(certs.ca, certs.broker(1))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("not a pem", "no CERTIFICATE"),
    ],
)
def test_bad_truststores_are_named(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TlsConfigError, match=message):
        TlsConfig.from_files(path)


def test_a_keystore_without_its_key_is_refused(tmp_path: Path) -> None:
    certs = generate(tmp_path, [1])
    (tmp_path / "chain.pem").write_text(certs.ca.read_text())
    with pytest.raises(TlsConfigError, match="expected one unencrypted PRIVATE KEY, found 0"):
        TlsConfig.from_files(certs.ca, tmp_path / "chain.pem")


def test_client_properties_as_kafka_names_them(tmp_path: Path) -> None:
    certs = generate(tmp_path, [1])
    assert TlsConfig.from_properties({}) is None
    assert TlsConfig.from_properties({"security.protocol": "PLAINTEXT"}) is None
    tls = TlsConfig.from_properties(certs.client_properties())
    assert tls is not None
    assert tls.cert_pem is not None
    with pytest.raises(TlsConfigError, match="SASL_SSL is not supported"):
        TlsConfig.from_properties({"security.protocol": "SASL_SSL"})
    with pytest.raises(TlsConfigError, match=r"needs ssl\.truststore\.location"):
        TlsConfig.from_properties({"security.protocol": "SSL"})


def test_principals_come_from_the_certificate_subject() -> None:
    assert peer_principal({}) is None
    assert peer_principal({"transport_security_type": [b"insecure"]}) is None
    ssl = {"transport_security_type": [b"ssl"]}
    assert peer_principal(ssl) is None  # no client certificate
    assert peer_principal({**ssl, "x509_subject": [b"CN=broker-2"]}) == broker_principal(2)
    assert peer_principal({**ssl, "x509_common_name": [b"client"]}) == "User:CN=client"


def test_broker_tls_properties(tmp_path: Path) -> None:
    certs = generate(tmp_path, [1, 2])
    config = BrokerConfig.from_properties({**REQUIRED, **certs.broker_properties(1, [1, 2])})
    assert config.tls_enabled
    assert config.ssl_client_auth == "required"
    assert config.super_user_principals == {"User:CN=broker-1", "User:CN=broker-2"}
    assert config.tls() == TlsConfig.from_files(certs.ca, certs.broker(1))
    assert BrokerConfig.from_properties(config.to_properties()) == config
    plain = BrokerConfig.from_properties(REQUIRED)
    assert (plain.tls_enabled, plain.tls()) == (False, None)
    with pytest.raises(ValueError, match=r"ssl\.client\.auth"):
        BrokerConfig.from_properties({**REQUIRED, "ssl.client.auth": "always"})
    with pytest.raises(ValueError, match="go together"):
        BrokerConfig.from_properties({**REQUIRED, "ssl.keystore.location": str(certs.broker(1))})
