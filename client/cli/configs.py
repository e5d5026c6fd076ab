"""``minibroker configs --describe|--alter`` (Kafka's ``kafka-configs.sh``).

::

    minibroker configs --alter --entity-type topics --entity-name orders \\
        --add-config min.insync.replicas=2,retention.ms=60000 --delete-config segment.bytes
    minibroker configs --alter --entity-type brokers --entity-default \\
        --add-config log.retention.ms=1000
    minibroker configs --describe --entity-type brokers --entity-name 1
    minibroker configs --describe --all --entity-type topics --entity-name orders

Client quotas (``--entity-type clients|users``, and a user and client-id pair with
``--entity-type users --entity-name u --entity-type clients --entity-name c``) are
:mod:`client.cli.quota_configs`.
Changes are written to ZooKeeper with a change notification, and every broker applies them
without a restart (:mod:`broker.dynamic_config`). Topic configs are checked as ``topics
create --config`` checks them; broker configs must be dynamic ones
(:mod:`proto.config.dynamic_broker_config`). ``--describe`` lists each entity's dynamic configs,
each with the layers that set it, highest first, as Kafka's ``synonyms``; ``--describe --all``
lists every config, defaults included (Kafka 2.8's ``--all``). Static broker properties are
not listed: they are on each broker's command line, out of a client's sight, so ``--all``
shows a broker's configs as ZooKeeper and the built-in defaults set them.
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
        "--all",
        action="store_true",
        help="with --describe: every config, defaults included, not only the dynamic ones",
    )
    parser.add_argument(
        "--entity-type",
        required=True,
        action="append",
        choices=("topics", "brokers", *QUOTA_ENTITY_TYPES),
        help="repeat as --entity-type users ... --entity-type clients ... for a user and "
        "client-id pair",
    )
    parser.add_argument(
        "--entity-name",
        metavar="NAME",
        dest="entities",
        action=_EntityAction,
        help="a topic, a broker id, a client id or a user (one per --entity-type, in order)",
    )
    parser.add_argument(
        "--entity-default",
        nargs=0,
        dest="entities",
        action=_EntityAction,
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


class _EntityAction(argparse.Action):
    """``--entity-name`` and ``--entity-default`` in command-line order: each names the
    entity of the ``--entity-type`` at its position (None for a default)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        entities = list(getattr(namespace, self.dest, None) or [])
        entities.append(values if isinstance(values, str) else None)
        setattr(namespace, self.dest, entities)


def entity_parts(args: argparse.Namespace) -> list[tuple[str, str | None, bool]]:
    """The ``(entity type, name, named)`` of each ``--entity-type`` in order: ``named``
    false where no ``--entity-name``/``--entity-default`` goes with it, a None name for a
    default. ClientError as Kafka's ``ConfigCommand`` refuses a combination."""
    types: list[str] = args.entity_type
    entities: list[str | None] = args.entities or []
    if len(entities) > len(types):
        raise ClientError("More entity names specified than entity types")
    if len(types) > 1:
        if sorted(types) != ["clients", "users"]:
            raise ClientError("Only 'users' and 'clients' entity types may be specified together")
        if args.alter and len(entities) != len(types):
            raise ClientError(
                "--entity-name or --entity-default must be specified with each --entity-type "
                "for --alter"
            )
    return [
        (t, entities[i] if i < len(entities) else None, i < len(entities))
        for i, t in enumerate(types)
    ]


async def _run(args: argparse.Namespace) -> int:
    parts = entity_parts(args)
    if args.all and not args.describe:
        raise ClientError("--all goes with --describe")
    if parts[0][0] in QUOTA_ENTITY_TYPES:
        if args.all:
            raise ClientError("--all is for topics and brokers")
        return await _run_quotas(args, parts)
    _, name, named = parts[0]
    args.entity_name = name
    args.entity_default = named and name is None
    entity = _entity(args)
    async with connections(args) as conns, admin_client(args, conns) as admin:
        if args.describe:
            if args.add_config is not None or args.delete_config is not None:
                raise ClientError("--add-config and --delete-config go with --alter")
            described = await admin.describe_configs(args.entity_type[0], entity)
            print("\n".join(describe_lines(described, describe_all=args.all)))
            return 0
        if entity is None:
            raise ClientError("--alter needs --entity-name (or --entity-default for brokers)")
        if args.add_config is None and args.delete_config is None:
            raise ClientError("--alter needs --add-config or --delete-config")
        add = parse_add_config(args.add_config or "")
        delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        altered = await admin.alter_configs(args.entity_type[0], entity, add, delete)
    print(f"Completed updating {_what(altered.entity_type, altered.entity)}.")
    return 0


async def _run_quotas(args: argparse.Namespace, parts: list[tuple[str, str | None, bool]]) -> int:
    if args.describe:
        if args.add_config is not None or args.delete_config is not None:
            raise ClientError("--add-config and --delete-config go with --alter")
        return await run_quota_configs(args, parts, None, [])
    if args.add_config is None and args.delete_config is None:
        raise ClientError("--alter needs --add-config or --delete-config")
    add = parse_add_config(args.add_config or "")
    delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    return await run_quota_configs(args, parts, add, delete)


def _entity(args: argparse.Namespace) -> str | None:
    if args.entity_default:
        if args.entity_type[0] != "brokers":
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


def describe_lines(entities: Iterable[EntityConfig], *, describe_all: bool = False) -> list[str]:
    """Kafka's ``--describe`` layout: a header per entity, then one line per dynamic config
    (``describe_all``: per config, defaults included) with its value, whether it is
    sensitive and where it is set (``synonyms``, highest precedence first), described by the
    code the brokers' DescribeConfigs uses (:mod:`proto.config.describe_configs`). The
    brokers' static properties are not among the synonyms: they are on each broker's
    command line, out of ZooKeeper's sight."""
    lines: list[str] = []
    which = "All" if describe_all else "Dynamic"
    for e in entities:
        if e.entity_type == "topics":
            lines.append(f"{which} configs for topic {e.entity} are:")
            layers = BrokerLayers(dynamic_default=e.cluster_default)
            described = describe_topic(e.overrides, layers, None if describe_all else e.overrides)
        elif e.entity == DEFAULT_BROKER_ENTITY:
            lines.append("Default configs for brokers in the cluster are:")
            described = describe_broker(BrokerLayers(dynamic_default=e.overrides), per_broker=False)
        else:
            lines.append(f"{which} configs for broker {e.entity} are:")
            layers = BrokerLayers(dynamic_broker=e.overrides, dynamic_default=e.cluster_default)
            described = describe_broker(layers, per_broker=True)
        lines.extend(config_line(c) for c in described if describe_all or c.source in _DYNAMIC)
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
