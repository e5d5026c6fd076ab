"""The group RPCs of the gRPC ``Broker`` service that act on one group: DescribeGroups,
DeleteGroups, DeleteGroupOffsets, FetchGroupOffsets and CommitGroupOffsets, answered by the
same :class:`~broker.coordinator.group_admin.GroupAdmin` as the Kafka listener's
DescribeGroups, DeleteGroups, OffsetDelete, OffsetFetch and OffsetCommit (one
implementation, two front doors).

DeleteGroups and DeleteGroupOffsets are answered by the group's coordinator only
(NOT_COORDINATOR elsewhere, as Kafka's): ``minibroker consumer-groups`` asks the broker
that DescribeGroups names as the coordinator. A broker without a
:class:`GroupAdmin` (no ZooKeeper, in tests) answers them COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import cast

from broker.coordinator.group_admin import GroupAdmin
from broker.coordinator.group_coordinator import (
    COORDINATOR_NOT_AVAILABLE,
    GroupCoordinator,
    GroupDescription,
    coordinator_of,
)
from broker.coordinator.group_metadata_manager import CommittedOffset
from broker.metadata_cache import MetadataCache
from broker.security.acl_authorizer import ANONYMOUS_SESSION, AclAuthorizer, Session
from proto.topic_partition import TopicPartition, topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.zk.acl_bindings import AclOperation, ResourceType

__all__ = ["GroupRpcs"]


def _code(code: int) -> pb.ErrorCode.ValueType:
    return cast(pb.ErrorCode.ValueType, code)


class GroupRpcs:
    """The group RPCs of one broker."""

    def __init__(
        self,
        broker_id: int,
        metadata_cache: MetadataCache,
        coordinator: GroupCoordinator,
        admin: GroupAdmin | None,
        authorizer: AclAuthorizer | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.coordinator = coordinator
        self.admin = admin
        self.authorizer = authorizer or AclAuthorizer(broker_id, None, enabled=False)
        """Describe on a group to describe it, Delete to delete it or its offsets (as the
        Kafka listener's DescribeGroups, DeleteGroups and OffsetDelete)."""

    def _allowed(self, session: Session, operation: AclOperation, group_id: str) -> bool:
        return self.authorizer.authorize(session, operation, ResourceType.GROUP, group_id)

    def _coordinator_id(self, group_id: str) -> int:
        found = coordinator_of(group_id, self.metadata_cache)
        return -1 if found is None else found

    async def describe_groups(
        self, request: pb.DescribeGroupsRequest, session: Session = ANONYMOUS_SESSION
    ) -> pb.DescribeGroupsResponse:
        response = pb.DescribeGroupsResponse()
        for group_id in request.groups:
            if not self._allowed(session, AclOperation.DESCRIBE, group_id):
                response.groups.add(
                    error_code=pb.GROUP_AUTHORIZATION_FAILED, group_id=group_id, coordinator_id=-1
                )
                continue
            if topic_name_problem(group_id, "group") is not None:
                response.groups.add(
                    error_code=pb.INVALID_REQUEST, group_id=group_id, coordinator_id=-1
                )
                continue
            coordinator = self._coordinator_id(group_id)
            if self.admin is not None and coordinator == self.broker_id:
                code, found = await self.admin.describe_group(group_id)
                if code != pb.NONE:
                    response.groups.add(
                        error_code=_code(code), group_id=group_id, coordinator_id=-1
                    )
                    continue
            else:
                # What this broker holds of a group coordinated elsewhere (it moved away and
                # its members have not found the new coordinator yet), else Dead.
                [found] = self.coordinator.describe_groups([group_id])
            _add_described_group(response, found, coordinator)
        return response

    async def delete_groups(
        self, request: pb.DeleteGroupsRequest, session: Session = ANONYMOUS_SESSION
    ) -> pb.DeleteGroupsResponse:
        response = pb.DeleteGroupsResponse()
        for group_id in dict.fromkeys(request.groups):
            code = COORDINATOR_NOT_AVAILABLE
            if not self._allowed(session, AclOperation.DELETE, group_id):
                code = pb.GROUP_AUTHORIZATION_FAILED
            elif self.admin is not None:
                code = await self.admin.delete_group(group_id)
            response.results.add(group_id=group_id, error_code=_code(code))
        return response

    async def delete_group_offsets(
        self, request: pb.DeleteGroupOffsetsRequest, session: Session = ANONYMOUS_SESSION
    ) -> pb.DeleteGroupOffsetsResponse:
        if not self._allowed(session, AclOperation.DELETE, request.group_id):
            return pb.DeleteGroupOffsetsResponse(error_code=pb.GROUP_AUTHORIZATION_FAILED)
        if self.admin is None:
            return pb.DeleteGroupOffsetsResponse(error_code=_code(COORDINATOR_NOT_AVAILABLE))
        asked = [TopicPartition(t.name, p) for t in request.topics for p in t.partitions]
        result = await self.admin.offset_delete(request.group_id, asked)
        response = pb.DeleteGroupOffsetsResponse(error_code=_code(result.error_code))
        by_topic: dict[str, pb.OffsetDeleteTopicResult] = {}
        for tp, code in result.partitions.items():
            if tp.topic not in by_topic:
                by_topic[tp.topic] = response.topics.add(name=tp.topic)
            by_topic[tp.topic].partitions.add(partition_index=tp.partition, error_code=_code(code))
        return response

    async def fetch_group_offsets(
        self, request: pb.FetchGroupOffsetsRequest, session: Session = ANONYMOUS_SESSION
    ) -> pb.FetchGroupOffsetsResponse:
        """:meth:`GroupAdmin.fetch_offsets`, as the Kafka listener's OffsetFetch answers
        (Describe on the group)."""
        if not self._allowed(session, AclOperation.DESCRIBE, request.group_id):
            return pb.FetchGroupOffsetsResponse(error_code=pb.GROUP_AUTHORIZATION_FAILED)
        if self.admin is None:
            return pb.FetchGroupOffsetsResponse(error_code=_code(COORDINATOR_NOT_AVAILABLE))
        asked = [TopicPartition(t.name, p) for t in request.topics for p in t.partitions] or None
        fetched = await self.admin.fetch_offsets(request.group_id, asked)
        response = pb.FetchGroupOffsetsResponse(error_code=_code(fetched.error_code))
        if fetched.error_code != pb.NONE:
            return response
        for tp in asked if asked is not None else sorted({*fetched.offsets, *fetched.malformed}):
            found = fetched.offsets.get(tp)
            response.offsets.add(
                topic=tp.topic,
                partition=tp.partition,
                offset=-1 if found is None else found.offset,
                metadata="" if found is None else found.metadata,
                leader_epoch=-1 if found is None else found.leader_epoch,
                commit_timestamp_ms=-1 if found is None else found.commit_timestamp_ms,
                error_code=pb.UNKNOWN_SERVER_ERROR if tp in fetched.malformed else pb.NONE,
            )
        return response

    async def commit_group_offsets(
        self, request: pb.CommitGroupOffsetsRequest, session: Session = ANONYMOUS_SESSION
    ) -> pb.CommitGroupOffsetsResponse:
        """:meth:`GroupAdmin.commit_offsets` from outside the group (generation -1, no
        member: refused while the group has members), as ``kafka-consumer-groups
        --reset-offsets`` commits (Read on the group)."""
        response = pb.CommitGroupOffsetsResponse()
        offsets = {
            TopicPartition(o.topic, o.partition): CommittedOffset(
                o.offset, o.leader_epoch, o.metadata
            )
            for o in request.offsets
        }
        codes: dict[TopicPartition, int]
        if not self._allowed(session, AclOperation.READ, request.group_id):
            codes = dict.fromkeys(offsets, int(pb.GROUP_AUTHORIZATION_FAILED))
        elif self.admin is None:
            codes = dict.fromkeys(offsets, COORDINATOR_NOT_AVAILABLE)
        else:
            valid = {
                tp: c
                for tp, c in offsets.items()
                if c.offset >= 0 and self.metadata_cache.partition(tp) is not None
            }
            codes = dict.fromkeys(offsets, int(pb.UNKNOWN_TOPIC_OR_PARTITION))
            codes.update(await self.admin.commit_offsets(request.group_id, -1, "", valid))
        for tp, c in offsets.items():
            response.offsets.add(
                topic=tp.topic, partition=tp.partition, offset=c.offset, error_code=_code(codes[tp])
            )
        return response


def _add_described_group(
    response: pb.DescribeGroupsResponse, group: GroupDescription, coordinator_id: int
) -> None:
    entry = response.groups.add(
        error_code=pb.NONE,
        group_id=group.group_id,
        group_state=group.state.value,
        protocol_type=group.protocol_type,
        protocol_data=group.protocol_name,
        coordinator_id=coordinator_id,
    )
    for m in group.members:
        member = entry.members.add(
            member_id=m.member_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata,
            member_assignment=m.assignment,
        )
        if m.group_instance_id is not None:
            member.group_instance_id = m.group_instance_id
        assigned: dict[str, list[int]] = {}
        for tp in m.partitions or ():
            assigned.setdefault(tp.topic, []).append(tp.partition)
        for topic, partitions in assigned.items():
            member.assignment.add(topic=topic, partitions=partitions)
