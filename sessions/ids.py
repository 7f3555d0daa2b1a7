"""Thread keys, session ids and timestamps: pure functions, no I/O.

A thread is ``(channel, thread id)``. Its key in the database is
``"<channel>/<thread id>"`` with ``%`` and ``/`` in the thread id
percent-encoded, so the key is readable for the usual ids (hub ids are
ULIDs, which have neither) and never collides: the last ``/`` always
separates the two parts. Claude Code session ids are UUIDs, so a thread's
``sessionId`` is a UUID 5 of its key, the same on every machine.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from urllib.parse import quote, unquote

__all__ = [
    "SESSION_NAMESPACE",
    "iso_utc",
    "normalize_timestamp",
    "now_iso",
    "parse_since",
    "session_id",
    "split_thread_key",
    "thread_key",
]

# Fixed forever: changing it would change every stored thread's sessionId.
SESSION_NAMESPACE = uuid.UUID("6d3f7a52-2c1b-5e0a-9a55-61737969616e")

_FIRST = "0001-01-01T00:00:00.000Z"  # the first and last moments the format holds
_LAST = "9999-12-31T23:59:59.999Z"


def thread_key(channel: str, thread_id: str) -> str:
    """The primary key of thread ``(channel, thread_id)``."""
    if not channel or not thread_id:
        raise ValueError("a thread needs a channel and a thread id")
    return f"{channel}/{quote(thread_id, safe='')}"


def split_thread_key(key: str) -> tuple[str, str]:
    """The ``(channel, thread_id)`` of a thread key (the inverse of ``thread_key``)."""
    channel, sep, encoded = key.rpartition("/")
    if not sep or not channel or not encoded:
        raise ValueError(f"not a thread key: {key!r}")
    return channel, unquote(encoded)


def session_id(channel: str, thread_id: str) -> str:
    """The Claude Code ``sessionId`` of a thread: a UUID 5 of its key."""
    return str(uuid.uuid5(SESSION_NAMESPACE, thread_key(channel, thread_id)))


def iso_utc(moment: datetime) -> str:
    """``moment`` in the one format the store keeps: ``2026-11-29T18:00:00.000Z``.

    One fixed-width format in UTC makes text comparison the same as time
    comparison, which is what the ``started``/``ts`` indexes rely on.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:
        # 0001-01-01T00:00+01:00 or 9999-12-31T23:00-05:00: before or after any
        # moment datetime holds in UTC, so the first or last one compares the same
        return _FIRST if moment.year == 1 else _LAST
    # %Y is not zero-padded below year 1000 on every libc: the width must be fixed
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}."
        f"{moment.microsecond // 1000:03d}Z"
    )


def now_iso() -> str:
    """The current time in the store's format."""
    return iso_utc(datetime.now(UTC))


def normalize_timestamp(value: str) -> str:
    """An ISO 8601 timestamp (naive means UTC) rewritten in the store's format.

    Raises ``ValueError`` naming the value when it is not ISO 8601.
    """
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not an ISO 8601 timestamp: {value!r}") from exc
    return iso_utc(moment)


def parse_since(value: str) -> str:
    """A ``--since`` bound: a date (``2026-11-29``, midnight UTC) or an ISO datetime.

    Returns the bound in the store's format; raises ``ValueError`` with a
    message fit for a person otherwise.
    """
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"not a date or ISO datetime: {value!r} (try 2026-11-29 or 2026-11-29T18:00:00Z)"
        ) from None
    return iso_utc(moment)
