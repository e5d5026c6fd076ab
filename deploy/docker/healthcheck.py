#!/opt/minibroker/bin/python
"""The containers' health checks (deploy/docker-compose.yml): exit 0 healthy, 1 not.

    minibroker-healthcheck zookeeper   ruok answers imok and srvr answers (it serves)
    minibroker-healthcheck broker      the broker's Metadata RPC answers and lists the broker
                                       itself: it serves gRPC, is registered in ZooKeeper,
                                       and the controller has sent it the cluster metadata

The broker is found through the entrypoint's variables (MINIBROKER_BROKER_ID,
MINIBROKER_PORT, MINIBROKER_ADVERTISED_HOST). Each check prints one line saying why, which
`docker inspect` shows under State.Health. grpc is imported only by the broker check, so
the ZooKeeper check costs a bare interpreter start.
"""

from __future__ import annotations

import os
import socket
import sys

TIMEOUT_S = 10.0
"""Per connection or RPC; docker-compose.yml gives the whole check 30 s."""


def four_letter_word(host: str, port: int, word: str) -> str:
    with socket.create_connection((host, port), timeout=TIMEOUT_S) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def check_zookeeper(host: str = "127.0.0.1", port: int = 2181) -> str:
    answer = four_letter_word(host, port, "ruok")
    if answer != "imok":
        raise RuntimeError(f"ruok answered {answer!r}")
    srvr = four_letter_word(host, port, "srvr")
    if "This ZooKeeper instance is not currently serving requests" in srvr or not srvr:
        raise RuntimeError("not serving requests")
    mode = next((line for line in srvr.splitlines() if line.startswith("Mode:")), "Mode: ?")
    return f"zookeeper on {host}:{port} serves ({mode})"


def check_broker() -> str:
    from proto.transport.tls import TlsConfig, sync_channel
    from proto.wire import minibroker_pb2 as pb
    from proto.wire import minibroker_pb2_grpc as pb_grpc

    broker_id = int(os.environ["MINIBROKER_BROKER_ID"])
    port = int(os.environ.get("MINIBROKER_PORT") or 9090 + broker_id)
    host = os.environ.get("MINIBROKER_ADVERTISED_HOST") or "127.0.0.1"
    # The TLS variant (docker-compose.tls.yml): ask with the broker's own certificate.
    keystore = os.environ.get("MINIBROKER_CFG_SSL_KEYSTORE_LOCATION")
    truststore = os.environ.get("MINIBROKER_CFG_SSL_TRUSTSTORE_LOCATION")
    tls = TlsConfig.from_files(truststore, keystore) if keystore and truststore else None
    with sync_channel(f"{host}:{port}", tls) as channel:
        response = pb_grpc.BrokerStub(channel).Metadata(pb.MetadataRequest(), timeout=TIMEOUT_S)
    listed = sorted(b.node_id for b in response.brokers)
    if broker_id not in listed:
        raise RuntimeError(f"Metadata from {host}:{port} lists brokers {listed}, not {broker_id}")
    return (
        f"broker {broker_id} serves on {host}:{port}; brokers {listed}, "
        f"controller {response.controller_id}"
    )


def main(argv: list[str]) -> int:
    role = argv[1] if len(argv) > 1 else "broker"
    try:
        if role == "zookeeper":
            message = check_zookeeper()
        elif role == "broker":
            message = check_broker()
        else:
            print(f"usage: {argv[0]} zookeeper|broker", file=sys.stderr)
            return 2
    except Exception as err:  # any failure means "not healthy", said in one line
        print(f"unhealthy: {type(err).__name__}: {err}")
        return 1
    print(message)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
