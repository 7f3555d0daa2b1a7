"""The hub's tokens file: which bearer token is which nick.

One token per line, then whitespace, then the nick; blank lines and lines
starting with ``#`` are ignored::

    # token                              nick
    3f0c9d2e6a0b4b0e9a7f1c2d3e4f5a6b     alice
    9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d     asyncai

The file must be readable by the hub's user only (mode 0600 or stricter):
:func:`load_tokens` refuses one that its group or others may read or write,
since anyone who reads a token can speak as its nick. Several tokens may map
to the same nick (one per device), a token may not appear twice.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from channels.errors import ChannelConfigError
from channels.names import is_nick

__all__ = ["check_private", "load_tokens", "parse_tokens"]

_MIN_TOKEN_CHARS = 16  # shorter ones are guessable


def parse_tokens(text: str, *, source: str = "tokens") -> dict[str, str]:
    """Parse the tokens file format; errors name the line (never the token)."""
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parts = stripped.split()
        if len(parts) != 2:
            raise ChannelConfigError(f"{source}:{number}: expected 'TOKEN NICK'")
        token, nick = parts
        if len(token) < _MIN_TOKEN_CHARS:
            raise ChannelConfigError(
                f"{source}:{number}: token too short (at least {_MIN_TOKEN_CHARS} characters)"
            )
        if not is_nick(nick):
            raise ChannelConfigError(
                f"{source}:{number}: invalid nick {nick!r}: 1-64 of letters, digits, '-', '_', '.'"
            )
        if token in tokens:
            raise ChannelConfigError(f"{source}:{number}: this token appears twice")
        tokens[token] = nick
    return tokens


def check_private(path: str | Path, mode: int) -> None:
    """Raise :class:`ChannelConfigError` unless ``mode`` gives group and others nothing.

    The message is one line that names the file and the fix.
    """
    if os.name == "posix" and mode & 0o077:
        raise ChannelConfigError(
            f"tokens file {path} is open to other users (mode {stat.S_IMODE(mode):04o}): "
            f"run chmod 600 {path}"
        )


def load_tokens(path: str | Path) -> dict[str, str]:
    """Read and parse a tokens file; refuse one that is not private (see the module)."""
    try:
        with open(path, encoding="utf-8") as file:
            # The mode of the file we read, not of whatever the path names a moment later.
            check_private(path, os.fstat(file.fileno()).st_mode)
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ChannelConfigError(f"cannot read tokens file {path}: {exc}") from exc
    return parse_tokens(text, source=str(path))
