"""ACLs in ZooKeeper as Kafka 2.8 stores them (``ZkData``'s ``ZkAclStore``,
``ZkAclChangeStore`` and ``ResourceZNode``; ``AclAuthorizer.updateResourceAcls``), the one
implementation behind the Kafka listener's CreateAcls, DescribeAcls and DeleteAcls and
``minibroker acls``; every broker's authorizer (:mod:`broker.security.acl_authorizer`)
reads the same znodes and follows the change notifications (docs/security.md)::

    /kafka-acl/<ResourceType>/<name>                      literal patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>    prefixed patterns
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Write","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>           "TOPIC:<name>" (a literal pattern changed)
    /kafka-acl-extended-changes/acl_changes_<seq>  {"version":1,"resourceType":"TOPIC",
                                                    "name":...,"patternType":"PREFIXED"}

A pattern's znode is rewritten conditionally on its version (ZooKeeper's compare-and-set),
so concurrent writers of one pattern lose nothing; a pattern whose last entry goes is
deleted. Each write is followed by a change notification, which every broker reads to
reload that one pattern. The functions take any session (:class:`ZooKeeperClient`): the
broker's, whose creates carry the secure ACL with ``zookeeper.set.acl``, or a tool's with
the cluster's digest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from proto.zk.acl_bindings import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
)
from proto.zk.session import ZooKeeperClient
from proto.zk.znodes import ZkDataError

__all__ = [
    "ACL_CHANGE_PATHS",
    "ACL_CHANGE_PREFIX",
    "ACL_PATHS",
    "acl_path",
    "create_acls",
    "decode_acl_change",
    "delete_acls",
    "describe_acls",
    "encode_acl_change",
    "read_acls",
    "read_all_acls",
]

log = logging.getLogger(__name__)

LITERAL_ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
LITERAL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
ACL_CHANGE_PATHS = (LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH)
_STORES = {
    PatternType.LITERAL: LITERAL_ACL_PATH,
    PatternType.PREFIXED: f"{EXTENDED_ACL_PATH}/prefixed",
}
ACL_PATHS = (*_STORES.values(), *ACL_CHANGE_PATHS)
"""The parents the authorizer makes sure of at start-up (Kafka's ``createAclPaths``)."""
_CONDITIONAL_WRITE_ATTEMPTS = 10
"""Kafka's ``maxUpdateRetries``: a pattern rewritten by others this often in a row fails."""


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of a literal or prefixed pattern (ValueError for another pattern type, or
    a name ZooKeeper cannot hold)."""
    store = _STORES.get(pattern.pattern_type)
    if store is None:
        raise ValueError(f"no ACL znode for pattern type {pattern.pattern_type.name}")
    if "/" in pattern.name or pattern.name in (".", ".."):
        raise ValueError(f"resource name {pattern.name!r} cannot be a znode name")
    return f"{store}/{pattern.resource_type.title}/{pattern.name}"


def encode_acl_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """The parent and content of the notification that ``pattern`` changed."""
    if pattern.pattern_type is PatternType.LITERAL:
        text = f"{pattern.resource_type.name}:{pattern.name}"
        return LITERAL_CHANGES_PATH, text.encode()
    event = {
        "version": 1,
        "resourceType": pattern.resource_type.name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return EXTENDED_CHANGES_PATH, json.dumps(event, separators=(",", ":")).encode()


def decode_acl_change(parent: str, data: bytes) -> ResourcePattern:
    """The pattern a notification under ``parent`` names; ZkDataError if malformed."""
    try:
        if parent == LITERAL_CHANGES_PATH:
            kind, sep, name = data.decode().partition(":")
            if not sep:
                raise ValueError("expected ResourceType:name")
            return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
        event = json.loads(data)
        if event.get("version") != 1:
            raise ValueError(f"unsupported version {event.get('version')!r}")
        return ResourcePattern(
            ResourceType.parse(str(event["resourceType"])),
            str(event["name"]),
            PatternType.parse(str(event["patternType"])),
        )
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as err:
        raise ZkDataError(f"{parent}: not an ACL change notification: {err}") from None


async def read_acls(
    zk: ZooKeeperClient, pattern: ResourcePattern
) -> tuple[frozenset[AccessControlEntry], int | None]:
    """A pattern's entries and its znode's version (None: no znode, no entries)."""
    path = acl_path(pattern)
    try:
        data, stat = await zk.request("get", path)
    except NoNodeError:
        return frozenset(), None
    return decode_acls(path, bytes(data)), int(stat.version)


async def _children(zk: ZooKeeperClient, path: str) -> list[str]:
    try:
        return sorted(await zk.request("get_children", path))
    except NoNodeError:
        return []


async def read_all_acls(
    zk: ZooKeeperClient,
) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """Every pattern with entries (Kafka's ``loadCache``). A resource type this version
    does not know, or a malformed znode, is logged and left out, as Kafka skips them."""
    found: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    for pattern_type, store in _STORES.items():
        for type_name in await _children(zk, store):
            try:
                resource_type = ResourceType.parse(type_name)
            except ValueError:
                log.warning("acl_store event=unknown_resource_type path=%s/%s", store, type_name)
                continue
            for name in await _children(zk, f"{store}/{type_name}"):
                pattern = ResourcePattern(resource_type, name, pattern_type)
                try:
                    entries, _ = await read_acls(zk, pattern)
                except ZkDataError as err:
                    log.warning("acl_store event=malformed_acls error=%s", err)
                    continue
                if entries:
                    found[pattern] = entries
    return found


async def update_acls(
    zk: ZooKeeperClient,
    pattern: ResourcePattern,
    change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]],
) -> tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]:
    """Rewrite ``pattern``'s entries to ``change(current)`` conditionally on the version
    read, again from a fresh read when another writer came first (Kafka's
    ``updateResourceAcls``), then notify the brokers if anything changed. Returns the
    entries before and after. RuntimeError after too many lost races."""
    path = acl_path(pattern)
    for _ in range(_CONDITIONAL_WRITE_ATTEMPTS):
        current, version = await read_acls(zk, pattern)
        wanted = change(current)
        if wanted == current:
            return current, current
        try:
            if version is None:
                await zk.request("create", path, encode_acls(wanted), makepath=True)
            elif wanted:
                await zk.request("set", path, encode_acls(wanted), version)
            else:
                await zk.request("delete", path, version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue
        parent, data = encode_acl_change(pattern)
        await zk.request(
            "create", f"{parent}/{ACL_CHANGE_PREFIX}", data, sequence=True, makepath=True
        )
        return current, wanted
    raise RuntimeError(
        f"ACLs of {pattern} changed under every one of {_CONDITIONAL_WRITE_ATTEMPTS} writes"
    )


async def create_acls(zk: ZooKeeperClient, bindings: Sequence[AclBinding]) -> list[str | None]:
    """Add each binding (Kafka's ``AclAuthorizer.createAcls``): per binding, None or why it
    was refused. Bindings of one pattern are written together."""
    results: list[str | None] = [None] * len(bindings)
    by_pattern: dict[ResourcePattern, list[int]] = {}
    for index, binding in enumerate(bindings):
        problem = binding.problem()
        if problem is None:
            try:
                acl_path(binding.pattern)
            except ValueError as err:
                problem = str(err)
        if problem is not None:
            results[index] = problem
        else:
            by_pattern.setdefault(binding.pattern, []).append(index)
    for pattern, indexes in by_pattern.items():
        added = frozenset(bindings[i].entry for i in indexes)

        def adding(
            current: frozenset[AccessControlEntry],
            added: frozenset[AccessControlEntry] = added,
        ) -> frozenset[AccessControlEntry]:
            return current | added

        try:
            await update_acls(zk, pattern, adding)
        except RuntimeError as err:
            for i in indexes:
                results[i] = str(err)
    return results


async def describe_acls(zk: ZooKeeperClient, filter_: AclBindingFilter) -> list[AclBinding]:
    """Every stored binding the filter matches, read from ZooKeeper, sorted."""
    everything = await read_all_acls(zk)
    return sorted(
        (
            AclBinding(pattern, entry)
            for pattern, entries in everything.items()
            for entry in entries
            if filter_.matches(AclBinding(pattern, entry))
        ),
        key=lambda b: (b.pattern, b.entry),
    )


async def delete_acls(
    zk: ZooKeeperClient, filters: Sequence[AclBindingFilter], known: Iterable[ResourcePattern] = ()
) -> list[list[AclBinding]]:
    """Remove every binding a filter matches (Kafka's ``AclAuthorizer.deleteAcls``): per
    filter, the bindings it deleted (one deleted by two filters is the first's). The
    patterns looked at are those in ZooKeeper, ``known`` ones and the ones a filter names
    exactly."""
    patterns = set(await read_all_acls(zk)) | set(known)
    for f in filters:
        patterns.update(f.pattern.exact_patterns())
    deleted: list[list[AclBinding]] = [[] for _ in filters]
    for pattern in sorted(patterns):
        matching = [i for i, f in enumerate(filters) if f.pattern.matches(pattern)]
        if not matching:
            continue
        removed: dict[AccessControlEntry, int] = {}

        def without(
            current: frozenset[AccessControlEntry],
            matching: list[int] = matching,
            removed: dict[AccessControlEntry, int] = removed,
        ) -> frozenset[AccessControlEntry]:
            removed.clear()
            for entry in sorted(current):
                for i in matching:
                    if filters[i].entry.matches(entry):
                        removed[entry] = i
                        break
            return current - removed.keys()

        await update_acls(zk, pattern, without)
        for entry, i in removed.items():
            deleted[i].append(AclBinding(pattern, entry))
    return deleted
