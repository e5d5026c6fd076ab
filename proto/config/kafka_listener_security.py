"""The Kafka listener's security, under Kafka's property names (docs/security.md).

The Kafka listener's name is ``KAFKA`` (its endpoint in ``/brokers/ids/<id>`` is
``KAFKA://host:port``), so its security protocol is the ``KAFKA`` entry of Kafka's
``listener.security.protocol.map`` and its own settings take Kafka's
``listener.name.kafka.`` prefix::

    kafka.port=9093
    listener.security.protocol.map=GRPC:SSL,KAFKA:SASL_SSL
    sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
    listener.name.kafka.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.\\
        PlainLoginModule required user_admin="admin-secret" user_alice="alice-secret";

The protocols are Kafka's: ``PLAINTEXT`` (the default), ``SSL`` (TLS with the broker's
``ssl.keystore.location``; with ``ssl.client.auth=required`` the principal is the client
certificate's subject mapped by ``ssl.principal.mapping.rules``), ``SASL_PLAINTEXT`` and
``SASL_SSL`` (the mechanisms of ``sasl.enabled.mechanisms``: PLAIN against the JAAS
``user_<name>="<password>"`` entries, SCRAM-SHA-256 and SCRAM-SHA-512 against the
credentials in ZooKeeper's ``/config/users/<name>``). As in Kafka, a SASL_SSL listener
asks for no client certificate unless ``listener.name.kafka.ssl.client.auth`` says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from proto.transport.ssl_principal import SslPrincipalMapper

__all__ = [
    "KAFKA_LISTENER_PREFIX",
    "PLAIN",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "KafkaListenerSecurity",
    "listener_protocols",
    "parse_jaas_users",
]

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
"""Kafka's ``SecurityProtocol`` names."""
PLAIN = "PLAIN"
SASL_MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")
"""What ``sasl.enabled.mechanisms`` may name here (Kafka's default, GSSAPI, is not one)."""
KAFKA_LISTENER_PREFIX = "listener.name.kafka."
_LISTENER_KEYS = (
    "ssl.client.auth",
    "sasl.enabled.mechanisms",
    *(f"{m.lower()}.sasl.jaas.config" for m in SASL_MECHANISMS),
)
"""The ``listener.name.kafka.`` properties read here."""
_PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_JAAS = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'\s*([^\s=]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^\s";]+)')


def listener_protocols(text: str) -> dict[str, str]:
    """``listener.security.protocol.map`` (``GRPC:SSL,KAFKA:SASL_SSL``) as a dict; the
    listener names are upper-cased, as Kafka's ``ListenerName.normalised``."""
    result: dict[str, str] = {}
    for entry in text.split(","):
        if not entry.strip():
            continue
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"invalid value for listener.security.protocol.map: {entry.strip()!r} "
                f"(LISTENER:PROTOCOL, the protocol one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name not in ("GRPC", "KAFKA"):
            raise ValueError(
                f"invalid value for listener.security.protocol.map: listener {name} "
                "(minibroker's listeners are GRPC, set by ssl.keystore.location, and KAFKA, "
                "the kafka.port listener)"
            )
        result[name] = protocol
    return result


def parse_jaas_users(text: str, prop: str) -> dict[str, str]:
    """The ``user_<name>="<password>"`` options of a PlainLoginModule JAAS entry (Kafka's
    ``PlainServerCallbackHandler`` reads them); ValueError naming ``prop`` for a text that
    is not one JAAS login module entry."""
    match = _JAAS.fullmatch(text)
    if match is None:
        raise ValueError(
            f"invalid value for {prop}: expected '<LoginModule> required key=\"value\" ...;'"
        )
    module, options = match.group(1), match.group(3)
    if module not in (_PLAIN_LOGIN_MODULE, _SCRAM_LOGIN_MODULE):
        raise ValueError(f"invalid value for {prop}: login module {module} is not supported")
    users: dict[str, str] = {}
    position = 0
    while position < len(options.rstrip()):
        option = _JAAS_OPTION.match(options, position)
        if option is None:
            raise ValueError(f"invalid value for {prop}: cannot parse {options[position:]!r}")
        value = option.group(3) if option.group(3) is not None else option.group(2)
        value = re.sub(r"\\(.)", r"\1", value)
        if option.group(1).startswith("user_"):
            users[option.group(1)[len("user_") :]] = value
        position = option.end()
    return users


