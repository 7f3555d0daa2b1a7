"""The ``atirc`` command: run a hub, publish, subscribe.

::

    atirc hub [--listen HOST:PORT] [--db PATH] [--tokens FILE]
    atirc pub CHANNEL TEXT [--thread ID] [--wait [SECONDS]]
    atirc sub CHANNEL [--since ID] [--json] [--status]

``pub`` and ``sub`` read ``ATIRC_URL`` (default ``ws://127.0.0.1:6680/``; a
``nats://HOST:PORT`` URL talks to NATS JetStream instead, see
:func:`channels.transport.open_channel`), ``ATIRC_TOKEN`` (none: say
``hello``; for NATS a token, ``USER:PASSWORD`` or a ``.creds`` file) and
``ATIRC_NICK`` (default: the user name). Exit status: 0 done, 1 an error (the
hub unreachable, refused, …), 2 a usage error, 3 ``--wait`` saw no reply in time.

While ``pub --wait`` waits, the replier's ``status`` frames (its progress)
show as one updating line when stdout is a terminal
(:class:`~channels.statusline.StatusLine`), erased before the reply; ``sub
--status`` prints them among the messages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import structlog

from channels.client import DEFAULT_URL, PublishAck
from channels.errors import ChannelConfigError, ChannelError, ProtocolError
from channels.frames import ErrorCode, Message, Status
from channels.hub import DEFAULT_HOST, DEFAULT_PORT, Hub
from channels.ids import is_id
from channels.names import is_channel
from channels.protocol import DEFAULT_MAX_FRAME, encode
from channels.statusline import StatusLine
from channels.tokens import load_tokens
from channels.transport import AnyChannel, open_channel

__all__ = ["main"]

DEFAULT_DB = Path(".atirc/hub.db")
DEFAULT_WAIT = 300.0  # seconds: local models are slow
EXIT_ERROR = 1
EXIT_NO_REPLY = 3
EXIT_USAGE = 2  # as argparse exits for bad arguments


def _configure_logging(level: int) -> None:
    """Log lines go to stderr, so stdout carries only what the command prints."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def _run(coro: Coroutine[Any, Any, int]) -> int:
    """Run on uvloop when it is installed (the hub's fan-out is loop-bound)."""
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop  # optional: absent on Windows

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``:PORT`` (loopback) into a host and a port."""
    host, sep, port_text = value.rpartition(":")
    if not sep:
        raise ChannelConfigError(f"--listen wants HOST:PORT, got {value!r}")
    host = host.strip("[]") or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError as exc:
        raise ChannelConfigError(f"--listen: not a port number: {port_text!r}") from exc
    if not 0 <= port <= 65535:
        raise ChannelConfigError(f"--listen: port out of range: {port}")
    return host, port


def _raise_fd_limit() -> None:
    """Many subscribers need many descriptors: lift the soft limit to the hard one."""
    try:
        import resource  # POSIX only

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass  # keep the soft limit; the hub still works, with fewer connections


# -- atirc hub ----------------------------------------------------------------------------


async def _hub(args: argparse.Namespace) -> int:
    host, port = parse_listen(args.listen)
    tokens = load_tokens(args.tokens) if args.tokens else None
    try:
        hub = Hub(
            args.db,
            host=host,
            port=port,
            tokens=tokens,
            max_frame=args.max_frame,
            retention_count=args.retention_count,
            retention_age=args.retention_days * 86400.0,
            rate=args.rate,
            burst=args.burst,
            queue_size=args.queue_size,
            systemd_notify=True,
        )
    except ValueError as exc:  # a limit out of range
        raise ChannelConfigError(f"invalid hub setting: {exc}") from exc
    try:
        await hub.start()
    except OSError as exc:
        raise ChannelConfigError(f"cannot listen on {args.listen}: {exc}") from exc
    print(f"atirc hub listening on {hub.url}", flush=True)
    if not tokens:
        print("no tokens: clients say hello, from loopback only", file=sys.stderr, flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await hub.aclose()
    return 0


# -- atirc pub / sub ----------------------------------------------------------------------


def _client(attempts: int | None, on_status: Callable[[Status], None] | None = None) -> AnyChannel:
    url = os.environ.get("ATIRC_URL") or DEFAULT_URL
    token = os.environ.get("ATIRC_TOKEN") or None
    nick = os.environ.get("ATIRC_NICK") or None
    if token is None and nick is None:
        try:
            nick = getpass.getuser()
        except (KeyError, OSError) as exc:
            raise ChannelConfigError("cannot tell the user name: set ATIRC_NICK") from exc
    try:
        return open_channel(url, token=token, nick=nick, attempts=attempts, on_status=on_status)
    except ChannelConfigError as exc:
        raise ChannelConfigError(f"{exc} (set ATIRC_NICK / ATIRC_URL)") from exc


async def _first_reply(channel: AnyChannel, ack: PublishAck) -> str:
    """The first reply in the thread from someone else, its split chunks joined."""
    parts: list[str] = []
    replier: str | None = None
    async for message in channel:
        if message.thread != ack.thread or message.id in ack.ids:
            continue
        if replier is None:
            if message.sender == channel.nick:
                continue
            replier = message.sender
        elif message.sender != replier:
            continue
        parts.append(message.text)
        if not message.more:
            return "".join(parts)
    raise ChannelError("the channel closed before a reply came")


async def _pub(args: argparse.Namespace, isatty: Callable[[], bool] | None = None) -> int:
    """``atirc pub``; ``isatty`` (default: stdout's) says whether to show the status line."""
    text = sys.stdin.read() if args.text == "-" else args.text
    shown = args.wait is not None and (isatty or sys.stdout.isatty)()
    line = StatusLine(sys.stdout) if shown else None
    thread: list[str] = []  # the thread whose statuses are shown, once acked
    # A status may overtake the ack on its way to this task: the newest per thread until
    # then (a handful at most: only what comes between the publish and its ack).
    early: dict[str, str] = {}

    def on_status(status: Status) -> None:
        if line is None or status.sender == channel.nick:
            return
        text = f"{status.sender}: {status.text}"
        if thread:
            if status.thread == thread[0]:
                line.show(text)
        elif len(early) < 100:
            early[status.thread] = text

    channel = _client(attempts=5, on_status=on_status)
    await channel.connect(retry=False)
    try:
        if args.wait is not None:
            # Subscribe first, so a fast reply cannot slip by before we listen.
            await channel.subscribe(args.channel)
        try:
            ack = await channel.publish(args.channel, text, thread=args.thread)
        except ProtocolError as exc:
            if exc.code != ErrorCode.BAD_THREAD:
                raise
            print(
                f"atirc: refused: {exc.message}; --thread must name a thread of "
                f"{args.channel} (its root message's id), or leave it out to start one",
                file=sys.stderr,
            )
            return EXIT_ERROR
        print(ack.id, flush=True)
        if args.wait is None:
            return 0
        thread.append(ack.thread)
        ticker = None
        if line is not None:
            if ack.thread in early:
                line.show(early[ack.thread])
            ticker = asyncio.create_task(line.tick())
        try:
            async with asyncio.timeout(args.wait):
                reply = await _first_reply(channel, ack)
        except TimeoutError:
            print(
                f"atirc: no reply in thread {ack.thread} within {args.wait:g}s",
                file=sys.stderr,
            )
            return EXIT_NO_REPLY
        finally:
            if ticker is not None:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)
            if line is not None:
                thread.clear()  # no status drawn after this
                line.clear()
        print(reply, flush=True)
        return 0
    finally:
        await channel.close()


