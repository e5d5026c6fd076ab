"""The Kafka listener's config APIs: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs
(Kafka 2.8's ``ConfigHelper`` and ``ZkAdminManager.alterConfigs`` /
``incrementalAlterConfigs``).

They read and write the znodes ``minibroker configs`` does (``/config/topics/<t>``,
``/config/brokers/<id|<default>>`` and a ``/config/changes`` notification that every broker
applies, :mod:`broker.dynamic_config`), and check and describe with the same code
(:mod:`proto.config.topic_config_def`, :mod:`proto.config.dynamic_broker_config`,
:mod:`proto.config.describe_configs`). Kafka's error codes, kept as they are: a name Kafka
does not know, or behaviour minibroker lacks, is INVALID_CONFIG; a value that does not parse
or is out of range is INVALID_REQUEST in AlterConfigs (Kafka wraps its ``ConfigException``)
and INVALID_CONFIG in CreateTopics; a read-only broker config is INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from kazoo.exceptions import NodeExistsError, NoNodeError

from broker.kafka_listener.messages import Tree
from broker.kafka_listener.wire_request import Answer, KafkaRequest, session_of
from broker.security.acl_authorizer import AclAuthorizer
from broker.zk_client import BrokerZkClient, ZkError
from proto.config.broker_config import BrokerConfig
from proto.config.broker_config_def import DYNAMIC_BROKER_CONFIG_KEYS
from proto.config.config_def import ConfigType
from proto.config.describe_configs import (
    BrokerLayers,
    DescribedConfig,
    describe_broker,
    describe_topic,
    static_broker_properties,
)
from proto.config.dynamic_broker_config import check_dynamic_broker_config
from proto.config.topic_config_def import (
    TOPIC_CONFIGS,
    InvalidConfigError,
    check_topic_config,
)
from proto.topic_partition import topic_name_problem
from proto.wire import minibroker_pb2 as pb
from proto.zk import znodes
from proto.zk.acl_bindings import AclOperation, ResourceType

__all__ = ["CONFIG_VERSIONS", "ConfigApis"]

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
CONFIG_VERSIONS: dict[int, tuple[int, int]] = {
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
}
"""The lows are the oldest versions kio has schemas for."""

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
_RESOURCE_NAMES = {2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER"}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
NONE, UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT = 0, 3, 7
INVALID_TOPIC_EXCEPTION, INVALID_CONFIG, INVALID_REQUEST = 17, 40, 42


class _ResourceError(Exception):
    """One resource's error answer."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class _Op:
    name: str
    op: int
    value: str | None


