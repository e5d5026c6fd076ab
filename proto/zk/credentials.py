"""ZooKeeper credentials and the secure ACL (Kafka's ``zookeeper.set.acl``).

A leaf module: the broker config reads the credentials, the ZooKeeper layer uses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kazoo.security import CREATOR_ALL_ACL, READ_ACL_UNSAFE

from proto.errors import MinibrokerError

SECURE_ACL = [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]
"""Kafka's secure ACL: everything for the identity that created the znode (the brokers'
shared digest), reading for the world."""

SENSITIVE_ACL = [*CREATOR_ALL_ACL]
"""Kafka's ACL of a sensitive znode (``ZkData.defaultAcls``): the secure ACL without the
world's read, for the secrets under :data:`proto.zk.znodes.SENSITIVE_ROOT_PATHS`."""


@dataclass(frozen=True)
class ZkCredentials:
    """A ZooKeeper session's digest identity, and whether its znodes get the secure ACL.

    ``digest`` is ``user:password`` (ZooKeeper's ``digest`` scheme; the file named by
    ``zookeeper.auth.digest.file``). Every broker of a cluster uses the same one, so each may
    change what another created, and an outsider without it can read but change nothing.
    """

    digest: str
    set_acl: bool = True

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data`` for a session of this identity."""
        return [("digest", self.digest)]

    def __repr__(self) -> str:
        user = self.digest.partition(":")[0]
        return f"ZkCredentials(user={user!r}, set_acl={self.set_acl})"


class ZkCredentialsError(MinibrokerError):
    """The digest file is missing, unreadable or not ``user:password``."""


def read_digest_file(path: Path | str, *, set_acl: bool) -> ZkCredentials:
    """The ``user:password`` in ``path`` (one line; surrounding whitespace ignored)."""
    try:
        text = Path(path).read_text().strip()
    except OSError as err:
        raise ZkCredentialsError(
            f"cannot read zookeeper.auth.digest.file {path}: {err.strerror or err}"
        ) from err
    user, sep, password = text.partition(":")
    if not sep or not user or not password or "\n" in text:
        raise ZkCredentialsError(
            f"zookeeper.auth.digest.file {path}: expected one line user:password"
        )
    return ZkCredentials(text, set_acl)
