"""Finding kcp servers: kubeconfigs in a directory, and picking one (spec A8).

A *kcp* is one kubeconfig. In the kcp directory (``--kcp-dir`` or
``ASYNCAI_KCP_DIR``) these are found, sorted by id:

- ``<id>.kubeconfig``, ``<id>.yaml``, ``<id>.yml``, ``<id>.json``: id is the stem;
- ``<id>/admin.kubeconfig`` (the layout ``kcp start`` writes under ``.kcp/``):
  id is the sub-directory's name.

Each one's ``server`` is its current context's cluster URL (read with
``kubectl config view --minify -o json``, so no YAML parser is needed), and
``running`` is a cheap check: a TCP connection to that URL's host and port
opens within :data:`PROBE_TIMEOUT`. Nothing is authenticated or requested.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "KCP_DIR_ENV",
    "DiscoveryError",
    "KcpRef",
    "find_kubeconfigs",
    "probe",
    "resolve_kcp",
    "server_base",
    "validate_workspace",
    "workspace_url",
]

KCP_DIR_ENV = "ASYNCAI_KCP_DIR"
SUFFIXES = (".kubeconfig", ".yaml", ".yml", ".json")
#: For the ``running`` check: a kcp on this machine or the LAN answers at once.
PROBE_TIMEOUT = 1.0

#: A kcp logical-cluster path: ``root``, ``root:org:team-a``.
_WORKSPACE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(:[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


class DiscoveryError(Exception):
    """No usable kcp for a call; the message lists what exists."""


@dataclass(frozen=True)
class KcpRef:
    """One discovered kubeconfig."""

    id: str
    kubeconfig: str


def find_kubeconfigs(directory: str | None) -> tuple[list[KcpRef], list[str]]:
    """The kubeconfigs in ``directory``, and problems found on the way."""
    if not directory:
        return [], [f"no kcp directory configured: pass --kcp-dir or set {KCP_DIR_ENV}"]
    root = Path(directory)
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        return [], [f"cannot read kcp directory {directory}: {exc.strerror or exc}"]
    found: dict[str, KcpRef] = {}
    errors: list[str] = []
    for entry in entries:
        if entry.is_dir():
            candidate = entry / "admin.kubeconfig"
            if candidate.is_file():
                ident = entry.name
            else:
                continue
        elif entry.is_file() and entry.suffix in SUFFIXES:
            candidate, ident = entry, entry.stem
        else:
            continue
        if ident in found:
            errors.append(f"kcp id {ident!r} found twice; using {found[ident].kubeconfig}")
            continue
        found[ident] = KcpRef(ident, str(candidate.resolve()))
    return list(found.values()), errors


def resolve_kcp(requested: str | None, kcps: list[KcpRef], errors: list[str]) -> KcpRef:
    """The kcp a call means: the named one, or the only one (spec A8)."""
    ids = ", ".join(k.id for k in kcps)
    if requested is not None:
        for ref in kcps:
            if ref.id == requested:
                return ref
        if kcps:
            raise DiscoveryError(f"unknown kcp {requested!r}; known kcps: {ids}")
    elif len(kcps) == 1:
        return kcps[0]
    elif kcps:
        raise DiscoveryError(f"{len(kcps)} kcps found, pass kcp= one of: {ids}")
    detail = "; ".join(errors) or "the kcp directory holds no kubeconfig"
    raise DiscoveryError(f"no kcp found ({detail})")


def validate_workspace(workspace: str) -> str:
    """``workspace`` if it is a kcp path; it becomes part of a URL."""
    if not _WORKSPACE.match(workspace):
        raise DiscoveryError(
            f"invalid workspace {workspace!r}: expected a kcp path such as root or root:org:team"
        )
    return workspace


def server_base(server: str) -> str:
    """The kcp front URL of a kubeconfig server: the part before ``/clusters/``."""
    parts = urlsplit(server)
    path = parts.path
    index = path.find("/clusters/")
    if index >= 0:
        path = path[:index]
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/"), "", ""))


def workspace_url(server: str, workspace: str) -> str:
    """The URL that addresses ``workspace`` on the kcp behind ``server``."""
    return f"{server_base(server)}/clusters/{validate_workspace(workspace)}"


async def probe(server: str, seconds: float = PROBE_TIMEOUT) -> bool:
    """Whether a TCP connection to the server URL's host and port opens."""
    parts = urlsplit(server)
    if not parts.hostname:
        return False
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    try:
        async with asyncio.timeout(seconds):
            _reader, writer = await asyncio.open_connection(parts.hostname, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    try:
        async with asyncio.timeout(seconds):
            await writer.wait_closed()
    except (OSError, TimeoutError):
        pass  # the probe already answered; a slow close changes nothing
    return True
