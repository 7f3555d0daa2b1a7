"""``asyncai up``: everything on one machine, in one process, for a first run.

It starts, in this order:

1. an atirc hub in this process, on ``127.0.0.1:6680`` (``--listen``), with
   its messages in ``./.asyncai/hub.db``, so ``atirc pub`` works with no
   settings;
2. the model endpoint: ``OPENAI_BASE_URL`` (or ``base_url`` in the config
   file, or OpenAI itself when only ``OPENAI_API_KEY`` is set) after checking
   that it answers; otherwise the embedded local model (``asyncai[local]``
   and ``asyncai model fetch``) as a child process. With neither it says
   exactly what to set and exits 1;
3. the daemon on channel ``#asyncai`` with the bundled ``asyncai-mcp-simple``
   server (``http_get``) besides any configured ones, its database in
   ``./.asyncai/asyncai.db``.

It also serves the operator's console on ``127.0.0.1:6690`` (``--web-listen``;
``[web] listen`` of the config file wins), creating ``.asyncai/web.tokens``
with one random token for the nick ``operator`` when the file is missing, and
its banner prints the login URL with that token.

Then it prints how to talk to it and runs until Ctrl-C or SIGTERM (exit 0).
An ``asyncai.toml`` in the working directory (or ``--config``) still applies,
except for the channels, the hub URL and the database, which ``up`` sets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import structlog

from channels.hub import Hub
from daemon.config import (
    Config,
    McpServerConfig,
    ModelConfig,
    add_config_arguments,
    load_config,
    overrides_from_args,
)
from daemon.errors import ConfigError

if TYPE_CHECKING:
    from daemon.app import Daemon
    from daemon.local_model.server import LocalModelServer

__all__ = ["BANNER_QUESTION", "CHANNEL", "ModelEndpoint", "probe_endpoint", "register", "up"]

log = structlog.get_logger("asyncai.up")

CHANNEL = "#asyncai"
DEFAULT_LISTEN = "127.0.0.1:6680"
DEFAULT_STATE_DIR = Path(".asyncai")
DEFAULT_WEB_LISTEN = "127.0.0.1:6690"
WEB_NICK = "operator"  # the nick of the token up writes into a new tokens file
#: The question the banner suggests; `python -m bench.questions --startup` times it and checks it.
#: (It was "the sum of the first 1000 primes", which the embedded 1.5B model reads as
#: the primes below 1000, every time: docs/benchmarks/history.md.)
BANNER_QUESTION = "What is the sum of the primes below 1000?"
SIMPLE_SERVER = "simple"  # the name the bundled http_get server gets in [mcp_servers]
T = TypeVar("T")
PROBE_TIMEOUT = 10.0  # seconds for the model endpoint to answer GET /models

NO_MODEL_HELP = """\
asyncai up: no model endpoint. Either point it at an OpenAI-compatible server:

    export OPENAI_BASE_URL=http://127.0.0.1:8080/v1   # llama.cpp, vLLM, Ollama (…/v1), OpenAI
    export ASYNCAI_MODEL=<model name>                 # optional when the server lists one
    export OPENAI_API_KEY=<key>                       # only if the server wants one
    make up

or run the bundled local model (no account needed; the first install builds
llama.cpp, about 9 minutes on 2 cores, and the model is a 1.1 GB download):

    .venv/bin/pip install -e '.[local]'
    .venv/bin/asyncai model fetch
    make up
