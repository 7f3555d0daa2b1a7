"""Who is logged in: sessions started with a token, each with its CSRF token (pure, no I/O).

A session is a random id (the cookie's value, ``HttpOnly`` and
``SameSite=Strict``, set by :mod:`daemon.web.app`) that maps to the nick its
token names in ``[web] tokens`` and to a CSRF token of its own, which every
state-changing request must carry (a form field or the ``X-CSRF-Token``
header). Sessions live in the daemon's memory: a restart logs everyone out,
and nothing secret is ever written down. A session ends after
:data:`SESSION_IDLE` seconds without a request or :data:`SESSION_MAX` seconds
in all; the table holds at most :data:`MAX_SESSIONS` (the oldest goes first),
so a script that logs in in a loop cannot grow it without bound.

The clock is injected, so expiry is tested without sleeping.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "MAX_SESSIONS",
    "SESSION_IDLE",
    "SESSION_MAX",
    "Session",
    "Sessions",
    "same_secret",
]

SESSION_IDLE = 8 * 3600.0  # a working day without a request
SESSION_MAX = 7 * 86400.0  # then a new login, whatever the activity
MAX_SESSIONS = 1000


def same_secret(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time (None: no)."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


@dataclass
class Session:
    """One logged-in browser: its id (the cookie), its nick, its CSRF token, its times."""

    id: str
    nick: str
    csrf: str
    started: float
    seen: float


class Sessions:
    """The sessions of one console; ``clock`` is ``time.monotonic`` unless a test's."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def login(self, token: str, tokens: Mapping[str, str]) -> Session | None:
        """A new session for the nick ``token`` names in ``tokens``, or None (no such token).

        Every token is compared in constant time, so the answer's timing does
        not tell how much of a guess was right.
        """
        nick = None
        for known, owner in tokens.items():
            if same_secret(token, known):
                nick = owner
        if nick is None:
            return None
        now = self._clock()
        session = Session(
            id=secrets.token_urlsafe(32),
            nick=nick,
            csrf=secrets.token_urlsafe(32),
            started=now,
            seen=now,
        )
        self._by_id[session.id] = session
        while len(self._by_id) > MAX_SESSIONS:
            self._by_id.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of this cookie value (its last use now), or None."""
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if now - session.seen > SESSION_IDLE or now - session.started > SESSION_MAX:
            del self._by_id[session_id]
            return None
        session.seen = now
        self._by_id.move_to_end(session_id)
        return session

    def logout(self, session_id: str) -> None:
        """End a session (nothing happens for an unknown id)."""
        self._by_id.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._by_id)
