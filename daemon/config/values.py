"""The kinds of value a config key holds: strict text, counts, seconds, sizes, paths.

Each is an ``Annotated`` type that pydantic reads when it validates the config
(:mod:`daemon.config.schema`) and that type checkers read as the plain type.
Strict, because TOML has its own types and a quoted number is a mistake worth
naming (``request_timeout = "300"``); the one exception is a number of seconds,
where an integer is as good as a float. Sizes take units (:func:`parse_size`);
a path may start with ``~`` (:func:`expand_home`); an address to listen on is
``HOST:PORT``.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, Strict
from pydantic_core import PydanticCustomError

from daemon.errors import ConfigError

__all__ = [
    "CHANNEL_URL_ERROR",
    "LISTEN_ERROR",
    "SIZE_ERROR",
    "URL_ERROR",
    "ChannelUrl",
    "Count",
    "Flag",
    "HttpUrl",
    "Listen",
    "NonNegativeInt",
    "NonNegativeSeconds",
    "PathValue",
    "Seconds",
    "Size",
    "Text",
    "expand_home",
    "parse_size",
]

Text = Annotated[str, Strict()]
Flag = Annotated[bool, Strict()]
Count = Annotated[int, Strict(), Field(ge=1)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
# strict float still takes an int; TOML's `inf` is no time a wait can end by (a request
# that never answers would hang the daemon's caller), so a time is a finite number
Seconds = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
NonNegativeSeconds = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]

SIZE_ERROR = "size"  # the pydantic error type of a text that is not a size

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}


def parse_size(value: Any) -> Any:
    """``"4GiB"``, ``"512 MiB"``, ``"1MB"`` or ``"1024"`` as a number of bytes; others as given.

    KiB, MiB… are powers of 1024; K, KB, MB… powers of 1000. Decimal
    arithmetic, so a long number of digits is a big size, not an overflow.
    """
    if not isinstance(value, str):
        return value  # an integer, or a wrong type that the int check names
    m = _SIZE.match(value)
    if not m:
        raise PydanticCustomError(SIZE_ERROR, "not a size like 4GiB or 1048576")
    unit = (m.group(2) or "").upper().rstrip("B")
    factor = 1024 ** ("KMGT".index(unit[0]) + 1) if unit.endswith("I") else _UNITS[unit]
    return int(Decimal(m.group(1)) * factor)


Size = Annotated[int, BeforeValidator(parse_size), Strict()]


def _non_empty(value: Any) -> Any:
    """An empty string is no path (``Path("")`` would quietly be the working directory)."""
    if value == "":
        raise PydanticCustomError("path_type", "an empty path")
    return value


PathValue = Annotated[Path, BeforeValidator(_non_empty)]

LISTEN_ERROR = "listen"  # the pydantic error type of a text that is not HOST:PORT

# a name or an address (IPv6 in brackets), a colon, a port number
_LISTEN = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):([0-9]{1,5})$")


def _listen(value: Any) -> Any:
    """``"HOST:PORT"`` as given; any other text is an error the loader names."""
    if isinstance(value, str):
        m = _LISTEN.match(value)
        if not m or int(m.group(2)) > 65535:
            raise PydanticCustomError(LISTEN_ERROR, "not HOST:PORT")
    return value


Listen = Annotated[str, AfterValidator(_listen), Strict()]

URL_ERROR = "url"  # the pydantic error type of a text that is not an http(s) URL
CHANNEL_URL_ERROR = "channel_url"  # ... that is not a hub's or a NATS server's URL


def _url_check(schemes: tuple[str, ...], error: str) -> Any:
    """A validator of a URL of one of ``schemes`` with a host (and a port that is one), as
    given; any other text is the error ``error``, which the loader names at start rather
    than at the first connection (where it was a traceback, retries of a connection that
    cannot be, or an exit that systemd restarts for ever)."""

    def check(value: Any) -> Any:
        if isinstance(value, str):
            try:
                parts = urlsplit(value)
                parts.port  # noqa: B018 -- raises ValueError for a port out of range or text
            except ValueError:  # also an unclosed [IPv6
                raise PydanticCustomError(error, "not a URL of its kind") from None
            if parts.scheme.lower() not in schemes or not parts.hostname:
                raise PydanticCustomError(error, "not a URL of its kind")
        return value

    return check


HttpUrl = Annotated[str, AfterValidator(_url_check(("http", "https"), URL_ERROR)), Strict()]
ChannelUrl = Annotated[
    str, AfterValidator(_url_check(("ws", "wss", "nats", "tls"), CHANNEL_URL_ERROR)), Strict()
]


def expand_home(path: Path, key: str, where: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; an unknown user is a ConfigError."""
    try:
        return path.expanduser()
    except RuntimeError as exc:  # pathlib's word for "no such user" or "no home"
        raise ConfigError(f"key '{key}' in {where}: cannot expand {str(path)!r}: {exc}") from exc
