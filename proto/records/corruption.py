"""The error of a record batch that is not valid, shared by the batch format and its codecs."""

from __future__ import annotations

from proto.errors import MinibrokerError

__all__ = ["CorruptRecordError"]


class CorruptRecordError(MinibrokerError, ValueError):
    """A record batch (or a buffer of them) that is not a valid v2 batch.

    The message says exactly what is wrong and where, e.g. ``batch at position 0: CRC
    mismatch (stored 0x1234abcd, computed 0x89ef0123)``. Kafka's CORRUPT_MESSAGE.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        """What is wrong, for a person."""
