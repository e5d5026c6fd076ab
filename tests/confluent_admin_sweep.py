"""Every call of confluent-kafka's ``AdminClient`` that asks for an API minibroker does not
serve, or that a client of the earlier admin APIs routinely makes, run once against a
cluster: one JSON line per call with how long it took and how it ended.

Run as a separate process (``python -m tests.confluent_admin_sweep BOOTSTRAP``) so that a
crash of librdkafka's binding (it segfaulted once on a null cluster id) or a hang fails the
test that runs it instead of killing pytest."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import confluent_kafka.admin
from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition

kafka_admin: Any = confluent_kafka.admin
"""Untyped: its stubs miss the SCRAM classes' exports and an ACL filter's null fields."""

RESULT_S = 20
REQUEST_S = 10


def calls(admin: Any) -> dict[str, Callable[[], object]]:
    """Each call resolved to a value or an exception; futures waited for at most RESULT_S.
    ``admin`` is untyped: the calls pass librdkafka's keyword options its stubs omit."""
    any_acl = kafka_admin.AclBindingFilter(
        kafka_admin.ResourceType.ANY,
        None,
        kafka_admin.ResourcePatternType.ANY,
        None,
        None,
        kafka_admin.AclOperation.ANY,
        kafka_admin.AclPermissionType.ANY,
    )
    acl = kafka_admin.AclBinding(
        kafka_admin.ResourceType.TOPIC,
        "sweep",
        kafka_admin.ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        kafka_admin.AclOperation.READ,
        kafka_admin.AclPermissionType.ALLOW,
    )
    scram = kafka_admin.UserScramCredentialUpsertion(
        "alice",
        kafka_admin.ScramCredentialInfo(kafka_admin.ScramMechanism.SCRAM_SHA_256, 4096),
        b"secret",
    )
    commit = ConsumerGroupTopicPartitions("sweep-group", [TopicPartition("never-made", 0, 1)])

    def every(futures: Mapping[Any, Future[Any]]) -> list[Any]:
        return [f.result(timeout=RESULT_S) for f in futures.values()]

    timeout = {"request_timeout": REQUEST_S}
    return {
        "describe_acls": lambda: admin.describe_acls(any_acl, **timeout).result(RESULT_S),
        "create_acls": lambda: every(admin.create_acls([acl], **timeout)),
        "delete_acls": lambda: every(admin.delete_acls([any_acl], **timeout)),
        "describe_user_scram_credentials": lambda: admin.describe_user_scram_credentials(
            **timeout
        ).result(RESULT_S),
        "alter_user_scram_credentials": lambda: every(
            admin.alter_user_scram_credentials([scram], **timeout)
        ),
        "describe_cluster": lambda: admin.describe_cluster(**timeout).result(RESULT_S).cluster_id,
        "describe_topics": lambda: every(
            admin.describe_topics(TopicCollection(["never-made"]), **timeout)
        ),
        "list_consumer_groups": lambda: len(
            admin.list_consumer_groups(**timeout).result(RESULT_S).valid
        ),
        "alter_consumer_group_offsets": lambda: [
            str(tp.error)
            for result in every(admin.alter_consumer_group_offsets([commit], **timeout))
            for tp in result.topic_partitions
        ],
    }


def main() -> None:
    admin: Any = kafka_admin.AdminClient({"bootstrap.servers": sys.argv[1]})
    for name, call in calls(admin).items():
        started = time.monotonic()
        try:
            outcome, detail = "ok", repr(call())
        except Exception as err:  # what the call raised is the outcome being recorded
            error = err.args[0] if err.args else err
            outcome = error.name() if hasattr(error, "name") else type(err).__name__
            detail = str(error)
        line = {
            "call": name,
            "seconds": round(time.monotonic() - started, 2),
            "outcome": outcome,
            "detail": detail,
        }
        print(json.dumps(line), flush=True)
    del admin


if __name__ == "__main__":
    main()
