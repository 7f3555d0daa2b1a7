"""The stdio transport under one MCP server: its process, its pipes, its stderr.

The SDK's ``mcp.client.stdio.stdio_client`` hands every server six variables of
the daemon's environment and writes server stderr to a file; asyncai wants a
documented minimal environment, stderr in its own structured log line by line,
the exit code and the last stderr lines for error messages, and an event that
fires when the server goes away. So this module owns the process and bridges
its pipes to the two memory streams a ``ClientSession`` reads and writes, with
the SDK's shutdown order (close stdin, wait, then kill the process group),
every wait bounded.

Nothing here buffers tool output beyond the one JSON-RPC line being read: the
stdout reader splits lines without a size cap (tool output is unbounded, spec
Decision 3). The memory streams have buffer 0, so a slow session applies
back-pressure to the pipe instead of growing a queue.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from types import TracebackType

import anyio
import anyio.abc
import anyio.lowlevel
import pydantic
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types as mcp_types
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from daemon.crashpoints import armed, crash_point

__all__ = ["BASE_ENV_VARS", "StdioProcess", "minimal_environment", "resolve_command"]

#: Variables of the daemon's environment every server inherits; everything else
#: must be in the server entry's ``env``. ``LC_*`` (every locale category) is
#: inherited too. Secrets such as ``OPENAI_API_KEY`` never reach a server.
BASE_ENV_VARS = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP")

#: Grace period for a server to exit by itself once its stdin is closed.
EXIT_GRACE = 2.0
#: Between SIGTERM and SIGKILL of the server's process group.
KILL_GRACE = 2.0
#: For the loop to observe the death after SIGKILL, and for the stderr reader
#: to drain the pipe (so error messages carry the whole stderr tail).
REAP_TIMEOUT = 2.0
#: For the writer to flush requests already accepted before stdin closes.
FLUSH_TIMEOUT = 0.5
#: After the server exits, how long its remaining stdout may take to arrive.
EXIT_STDOUT_GRACE = 1.0
#: Lines of stderr kept for error messages (the whole stderr goes to the log).
STDERR_TAIL_LINES = 40
#: A stderr line longer than this is logged in pieces rather than buffered
#: without bound: stderr is the server's diagnostics, not tool output.
STDERR_LINE_MAX = 64 * 1024
#: Bytes of a stdout line that is no JSON-RPC message shown in its log line.
BAD_OUTPUT_SHOWN = 200
#: Stderr lines logged before the reader gives the event loop a turn: logging a
#: 64 KiB read of short lines at once took about a second with ``--verbose``.
STDERR_LINES_PER_TURN = 200


def minimal_environment(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a server gets: :data:`BASE_ENV_VARS` and ``LC_*`` from
    ``base`` (the daemon's environment by default), then ``extra`` over them."""
    source = os.environ if base is None else base
    env: dict[str, str] = {}
    for key, value in source.items():
        if key not in BASE_ENV_VARS and not key.startswith("LC_"):
            continue
        if value.startswith("()"):
            continue  # an exported shell function, never data a server needs
        env[key] = value
    env.update(extra or {})
    return env


def resolve_command(command: str, env: Mapping[str, str]) -> str | None:
    """Find the executable for ``command``.

    A command with a slash is used as given. A bare name is looked up on the
    server's ``PATH``, then next to the daemon's Python: the bundled servers'
    console scripts live in the daemon's virtual environment, whose ``bin``
    need not be on the ``PATH`` of a systemd service.
    """
    if os.sep in command:
        return command if os.access(command, os.X_OK) else None
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        found = shutil.which(command, path=os.path.dirname(sys.executable))
    return found


