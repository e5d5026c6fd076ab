"""MetadataClient against real in-process gRPC servers: which broker's answer it takes."""

from __future__ import annotations

import asyncio

import grpc

from client.metadata import BrokerConnections, MetadataClient
from proto.wire import minibroker_pb2 as pb


class _Broker:
    """Answers Metadata (its only method) with a fixed response."""

    def __init__(self, response: pb.MetadataResponse) -> None:
        self.response = response
        self.asked = 0

    async def metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.MetadataResponse:
        self.asked += 1
        return self.response


async def _serve(broker: _Broker) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    handler = grpc.unary_unary_rpc_method_handler(
        broker.metadata,
        request_deserializer=pb.MetadataRequest.FromString,
        response_serializer=pb.MetadataResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("minibroker.Broker", {"Metadata": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def test_a_broker_that_has_not_heard_from_the_controller_is_not_the_answer() -> None:
    """A restarted broker's metadata cache is empty until the controller's UpdateMetadata:
    it knows no broker and no topic. Asked first, it made `topics describe` say "unknown
    topic" for a topic the other brokers serve."""
    ready = pb.MetadataResponse(controller_id=2)
    ready.brokers.add(node_id=2, host="127.0.0.1", port=1)
    ready.topics.add(name="kept", error_code=pb.NONE).partitions.add(
        partition_index=0, leader_id=2, replica_nodes=[2], isr_nodes=[2]
    )
    not_ready = pb.MetadataResponse(controller_id=-1)
    not_ready.topics.add(name="kept", error_code=pb.UNKNOWN_TOPIC_OR_PARTITION)

    async def scenario() -> None:
        fresh, ready_broker = _Broker(not_ready), _Broker(ready)
        fresh_server, fresh_port = await _serve(fresh)
        ready_server, ready_port = await _serve(ready_broker)
        connections = BrokerConnections([("127.0.0.1", fresh_port), ("127.0.0.1", ready_port)])
        try:
            metadata = await MetadataClient(connections).refresh(["kept"])
            assert fresh.asked == 1
            assert list(metadata.brokers) == [2]
            assert "kept" in metadata.topics
            # Alone, the broker that is not ready is still an answer (a one-broker cluster
            # that just started): the caller sees what it says.
            alone = BrokerConnections([("127.0.0.1", fresh_port)])
            assert (await MetadataClient(alone).refresh(["kept"])).brokers == {}
            await alone.close()
        finally:
            await connections.close()
            await fresh_server.stop(None)
            await ready_server.stop(None)

    asyncio.run(scenario())
