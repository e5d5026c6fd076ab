"""``async with`` for the client's resources: enter returns the object, exit closes it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

__all__ = ["AsyncClosing"]


class AsyncClosing(ABC):
    """Base of client objects used as ``async with X(...) as x:``; :meth:`close` is called
    on the way out, whatever the outcome (it must be idempotent)."""

    @abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