@dataclass(frozen=True)
class KafkaListenerSecurity:
    """How the Kafka listener authenticates its clients (from a broker's config)."""

    protocol: str = PLAINTEXT
    mechanisms: tuple[str, ...] = ()
    """``sasl.enabled.mechanisms``, with a SASL protocol."""
    plain_users: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """PLAIN's users and passwords, from the JAAS config."""
    client_auth: str = "none"
    """``ssl.client.auth`` on this listener: ``required``, ``requested`` or ``none``."""
    principal_mapper: SslPrincipalMapper = field(default_factory=SslPrincipalMapper)

    @property
    def tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    @classmethod
    def from_properties(
        cls,
        protocol: str,
        *,
        sasl_enabled_mechanisms: str,
        sasl_jaas_config: str,
        ssl_client_auth: str,
        ssl_principal_mapping_rules: str,
        listener_properties: Mapping[str, str],
        tls_enabled: bool,
    ) -> KafkaListenerSecurity:
        """Check and gather the listener's settings; ValueError naming the property."""
        for key in listener_properties:
            if key[len(KAFKA_LISTENER_PREFIX) :] not in _LISTENER_KEYS:
                raise ValueError(
                    f"unknown broker property {key!r} (the Kafka listener's are "
                    f"{', '.join(KAFKA_LISTENER_PREFIX + k for k in _LISTENER_KEYS)})"
                )
        if protocol in (SSL, SASL_SSL) and not tls_enabled:
            raise ValueError(
                f"listener.security.protocol.map: KAFKA:{protocol} needs the broker's "
                "ssl.keystore.location and ssl.truststore.location"
            )
        if protocol == PLAINTEXT and tls_enabled:
            # A PLAINTEXT Kafka listener would be a door around every certificate check.
            raise ValueError(
                "invalid value for kafka.port: this broker is authenticated "
                "(ssl.keystore.location is set) and its Kafka listener is PLAINTEXT; set "
                "listener.security.protocol.map=KAFKA:SSL or KAFKA:SASL_SSL (docs/security.md)"
            )
        if protocol == SASL_PLAINTEXT and tls_enabled:
            raise ValueError(
                "invalid value for listener.security.protocol.map: KAFKA:SASL_PLAINTEXT on an "
                "authenticated broker would send passwords in the clear; use KAFKA:SASL_SSL"
            )
        client_auth = listener_properties.get(
            KAFKA_LISTENER_PREFIX + "ssl.client.auth",
            ssl_client_auth if protocol == SSL else "none",
        ).strip()
        if client_auth not in ("required", "requested", "none"):
            raise ValueError(
                f"invalid value for listener.name.kafka.ssl.client.auth: {client_auth!r}"
            )
        try:
            mapper = SslPrincipalMapper(ssl_principal_mapping_rules or "DEFAULT")
        except ValueError as err:
            raise ValueError(f"invalid value for ssl.principal.mapping.rules: {err}") from None
        if protocol not in (SASL_PLAINTEXT, SASL_SSL):
            return cls(protocol, client_auth=client_auth, principal_mapper=mapper)
        mechanisms_text = listener_properties.get(
            KAFKA_LISTENER_PREFIX + "sasl.enabled.mechanisms", sasl_enabled_mechanisms
        )
        mechanisms = tuple(m.strip().upper() for m in mechanisms_text.split(",") if m.strip())
        if not mechanisms or any(m not in SASL_MECHANISMS for m in mechanisms):
            raise ValueError(
                f"invalid value for sasl.enabled.mechanisms: {mechanisms_text!r} (a "
                f"{protocol} listener needs one or more of {', '.join(SASL_MECHANISMS)}; "
                "minibroker has no GSSAPI, Kafka's default)"
            )
        users: dict[str, str] = {}
        if PLAIN in mechanisms:
            prop = KAFKA_LISTENER_PREFIX + "plain.sasl.jaas.config"
            jaas = listener_properties.get(prop)
            if jaas is None:
                prop, jaas = "sasl.jaas.config", sasl_jaas_config
            if not jaas:
                raise ValueError(
                    "sasl.enabled.mechanisms names PLAIN: its users are the user_<name>="
                    '"<password>" entries of listener.name.kafka.plain.sasl.jaas.config '
                    "(or sasl.jaas.config), which is not set"
                )
            users = parse_jaas_users(jaas, prop)
        return cls(protocol, mechanisms, MappingProxyType(users), client_auth, mapper)
