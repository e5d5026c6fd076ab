"""SCRAM (RFC 5802, RFC 7677's test vector), Kafka's credential format, and Kafka's
``ssl.principal.mapping.rules`` (the cases of Kafka's SslPrincipalMapperTest)."""

from __future__ import annotations

import base64

import pytest

from proto.transport.scram import (
    ScramAuthenticationError,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    client_proof,
    format_credential,
    parse_credential,
    salted_password,
)
from proto.transport.ssl_principal import NoMatchingRuleError, SslPrincipalMapper

SHA256 = ScramMechanism.SCRAM_SHA_256
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
NONCE = "rOprNGfwEbeRWgbNEkqO" + SERVER_NONCE


def test_rfc_7677_test_vector() -> None:
    server = ScramServer(SHA256, server_nonce=lambda: SERVER_NONCE)
    assert server.client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == "user"
    credential = ScramCredential.from_password(SHA256, "pencil", 4096, SALT)
    first = server.server_first(credential)
    assert first == f"r={NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    final = server.client_final(
        f"c=biws,r={NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode()
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete
    assert server.username == "user"


def test_our_client_proof_is_the_rfc_s() -> None:
    salted = salted_password(SHA256, "pencil", SALT, 4096)
    auth = (
        f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
        f"c=biws,r={NONCE}"
    ).encode()
    proof = base64.b64encode(client_proof(SHA256, salted, auth)).decode()
    assert proof == "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_a_wrong_password_or_an_unknown_user_fails_alike(mechanism: ScramMechanism) -> None:
    credential = ScramCredential.from_password(mechanism, "right")
    wrong = salted_password(mechanism, "wrong", credential.salt, credential.iterations)
    server = ScramServer(mechanism, server_nonce=lambda: "s")
    server.client_first(b"n,,n=alice,r=c")
    first = server.server_first(credential).decode()
    bare = "c=biws,r=cs"
    proof = client_proof(mechanism, wrong, f"n=alice,r=c,{first},{bare}".encode())
    with pytest.raises(ScramAuthenticationError):
        server.client_final(f"{bare},p={base64.b64encode(proof).decode()}".encode())
    unknown = ScramServer(mechanism)
    unknown.client_first(b"n,,n=bob,r=c")
    with pytest.raises(ScramAuthenticationError, match="Invalid user credentials"):
        unknown.server_first(None)


def test_the_client_messages_are_checked() -> None:
    for bad in (b"p=tls-unique,,n=u,r=c", b"n,,r=c,n=u", b"n,a=other,n=u,r=c", b"n,,n=a=b,r=c"):
        with pytest.raises(ScramAuthenticationError):
            ScramServer(SHA256).client_first(bad)
    server = ScramServer(SHA256, server_nonce=lambda: "s")
    assert server.client_first(b"n,a=a=2Cb,n=a=2Cb,r=c,tokenauth=false") == "a,b"
    server.server_first(ScramCredential.from_password(SHA256, "x"))
    with pytest.raises(ScramAuthenticationError, match="nonce"):
        server.client_final(b"c=biws,r=other,p=AAAA")


def test_kafka_s_credential_format_round_trips() -> None:
    credential = ScramCredential.from_password(ScramMechanism.SCRAM_SHA_512, "p", 8192)
    text = format_credential(credential)
    assert text.startswith("salt=")
    assert text.endswith(",iterations=8192")
    assert [part.split("=", 1)[0] for part in text.split(",")] == [
        "salt",
        "stored_key",
        "server_key",
        "iterations",
    ]
    assert parse_credential(text) == credential
    for bad in ("salt=AA==,stored_key=AA==,server_key=AA==", text + ",extra=1", "x"):
        with pytest.raises(ValueError, match="Credentials not valid"):
            parse_credential(bad)


def test_principal_mapping_rules_as_kafka_s() -> None:
    rules = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT"
    )
    assert rules.name("CN=kafka1,OU=ServiceUsers,O=Org,C=US") == "kafka1"
    assert rules.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Palo Alto,ST=CA,C=US") == (
        "duke@javasoft"
    )
    assert rules.name("cn=duke,ou=JavaSoft") == "DUKE"
    assert rules.name("OU=JavaSoft,O=Sun Microsystems") == "OU=JavaSoft,O=Sun Microsystems"
    assert SslPrincipalMapper().name("CN=alice,O=x") == "CN=alice,O=x"
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$1 $2/").name("CN=a") == "a $2"  # $2: literal
    with pytest.raises(NoMatchingRuleError):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")
    for bad in ("RULE:x", "DEFAULT, RULE:a/b/Q", "KAFKA"):
        with pytest.raises(ValueError, match="Invalid rule"):
            SslPrincipalMapper(bad)


def test_a_final_nonce_that_repeats_the_client_s_is_accepted_as_by_kafka() -> None:
    # librdkafka sends its own nonce again before the server's; Kafka's ScramSaslServer
    # only checks that the final nonce ends with the server-first's.
    credential = ScramCredential.from_password(SHA256, "pw")
    server = ScramServer(SHA256, server_nonce=lambda: "S")
    server.client_first(b"n,,n=u,r=C")
    first = server.server_first(credential).decode()
    bare = "c=biws,r=CCS"
    salted = salted_password(SHA256, "pw", credential.salt, credential.iterations)
    proof = client_proof(SHA256, salted, f"n=u,r=C,{first},{bare}".encode())
    assert server.client_final(f"{bare},p={base64.b64encode(proof).decode()}".encode())
