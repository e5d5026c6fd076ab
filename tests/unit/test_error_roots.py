"""One error root: every error the project raises on purpose is a ``MinibrokerError``, so
the CLI reports each as one line, and no two errors share a name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import defaultdict

import pytest

import broker
import chaos
import client
import controller
import deploy
import proto
from broker.replication.replica_manager import _error_of
from proto.errors import MessageTooLargeError, MinibrokerError
from proto.wire.minibroker_pb2 import ErrorCode

PACKAGES = (proto, broker, controller, client, deploy, chaos)
SKIP = ("proto.wire.minibroker_pb2", "proto.wire.minibroker_pb2_grpc", "proto.wire.generate")


def _project_errors() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for package in PACKAGES:
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.startswith(SKIP):
                continue
            module = importlib.import_module(info.name)
            for _, value in inspect.getmembers(module, inspect.isclass):
                if (
                    issubclass(value, BaseException)
                    and value.__module__ == module.__name__
                    and not value.__name__.startswith("_")  # a module's own control flow
                ):
                    found.append(value)
    return found


ERRORS = _project_errors()


def test_the_project_defines_errors_to_check() -> None:
    assert len(ERRORS) > 50


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: f"{e.__module__}.{e.__qualname__}")
def test_every_error_derives_from_the_one_root(error: type[BaseException]) -> None:
    assert issubclass(error, MinibrokerError)


def test_no_two_errors_share_a_name() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for error in ERRORS:
        by_name[error.__name__].append(error.__module__)
    assert {name: mods for name, mods in by_name.items() if len(mods) > 1} == {}


def test_a_partition_error_travels_without_its_code_name_so_the_client_adds_it_once() -> None:
    code, message = _error_of(MessageTooLargeError("batch of 9 bytes exceeds 5"))
    assert (code, message) == (ErrorCode.MESSAGE_TOO_LARGE, "batch of 9 bytes exceeds 5")
