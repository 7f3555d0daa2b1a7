"""The six MCP servers every question is asked with, as ``mcpServers`` entries.

- ``kcp``: the bundled ``asyncai-mcp-kcp``, read-only, in front of the fake
  ``kubectl`` of ``tests/fakes`` (behind a thin filter that honours
  ``--namespace``, ``--selector`` and ``--field-selector``, which the fake
  ignores), reading the world's fixtures;
- ``simple``: the bundled ``http_get``, as ``asyncai up`` adds it;
- ``time``, ``fetch``, ``git``, ``sqlite``: third-party servers from PyPI,
  pinned, each in a venv of its own under
  ``$XDG_CACHE_HOME/asyncai/bench-servers/`` (default ``~/.cache``), made with
  uv (the dev extra's) on first use, as a user would run them with ``uvx``. One
  venv each, because ``mcp-server-sqlite`` still needs ``mcp<2`` while the
  others do not. uv rather than the stdlib's venv and pip: it makes the four in
  seconds where pip took 2 min 45 s, and ``make test`` makes them on every
  fresh CI machine.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.questions.core import SERVERS, World

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"

#: The kcp the kcp server finds (its kubeconfig's name in the kcp directory).
KCP_NAME = "shop"


@dataclass(frozen=True)
class Package:
    """A third-party server: what pip installs into its venv, the command it
    runs and the arguments it gets (given the world)."""

    requirements: tuple[str, ...]
    command: str
    args: Callable[[World], list[str]]


#: Pinned, so every run asks the same tools; change a pin and its venv is made again.
PACKAGES: dict[str, Package] = {
    "time": Package(
        ("mcp-server-time==2026.10.19",),
        "mcp-server-time",
        lambda world: ["--local-timezone", "UTC"],
    ),
    "fetch": Package(
        ("mcp-server-fetch==2026.10.24",),
        "mcp-server-fetch",
        # the questions' pages are on the loopback server, which this version refuses
        # unless told; it has no robots.txt (the check would cost a request a fetch)
        lambda world: ["--ignore-robots-txt", "--allow-private-ips"],
    ),
    "git": Package(
        ("mcp-server-git==2026.10.19",),
        "mcp-server-git",
        lambda world: ["--repository", str(world.repo)],
    ),
    "sqlite": Package(
        # 2025.4.25 imports mcp.server.stdio and the 1.x low-level API: mcp 2 broke both
        ("mcp-server-sqlite==2025.4.25", "mcp<2"),
        "mcp-server-sqlite",
        lambda world: ["--db-path", str(world.db)],
    ),
}


def venvs_dir() -> Path:
    """Where the third-party servers' venvs live."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "asyncai" / "bench-servers"


def _stamp(package: Package) -> str:
    return json.dumps({"python": sys.version.split()[0], "requirements": package.requirements})


def venv_of(name: str) -> Path:
    """The venv of third-party server ``name`` (it may not exist yet)."""
    return venvs_dir() / name


def installed(name: str) -> bool:
    """Whether ``name``'s venv holds its pinned requirements for this Python."""
    stamp = venv_of(name) / "asyncai-requirements.json"
    return stamp.is_file() and stamp.read_text() == _stamp(PACKAGES[name])


def install(name: str, report: Callable[[str], None] = lambda s: None) -> Path:
    """Make ``name``'s venv with uv, unless it is there with the same pins; its path.

    Raises :class:`RuntimeError` with uv's output when uv fails.
    """
    package = PACKAGES[name]
    where = venv_of(name)
    if installed(name):
        return where
    report(f"installing {' '.join(package.requirements)} into {where}")
    shutil.rmtree(where, ignore_errors=True)
    uv = [sys.executable, "-m", "uv", "--quiet"]
    for step in (
        [*uv, "venv", "--python", sys.executable, str(where)],
        [*uv, "pip", "install", "--python", str(where / "bin" / "python"), *package.requirements],
    ):
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"uv could not install {name}'s server:\n{done.stdout}{done.stderr}")
    (where / "asyncai-requirements.json").write_text(_stamp(package))
    return where


def install_all(report: Callable[[str], None] = lambda s: None) -> None:
    """Every third-party server's venv (those already made are kept)."""
    for name in PACKAGES:
        install(name, report)


