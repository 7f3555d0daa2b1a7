"""The runner: ``python -m bench.questions``.

python -m bench.questions --install-servers     # the third-party servers' venvs
python -m bench.questions --list                # id, split, shape, servers
python -m bench.questions --tools               # every tool of the six servers
python -m bench.questions --call git.git_log '{"repo_path": "/tmp/asyncai-bench/seed-0/repo"}'
"""

from __future__ import annotations

import argparse
import socket
import sys

from bench.questions import probe
from bench.questions.servers import install_all
from bench.questions.world import HTTP_PORT, open_world, templates
from daemon.logging import configure_logging


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.questions", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument(
        "--install-servers",
        action="store_true",
        help="make the third-party servers' venvs (pip, pinned) and exit",
    )
    parser.add_argument("--list", action="store_true", help="one line per template and exit")
    parser.add_argument(
        "--call",
        nargs=2,
        metavar=("SERVER.TOOL", "JSON-ARGS"),
        help="build the world, start all servers, call one tool and print its result as "
        "the sandbox receives it ({base_url} in JSON-ARGS: the HTTP server's URL)",
    )
    parser.add_argument("--tools", action="store_true", help="list every tool and exit")
    parser.add_argument("--seed", type=int, default=0, help="the world of --call/--tools")
    parser.add_argument(
        "--http-port",
        type=int,
        default=HTTP_PORT,
        help=f"the loopback HTTP server's port, in the web questions' text (default "
        f"{HTTP_PORT}; 0: any free port)",
    )
    return parser


def list_templates() -> list[str]:
    """``--list``: one line per template."""
    return [f"{t.id:40} {t.split:8} {t.shape:12} {','.join(t.servers) or '-'}" for t in templates()]


async def main(argv: list[str] | None = None) -> int:
    """Parse flags and do what they ask."""
    args = _parser().parse_args(argv)
    configure_logging(False)  # warnings and errors only, on stderr
    say = lambda s: print(s, flush=True)  # noqa: E731
    if args.install_servers:
        install_all(lambda s: print(s, file=sys.stderr, flush=True))
        return 0
    if args.list:
        for line in list_templates():
            say(line)
        return 0
    if args.call or args.tools:
        install_all(lambda s: print(s, file=sys.stderr, flush=True))
        port = args.http_port
        if port and not _port_free(port):  # a bench run holds it, say
            print(f"# port {port} is taken: any free port instead", file=sys.stderr)
            port = 0
        async with open_world(args.seed, http_port=port) as served:
            print(f"# world at {served.world.root}, {served.world.base_url}", file=sys.stderr)
            if args.tools:
                await probe.list_tools(served, say)
                return 0
            return await probe.call(served, args.call[0], args.call[1], say)
    print("the runner lands next; meanwhile: --list, --tools, --call", file=sys.stderr)
    return 2


def _port_free(port: int) -> bool:
    with socket.socket() as probe_socket:
        # as asyncio's server does: a port a finished run left in TIME_WAIT is free
        probe_socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe_socket.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
