"""The console's tokens file: who may log in, and as which nick.

The format is the hub's tokens file (:mod:`channels.tokens`: ``TOKEN NICK``
lines, mode 0600, tokens of at least 16 characters), read by its parser, so
one habit serves both. :func:`read_tokens` turns its errors into the
operator's :class:`~daemon.errors.ConfigError` naming ``[web] tokens`` and how
to make the file; :func:`create_tokens` writes a new file with one random
token (``asyncai up``).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from channels import ChannelConfigError, load_tokens
from daemon.errors import ConfigError

__all__ = ["TOKEN_BYTES", "create_tokens", "first_token", "missing_tokens_help", "read_tokens"]

TOKEN_BYTES = 24  # 48 hex characters: far above the format's 16, never guessed


def missing_tokens_help(path: Path) -> str:
    """How to make a tokens file at ``path``: the words of the refusal to start without one."""
    return (
        f"[web] listen is set but the console's tokens file {path} does not exist "
        f"([web] tokens). Make one with a random token for your nick, readable by you only:\n"
        f"    umask 077; mkdir -p {path.parent}; "
        f"echo \"$(python3 -c 'import secrets; print(secrets.token_hex({TOKEN_BYTES}))') "
        f'operator" >> {path}\n'
        "then log in at the console with that token (or remove [web] listen)"
    )


def read_tokens(path: Path) -> dict[str, str]:
    """``{token: nick}`` of the tokens file; a :class:`ConfigError` that says how to fix it.

    A missing file, one that others may read, a short token or a bad line
    each fail with one message; the token itself is never in it.
    """
    if not path.exists():
        raise ConfigError(missing_tokens_help(path))
    try:
        tokens = load_tokens(path)
    except ChannelConfigError as exc:
        raise ConfigError(f"[web] tokens: {exc}") from exc
    if not tokens:
        raise ConfigError(
            f"[web] tokens: {path} holds no 'TOKEN NICK' line: nobody could log in. "
            + missing_tokens_help(path).split(". ", 1)[1]
        )
    return tokens


def create_tokens(path: Path, nick: str = "operator") -> str:
    """Write a new tokens file at ``path`` (mode 0600) with one random token for ``nick``.

    The token is returned. An existing file is an error (``FileExistsError``):
    it may hold tokens people use.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(TOKEN_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(
            f"# asyncai console tokens: TOKEN NICK, one a line (mode 0600)\n{token} {nick}\n"
        )
    return token


def first_token(path: Path, nick: str) -> str | None:
    """The first token of ``nick`` in the file at ``path``, if any (for a banner)."""
    for token, owner in read_tokens(path).items():
        if owner == nick:
            return token
    return None