"""


@dataclass(frozen=True)
class ModelEndpoint:
    """Where the daemon's model is: a URL and a model name (and who started it)."""

    base_url: str
    model: str
    local: bool = False
    server: LocalModelServer | None = None  # the embedded model's server, when up started it


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``asyncai up`` to the command line."""
    parser = subparsers.add_parser(
        "up",
        help="run hub, daemon and the http_get tool on this machine (state in ./.asyncai/)",
        description=(
            "The embedded default for one machine: an atirc hub, the daemon on #asyncai and "
            "the bundled asyncai-mcp-simple server, in one process. Uses OPENAI_BASE_URL when "
            "set, else the local model (asyncai[local])."
        ),
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where the hub listens (default {DEFAULT_LISTEN}; port 0 picks a free one)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        metavar="DIR",
        help="hub and session databases (default ./.asyncai)",
    )
    parser.add_argument(
        "--web-listen",
        default=None,
        metavar="HOST:PORT",
        help=f"where the console listens (default [web] listen, else {DEFAULT_WEB_LISTEN})",
    )
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, overrides_from_args(args))
        host, port = _listen(args.listen, "--listen")
        if args.web_listen is not None:
            _listen(args.web_listen, "--web-listen")
            config.web.listen = args.web_listen
    except ConfigError as exc:
        print(f"asyncai up: {exc}", file=sys.stderr)
        return 2
    from daemon.logging import configure_logging

    configure_logging(args.verbose, secrets=config.secrets())
    try:
        args.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file there, or under a file, or not ours to write
        # mkdir(exist_ok=True) says "File exists" only when what exists is no directory
        why = "it is a file" if isinstance(exc, FileExistsError) else exc.strerror or exc
        print(
            f"asyncai up: cannot make the state directory {args.state_dir}: {why}",
            file=sys.stderr,
        )
        return 1
    try:
        import uvloop
    except ImportError:  # optional
        return asyncio.run(up(config, host=host, port=port, state_dir=args.state_dir))
    return uvloop.run(up(config, host=host, port=port, state_dir=args.state_dir))


def _listen(value: str, flag: str) -> tuple[str, int]:
    """``flag``'s HOST:PORT, checked before anything starts (the hub binds it only after
    the model has loaded)."""
    from daemon.asgi import parse_listen  # the servers' own reading (uvicorn: loaded by up)

    try:
        return parse_listen(value)
    except ValueError:
        raise ConfigError(
            f"{flag} must be HOST:PORT with a port of 0 to 65535, not {value!r}"
        ) from None


async def up(
    config: Config,
    *,
    host: str = "127.0.0.1",
    port: int = 6680,
    state_dir: Path = DEFAULT_STATE_DIR,
    environ: dict[str, str] | None = None,
    out: TextIO | None = None,
) -> int:
    """Run hub, model and daemon until SIGTERM/SIGINT; the exit status.

    ``state_dir`` must exist. ``environ`` (default ``os.environ``) is where
    ``OPENAI_BASE_URL`` is looked for; the instructions go to ``out``.
    """
    out = out or sys.stdout
    environ = dict(os.environ) if environ is None else environ
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with contextlib.AsyncExitStack() as stack:
            # The local model may take minutes to load: Ctrl-C must not wait for it.
            try:
                endpoint = await _unless_stopped(
                    _model_endpoint(config, environ, stack, state_dir), stop
                )
            except ConfigError as exc:  # the operator must act: no usable model endpoint
                print(exc, file=sys.stderr)
                return 1
            if endpoint is None:
                return 0
            hub = Hub(state_dir / "hub.db", host=host, port=port)
            try:
                await hub.start()
            except OSError as exc:
                print(
                    f"asyncai up: cannot listen on {host}:{port} ({exc.strerror or exc}): "
                    "is another `asyncai up` or `atirc hub` running? "
                    "Stop it, or pass --listen 127.0.0.1:PORT and set ATIRC_URL for atirc.",
                    file=sys.stderr,
                )
                return 1
            stack.push_async_callback(hub.aclose)
            _configure(config, hub.url, endpoint, state_dir)
            try:
                token = _console_token(config, state_dir)
            except ConfigError as exc:  # a tokens file that cannot be used as it is
                print(f"asyncai up: {exc}", file=sys.stderr)
                return 1
            from daemon.app import Daemon  # the whole daemon: loaded only when it runs

            daemon = Daemon(config, warm_up=endpoint.local)
            forward = asyncio.create_task(_forward_stop(stop, daemon))
            guard = None
            if endpoint.server is not None:
                from daemon.local_model.guard import guard_memory

                guard = asyncio.create_task(
                    guard_memory(
                        endpoint.server,
                        config.model.local_max_rss,
                        daemon.idle,
                        after_restart=daemon.warm_up_model,
                    ),
                    name="local-model-guard",
                )
            try:
                return await daemon.run(
                    ready=lambda: print(
                        _instructions(
                            hub.url, endpoint, config, console=_login_url(daemon.web_url, token)
                        ),
                        file=out,
                        flush=True,
                    )
                )
            finally:
                forward.cancel()
                if guard is not None:
                    guard.cancel()
                await asyncio.gather(
                    forward, *([guard] if guard is not None else []), return_exceptions=True
                )
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def _unless_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event) -> T | None:
    """``work``'s result, or None (``work`` cancelled) when ``stop`` is set first.

    ``work``'s own error is raised; so is a cancellation of the caller, after
    ``work`` has been cancelled and has ended.
    """
    task = asyncio.create_task(work)
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
        # A cancelled task is not done until it has run its cleanup (the local
        # model's child process is stopped then): wait for both to end.
        await asyncio.gather(task, stopper, return_exceptions=True)
    if task.cancelled():
        return None
    return task.result()


async def _forward_stop(stop: asyncio.Event, daemon: Daemon) -> None:
    await stop.wait()
    daemon.request_stop()


def _configure(config: Config, hub_url: str, endpoint: ModelEndpoint, state_dir: Path) -> None:
    """What ``up`` decides: the channel, the hub, the database, the model, the http_get tool."""
    config.channels.url = hub_url
    config.channels.channels = [CHANNEL]
    config.channels.token = None
    config.sessions.db = state_dir / "asyncai.db"
    config.model.base_url = endpoint.base_url
    config.model.model = endpoint.model
    if endpoint.local and config.model.api_key is None:
        config.model.api_key = "local"
    if SIMPLE_SERVER not in config.mcp_servers:
        config.mcp_servers = {
            SIMPLE_SERVER: McpServerConfig(command="asyncai-mcp-simple"),
            **config.mcp_servers,
        }


def _console_token(config: Config, state_dir: Path) -> str | None:
    """The console's address and tokens file as ``up`` sets them; a token for the banner.

    ``[web] listen`` defaults to ``127.0.0.1:6690``; ``[web] tokens``, unless
    the config file names one, is ``STATE_DIR/web.tokens``, created with one
    random token for ``operator`` when missing. The token returned is the
    first of ``operator`` (None when the file has none).
    """
    from daemon.web import create_tokens, first_token

    if config.web.listen is None:
        config.web.listen = DEFAULT_WEB_LISTEN
    if "web.tokens" not in config.sources:
        config.web.tokens = state_dir / "web.tokens"
    if not config.web.tokens.exists():
        return create_tokens(config.web.tokens, WEB_NICK)
    return first_token(config.web.tokens, WEB_NICK)


def _login_url(url: str | None, token: str | None) -> str | None:
    """The console's login page, with the token in the fragment (never sent to the server)."""
    if url is None:
        return None
    return f"{url}login" + (f"#token={token}" if token else "")


