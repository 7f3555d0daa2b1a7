"""What a channel name, a nick and a client id may be, and what text may go on the wire.

Pure predicates, shared by the frame parser (``protocol``), the client and
the tokens file; message ids have their own module (``ids``).
"""

from __future__ import annotations

import re

__all__ = ["CLIENT_ID_RE", "is_channel", "is_nick", "is_utf8"]

_CHANNEL_RE = re.compile(r"#[A-Za-z0-9_.\-]{1,64}\Z")
_NICK_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}\Z")
CLIENT_ID_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,128}\Z")
"""A publish's ``client_id``: 1-128 of ``[A-Za-z0-9_.:-]``."""


def is_channel(name: object) -> bool:
    """Whether ``name`` is a valid channel name: ``#`` and 1-64 of ``[A-Za-z0-9_.-]``."""
    return isinstance(name, str) and _CHANNEL_RE.match(name) is not None


def is_nick(name: object) -> bool:
    """Whether ``name`` is a valid nick: 1-64 of ``[A-Za-z0-9_.-]``."""
    return isinstance(name, str) and _NICK_RE.match(name) is not None


def is_utf8(text: str) -> bool:
    """Whether ``text`` can go out as UTF-8.

    ``json.loads`` lets lone surrogates through (``"\\ud800"``); websockets
    fails the whole connection on a text frame that holds one.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
