"""The gRPC face of a broker to its clients and followers: the ``Broker`` service of
proto/wire/minibroker.proto (the controller's ``Control`` service is
:mod:`broker.grpc_listener.control_service`).

This layer only translates: it checks that a request is well formed (a malformed request
as a whole gets INVALID_ARGUMENT with a message a person can act on), turns it into calls on
the :class:`ReplicaManager` and builds the response. Per-partition problems are per-partition
error codes. Nothing a client sends may crash the broker: an unexpected exception while
handling one request is logged and answered with INTERNAL, and the broker goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import cast

import grpc

from broker.auto_topic_creation import AutoTopicCreator
from broker.broker_metrics import RequestMetrics
from broker.coordinator.group_admin import GroupAdmin
from broker.coordinator.group_coordinator import GroupCoordinator, GroupState, coordinator_of
from broker.coordinator.producer_id_manager import ProducerIdManager
from broker.grpc_listener.authorizer import GrpcAuthorizer
from broker.grpc_listener.group_rpcs import GroupRpcs
from broker.grpc_listener.guarded_call import MalformedRequestError, guarded
from broker.grpc_listener.request_parsing import (
    ParsedProduce,
    by_topic,
    current_leader_epoch,
    is_read_committed,
    parse_produce,
    produce_response,
    unique,
)
from broker.grpc_listener.transaction_rpcs import TransactionRpcMethods, TransactionRpcs
from broker.metadata_cache import MetadataCache
from broker.quotas.client_quota_manager import ANONYMOUS, ClientQuotas
from broker.replication.fetch_session import FetchSessionState, FetchSpec
from broker.replication.replica_manager import (
    AppendedRecords,
    FetchPartitionResult,
    ProduceResult,
    ReplicaManager,
)
from broker.request_handlers import (
    DeletedRecords,
    delete_partition_records,
    epoch_end_offset,
    init_producer_id_refusal,
    list_partition_offset,
    metadata_refusals,
    new_producer_id,
    partition_problem,
)
from broker.security.acl_authorizer import ANONYMOUS_SESSION, Session
from proto.process.tuning import release_free_memory_soon
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.wire import minibroker_pb2_grpc as pb_grpc
from proto.zk.acl_bindings import AclOperation

logger = logging.getLogger(__name__)

SESSION_MAX_PENDING_ANSWERS = 64
"""Produce requests of one ProduceSession appended but not yet answered (waiting for their
acks) before the broker stops reading more from that session: gRPC's flow control then
holds the client back, as Kafka's ``queued.max.requests`` does. Well above what a client
keeps in flight (``max.in.flight.requests.per.connection``, 5)."""


async def _delay(throttle_ms: int) -> None:
    if throttle_ms > 0:
        await asyncio.sleep(throttle_ms / 1000)


class BrokerService(TransactionRpcMethods, pb_grpc.BrokerServicer):
    """Produce, Fetch, OffsetsForLeaderEpoch, ListOffsets, Metadata, InitProducerId, and
    the group RPCs of the Kafka listener's group coordinator (ListGroups here, the others in
    :mod:`broker.grpc_listener.group_rpcs`)."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        producer_id_manager: ProducerIdManager,
        *,
        group_coordinator: GroupCoordinator | None = None,
        group_admin: GroupAdmin | None = None,
        producer_id_timeout_ms: int = 6000,
        authorizer: GrpcAuthorizer | None = None,
        request_metrics: RequestMetrics | None = None,
        cluster_id: str = "",
        auto_topic_creator: AutoTopicCreator | None = None,
        client_quotas: ClientQuotas | None = None,
        transaction_rpcs: TransactionRpcs | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.transaction_rpcs = transaction_rpcs
        """The transaction RPCs (:class:`TransactionRpcMethods`); None: none served."""
        self.cluster_id = cluster_id
        """``/cluster/id``, answered in Metadata ("" where none is known, as in tests)."""
        self.auto_topic_creator = auto_topic_creator
        """Creates the missing topics a Metadata request allows (None: never)."""
        self.client_quotas = client_quotas
        """The produce and fetch byte rates of clients (:meth:`_throttle`); None: none."""
        self.request_metrics = request_metrics
        """Where the sessions' requests are counted and timed (the unary methods' are by
        the RequestTiming interceptor)."""
        self.authorizer = authorizer or GrpcAuthorizer.open(replica_manager.broker_id)
        """Replica fetches (``replica_id`` >= 0) only from the broker they name."""
        self.metadata_cache = metadata_cache
        self.producer_id_manager = producer_id_manager
        self.producer_id_timeout_ms = producer_id_timeout_ms
        """How long InitProducerId waits for ZooKeeper when it must reserve a block."""
        self.group_coordinator = group_coordinator or GroupCoordinator(replica_manager.broker_id)
        """The Kafka clients' groups (none without a Kafka listener)."""
        self.group_admin = group_admin
        """ListGroups and DescribeGroups as the Kafka listener answers them (the groups this
        broker coordinates, with their offsets and ZooKeeper members); None: only the
        coordinator's own holdings (a broker without ZooKeeper, in tests)."""
        self.group_rpcs = GroupRpcs(
            replica_manager.broker_id,
            metadata_cache,
            self.group_coordinator,
            group_admin,
            self.authorizer.acls,
        )
        """DescribeGroups, DeleteGroups and DeleteGroupOffsets."""

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.ProduceResponse:
        session = self.authorizer.session(context)
        return await guarded(context, "Produce", lambda: self._produce(request, session))

    def _parse_authorized(self, request: pb.ProduceRequest, session: Session) -> ParsedProduce:
        """A produce request checked, the partitions of topics without Write refused."""
        parsed = parse_produce(request)
        written = {tp.topic for tp in parsed.entries}
        denied = self.authorizer.denied(session, AclOperation.WRITE, written)
        for tp in [tp for tp in parsed.entries if tp.topic in denied]:
            del parsed.entries[tp]
            parsed.refused[tp] = ProduceResult(pb.TOPIC_AUTHORIZATION_FAILED, "no Write ACL")
        return parsed

    async def _produce(self, request: pb.ProduceRequest, session: Session) -> pb.ProduceResponse:
        try:
            return await self._produce_request(request, session)
        finally:
            # A large request leaves its copies in malloc's heap: given back a moment
            # after it is answered (docs/resource-limits.md, "Memory after a spike").
            size = sum(len(p.records) for t in request.topics for p in t.partitions)
            release_free_memory_soon(size)

    async def _produce_request(
        self, request: pb.ProduceRequest, session: Session
    ) -> pb.ProduceResponse:
        parsed = self._parse_authorized(request, session)
        results = await self.replica_manager.append_records(
            request.acks, request.timeout_ms, parsed.entries
        )
        response = produce_response(parsed, results)
        response.throttle_time_ms = self._throttle(request, request.client_id)
        await _delay(response.throttle_time_ms)  # a unary call: its answer is what waits
        return response

    def _throttle(self, message: pb.ProduceRequest | pb.FetchResponse, client_id: str) -> int:
        """Record a produce request's or a consumer's fetch response's bytes against the
        client's byte-rate quota (:mod:`broker.quotas.client_quota_manager`, the Kafka
        listener's quotas) and return its throttle time, 0 within the quota.

        The gRPC door throttles as Kafka did before KIP-219: a unary call's answer is
        delayed by the throttle time, data included; a session writes the answer at once
        and reads the session's next request only after the throttle time (the muted
        channel of KIP-219, per stream). Every client is the user ``ANONYMOUS``, and the
        request-time quota is the Kafka listener's only."""
        quotas = self.client_quotas
        if quotas is None:
            return 0
        manager = quotas.produce if isinstance(message, pb.ProduceRequest) else quotas.fetch
        if not manager.quotas_enabled:
            return 0
        throttle = manager.record(ANONYMOUS, client_id, message.ByteSize())
        manager.throttled(ANONYMOUS, client_id, throttle)
        return throttle

    async def ProduceSession(  # type: ignore[override]  # grpc.aio's context.write style
        self,
        request_iterator: AsyncIterator[pb.ProduceRequest],
        context: grpc.aio.ServicerContext[object, object],
    ) -> None:
        """Produce requests as a stream (see the proto): each request's batches are appended
        before the next request is read, so the session's appends keep its order; each
        answer, tagged with the request's correlation id, is written once its acks are met,
        by a task of its own. A malformed request ends the session (INVALID_ARGUMENT) after
        the answers to the requests before it; the client half-closing ends it once every
        answer is written. Cancelled (the client went away), what was appended stays."""
        answers: set[asyncio.Task[None]] = set()
        session = self.authorizer.session(context)
        writing = asyncio.Lock()
        room = asyncio.Semaphore(SESSION_MAX_PENDING_ANSWERS)

        async def answer(
            request: pb.ProduceRequest,
            parsed: ParsedProduce,
            appended: AppendedRecords,
            started: float,
            throttle_ms: int,
        ) -> None:
            try:
                results = await self.replica_manager.await_acks(appended, request.timeout_ms)
                response = produce_response(parsed, results)
                response.correlation_id = request.correlation_id
                response.throttle_time_ms = throttle_ms
                async with writing:
                    await context.write(response)
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception:
                # A bug, or the call ended under the write: either way this request gets no
                # answer, so the session must end rather than leave the client waiting.
                logger.exception("request failed event=request_error rpc=ProduceSession")
                with contextlib.suppress(grpc.aio.AbortError, Exception):
                    await context.abort(
                        grpc.StatusCode.INTERNAL, "ProduceSession: internal broker error (see log)"
                    )
                return
            finally:
                room.release()
            self._observe("Produce", started)

        async def finish_answers() -> None:
            while answers:
                await asyncio.wait(set(answers))

        try:
            async for request in request_iterator:
                started = time.perf_counter()
                try:
                    parsed = self._parse_authorized(request, session)
                except MalformedRequestError as err:
                    await finish_answers()  # owed to the requests before this one
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"ProduceSession: {err}")
                await room.acquire()
                appended = await guarded(
                    context,
                    "ProduceSession",
                    partial(
                        self.replica_manager.append_to_local_logs, request.acks, parsed.entries
                    ),
                )
                throttle_ms = self._throttle(request, request.client_id)
                task = asyncio.create_task(answer(request, parsed, appended, started, throttle_ms))
                answers.add(task)
                task.add_done_callback(answers.discard)
                await _delay(throttle_ms)  # the session's next request waits it out
            await finish_answers()  # half-closed by the client
        finally:
            for task in answers:
                task.cancel()

    def _observe(self, api: str, started: float) -> None:
        """A request of a session served: counted and timed as the unary method's are."""
        if self.request_metrics is not None:
            self.request_metrics.observe(api, (time.perf_counter() - started) * 1000)

    async def Fetch(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.FetchResponse:
        if request.replica_id >= 0:
            await self.authorizer.authorize_cluster_action(
                context, "Fetch", as_broker=request.replica_id
            )
        session = self.authorizer.session(context)
        response = await guarded(context, "Fetch", lambda: self._fetch(request, session))
        await _delay(response.throttle_time_ms)  # a unary call: its answer is what waits
        return response

    async def _fetch(
        self,
        request: pb.FetchRequest,
        session: Session,
        fetch_session: FetchSessionState | None = None,
    ) -> pb.FetchResponse:
        if request.max_wait_ms < 0 or request.min_bytes < 0 or request.max_bytes < 0:
            raise MalformedRequestError("max_wait_ms, min_bytes and max_bytes must be >= 0")
        if request.incremental and fetch_session is None:
            raise MalformedRequestError("an incremental fetch needs a FetchSession stream")
        read_committed = is_read_committed(request.isolation_level) and request.replica_id < 0
        # A replica's fetch is authorized as a cluster action, a consumer's needs Read.
        read = {t.topic for t in request.topics if request.replica_id < 0}
        denied = self.authorizer.denied(session, AclOperation.READ, read)
        specs: dict[TopicPartition, FetchSpec] = {}
        refused: dict[TopicPartition, FetchPartitionResult] = {}
        order: list[TopicPartition] = []
        for topic in request.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition)
                order.append(tp)
                problem = partition_problem(tp)
                if tp.topic in denied:
                    refused[tp] = FetchPartitionResult(pb.TOPIC_AUTHORIZATION_FAILED, "no Read")
                    continue
                if problem is not None:
                    refused[tp] = FetchPartitionResult(problem, f"invalid partition {tp!r}")
                    continue
                if part.fetch_offset < 0 or part.partition_max_bytes < 0:
                    raise MalformedRequestError(
                        f"{tp}: fetch_offset and partition_max_bytes must be >= 0"
                    )
                specs[tp] = FetchSpec(
                    fetch_offset=part.fetch_offset,
                    max_bytes=part.partition_max_bytes,
                    current_leader_epoch=current_leader_epoch(part),
                    log_start_offset=part.log_start_offset,
                    read_committed=read_committed,
                )
        unique("fetch request", order)
        max_bytes = request.max_bytes or sum(s.max_bytes for s in specs.values())
        quotas = self.client_quotas
        if quotas is not None and request.replica_id < 0 and quotas.fetch.quotas_enabled:
            cap = quotas.fetch.max_value_in_window(ANONYMOUS, request.client_id)
            max_bytes = max(min(max_bytes, int(min(cap, 2**31 - 1))), 1)
        if fetch_session is None:
            results = await self.replica_manager.fetch_messages(
                request.replica_id, request.max_wait_ms, request.min_bytes, max_bytes, specs
            )
        else:
            forgotten = [
                TopicPartition(t.topic, p) for t in request.forgotten_topics for p in t.partitions
            ]
            results = await self.replica_manager.fetch_in_session(
                fetch_session, request.max_wait_ms, request.min_bytes, max_bytes, specs, forgotten
            )
            order = [tp for tp in order if tp in refused] + list(results)
        results.update(refused)
        response = pb.FetchResponse(error_code=pb.NONE)
        for name, tps in by_topic(order).items():
            topic_response = response.responses.add(topic=name)
            for tp in tps:
                r = results[tp]
                topic_response.partitions.add(
                    partition_index=tp.partition,
                    error_code=r.error_code,
                    error_message=r.error_message,
                    high_watermark=r.high_watermark,
                    last_stable_offset=r.last_stable_offset,
                    log_start_offset=r.log_start_offset,
                    log_end_offset=r.log_end_offset,
                    current_leader_epoch=r.leader_epoch,
                    records=r.records,
                    aborted_transactions=[
                        pb.AbortedTransaction(
                            producer_id=txn.producer_id, first_offset=txn.first_offset
                        )
                        for txn in r.aborted_transactions or ()
                    ],
                )
        if request.replica_id < 0:  # followers are never throttled, as in Kafka
            response.throttle_time_ms = self._throttle(response, request.client_id)
        return response

    async def FetchSession(  # type: ignore[override]  # grpc.aio's context.write style
        self,
        request_iterator: AsyncIterator[pb.FetchRequest],
        context: grpc.aio.ServicerContext[object, object],
    ) -> None:
        """Fetch requests as a stream (see the proto), each answered in turn exactly as
        :meth:`Fetch` answers it. The first request's ``replica_id`` is the session's: a
        replica's session is authorized once, as that broker, and a request naming another
        replica ends the session with INVALID_ARGUMENT. Incremental requests make the stream
        an incremental fetch session (KIP-227, broker/replication/fetch_session.py)."""
        replica_id: int | None = None
        session = self.authorizer.session(context)
        fetch_session: FetchSessionState | None = None
        try:
            async for request in request_iterator:
                started = time.perf_counter()
                if replica_id is None:
                    replica_id = request.replica_id
                    if replica_id >= 0:
                        await self.authorizer.authorize_cluster_action(
                            context, "FetchSession", as_broker=replica_id
                        )
                elif request.replica_id != replica_id:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"FetchSession: a session fetches for one replica_id: it began as "
                        f"{replica_id}, this request says {request.replica_id}",
                    )
                if request.incremental and fetch_session is None:
                    fetch_session = self.replica_manager.open_fetch_session(replica_id)
                elif not request.incremental and fetch_session is not None:
                    self.replica_manager.close_fetch_session(fetch_session)
                    fetch_session = None
                response = await guarded(
                    context, "FetchSession", partial(self._fetch, request, session, fetch_session)
                )
                await context.write(response)
                self._observe("Fetch", started)
                await _delay(response.throttle_time_ms)  # the next request waits it out
        finally:
            if fetch_session is not None:
                self.replica_manager.close_fetch_session(fetch_session)

    async def OffsetsForLeaderEpoch(
        self,
        request: pb.OffsetsForLeaderEpochRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.OffsetsForLeaderEpochResponse:
        session = self.authorizer.session(context)

        async def handle() -> pb.OffsetsForLeaderEpochResponse:
            response = pb.OffsetsForLeaderEpochResponse()
            denied = self.authorizer.replica_or_denied(session, {t.topic for t in request.topics})
            for topic in request.topics:
                topic_response = response.topics.add(topic=topic.topic)
                for part in topic.partitions:
                    tp = TopicPartition(topic.topic, part.partition)
                    if topic.topic in denied:
                        code, epoch, end = int(pb.TOPIC_AUTHORIZATION_FAILED), -1, -1
                    else:
                        code, epoch, end = epoch_end_offset(
                            self.replica_manager,
                            tp,
                            current_leader_epoch(part),
                            part.leader_epoch,
                        )
                    topic_response.partitions.add(
                        error_code=code, partition=tp.partition, leader_epoch=epoch, end_offset=end
                    )
            return response

        return await guarded(context, "OffsetsForLeaderEpoch", handle)

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.ListOffsetsResponse:
        session = self.authorizer.session(context)

        async def handle() -> pb.ListOffsetsResponse:
            read_committed = is_read_committed(request.isolation_level)
            response = pb.ListOffsetsResponse()
            topics = {t.name for t in request.topics}
            denied = (
                self.authorizer.replica_or_denied(session, topics)
                if request.replica_id >= 0
                else self.authorizer.denied(session, AclOperation.DESCRIBE, topics)
            )
            for topic in request.topics:
                topic_response = response.topics.add(name=topic.name)
                for part in topic.partitions:
                    tp = TopicPartition(topic.name, part.partition_index)
                    if topic.name in denied:
                        topic_response.partitions.add(
                            partition_index=tp.partition,
                            error_code=pb.TOPIC_AUTHORIZATION_FAILED,
                            offset=-1,
                            timestamp=-1,
                            leader_epoch=-1,
                        )
                        continue
                    code, offset, timestamp, epoch = await list_partition_offset(
                        self.replica_manager,
                        tp,
                        current_leader_epoch(part),
                        part.timestamp,
                        request.replica_id,
                        read_committed=read_committed,
                    )
                    topic_response.partitions.add(
                        partition_index=tp.partition,
                        error_code=code,
                        offset=offset,
                        timestamp=timestamp,
                        leader_epoch=epoch,
                    )
            return response

        return await guarded(context, "ListOffsets", handle)

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.MetadataResponse:
        session = self.authorizer.session(context)

        async def handle() -> pb.MetadataResponse:
            cache = self.metadata_cache
            response = pb.MetadataResponse(
                controller_id=cache.controller_id, cluster_id=self.cluster_id
            )
            for b in cache.brokers():
                endpoint = response.brokers.add(node_id=b.broker_id, host=b.host, port=b.port)
                if b.kafka_endpoint is not None:
                    endpoint.kafka_host, endpoint.kafka_port = b.kafka_endpoint
            names = list(request.topics) or sorted(cache.topics())
            names, refused = metadata_refusals(
                self.authorizer.acls,
                session,
                names,
                listing_all=not request.topics,
                missing=[n for n in names if not cache.partitions_of(n)],
                may_create=request.allow_auto_topic_creation,
            )
            for name in sorted(refused):
                response.topics.add(name=name, error_code=pb.TOPIC_AUTHORIZATION_FAILED)
            unknown = [
                n for n in names if topic_name_problem(n) is not None or not cache.partitions_of(n)
            ]
            missing: dict[str, int] = {}
            if unknown and self.auto_topic_creator is not None:
                missing = await self.auto_topic_creator.answer_missing(
                    unknown, request.allow_auto_topic_creation
                )
            for name in names:
                partitions = cache.partitions_of(name)
                if topic_name_problem(name) is not None:
                    response.topics.add(name=name, error_code=pb.INVALID_TOPIC)
                    continue
                if not partitions:
                    code = missing.get(name, pb.UNKNOWN_TOPIC_OR_PARTITION)
                    response.topics.add(name=name, error_code=code)
                    continue
                topic = response.topics.add(name=name, error_code=pb.NONE)
                live = {b.broker_id for b in cache.brokers()}
                for index in sorted(partitions):
                    info = partitions[index]
                    leader_live = info.leader >= 0 and (not live or info.leader in live)
                    topic.partitions.add(
                        error_code=pb.NONE if leader_live else pb.LEADER_NOT_AVAILABLE,
                        partition_index=index,
                        leader_id=info.leader,
                        leader_epoch=info.leader_epoch,
                        replica_nodes=info.replicas,
                        isr_nodes=info.isr,
                        offline_replicas=info.offline_replicas,
                    )
            return response

        return await guarded(context, "Metadata", handle)

    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.InitProducerIdResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context, "InitProducerId", lambda: self._init_producer_id(request, session)
        )

    async def _init_producer_id(
        self, request: pb.InitProducerIdRequest, session: Session
    ) -> pb.InitProducerIdResponse:
        if request.transactional_id:
            return await self._rpcs().init_producer_id(request, session)
        refusal = init_producer_id_refusal(self.authorizer.acls, session, None)
        if refusal is not None:
            return pb.InitProducerIdResponse(
                error_code=cast(pb.ErrorCode.ValueType, refusal), producer_id=-1, producer_epoch=-1
            )
        code, producer_id = await new_producer_id(
            self.producer_id_manager, self.replica_manager.broker_id, self.producer_id_timeout_ms
        )
        if code != pb.NONE:
            return pb.InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)
        return pb.InitProducerIdResponse(
            error_code=pb.NONE, producer_id=producer_id, producer_epoch=0
        )

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.ListGroupsResponse:
        session = self.authorizer.session(context)
        return await guarded(context, "ListGroups", lambda: self._list_groups(request, session))

    async def _list_groups(
        self, request: pb.ListGroupsRequest, session: Session = ANONYMOUS_SESSION
    ) -> pb.ListGroupsResponse:
        states = {s.value.lower(): s for s in GroupState if s is not GroupState.DEAD}
        unknown = sorted({f for f in request.states_filter if f.lower() not in states})
        if unknown:
            raise MalformedRequestError(
                f"unknown group state(s) {', '.join(map(repr, unknown))} in states_filter "
                f"(expected {', '.join(s.value for s in states.values())})"
            )
        wanted = [states[f.lower()] for f in request.states_filter]
        code: int = pb.NONE
        if self.group_admin is None:
            listed = self.group_coordinator.list_groups(wanted)
        else:
            code, listed = await self.group_admin.list_groups([s.value for s in wanted])
        response = pb.ListGroupsResponse(error_code=cast(pb.ErrorCode.ValueType, code))
        for group in self.authorizer.describable_groups(session, listed):
            coordinator = coordinator_of(group.group_id, self.metadata_cache)
            response.groups.add(
                group_id=group.group_id,
                protocol_type=group.protocol_type,
                group_state=group.state.value,
                coordinator_id=-1 if coordinator is None else coordinator,
            )
        return response

    async def DescribeGroups(
        self, request: pb.DescribeGroupsRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.DescribeGroupsResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context, "DescribeGroups", lambda: self.group_rpcs.describe_groups(request, session)
        )

    async def DeleteGroups(
        self, request: pb.DeleteGroupsRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.DeleteGroupsResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context, "DeleteGroups", lambda: self.group_rpcs.delete_groups(request, session)
        )

    async def DeleteGroupOffsets(
        self,
        request: pb.DeleteGroupOffsetsRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.DeleteGroupOffsetsResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context,
            "DeleteGroupOffsets",
            lambda: self.group_rpcs.delete_group_offsets(request, session),
        )

    async def FetchGroupOffsets(
        self,
        request: pb.FetchGroupOffsetsRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.FetchGroupOffsetsResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context,
            "FetchGroupOffsets",
            lambda: self.group_rpcs.fetch_group_offsets(request, session),
        )

    async def CommitGroupOffsets(
        self,
        request: pb.CommitGroupOffsetsRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.CommitGroupOffsetsResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context,
            "CommitGroupOffsets",
            lambda: self.group_rpcs.commit_group_offsets(request, session),
        )

    async def DeleteRecords(
        self, request: pb.DeleteRecordsRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.DeleteRecordsResponse:
        session = self.authorizer.session(context)
        return await guarded(
            context, "DeleteRecords", lambda: self._delete_records(request, session)
        )

    async def _delete_records(
        self, request: pb.DeleteRecordsRequest, session: Session
    ) -> pb.DeleteRecordsResponse:
        asked = [
            (TopicPartition(topic.name, part.partition_index), part.offset)
            for topic in request.topics
            for part in topic.partitions
        ]
        unique("DeleteRecords", [tp for tp, _ in asked])
        offsets = dict(asked)
        denied = self.authorizer.denied(session, AclOperation.DELETE, {tp.topic for tp, _ in asked})
        results = await delete_partition_records(
            self.replica_manager,
            {tp: o for tp, o in offsets.items() if tp.topic not in denied},
            max(request.timeout_ms, 0),
        )
        for tp in offsets:
            if tp.topic in denied:
                results[tp] = DeletedRecords(pb.TOPIC_AUTHORIZATION_FAILED, -1, "no Delete")
        response = pb.DeleteRecordsResponse()
        for topic, tps in by_topic(list(results)).items():
            entry = response.topics.add(name=topic)
            for tp in tps:
                r = results[tp]
                entry.partitions.add(
                    partition_index=tp.partition,
                    error_code=r.error_code,
                    low_watermark=r.low_watermark,
                    error_message=r.error_message,
                )
        return response