# The fake kubectl ignores namespaces and selectors; this filter in front of it applies
# them to its JSON output, so a model that passes namespace= gets what kubectl would give.
KUBECTL_FILTER = r"""#!PYTHON
import json, os, subprocess, sys

argv = sys.argv[1:]
done = subprocess.run([sys.executable, os.environ["BENCH_FAKE_KUBECTL"], *argv],
                      capture_output=True, text=True)
sys.stderr.write(done.stderr)
if done.returncode != 0 or not done.stdout.lstrip().startswith("{"):
    sys.stdout.write(done.stdout)
    sys.exit(done.returncode)
obj = json.loads(done.stdout)
opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)

def dig(o, path):
    for part in path.split("."):
        o = o.get(part) if isinstance(o, dict) else None
    return o

def keep(item):
    ns = opts.get("namespace")
    if ns and item.get("metadata", {}).get("namespace") != ns:
        return False
    for cond in filter(None, opts.get("selector", "").split(",")):
        k, _, v = cond.partition("=")
        if (item.get("metadata", {}).get("labels") or {}).get(k) != v:
            return False
    for cond in filter(None, opts.get("field-selector", "").split(",")):
        k, _, v = cond.partition("=")
        if str(dig(item, k)) != v:
            return False
    return True

if "items" in obj:
    obj["items"] = [i for i in obj["items"] if keep(i)]
elif "metadata" in obj and not keep(obj):
    name = obj["metadata"].get("name")
    sys.stderr.write(f'Error from server (NotFound): "{name}" not found\n')
    sys.exit(1)
print(json.dumps(obj, indent=2))
"""


def kubeconfig(server: str) -> str:
    """A kubeconfig (JSON is YAML) whose current context points at ``server``."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "root",
            "clusters": [{"name": "kcp", "cluster": {"server": server}}],
            "contexts": [{"name": "root", "context": {"cluster": "kcp", "user": "admin"}}],
            "users": [{"name": "admin", "user": {"token": "t"}}],
        }
    )


#: The bundled http_get server, as ``asyncai up`` adds it (this checkout's code).
SIMPLE_SERVER: dict[str, Any] = {
    "command": sys.executable,
    "args": ["-m", "servers.simple"],
    "env": {"PYTHONPATH": str(ROOT)},
    "cwd": str(ROOT),
}


def kcp_server(fixtures: Path, scratch: Path, listener: socket.socket) -> dict[str, Any]:
    """The bundled kcp server over ``fixtures``: the kubectl filter and the kcp
    directory go into ``scratch``; ``listener`` (open while the server is used) is
    the port its kubeconfig names, so ``list_kcps`` reports the kcp running."""
    for name in ("api-resources.txt", "workspaces.tenancy.kcp.io.json"):
        if not (fixtures / name).exists():  # kubectl's own, unless the data module wrote one
            shutil.copy(FAKES / "kcp_fixtures" / name, fixtures / name)
    bin_dir = scratch / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(KUBECTL_FILTER.replace("#!PYTHON", f"#!{sys.executable}", 1))
    kubectl.chmod(0o755)
    kcps = scratch / "kcps"
    kcps.mkdir(exist_ok=True)
    port = listener.getsockname()[1]
    (kcps / f"{KCP_NAME}.kubeconfig").write_text(
        kubeconfig(f"https://127.0.0.1:{port}/clusters/root")
    )
    path = os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    return {
        "command": sys.executable,
        "args": ["-m", "servers.kcp", "--readonly"],
        "env": {
            "PATH": path,
            "ASYNCAI_KCP_DIR": str(kcps),
            "FAKE_KUBECTL_FIXTURES": str(fixtures),
            "BENCH_FAKE_KUBECTL": str(FAKES / "kubectl"),
            "PYTHONPATH": str(ROOT),
        },
        "cwd": str(ROOT),
    }


def server_entries(world: World, scratch: Path, listener: socket.socket) -> dict[str, Any]:
    """All six servers for ``world``, in :data:`SERVERS` order (the routing priority).

    The third-party venvs must be installed (:func:`install_all`).
    """
    entries: dict[str, Any] = {
        "kcp": kcp_server(world.kcp_fixtures, scratch, listener),
        "simple": SIMPLE_SERVER,
    }
    for name, package in PACKAGES.items():
        entries[name] = {
            "command": str(install(name) / "bin" / package.command),
            "args": package.args(world),
        }
    assert tuple(entries) == SERVERS, "core.SERVERS names the servers this module starts"
    return entries
