"""The ``Broker`` service's transaction RPCs answered UNIMPLEMENTED, for the stand-in
brokers of unit tests that serve a follower or a producer and never a transaction."""

from __future__ import annotations

from typing import Any

import grpc

from proto.wire import minibroker_pb2 as pb

__all__ = ["NoTransactionRpcs"]

Context = grpc.aio.ServicerContext[Any, Any]


class NoTransactionRpcs:
    """Mixed into a ``BrokerServicer`` stand-in before the servicer itself."""

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: Context
    ) -> pb.FindCoordinatorResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no transactions in this test")

    async def AddPartitionsToTxn(
        self, request: pb.AddPartitionsToTxnRequest, context: Context
    ) -> pb.AddPartitionsToTxnResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no transactions in this test")

    async def AddOffsetsToTxn(
        self, request: pb.AddOffsetsToTxnRequest, context: Context
    ) -> pb.AddOffsetsToTxnResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no transactions in this test")

    async def TxnOffsetCommit(
        self, request: pb.TxnOffsetCommitRequest, context: Context
    ) -> pb.TxnOffsetCommitResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no transactions in this test")

    async def EndTxn(self, request: pb.EndTxnRequest, context: Context) -> pb.EndTxnResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no transactions in this test")
