"""Typed config definitions and their checks, as Kafka's ``ConfigDef`` has them.

A :class:`ConfigKey` names a config's type (the ``config_type`` DescribeConfigs v3+
answers), its default, what values it accepts and its documentation. :func:`parse` turns
the text a client sent into a value as ``ConfigDef.parseType`` and the key's validator
do, and on a bad value raises :class:`ConfigValueError` with Kafka's own message
(``Invalid value abc for configuration retention.ms: Not a number of type LONG``), so a
tool that prints it reads what it would read from Kafka.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Union

from proto.errors import MinibrokerError

__all__ = [
    "BOOL",
    "CLASS",
    "DOUBLE",
    "DOUBLE_MAX",
    "INT",
    "INT_MAX",
    "LIST",
    "LONG",
    "LONG_MAX",
    "PASSWORD",
    "SHORT",
    "STR",
    "ConfigKey",
    "ConfigType",
    "ConfigValue",
    "ConfigValueError",
    "at_least",
    "between",
    "in_list",
    "one_of",
    "parse",
    "to_string",
]

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_COMMA = re.compile(r"\s*,\s*")

ConfigValue = Union[bool, int, float, str, list[str]]  # noqa: UP007 (a runtime alias)


class ConfigType(enum.IntEnum):
    """``ConfigDef.Type``, numbered as DescribeConfigs' ``config_type`` numbers them."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


# Short names for the definition tables (broker_config_def, topic_config_def), and the
# defaults Kafka writes as a type's maximum, as DescribeConfigs shows them.
INT, LONG, SHORT, DOUBLE = ConfigType.INT, ConfigType.LONG, ConfigType.SHORT, ConfigType.DOUBLE
BOOL, STR, LIST = ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.LIST
PASSWORD, CLASS = ConfigType.PASSWORD, ConfigType.CLASS
INT_MAX = str(INT32[1])
LONG_MAX = str(INT64[1])
DOUBLE_MAX = "1.7976931348623157E308"


class ConfigValueError(MinibrokerError, ValueError):
    """Kafka's ``ConfigException``: a value that does not parse or is out of range."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        super().__init__(f"Invalid value {value} for configuration {name}: {reason}")
        self.name = name


Validator = Callable[[str, ConfigValue], None]
"""Raises ConfigValueError for a parsed value the config does not accept."""


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One config's definition (Kafka's ``ConfigDef.ConfigKey``)."""

    name: str
    type: ConfigType
    default: str | None
    """The default as text (as DescribeConfigs shows it); None: the config has none."""
    documentation: str
    validator: Validator | None = None

    @property
    def sensitive(self) -> bool:
        """Kafka's ``KafkaConfig.maybeSensitive``: passwords are never shown."""
        return self.type is ConfigType.PASSWORD


def parse(key: ConfigKey, text: str) -> ConfigValue:
    """``text`` as a value of ``key``'s type, validated; ConfigValueError otherwise."""
    value = _parse_type(key.name, text, key.type)
    if key.validator is not None:
        key.validator(key.name, value)
    return value


def to_string(value: ConfigValue, kind: ConfigType) -> str:
    """``ConfigDef.convertToString``: how a parsed value is shown."""
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind is ConfigType.DOUBLE:
        return repr(float(value))
    return str(value)


def _parse_type(name: str, raw: str, kind: ConfigType) -> ConfigValue:
    text = raw.strip()
    if kind is ConfigType.BOOLEAN:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ConfigValueError(name, raw, "Expected value to be either true or false")
    if kind in (ConfigType.STRING, ConfigType.PASSWORD, ConfigType.CLASS):
        return text
    if kind is ConfigType.LIST:
        return [] if not text else _COMMA.split(text)
    if kind in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        low, high = {
            ConfigType.INT: INT32,
            ConfigType.LONG: INT64,
            ConfigType.SHORT: (-(2**15), 2**15 - 1),
        }[kind]
        if re.fullmatch(r"[-+]?[0-9]+", text) and low <= int(text) <= high:
            return int(text)
        raise ConfigValueError(name, raw, f"Not a number of type {kind.name}")
    if kind is ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise ConfigValueError(name, raw, "Not a number of type DOUBLE") from None
    raise ConfigValueError(name, raw, f"cannot parse a value of type {kind.name}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def at_least(low: float) -> Validator:
    """``ConfigDef.Range.atLeast``."""

    def check(name: str, value: ConfigValue) -> None:
        assert isinstance(value, int | float)
        if value < low:
            raise ConfigValueError(name, value, f"Value must be at least {_number(low)}")

    return check


def between(low: float, high: float) -> Validator:
    """``ConfigDef.Range.between``."""

    def check(name: str, value: ConfigValue) -> None:
        assert isinstance(value, int | float)
        if value < low:
            raise ConfigValueError(name, value, f"Value must be at least {_number(low)}")
        if value > high:
            raise ConfigValueError(name, value, f"Value must be no more than {_number(high)}")

    return check


def one_of(*choices: str) -> Validator:
    """``ConfigDef.ValidString.in``: exactly one of ``choices`` (case matters)."""

    def check(name: str, value: ConfigValue) -> None:
        if value not in choices:
            raise ConfigValueError(name, value, f"String must be one of: {', '.join(choices)}")

    return check


def in_list(choices: Sequence[str]) -> Validator:
    """``ConfigDef.ValidList.in``: every element one of ``choices``."""

    def check(name: str, value: ConfigValue) -> None:
        assert isinstance(value, list)
        for element in value:
            if element not in choices:
                raise ConfigValueError(
                    name, element, f"String must be one of: {', '.join(choices)}"
                )

    return check