def _format(message: Message, continued: bool) -> str:
    if continued:
        return message.text
    reply = f"(re {message.thread}) " if message.thread != message.id else ""
    return f"{message.ts} {message.id} <{message.sender}> {reply}{message.text}"


def _format_status(status: Status) -> str:
    # "*" where a message has its id: a status has none, it is not stored.
    return f"{status.ts} * <{status.sender}> (re {status.thread}) {status.text}"


async def _sub(args: argparse.Namespace) -> int:
    # A status comes on the reader's task, maybe before messages received ahead of it
    # are printed: it waits for those (its count of them ahead), so lines keep the hub's order.
    later: deque[list[Any]] = deque()

    def show(status: Status) -> None:
        print(encode(status) if args.json else _format_status(status), flush=True)

    def on_status(status: Status) -> None:
        if channel.pending == 0 and not later:
            show(status)
        else:
            later.append([channel.pending, status])

    def printed_one() -> None:
        for entry in later:
            entry[0] -= 1
        while later and later[0][0] <= 0:
            show(later.popleft()[1])

    # like tail -f: ride out hub restarts
    channel = _client(attempts=None, on_status=on_status if args.status else None)
    await channel.connect(retry=False)
    loop = asyncio.get_running_loop()
    closing: list[asyncio.Task[None]] = []

    def stop() -> None:
        if not closing:
            closing.append(loop.create_task(channel.close()))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    try:
        await channel.subscribe(args.channel, since=args.since)
        continued = False
        async for message in channel:
            if args.json:
                print(encode(message), flush=True)
            else:
                # A split text's chunks are printed as one text.
                end = "" if message.more else "\n"
                print(_format(message, continued), end=end, flush=True)
                continued = message.more
            printed_one()
        return 0
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if closing:
            await closing[0]
        await channel.close()


