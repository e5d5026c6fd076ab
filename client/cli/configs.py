"""``minibroker configs --describe|--alter`` (Kafka's ``kafka-configs.sh``).

::

    minibroker configs --alter --entity-type topics --entity-name orders \\
        --add-config min.insync.replicas=2,retention.ms=60000 --delete-config segment.bytes
    minibroker configs --alter --entity-type brokers --entity-default \\
        --add-config log.retention.ms=1000
    minibroker configs --describe --entity-type brokers --entity-name 1

Client quotas (``--entity-type clients|users``) are :mod:`client.cli.quota_configs`.
Changes are written to ZooKeeper with a change notification, and every broker applies them
without a restart (:mod:`broker.dynamic_config`). Topic configs are checked as ``topics
create --config`` checks them; broker configs must be dynamic ones
(:mod:`proto.config.dynamic_broker_config`). ``--describe`` lists each entity's dynamic configs,
each with the layers that set it, highest first, as Kafka's ``synonyms`` (static broker
properties are not listed: they are on each broker's command line, out of a client's sight).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from client.admin import EntityConfig
from client.cli.common import (
    add_bootstrap_option,
    add_zookeeper_option,
    admin_client,
    connections,
    run_async,
)
from client.cli.quota_configs import QUOTA_ENTITY_TYPES, run_quota_configs
from client.metadata import ClientError
from proto.config.describe_configs import (
    BrokerLayers,
    ConfigSource,
    DescribedConfig,
    describe_broker,
    describe_topic,
)
from proto.zk.znodes import DEFAULT_BROKER_ENTITY


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "configs",
        help="describe and change topic and broker configs without a restart",
        description="Describe and alter dynamic topic and broker configs (as kafka-configs.sh).",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the dynamic configs")
    action.add_argument("--alter", action="store_true", help="add or delete configs")
    parser.add_argument(
        "--entity-type", required=True, choices=("topics", "brokers", *QUOTA_ENTITY_TYPES)
    )
    entity = parser.add_mutually_exclusive_group()
    entity.add_argument("--entity-name", metavar="NAME", help="a topic or a broker id")
    entity.add_argument(
        "--entity-default",
        action="store_true",
        help="the cluster-wide default of the broker configs, or the default client or user",
    )
    parser.add_argument(
        "--add-config",
        metavar="K=V,K2=V2",
        help="configs to set; a value holding commas goes in brackets: k=[a,b]",
    )
    parser.add_argument("--delete-config", metavar="K,K2", help="configs to remove")
    add_bootstrap_option(parser)
    add_zookeeper_option(parser, "the configs")
    parser.set_defaults(run=lambda a: run_async(_run(a)))


async def _run(args: argparse.Namespace) -> int:
    if args.entity_type in QUOTA_ENTITY_TYPES:
        return await _run_quotas(args)
    entity = _entity(args)
    async with connections(args) as conns, admin_client(args, conns) as admin:
        if args.describe:
            if args.add_config is not None or args.delete_config is not None:
                raise ClientError("--add-config and --delete-config go with --alter")
            described = await admin.describe_configs(args.entity_type, entity)
            print("\n".join(describe_lines(described)))
            return 0
        if entity is None:
            raise ClientError("--alter needs --entity-name (or --entity-default for brokers)")
        if args.add_config is None and args.delete_config is None:
            raise ClientError("--alter needs --add-config or --delete-config")
        add = parse_add_config(args.add_config or "")
        delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        altered = await admin.alter_configs(args.entity_type, entity, add, delete)
    print(f"Completed updating {_what(altered.entity_type, altered.entity)}.")
    return 0


async def _run_quotas(args: argparse.Namespace) -> int:
    if args.describe:
        if args.add_config is not None or args.delete_config is not None:
            raise ClientError("--add-config and --delete-config go with --alter")
        return await run_quota_configs(args, None, [])
    if args.add_config is None and args.delete_config is None:
        raise ClientError("--alter needs --add-config or --delete-config")
    add = parse_add_config(args.add_config or "")
    delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    return await run_quota_configs(args, add, delete)


def _entity(args: argparse.Namespace) -> str | None:
    if args.entity_default:
        if args.entity_type != "brokers":
            raise ClientError("--entity-default is for --entity-type brokers")
        return DEFAULT_BROKER_ENTITY
    name: str | None = args.entity_name
    return name


def _what(entity_type: str, entity: str) -> str:
    if entity_type == "topics":
        return f"config for topic {entity}"
    if entity == DEFAULT_BROKER_ENTITY:
        return "default config for brokers in the cluster"
    return f"config for broker {entity}"


def parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` (Kafka's ``--add-config``); a value in square brackets may hold commas
    (``k=[a,b]`` is ``a,b``). ClientError for an entry without ``=`` or with no name."""
    entries: list[str] = []
    current, depth = "", 0
    for char in text:
        if char == "," and depth == 0:
            entries.append(current)
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        current += char
    entries.append(current)
    configs: dict[str, str] = {}
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        key, sep, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ClientError(f"--add-config {entry!r}: expected key=value")
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        configs[key] = value
    return configs


def describe_lines(entities: Iterable[EntityConfig]) -> list[str]:
    """Kafka's ``--describe`` layout: a header per entity, then one line per dynamic config
    with its value, whether it is sensitive and where it is set (``synonyms``, highest
    precedence first), described by the code the brokers' DescribeConfigs uses
    (:mod:`proto.config.describe_configs`). The brokers' static properties are not among
    the synonyms: they are on each broker's command line, out of ZooKeeper's sight."""
    lines: list[str] = []
    for e in entities:
        if e.entity_type == "topics":
            lines.append(f"Dynamic configs for topic {e.entity} are:")
            layers = BrokerLayers(dynamic_default=e.cluster_default)
            described = describe_topic(e.overrides, layers, e.overrides)
        elif e.entity == DEFAULT_BROKER_ENTITY:
            lines.append("Default configs for brokers in the cluster are:")
            described = describe_broker(BrokerLayers(dynamic_default=e.overrides), per_broker=False)
        else:
            lines.append(f"Dynamic configs for broker {e.entity} are:")
            layers = BrokerLayers(dynamic_broker=e.overrides, dynamic_default=e.cluster_default)
            described = describe_broker(layers, per_broker=True)
        lines.extend(config_line(c) for c in described if c.source in _DYNAMIC)
    return lines


_DYNAMIC = (
    ConfigSource.DYNAMIC_TOPIC_CONFIG,
    ConfigSource.DYNAMIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
)


def config_line(config: DescribedConfig) -> str:
    """One config as ``kafka-configs --describe`` prints it."""
    listed = ", ".join(f"{s.source.name}:{s.name}={_text(s.value)}" for s in config.synonyms)
    sensitive = "true" if config.sensitive else "false"
    return f"  {config.name}={_text(config.value)} sensitive={sensitive} synonyms={{{listed}}}"


def _text(value: str | None) -> str:
    return "null" if value is None else value
