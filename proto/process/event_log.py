"""One log line per event, the same shape in every process: ``<component> event=<name>
key=value ...``.

A chaos run is read afterwards from the brokers' logs, so each line carries what it is about
(broker id, topic-partition, epochs) as ``key=value`` pairs that ``grep`` and a parser can
pick out. The record also carries ``event`` and ``event_fields`` (the fields as given), for
tests and log handlers that would rather not parse text.

Example::

    log_event(logger, logging.INFO, "controller", "elected", broker=1, epoch=4)
    # controller event=elected broker=1 epoch=4
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

__all__ = ["capped", "event_line", "format_value", "log_event"]

_QUOTE_IF = frozenset(' \t\n"=')


def format_value(value: object) -> str:
    """``value`` as one token: collections as ``[a,b]``, an exception as its message (its
    type if it has none), a text holding spaces, quotes or ``=`` (or nothing) in double
    quotes."""
    if isinstance(value, (list, set, frozenset)) or (
        type(value) is tuple  # a NamedTuple such as TopicPartition prints itself
    ):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return "[" + ",".join(format_value(item) for item in items) + "]"
    text = (str(value) or type(value).__name__) if isinstance(value, BaseException) else str(value)
    if not text or not _QUOTE_IF.isdisjoint(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def capped(items: Sequence[object], limit: int = 50) -> list[object]:
    """The first ``limit`` of ``items``, then ``"+N"`` for the N left out: a field naming
    every partition of a broker holding 10,000 made one line of 150 KB."""
    if len(items) <= limit:
        return list(items)
    return [*items[:limit], f"+{len(items) - limit}"]


def event_line(component: str, event: str, fields: Mapping[str, object]) -> str:
    """``<component> event=<event> key=value ...`` with the fields in the order given."""
    parts = [component, f"event={event}"]
    parts.extend(f"{key}={format_value(value)}" for key, value in fields.items())
    return " ".join(parts)


def log_event(
    logger: logging.Logger,
    level: int,
    component: str,
    event: str,
    /,
    *,
    exc_info: object = False,
    **fields: object,
) -> None:
    """Log :func:`event_line` at ``level`` (nothing is formatted when the level is off);
    ``exc_info`` as for :meth:`logging.Logger.log` (True: the exception being handled, an
    exception: that one). It is typed ``object`` so that a caller may pass its fields as
    ``**dict[str, object]``."""
    if logger.isEnabledFor(level):
        exc = exc_info if isinstance(exc_info, BaseException) else bool(exc_info)
        logger.log(
            level,
            "%s",
            event_line(component, event, fields),
            exc_info=exc,
            extra={"event": event, "event_fields": fields},
            stacklevel=2,
        )
