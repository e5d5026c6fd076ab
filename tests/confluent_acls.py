"""CreateAcls, DescribeAcls and DeleteAcls through confluent-kafka's ``AdminClient``: one
JSON line per step with the bindings librdkafka read back.

Run as a separate process (``python -m tests.confluent_acls BOOTSTRAP TOPIC``), so that a
crash or hang of librdkafka fails the test that runs it, not pytest."""

from __future__ import annotations

import json
import sys
from typing import Any

import confluent_kafka.admin

kafka_admin: Any = confluent_kafka.admin
"""Untyped: its stubs miss an ACL filter's null fields."""
RESULT_S = 20


def _text(binding: Any) -> str:
    return (
        f"{binding.restype.name}:{binding.resource_pattern_type.name}:{binding.name}:"
        f"{binding.principal}:{binding.host}:{binding.operation.name}:"
        f"{binding.permission_type.name}"
    )


def main() -> None:
    bootstrap, topic = sys.argv[1], sys.argv[2]
    admin: Any = kafka_admin.AdminClient({"bootstrap.servers": bootstrap})
    allow = kafka_admin.AclBinding(
        kafka_admin.ResourceType.TOPIC,
        topic,
        kafka_admin.ResourcePatternType.PREFIXED,
        "User:carol",
        "*",
        kafka_admin.AclOperation.WRITE,
        kafka_admin.AclPermissionType.ALLOW,
    )
    carols = kafka_admin.AclBindingFilter(
        kafka_admin.ResourceType.ANY,
        None,
        kafka_admin.ResourcePatternType.ANY,
        "User:carol",
        None,
        kafka_admin.AclOperation.ANY,
        kafka_admin.AclPermissionType.ANY,
    )
    timeout = {"request_timeout": 10}
    for future in admin.create_acls([allow], **timeout).values():
        future.result(timeout=RESULT_S)
    print(json.dumps({"step": "created"}), flush=True)
    found = admin.describe_acls(carols, **timeout).result(RESULT_S)
    print(json.dumps({"step": "described", "acls": sorted(map(_text, found))}), flush=True)
    deleted = [
        _text(b)
        for f in admin.delete_acls([carols], **timeout).values()
        for b in f.result(timeout=RESULT_S)
    ]
    print(json.dumps({"step": "deleted", "acls": sorted(deleted)}), flush=True)
    found = admin.describe_acls(carols, **timeout).result(RESULT_S)
    print(json.dumps({"step": "described", "acls": sorted(map(_text, found))}), flush=True)
    del admin


if __name__ == "__main__":
    main()
