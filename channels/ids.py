"""Sortable message ids (ULID layout), assigned by the hub.

An id is 26 characters of Crockford base32: 48 bits of Unix time in
milliseconds, then 80 bits that are random for the first id of a millisecond
and incremented for the next ones. So ids compare as strings in the order the
hub assigned them, which is what ``since`` replay and the client's dedupe rely
on, even for many ids in one millisecond or a clock that steps back.

Pure: the clock and the randomness are arguments.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = [
    "ZERO_ID",
    "IdGenerator",
    "id_for_time",
    "id_time_ms",
    "id_timestamp",
    "is_id",
]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(_ALPHABET)}
_ID_RE = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}\Z")
_RANDOM_BITS = 80
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1
_TIME_MAX = (1 << 48) - 1

ZERO_ID = "0" * 26
"""Sorts before every real id: ``since=ZERO_ID`` replays everything retained."""


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def _decode(text: str) -> int:
    value = 0
    for c in text:
        value = (value << 5) | _DECODE[c]
    return value


def is_id(text: object) -> bool:
    """Whether ``text`` is a syntactically valid id."""
    return isinstance(text, str) and _ID_RE.match(text) is not None


def id_time_ms(message_id: str) -> int:
    """The Unix time in milliseconds encoded in ``message_id``."""
    return _decode(message_id) >> _RANDOM_BITS


def id_timestamp(message_id: str) -> str:
    """The id's time as ISO 8601 with milliseconds and ``Z`` (the ``ts`` of a message)."""
    ms = id_time_ms(message_id)
    when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def id_for_time(ms: int) -> str:
    """The smallest id of millisecond ``ms``: every id assigned before ``ms`` sorts below it."""
    return _encode(max(0, min(ms, _TIME_MAX)) << _RANDOM_BITS)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _random80() -> int:
    return int.from_bytes(os.urandom(10), "big")


class IdGenerator:
    """Monotonic id source: every id it returns sorts after the previous one.

    ``after`` seeds it with the largest id already stored, so a hub restarted
    on the same file (possibly with its clock set back) never reuses or
    undercuts an id.
    """

    def __init__(
        self,
        *,
        after: str | None = None,
        clock: Callable[[], int] = _now_ms,
        random: Callable[[], int] = _random80,
    ) -> None:
        self._clock = clock
        self._random = random
        self._last_ms = -1
        self._last_rand = 0
        if after is not None:
            value = _decode(after)
            self._last_ms = value >> _RANDOM_BITS
            self._last_rand = value & _RANDOM_MAX

    def new(self) -> str:
        """The next id."""
        now = self._clock()
        if now > self._last_ms:
            # A fresh millisecond: start from random bits, but leave headroom so a
            # burst in the same millisecond can increment without overflowing.
            self._last_ms = now
            self._last_rand = self._random() & (_RANDOM_MAX >> 1)
        elif self._last_rand < _RANDOM_MAX:
            self._last_rand += 1
        else:
            # 2**80 ids in one millisecond cannot happen; borrow the next one anyway.
            self._last_ms += 1
            self._last_rand = 0
        return _encode((self._last_ms << _RANDOM_BITS) | self._last_rand)
