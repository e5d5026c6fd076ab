"""BrokerZkClient retries a request after a connection loss and renews its session lease.

kazoo is replaced by a scripted stand-in here because a connection loss at an exact moment
cannot be produced with a real server deterministically; the real client is exercised
against ZooKeeper in tests/integration/test_broker_zk_client.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kazoo.exceptions import ConnectionLoss

from broker.zk_client import BrokerZkClient


class _Answered:
    """An already settled IAsyncResult, as kazoo's ``*_async`` calls return."""

    def __init__(self, value: Any = None, exception: BaseException | None = None) -> None:
        self.value = value
        self.exception = exception

    def successful(self) -> bool:
        return self.exception is None

    def rawlink(self, callback: Any) -> None:
        callback(self)


class _FlakyKazoo:
    """Fails the first ``failures`` requests with ConnectionLoss, then answers."""

    client_id = (0x51, b"password")
    connected = True

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def exists_async(self, path: str) -> _Answered:
        self.calls += 1
        if self.calls <= self.failures:
            return _Answered(exception=ConnectionLoss())
        return _Answered(value=("stat-of", path))


def test_a_request_is_retried_after_connection_loss_and_renews_the_lease() -> None:
    async def scenario() -> None:
        client = BrokerZkClient("127.0.0.1:1", broker_id=7, session_timeout_ms=6000)
        flaky = _FlakyKazoo(failures=2)
        client._loop = asyncio.get_running_loop()
        client._client = flaky
        client._session_id = 0x51
        assert not client.session_lease_valid()  # never confirmed
        assert await client._call("exists", "/", lambda c: c.exists_async("/")) == (
            "stat-of",
            "/",
        )
        assert flaky.calls == 3
        assert client.session_lease_valid()

    asyncio.run(scenario())
