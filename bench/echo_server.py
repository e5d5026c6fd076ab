"""A gRPC echo server for the side-by-side ceilings: ``python -m bench.echo_server PORT``.

Raw bytes in, the same bytes out, over grpc.aio on uvloop as the brokers run it, as a
unary method (``/bench.Echo/Unary``) and a bidirectional stream (``/bench.Echo/Stream``).
No protobuf (identity serializers), no work per message: what is left is the price of a
gRPC message on this machine, the ceiling of any service built on it. A separate process,
as a broker is, so the client and the server each have their own GIL.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import grpc
import uvloop

SERVICE = "bench.Echo"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


async def _unary(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


async def _stream(
    requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]
) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


async def serve(port: int) -> None:
    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(_unary),
            "Stream": grpc.stream_stream_rpc_method_handler(_stream),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