class ConfigApis:
    """The config handlers, by API key. ``listeners`` gives the broker's listener configs
    (``listeners``, ``advertised.listeners``, ...), known once its ports are bound."""

    def __init__(
        self,
        config: BrokerConfig,
        zk: BrokerZkClient,
        listeners: Callable[[], Mapping[str, str]] = dict,
        authorizer: AclAuthorizer | None = None,
    ) -> None:
        self.config = config
        """The broker's static config (the dynamic layers are read from ZooKeeper)."""
        self.zk = zk
        self.listeners = listeners
        self.broker_id = config.broker_id
        self.authorizer = authorizer or AclAuthorizer(config.broker_id, None, enabled=False)
        """DescribeConfigs and AlterConfigs on the topic, or on the Cluster for a broker's
        configs (Kafka's ``ConfigResource`` to ACL resource mapping)."""
        self.handlers: dict[int, Callable[[KafkaRequest], Awaitable[Answer]]] = {
            DESCRIBE_CONFIGS: self.describe_configs,
            ALTER_CONFIGS: self.alter_configs,
            INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
        }

    # -- DescribeConfigs ---------------------------------------------------------------------

    async def describe_configs(self, request: KafkaRequest) -> Answer:
        return self._describe_configs(request)

    async def _describe_configs(self, request: KafkaRequest) -> Tree:
        body = request.body
        synonyms = bool(getattr(body, "include_synonyms", False))
        documentation = bool(getattr(body, "include_documentation", False))
        results = []
        for resource in body.resources:
            code, message, entries = NONE, None, []
            try:
                self._check_acl(
                    request,
                    AclOperation.DESCRIBE_CONFIGS,
                    resource.resource_type,
                    resource.resource_name,
                )
                entries = await self._describe(
                    resource.resource_type, resource.resource_name, resource.configuration_keys
                )
            except _ResourceError as err:
                code, message = err.code, err.message
            except ZkError as err:
                code, message = REQUEST_TIMED_OUT, f"ZooKeeper unavailable: {err}"
            results.append(
                {
                    "error_code": code,
                    "error_message": message,
                    "resource_type": resource.resource_type,
                    "resource_name": resource.resource_name,
                    "configs": [_config_tree(e, synonyms, documentation) for e in entries],
                }
            )
        return {"results": results}

    async def _describe(
        self, resource_type: int, name: str, keys: Sequence[str] | None
    ) -> list[DescribedConfig]:
        if resource_type == TOPIC_RESOURCE:
            await self._check_topic(name)
            overrides = await self.zk.get_topic_config(name)
            return describe_topic(overrides, await self._layers(), keys)
        if resource_type == BROKER_RESOURCE:
            entity = self._broker_entity(name, describing=True)
            return describe_broker(
                await self._layers(),
                per_broker=entity != znodes.DEFAULT_BROKER_ENTITY,
                keys=keys,
            )
        raise _ResourceError(
            INVALID_REQUEST, f"Unsupported resource type: {_resource_type(resource_type)}"
        )

    def _check_acl(
        self, request: KafkaRequest, operation: AclOperation, resource_type: int, name: str
    ) -> None:
        """_ResourceError with Kafka's AUTHORIZATION_FAILED code if the ACLs refuse."""
        if resource_type == TOPIC_RESOURCE:
            kind, code = ResourceType.TOPIC, pb.TOPIC_AUTHORIZATION_FAILED
        elif resource_type == BROKER_RESOURCE:
            kind, code, name = ResourceType.CLUSTER, pb.CLUSTER_AUTHORIZATION_FAILED, ""
        else:
            return
        if name:
            allowed = self.authorizer.authorize(session_of(request), operation, kind, name)
        else:
            allowed = self.authorizer.authorize(session_of(request), operation, kind)
        if not allowed:
            raise _ResourceError(code, f"no {operation.title} on the {kind.title}")

    async def _layers(self) -> BrokerLayers:
        return BrokerLayers(
            dynamic_broker=await self.zk.get_broker_config(self.broker_id),
            dynamic_default=await self.zk.get_broker_config(znodes.DEFAULT_BROKER_ENTITY),
            static=static_broker_properties(self.config, self.listeners()),
        )

    # -- AlterConfigs and IncrementalAlterConfigs ------------------------------------------------

    async def alter_configs(self, request: KafkaRequest) -> Answer:
        return self._alter(request, incremental=False)

    async def incremental_alter_configs(self, request: KafkaRequest) -> Answer:
        return self._alter(request, incremental=True)

    async def _alter(self, request: KafkaRequest, *, incremental: bool) -> Tree:
        body = request.body
        responses = []
        for resource in body.resources:
            ops = [
                _Op(c.name, getattr(c, "config_operation", SET), c.value) for c in resource.configs
            ]
            code, message = NONE, None
            try:
                self._check_acl(
                    request,
                    AclOperation.ALTER_CONFIGS,
                    resource.resource_type,
                    resource.resource_name,
                )
                await self._alter_one(
                    resource.resource_type,
                    resource.resource_name,
                    ops,
                    incremental=incremental,
                    validate_only=body.validate_only,
                )
            except _ResourceError as err:
                code, message = err.code, err.message
            except ZkError as err:
                code, message = REQUEST_TIMED_OUT, f"ZooKeeper unavailable: {err}"
            responses.append(
                {
                    "error_code": code,
                    "error_message": message,
                    "resource_type": resource.resource_type,
                    "resource_name": resource.resource_name,
                }
            )
        return {"responses": responses}

    async def _alter_one(
        self,
        resource_type: int,
        name: str,
        ops: list[_Op],
        *,
        incremental: bool,
        validate_only: bool,
    ) -> None:
        described = f"ConfigResource(type={_resource_type(resource_type)}, name='{name}')"
        names = [op.name for op in ops]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if incremental and duplicates:
            raise _ResourceError(
                INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(duplicates)}"
            )
        nulls = [
            f"{_OP_NAMES.get(op.op, op.op)}:{op.name}" if incremental else op.name
            for op in ops
            if op.value is None and not (incremental and op.op == DELETE)
        ]
        if nulls:
            raise _ResourceError(
                INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}"
            )
        try:
            if resource_type == TOPIC_RESOURCE:
                await self._check_topic(name, altering=True)
                current = await self.zk.get_topic_config(name) if incremental else {}
                configs = (
                    _apply(ops, current, _topic_list_default)
                    if incremental
                    else {op.name: op.value or "" for op in ops}
                )
                configs = check_topic_config(configs, self.config)
                entity_type = "topics"
            elif resource_type == BROKER_RESOURCE:
                name = self._broker_entity(name, describing=False)
                current = await self.zk.get_broker_config(name) if incremental else {}
                configs = (
                    _apply(ops, current, _broker_list_default)
                    if incremental
                    else {op.name: op.value or "" for op in ops}
                )
                configs = check_dynamic_broker_config(
                    configs, per_broker=name != znodes.DEFAULT_BROKER_ENTITY
                )
                entity_type = "brokers"
            else:
                raise _ResourceError(
                    INVALID_REQUEST,
                    "AlterConfigs is only supported for topics and brokers, but resource type "
                    f"is {_resource_type(resource_type)}",
                )
        except InvalidConfigError as err:
            raise _ResourceError(INVALID_CONFIG, str(err)) from None
        except ValueError as err:  # ConfigValueError, and the broker config checks
            raise _ResourceError(
                INVALID_REQUEST, f"Invalid config value for resource {described}: {err}"
            ) from None
        if not validate_only:
            await self._write(entity_type, name, configs)

    async def _write(self, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
        """Kafka's ``AdminZkClient.changeEntityConfig``: the entity's znode, then the change
        notification every broker acts on."""
        path = (
            znodes.topic_config_path(name)
            if entity_type == "topics"
            else znodes.broker_config_path(name)
        )
        data = znodes.encode_topic_config(dict(configs))
        try:
            await self.zk.request("set", path, data)
        except NoNodeError:
            try:
                await self.zk.request("create", path, data, makepath=True)
            except NodeExistsError:
                await self.zk.request("set", path, data)
        await self.zk.request(
            "create",
            f"{znodes.CONFIG_CHANGES_PATH}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_config_change(znodes.encode_config_entity_path(entity_type, name)),
            sequence=True,
            makepath=True,
        )

    # -- helpers -------------------------------------------------------------------------

    async def _check_topic(self, name: str, *, altering: bool = False) -> None:
        problem = topic_name_problem(name)
        if problem is not None:
            raise _ResourceError(INVALID_TOPIC_EXCEPTION, problem)
        if await self.zk.get_topic_assignment(name) is None:
            message = f"The topic '{name}' does not exist." if altering else None
            raise _ResourceError(UNKNOWN_TOPIC_OR_PARTITION, message)

    def _broker_entity(self, name: str, *, describing: bool) -> str:
        """``<default>`` for ``""``, else this broker's id (Kafka's ``getBrokerId``)."""
        if not name:
            return znodes.DEFAULT_BROKER_ENTITY
        try:
            broker_id = int(name)
        except ValueError:
            raise _ResourceError(
                INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
            ) from None
        if broker_id != self.broker_id:
            also = " or empty string" if describing else ""
            raise _ResourceError(
                INVALID_REQUEST,
                f"Unexpected broker id, expected {self.broker_id}{also}, but received {name}",
            )
        return str(broker_id)


def _resource_type(code: int) -> str:
    return _RESOURCE_NAMES.get(code, "UNKNOWN")


def _topic_list_default(name: str) -> str | None:
    """A topic config's default if it is a list; ``Unknown topic config name`` if unknown;
    None if it is no list."""
    key = TOPIC_CONFIGS.get(name)
    if key is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    return key.default if key.type is ConfigType.LIST else None


def _broker_list_default(name: str) -> str | None:
    """A dynamic broker config's default if it is a list (``log.cleanup.policy``,
    ``metric.reporters``, ...); None otherwise."""
    key = DYNAMIC_BROKER_CONFIG_KEYS.get(name)
    return key.default or "" if key is not None and key.type is ConfigType.LIST else None


def _apply(
    ops: Sequence[_Op], current: Mapping[str, str], list_default: Callable[[str], str | None]
) -> dict[str, str]:
    """``ZkAdminManager.prepareIncrementalConfigs``: ``ops`` applied to ``current``."""
    configs = dict(current)
    for op in ops:
        if op.op == SET:
            configs[op.name] = op.value or ""
        elif op.op == DELETE:
            configs.pop(op.name, None)
        elif op.op in (APPEND, SUBTRACT):
            default = list_default(op.name)
            if default is None:
                verb = "append" if op.op == APPEND else "subtract"
                raise _ResourceError(
                    INVALID_REQUEST, f"Config value {verb} is not allowed for config key: {op.name}"
                )
            # Kafka splits "" into one empty element, which no list config accepts.
            old = [v for v in configs.get(op.name, default).split(",") if v]
            given = [v for v in (op.value or "").split(",") if v]
            if op.op == APPEND:
                new = old + given
            else:
                new = list(old)
                for item in given:  # Scala's List.diff: one occurrence per item
                    if item in new:
                        new.remove(item)
            configs[op.name] = ",".join(new)
        else:
            raise _ResourceError(INVALID_REQUEST, f"Unknown config operation {op.op}")
    return configs


def _config_tree(entry: DescribedConfig, synonyms: bool, documentation: bool) -> Tree:
    return {
        "name": entry.name,
        "value": entry.value,
        "read_only": entry.read_only,
        "config_source": int(entry.source),
        "is_sensitive": entry.sensitive,
        "synonyms": [
            {"name": s.name, "value": s.value, "source": int(s.source)} for s in entry.synonyms
        ]
        if synonyms
        else [],
        "config_type": int(entry.type),
        "documentation": entry.documentation if documentation else None,
    }