# -- the parser ---------------------------------------------------------------------------


def _channel_arg(value: str) -> str:
    if not is_channel(value):
        raise argparse.ArgumentTypeError(
            f"invalid channel {value!r}: '#' and 1-64 of letters, digits, '-', '_', '.'"
        )
    return value


def _id_arg(value: str) -> str:
    if not is_id(value):
        raise argparse.ArgumentTypeError(f"not a message id: {value!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``atirc`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="atirc",
        description="atirc-style pub/sub: run a hub, publish, subscribe.",
        epilog="Environment: ATIRC_URL (default ws://127.0.0.1:6680/; or nats://HOST:PORT), "
        "ATIRC_TOKEN, ATIRC_NICK (default: your user name).",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    hub = commands.add_parser("hub", help="run a hub")
    hub.add_argument(
        "--listen",
        default=f"{DEFAULT_HOST}:{DEFAULT_PORT}",
        metavar="HOST:PORT",
        help="address to listen on (default %(default)s; port 0 picks one)",
    )
    hub.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite file (%(default)s)")
    hub.add_argument(
        "--tokens",
        type=Path,
        metavar="FILE",
        help="'TOKEN NICK' lines; without it, clients say hello, from loopback only",
    )
    hub.add_argument("--max-frame", type=int, default=DEFAULT_MAX_FRAME, metavar="BYTES")
    hub.add_argument("--retention-count", type=int, default=10_000, metavar="N")
    hub.add_argument("--retention-days", type=float, default=7.0, metavar="DAYS")
    hub.add_argument("--rate", type=float, default=50.0, help="frames/s per connection")
    hub.add_argument("--burst", type=int, default=200, help="frames over the rate, briefly")
    hub.add_argument("--queue-size", type=int, default=1000, help="frames per subscriber")
    hub.set_defaults(func=_hub, log_level=logging.INFO)

    pub = commands.add_parser("pub", help="publish a message; print its id")
    pub.add_argument("channel", type=_channel_arg, metavar="CHANNEL")
    pub.add_argument("text", metavar="TEXT", help="the text ('-' reads stdin)")
    pub.add_argument("--thread", type=_id_arg, metavar="ID", help="reply in this thread")
    pub.add_argument(
        "--wait",
        type=float,
        nargs="?",
        const=DEFAULT_WAIT,
        metavar="SECONDS",
        help=f"then print the first reply in the thread (default {DEFAULT_WAIT:g}s)",
    )
    pub.set_defaults(func=_pub, log_level=logging.WARNING)

    sub = commands.add_parser("sub", help="print a channel's messages as they come")
    sub.add_argument("channel", type=_channel_arg, metavar="CHANNEL")
    sub.add_argument("--since", type=_id_arg, metavar="ID", help="first replay what came after ID")
    sub.add_argument("--json", action="store_true", help="one JSON message frame per line")
    sub.add_argument(
        "--status",
        action="store_true",
        help="also print status frames (progress, never stored): TS * <FROM> (re THREAD) TEXT",
    )
    sub.set_defaults(func=_sub, log_level=logging.WARNING)
    return parser


def _from_bytes(arg: str) -> bool:
    """Whether ``arg`` came from bytes the filesystem encoding could not decode."""
    try:
        os.fsencode(arg)
    except UnicodeEncodeError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``atirc`` console script."""
    for arg in sys.argv[1:] if argv is None else argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            # bytes that are not UTF-8 arrive as lone surrogates, which no frame can carry
            shown = os.fsencode(arg) if _from_bytes(arg) else ascii(arg)
            print(
                f"atirc: an argument is not UTF-8 text: {shown!r}; pass text in UTF-8",
                file=sys.stderr,
            )
            return EXIT_USAGE
    args = build_parser().parse_args(argv)
    _configure_logging(args.log_level)
    if args.command == "hub":
        _raise_fd_limit()
    try:
        return _run(args.func(args))
    except ChannelError as exc:
        print(f"atirc: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `atirc sub ... | head`: the reader is gone, which is not an error.
        # Point stdout at /dev/null so the interpreter's own flush at exit
        # does not report the broken pipe again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    finally:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()
