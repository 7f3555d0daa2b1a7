"""The hub's tokens file: which bearer token is which nick.

One token per line, then whitespace, then the nick; blank lines and lines
starting with ``#`` are ignored::

    # token                              nick
    3f0c9d2e6a0b4b0e9a7f1c2d3e4f5a6b     alice
    9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d     asyncai

Keep the file readable by the hub's user only; several tokens may map to the
same nick (one per device), a token may not appear twice.
"""

from __future__ import annotations

from pathlib import Path

from channels.errors import ChannelConfigError
from channels.protocol import is_nick

__all__ = ["load_tokens", "parse_tokens"]

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


def load_tokens(path: str | Path) -> dict[str, str]:
    """Read and parse a tokens file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ChannelConfigError(f"cannot read tokens file {path}: {exc}") from exc
    return parse_tokens(text, source=str(path))
