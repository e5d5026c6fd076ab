"""Moved to :mod:`chaos.scripted_controller` (the hw-data-loss scenario uses it too);
re-exported here for tests written against the old place."""

from chaos.scripted_controller import (
    CONTROLLER_ID,
    BrokerAddress,
    LeadershipError,
    ProcessController,
    ScriptedController,
)

__all__ = [
    "CONTROLLER_ID",
    "BrokerAddress",
    "LeadershipError",
    "ProcessController",
    "ScriptedController",
]
