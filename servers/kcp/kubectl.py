"""Running kubectl: argv lists only (never a shell), bounded, errors as text.

Every call names its kubeconfig (``--kubeconfig``) and its workspace (the
kubeconfig's server with ``/clusters/<workspace>``, passed as ``--server``),
so nothing depends on the kubeconfig's current workspace and calls on
different kcps and workspaces run side by side. Object reads and writes carry
``-o json``. Values go in as ``--flag=value`` tokens or checked positionals
(a positional may not start with ``-``), so no argument can become a flag.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["Kubectl", "KubectlError", "check_positional", "parse_api_resources"]


class KubectlError(Exception):
    """kubectl failed or could not run; the message carries its stderr in full."""


def check_positional(kind: str, value: str) -> str:
    """A resource, name or pod as a positional argument, never a flag."""
    if not value or value.startswith("-") or any(c.isspace() for c in value):
        raise KubectlError(f"invalid {kind} {value!r}")
    return value


class Kubectl:
    """kubectl with one kubeconfig and workspace URL per call."""

    def __init__(self, binary: str = "kubectl", *, timeout: float = 60.0) -> None:
        self.binary = binary
        self.timeout = timeout

    def argv(self, kubeconfig: str, server: str | None, args: Sequence[str]) -> list[str]:
        """The full argv of one call."""
        argv = [self.binary, f"--kubeconfig={kubeconfig}"]
        if server is not None:
            argv.append(f"--server={server}")
            # kubectl's own bound on API requests, inside ours on the process.
            argv.append(f"--request-timeout={max(1, int(self.timeout) - 5)}s")
        argv.extend(args)
        return argv

    async def run(
        self,
        kubeconfig: str,
        server: str | None,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
    ) -> str:
        """stdout of one kubectl call; :class:`KubectlError` on a non-zero exit."""
        argv = self.argv(kubeconfig, server, args)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise KubectlError(f"cannot run {self.binary}: {exc}") from exc
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await process.communicate(stdin)
        except BaseException as exc:
            # Timed out or cancelled (the client gave up): no orphan kubectl.
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            if isinstance(exc, TimeoutError):
                raise KubectlError(
                    f"kubectl did not finish within {self.timeout:g}s: {' '.join(args)}"
                ) from exc
            raise
        if process.returncode != 0:
            message = err.decode("utf-8", errors="replace").strip() or "(no stderr)"
            raise KubectlError(f"kubectl exited with {process.returncode}: {message}")
        return out.decode("utf-8", errors="replace")

    async def json(
        self,
        kubeconfig: str,
        server: str | None,
        args: Sequence[str],
        *,
        stdin: bytes | None = None,
    ) -> Any:
        """A kubectl call whose stdout is JSON."""
        out = await self.run(kubeconfig, server, args, stdin=stdin)
        try:
            return json.loads(out)
        except ValueError as exc:
            raise KubectlError(f"kubectl printed no JSON: {exc}; output: {out}") from exc


def parse_api_resources(table: str) -> list[dict[str, Any]]:
    """``kubectl api-resources -o wide`` as dicts.

    Columns are cut at the header's offsets (SHORTNAMES and CATEGORIES are
    often empty, so splitting on blanks would shift them). Verbs and
    categories may be ``a,b`` or ``[a b]`` depending on the kubectl version.
    """
    lines = [line for line in table.splitlines() if line.strip()]
    if not lines:
        return []
    columns = list(re.finditer(r"\S+", lines[0]))
    names = [m.group() for m in columns]
    starts = [m.start() for m in columns]
    resources: list[dict[str, Any]] = []
    for line in lines[1:]:
        cells: dict[str, str] = {}
        for i, name in enumerate(names):
            end = starts[i + 1] if i + 1 < len(starts) else None
            cells[name] = line[starts[i] : end].strip()
        resources.append(
            {
                "name": cells.get("NAME", ""),
                "short_names": _list_cell(cells.get("SHORTNAMES", "")),
                "api_version": cells.get("APIVERSION", ""),
                "namespaced": cells.get("NAMESPACED", "").lower() == "true",
                "kind": cells.get("KIND", ""),
                "verbs": _list_cell(cells.get("VERBS", "")),
                "categories": _list_cell(cells.get("CATEGORIES", "")),
            }
        )
    return resources


def _list_cell(cell: str) -> list[str]:
    cell = cell.strip().strip("[]")
    return [part for part in cell.replace(",", " ").split() if part]