class StdioProcess:
    """One MCP server process, entered as an async context manager.

    ``async with StdioProcess(...) as (read_stream, write_stream):`` spawns the
    server and yields the streams a ``ClientSession`` takes; leaving the block
    stops the server and reaps it (stdin closed, a grace period, then SIGTERM
    and SIGKILL to its process group). It must be entered and left in one task,
    like every anyio context.

    ``on_exit`` is called once when the server's stdout ends (it exited, or
    closed stdout, which leaves it useless) or its stdin no longer takes
    requests; by then the session's in-flight requests are failing with
    ``Connection closed``. ``on_stderr`` receives each stderr line, and
    ``on_bad_output`` each stdout line that is no JSON-RPC message (its first
    :data:`BAD_OUTPUT_SHOWN` bytes, and why), which the session drops.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: str | None = None,
        on_stderr: Callable[[str], None],
        on_exit: Callable[[], None],
        on_bad_output: Callable[[str, str], None] | None = None,
    ) -> None:
        self._command = command
        self._args = list(args)
        self._env = dict(env)
        self._cwd = cwd
        self._on_stderr = on_stderr
        self._on_exit = on_exit
        self._on_bad_output = on_bad_output
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._process: anyio.abc.Process | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._stderr_done = anyio.Event()
        self._stdout_done = anyio.Event()
        self._writer_done = anyio.Event()
        self._closing = False
        #: Whether stdout ended before the shutdown began: the server exited
        #: (or gave up its pipe) by itself, so its exit code means something.
        self.ended_by_itself = False
        self._streams: (
            tuple[
                MemoryObjectSendStream[SessionMessage | Exception],
                MemoryObjectReceiveStream[SessionMessage | Exception],
                MemoryObjectSendStream[SessionMessage],
                MemoryObjectReceiveStream[SessionMessage],
            ]
            | None
        ) = None

    @property
    def pid(self) -> int | None:
        """The server's process id, once spawned."""
        return None if self._process is None else self._process.pid

    @property
    def returncode(self) -> int | None:
        """The server's exit status once it has exited (negative: killed by a signal)."""
        return None if self._process is None else self._process.returncode

    def stderr_text(self) -> str:
        """The last stderr lines, for an error message."""
        return "\n".join(self.stderr_tail)

    async def __aenter__(
        self,
    ) -> tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]:
        executable = resolve_command(self._command, self._env)
        if executable is None:
            raise FileNotFoundError(f"command not found: {self._command!r}")
        self._process = await anyio.open_process(
            [executable, *self._args],
            env=self._env,
            cwd=self._cwd,
            # Its own session and process group: the shutdown kills the whole
            # tree (kubectl children included), and a Ctrl-C on the daemon's
            # terminal does not reach the servers before the daemon stops them.
            start_new_session=True,
        )
        # No await between the spawn and entering the task group: a
        # cancellation there would leak the live process.
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        self._streams = (read_writer, read_stream, write_stream, write_reader)
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._read_stdout)
        self._task_group.start_soon(self._write_stdin)
        self._task_group.start_soon(self._read_stderr)
        self._task_group.start_soon(self._watch_exit)
        return read_stream, write_stream

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task_group is not None
        self._closing = True
        # Shutdown must finish even when the owner is being cancelled, or the
        # process would leak; every wait inside is bounded.
        with anyio.CancelScope(shield=True):
            await self._shutdown()
        self._task_group.cancel_scope.cancel()
        await self._task_group.__aexit__(None, None, None)

    async def _read_stdout(self) -> None:
        """Parse stdout into JSON-RPC messages, one per line, no size cap."""
        assert self._process is not None
        assert self._process.stdout is not None
        assert self._streams is not None
        read_writer = self._streams[0]
        stdout = self._process.stdout
        parts: list[bytes] = []  # pieces of the line being read
        try:
            async with read_writer:
                while True:
                    try:
                        chunk = await stdout.receive()
                    except (
                        anyio.EndOfStream,
                        anyio.ClosedResourceError,
                        anyio.BrokenResourceError,
                    ):
                        break
                    # Join only at a newline: re-joining a growing buffer on
                    # every chunk would be quadratic for multi-megabyte results.
                    while (nl := chunk.find(b"\n")) >= 0:
                        parts.append(chunk[:nl])
                        line = b"".join(parts)
                        parts = []
                        chunk = chunk[nl + 1 :]
                        if line.strip():
                            await read_writer.send(self._parse(line))
                    if chunk:
                        parts.append(chunk)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session went away first; shutdown is under way
        finally:
            self._stdout_done.set()
            self._ended()

    def _parse(self, line: bytes) -> SessionMessage | Exception:
        """:func:`_parse_line`, handing a line that is no message to ``on_bad_output``."""
        parsed = _parse_line(line)
        if isinstance(parsed, Exception) and self._on_bad_output is not None:
            shown = line[:BAD_OUTPUT_SHOWN].decode("utf-8", errors="replace")
            self._on_bad_output(shown, _reason(parsed))
        return parsed

    async def _watch_exit(self) -> None:
        """Notice the server's exit even when a child it left holds stdout open."""
        assert self._process is not None
        await self._process.wait()
        # Its last output is already in the pipe: let the reader deliver it.
        with anyio.move_on_after(EXIT_STDOUT_GRACE):
            await self._stdout_done.wait()
        if not self._stdout_done.is_set():
            # A leftover child keeps stdout open: end the session's read side
            # so in-flight requests fail now rather than at their timeout.
            assert self._streams is not None
            await self._streams[0].aclose()
        self._ended()

    def _ended(self) -> None:
        """The server is gone by its own doing (called once or more)."""
        if self._closing or self.ended_by_itself:
            return
        self.ended_by_itself = True
        self._on_exit()

    async def _write_stdin(self) -> None:
        """Send the session's messages to the server, one JSON line each."""
        assert self._process is not None
        assert self._process.stdin is not None
        assert self._streams is not None
        read_writer, _, _, write_reader = self._streams
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await self._process.stdin.send(data.encode() + b"\n")
                    if armed() is not None and _is_tool_call(message):
                        crash_point("call_sent")  # the request is in the server's pipe
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading: end the session's read side so no
            # request waits forever for an answer that cannot come, and say the
            # server is gone (its stdout may stay open, silent) so it is restarted.
            await read_writer.aclose()
            self._ended()
        finally:
            self._writer_done.set()

    async def _read_stderr(self) -> None:
        """Hand each stderr line to ``on_stderr`` and keep the tail."""
        assert self._process is not None
        assert self._process.stderr is not None
        buffer = b""
        try:
            while True:
                try:
                    chunk = await self._process.stderr.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                while len(buffer) > STDERR_LINE_MAX:
                    lines.append(buffer[:STDERR_LINE_MAX])
                    buffer = buffer[STDERR_LINE_MAX:]
                for i, line in enumerate(lines, 1):
                    self._stderr_line(line)
                    if i % STDERR_LINES_PER_TURN == 0:
                        # one read can hold thousands of short lines, each a log
                        # line: let the rest of the daemon run between batches
                        await anyio.lowlevel.checkpoint()
            if buffer:
                self._stderr_line(buffer)
        finally:
            self._stderr_done.set()

    def _stderr_line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        self.stderr_tail.append(line)
        self._on_stderr(line)

    async def _shutdown(self) -> None:
        """Stop traffic, let the server exit by itself, else kill its group."""
        assert self._process is not None
        assert self._streams is not None
        process = self._process
        read_writer, read_stream, write_stream, write_reader = self._streams
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(FLUSH_TIMEOUT):
            await self._writer_done.wait()
        if process.stdin is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
        await _wait_exit(process, EXIT_GRACE)
        # Always, even when the server exited by itself: children it left
        # behind in its process group are stopped too (a no-op when the group
        # is gone). SIGTERM, then SIGKILL after KILL_GRACE.
        await terminate_posix_process_tree(process, KILL_GRACE)
        await _wait_exit(process, REAP_TIMEOUT)
        with anyio.move_on_after(REAP_TIMEOUT):
            await self._stderr_done.wait()
        with anyio.move_on_after(REAP_TIMEOUT):
            await process.aclose()
        for stream in (read_writer, read_stream, write_stream, write_reader):
            await stream.aclose()


