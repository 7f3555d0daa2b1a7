"""How a bad config value reads: pydantic's errors in the operator's words.

Pydantic checks the merged configuration against :class:`~daemon.config.schema.Config`;
:func:`config_error` turns its ``ValidationError`` into one
:class:`~daemon.errors.ConfigError` about the first offending key, in the
order the keys were written, and naming where it was written::

    unknown key 'code_mode.max_wal' in asyncai.toml (did you mean 'code_mode.max_wall'?)
    key 'model.max_rounds' in asyncai.toml must be an integer, not float 2.5
    key 'model.request_timeout' in asyncai.toml must be greater than 0, not 0.0

Values of secret-looking keys (and of ``repr=False`` fields) show as ``(hidden)``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from daemon.config.schema import SECRET_NAME, without_userinfo
from daemon.config.values import (
    CHANNEL_URL_ERROR,
    LISTEN_ERROR,
    SIZE_ERROR,
    URL_ERROR,
    parse_size,
)
from daemon.errors import ConfigError

__all__ = ["config_error", "toml_key", "unknown_key"]

_UNKNOWN = {"unexpected_keyword_argument", "extra_forbidden"}
_BOUNDS = {
    "greater_than": "greater than",
    "greater_than_equal": "at least",
    "less_than": "less than",
    "less_than_equal": "at most",
}


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")


def toml_key(parts: Sequence[str]) -> str:
    """The parts of a key as TOML writes it: ``model.api_key``, ``channel."#ops".servers``.

    A part that is no bare key (a channel's ``#``, a dot, a space) is quoted,
    so that the dots left are the ones between parts.
    """
    return ".".join(p if _BARE_KEY.match(p) else json.dumps(p, ensure_ascii=False) for p in parts)


def unknown_key(key: str, known: Iterable[str], where: str) -> str:
    """``unknown key 'KEY' in WHERE``, with the closest of ``known`` (full keys) as a guess.

    Siblings are compared without their shared parent (``max_wal`` against
    ``max_wall``), or every key of a section would look alike.
    """
    known = list(known)
    parent = key.rpartition(".")[0] + "."
    if parent == "." or not all(k.startswith(parent) for k in known):
        parent = ""  # not siblings (a misspelt section): compare whole keys
    tails = {k[len(parent) :]: k for k in known}
    close = difflib.get_close_matches(key[len(parent) :], list(tails), n=1)
    message = f"unknown key '{key}' in {where}"
    return f"{message} (did you mean '{tails[close[0]]}'?)" if close else message


# what a URL key takes, by the error type of its validator
_URLS = {
    URL_ERROR: "an http:// or https:// URL like http://127.0.0.1:8080/v1",
    CHANNEL_URL_ERROR: "ws://HOST:PORT/ (an atirc hub) or nats://HOST:PORT (NATS)",
}


def config_error(
    exc: ValidationError,
    schema: type,
    inputs: Mapping[str, Any],
    where: Callable[[str], str],
) -> ConfigError:
    """The error about the first bad key of ``inputs`` (dotted key → value as written).

    ``schema`` is the dataclass validated; ``where(key)`` names the source of
    a key (a file, an environment variable, the command line). Unknown keys and
    wrong types come before out-of-range values, as each key's type is checked
    before any bound.
    """
    order = {key: i for i, key in enumerate(inputs)}
    located = [(_locate(schema, e["loc"]), e) for e in exc.errors(include_url=False)]
    (key, owner, name), error = min(
        located,
        key=lambda item: (item[1]["type"] in _BOUNDS, order.get(item[0][0], len(order))),
    )
    source = where(key)
    kind = error["type"]
    if kind in _UNKNOWN:
        parent = key.rpartition(".")[0]
        known = [f"{parent}.{n}" if parent else n for n in _settable(owner)]
        return ConfigError(unknown_key(key, known, source))
    value = inputs.get(key, error["input"])
    if kind in _BOUNDS:  # the value compared: a size as a number of bytes, an int as float
        bound = _bound(error)
        value = parse_size(value) if isinstance(value, str) else value  # the only text bounded
        shown = float(value) if isinstance(bound, float) and _is_int(value) else value
        return ConfigError(
            f"key '{key}' in {source} must be {_BOUNDS[kind]} {_number(bound)}, not {shown}"
        )
    if kind == SIZE_ERROR:
        return ConfigError(
            f"key '{key}' in {source} must be a size like 4GiB or 1048576, not {value!r}"
        )
    if kind == LISTEN_ERROR:
        return ConfigError(
            f"key '{key}' in {source} must be HOST:PORT like 127.0.0.1:6690, not {value!r}"
        )
    if kind == "finite_number":  # TOML's inf or nan where a time is asked
        return ConfigError(f"key '{key}' in {source} must be a finite number, not {value}")
    if kind in _URLS:  # a user and password in the URL are not repeated
        return ConfigError(
            f"key '{key}' in {source} must be {_URLS[kind]}, not {without_userinfo(str(value))!r}"
        )
    hint = _hints(owner).get(name)
    shown = "(hidden)" if _is_secret(owner, name) else repr(value)
    return ConfigError(
        f"key '{key}' in {source} must be {_type_name(hint)}, not {type(value).__name__} {shown}"
    )


def _locate(schema: type, loc: tuple[int | str, ...]) -> tuple[str, type, str]:
    """The key an error is about (as :func:`toml_key` writes it), the dataclass holding it,
    and its field name.

    The walk stops at the first field that is not a dataclass, or a table of
    them (``[channel."#name"]``, whose next step is a name): an error inside a
    list or a table of strings is about the whole value of its key.
    """
    owner, parts = schema, []
    i = 0
    while i < len(loc) and isinstance(loc[i], str):
        step = str(loc[i])
        parts.append(step)
        inner = _optional(_hints(owner).get(step))
        named = get_origin(inner) is dict and _is_dataclass(get_args(inner)[1])
        if named and i + 1 < len(loc) and isinstance(loc[i + 1], str):
            parts.append(str(loc[i + 1]))  # the table's name: '#ops', 'big'
            i += 1
            inner = get_args(inner)[1]
        if i + 1 >= len(loc) or not _is_dataclass(inner):
            break
        owner = inner
        i += 1
    return toml_key(parts), owner, parts[-1] if parts else ""


def _is_dataclass(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _hints(owner: type) -> dict[str, Any]:
    """The field annotations of a dataclass, ``Annotated`` stripped; nothing otherwise."""
    return get_type_hints(owner) if dataclasses.is_dataclass(owner) else {}


def _settable(owner: type) -> list[str]:
    """The keys a section takes (``init=False`` fields are filled by the loader)."""
    if not dataclasses.is_dataclass(owner):
        return []
    return [f.name for f in dataclasses.fields(owner) if f.init]


def _is_secret(owner: type, name: str) -> bool:
    if SECRET_NAME.search(name):
        return True
    if not dataclasses.is_dataclass(owner):
        return False
    return any(f.name == name and not f.repr for f in dataclasses.fields(owner))


def _optional(hint: Any) -> Any:
    """``X`` for ``X | None``; anything else as is."""
    if get_origin(hint) in (Union, types.UnionType):
        inner = [a for a in get_args(hint) if a is not type(None)]
        return inner[0] if len(inner) == 1 else hint
    return hint


def _type_name(hint: Any) -> str:
    hint = _optional(hint)
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true or false",
        Path: "a path",
    }
    if hint in names:
        return names[hint]
    origin = get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    if origin is list:
        return "a list of strings"
    if origin is dict:
        return "a table of strings"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "a table"
    return str(hint)


def _bound(error: ErrorDetails) -> Any:
    ctx = error.get("ctx") or {}
    return next(iter(ctx.values()), "?")


def _number(bound: Any) -> Any:
    """``0`` for pydantic's ``0.0``: the bound as the field's annotation wrote it."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
