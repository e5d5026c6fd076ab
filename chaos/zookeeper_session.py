"""Ending a ZooKeeper session for real, from outside the process that holds it.

A second client attaches to the session (its id and password) and closes it: the server
ends the session and deletes its ephemerals, and the owner learns it is gone when it next
talks to the server, exactly as after a real expiry. kazoo.testing's ``expire_session`` only
fakes the event on the client side. The owner may win its session back before the close
lands (it reconnects by itself), so :func:`expire_session` tries until the session is gone.
"""

from __future__ import annotations

import contextlib
import time

from kazoo.client import KazooClient

from proto.zk.sync_client import kazoo_client

__all__ = ["close_session", "expire_session"]


def close_session(hosts: str, session_id: int, password: bytes, timeout: float = 10.0) -> None:
    """Attach to the session and close it (once)."""
    thief = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=timeout)
    thief.start(timeout=timeout)
    try:
        thief.stop()  # sends closeSession for the session it holds
    finally:
        thief.close()


def expire_session(
    hosts: str, session_id: int, password: bytes, owner_path: str, timeout: float = 30.0
) -> None:
    """Close the session until the ephemeral ``owner_path`` it held is gone or owned by
    another session. Raises TimeoutError if that does not happen within ``timeout``."""
    deadline = time.monotonic() + timeout
    with kazoo_client(hosts) as observer:
        while True:
            stat = observer.exists(owner_path)
            if stat is None or int(stat.ephemeralOwner) != session_id:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"session 0x{session_id:x} still holds {owner_path}")
            # Already gone, or the server was slow: look again. (kazoo's start timeout is no
            # KazooException.)
            with contextlib.suppress(Exception):
                close_session(hosts, session_id, password)
            time.sleep(0.2)