def _endpoint_configured(config: Config, environ: dict[str, str]) -> bool:
    """An endpoint was asked for: OPENAI_BASE_URL, a base_url in the file, or an API key."""
    return bool(
        environ.get("OPENAI_BASE_URL")
        or config.model.base_url != ModelConfig().base_url
        or config.model.api_key
    )


async def _model_endpoint(
    config: Config, environ: dict[str, str], stack: contextlib.AsyncExitStack, state_dir: Path
) -> ModelEndpoint:
    if _endpoint_configured(config, environ):
        return await probe_endpoint(config.model)
    return await _start_local_model(stack, state_dir, config.model.local_prompt_cache)


async def probe_endpoint(model: ModelConfig, seconds: float = PROBE_TIMEOUT) -> ModelEndpoint:
    """Check that the endpoint answers, and find a model name when none is configured."""
    import openai

    client = openai.AsyncOpenAI(
        base_url=model.base_url,
        api_key=model.api_key or "no-key",
        max_retries=0,
        timeout=seconds,
    )
    listed: list[str] = []
    try:
        page = await client.models.list()
        listed = [m.id for m in page.data]
    except openai.AuthenticationError as exc:
        raise ConfigError(
            f"asyncai up: the model endpoint {model.base_url} refused the key ({exc.status_code}): "
            "set OPENAI_API_KEY to a key it accepts"
        ) from exc
    except openai.APIStatusError:
        pass  # it answers; some servers have no GET /models
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        raise ConfigError(
            f"asyncai up: the model endpoint {model.base_url} is not reachable ({exc}): "
            "start that server, or set OPENAI_BASE_URL to one that runs "
            "(unset, asyncai up starts the local model)"
        ) from exc
    finally:
        await client.close()
    name = model.model or (listed[0] if listed else None)
    if not name:
        raise ConfigError(
            f"asyncai up: {model.base_url} answers but lists no model: set ASYNCAI_MODEL "
            "(or model in [model] of asyncai.toml)"
        )
    return ModelEndpoint(base_url=model.base_url, model=name)