def _parse_line(line: bytes) -> SessionMessage | Exception:
    """One stdout line as a message, or the parse error for the session to report.

    Bytes that are not UTF-8 (a Latin-1 file name, a binary blob in a text
    block) are replaced with U+FFFD, as in stderr lines: refusing the line would
    drop the answer, and its call would wait out its whole timeout.
    """
    try:
        return _message(line)
    except ValueError as exc:
        error = exc
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        try:
            return _message(line.decode("utf-8", errors="replace"))
        except ValueError as exc:
            error = exc
    return _unreadable_answer(line, error) or error


def _unreadable_answer(line: bytes, error: ValueError) -> SessionMessage | None:
    """An error answer to the request a line answers that the SDK could not read.

    The SDK's parser refuses JSON nested more than a few hundred levels deep;
    without its id the answer is dropped and the call waits out its timeout.
    Python's parser goes deeper: when it finds a response's id, that call fails
    at once with why.
    """
    try:
        value = json.loads(line.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return None
    if (
        not isinstance(value, dict)
        or "method" in value
        or not ("result" in value or "error" in value)
    ):
        return None
    request_id = value.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    message = f"the server's answer could not be read: {_reason(error)}"
    answer = mcp_types.JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=mcp_types.ErrorData(code=mcp_types.PARSE_ERROR, message=message),
    )
    return SessionMessage(answer)


def _reason(error: Exception) -> str:
    """Why a line is no message, in one line: a validation error's first complaint, else
    the error's first line, else its type."""
    if isinstance(error, pydantic.ValidationError) and error.errors():
        return str(error.errors()[0]["msg"])
    lines = str(error).splitlines()
    return lines[0] if lines else type(error).__name__


def _message(line: bytes | str) -> SessionMessage:
    return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))


async def _wait_exit(process: anyio.abc.Process, seconds: float) -> bool:
    """Whether the process exited within ``seconds``."""
    with anyio.move_on_after(seconds):
        await process.wait()
        return True
    return process.returncode is not None


def _is_tool_call(message: SessionMessage) -> bool:
    """Whether ``message`` is a ``tools/call`` request (the ``call_sent`` crash point)."""
    return getattr(message.message, "method", None) == "tools/call"
