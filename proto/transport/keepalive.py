"""HTTP/2 keepalive settings shared by every gRPC channel and server of the cluster.

A network partition that drops packets (no FIN, no RST) leaves a TCP connection looking
alive; without keepalive pings a follower's fetch or a controller's LeaderAndIsr sent into
it waits out its whole deadline, and the next request is queued behind it on the same
dead connection. With pings every ``KEEPALIVE_TIME_MS`` and a ``KEEPALIVE_TIMEOUT_MS``
answer deadline, a black-holed connection is dropped within about ten seconds and gRPC
reconnects (Kafka gets the same from its ``connections.max.idle.ms`` and request timeouts).
The server must accept pings that often, or it answers them with GOAWAY ("too_many_pings").
"""

from __future__ import annotations

__all__ = ["CLIENT_KEEPALIVE_OPTIONS", "SERVER_KEEPALIVE_OPTIONS"]

KEEPALIVE_TIME_MS = 5000
KEEPALIVE_TIMEOUT_MS = 5000

CLIENT_KEEPALIVE_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]

SERVER_KEEPALIVE_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
    ("grpc.http2.max_ping_strikes", 0),
]