async def _start_local_model(
    stack: contextlib.AsyncExitStack, state_dir: Path, prompt_cache: int = 0
) -> ModelEndpoint:
    from daemon.local_model.errors import (
        LocalModelError,
        ModelNotFetchedError,
        ServerNotInstalledError,
    )
    from daemon.local_model.server import LocalModelServer, prompt_cache_args

    try:
        server = LocalModelServer.default(
            log_path=state_dir / "local-model.log", extra_args=prompt_cache_args(prompt_cache)
        )
    except LocalModelError as exc:
        raise ConfigError(f"{NO_MODEL_HELP}\n({exc})") from exc
    print(
        "asyncai up: no OPENAI_BASE_URL, starting the local model "
        f"({server.model_file.name}; its log: {state_dir / 'local-model.log'}) ...",
        file=sys.stderr,
        flush=True,
    )
    try:
        await server.start()
    except (ModelNotFetchedError, ServerNotInstalledError) as exc:
        await server.aclose()
        raise ConfigError(f"{NO_MODEL_HELP}\n({exc})") from exc
    except LocalModelError as exc:
        await server.aclose()
        raise ConfigError(
            f"asyncai up: the local model did not start: {exc} "
            f"(its log: {state_dir / 'local-model.log'})"
        ) from exc
    stack.push_async_callback(server.aclose)
    # The one model it serves; its name also turns the small-model harness on.
    return ModelEndpoint(base_url=server.base_url, model=server.model, local=True, server=server)


def _instructions(
    hub_url: str, endpoint: ModelEndpoint, config: Config, *, console: str | None = None
) -> str:
    env = "" if hub_url == "ws://127.0.0.1:6680/" else f"ATIRC_URL={hub_url} "
    tools = ", ".join(config.mcp_servers)
    model = f"{endpoint.model} at {endpoint.base_url}" + (" (local)" if endpoint.local else "")
    db = config.sessions.db
    # the readers default to the daemon's database: name it only when it is elsewhere
    db_flag = "" if db == DEFAULT_STATE_DIR / "asyncai.db" else f" --db {db}"
    console_line = (
        f"{console}   (nick {WEB_NICK}; tokens in {config.web.tokens})" if console else "(off)"
    )
    return f"""\
asyncai is up.
  hub      {hub_url}   channel {CHANNEL}
  model    {model}
  tools    {tools} (MCP servers; the model calls them from run_code)
  state    {db}
  console  {console_line}

Talk to it from another terminal:
  {env}.venv/bin/atirc pub '{CHANNEL}' "{BANNER_QUESTION}" --wait

Then see what happened:
  .venv/bin/asyncai threads{db_flag}
  .venv/bin/asyncai audit{db_flag}
  .venv/bin/asyncai transcript THREAD{db_flag}

Ctrl-C stops it."""
