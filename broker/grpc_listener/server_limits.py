"""The gRPC listener's resource limits, as gRPC core's channel arguments
(docs/resource-limits.md).

- ``connections.handshake.timeout.ms`` -> ``grpc.server_handshake_timeout_ms``: a connection
  must finish its TLS handshake and HTTP/2 preface within it, or gRPC closes it. gRPC's
  own default is 120 s, for which 20,000 bare TCP connections (no certificate needed) held
  a TLS broker's descriptors.
- ``connections.max.idle.ms`` -> ``grpc.max_connection_idle_ms``: a connection without a
  call for that long gets a GOAWAY and is closed (a client's channel reconnects when it
  next needs to, as Kafka's clients do after their idle connections are closed). A
  fetcher's ``FetchSession`` stream is a call: it keeps its connection.
- ``max.connections`` -> ``grpc.max_allowed_incoming_connections``: connections past it
  are closed as they are accepted (gRPC cannot make its accept wait as Kafka's acceptor
  does). The count is the gRPC listener's own: each listener has ``max.connections``.

gRPC has no limit per client address: ``max.connections.per.ip`` applies to the Kafka
listener only. Memory per request is bounded by ``grpc.max_receive_message_length``
(``socket.request.max.bytes``), set beside these.
"""

from __future__ import annotations

from proto.config.broker_config import BrokerConfig

__all__ = ["grpc_server_limits"]

_INT32_MAX = 2**31 - 1


def grpc_server_limits(config: BrokerConfig) -> list[tuple[str, int]]:
    """The channel arguments of the broker's gRPC server for ``config``'s limits."""
    options = [
        ("grpc.server_handshake_timeout_ms", config.connections_handshake_timeout_ms),
        ("grpc.max_connection_idle_ms", min(config.connections_max_idle_ms, _INT32_MAX)),
    ]
    if config.max_connections < _INT32_MAX:
        options.append(("grpc.max_allowed_incoming_connections", config.max_connections))
    return options
