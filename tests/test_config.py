"""The configuration: TOML file, environment and flags, every key checked by name and type."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from daemon.cli import main
from daemon.code_mode import CodeModeLimits
from daemon.config import (
    ApprovalsConfig,
    Config,
    McpServerConfig,
    ModelConfig,
    add_config_arguments,
    load_config,
    overrides_from_args,
)
from daemon.errors import ConfigError

# The complete example of the configuration reference (docs/configuration.md), verbatim.
EXAMPLE = """\
# asyncai.toml — every key, with its default unless marked "example"

mcp_json = "mcp.json"              # example: also read an mcpServers JSON file

[model]
base_url = "http://127.0.0.1:8080/v1"   # example (default https://api.openai.com/v1)
api_key = "sk-local-0123456789"          # example; better: OPENAI_API_KEY
model = "qwen-coder-1.5b"                # example; required (or --model / ASYNCAI_MODEL)
tool_mode = "code"                       # "code": only run_code; "direct": MCP tools as functions
# system_prompt = "..."                  # replaces the built-in system prompt
# temperature = 0.0                      # sent only when set
# max_tokens = 1024                      # sent only when set
request_timeout = 300.0                  # seconds per model request
tool_call_timeout = 600.0                # seconds per model tool call (run_code)
max_rounds = 8                           # model requests per run; the last has no tools
retries = 3                              # retries of 408/409/429/5xx, connection errors, timeouts
backoff_initial = 1.0                    # seconds before the first retry, doubling
backoff_max = 30.0                       # at most this (or the server's Retry-After)
local_max_rss = "5GiB"                   # asyncai up restarts its local model above this
local_prompt_cache = 0                   # asyncai up's local model: RAM for prompt states (0: off)
answer_samples = 1                       # harness: snippets drawn for a short answer; 2-3: vote

[code_mode]
max_feed_duration = 30.0                 # seconds of Python per snippet (tool waits excluded)
max_suspensions = 10000                  # host round trips per snippet
max_nested_calls = 100                   # tool calls per snippet
max_print_bytes = "1MiB"                 # collected print() output per snippet
max_memory = "4GiB"                      # sandbox heap per scope
tool_timeout = 120.0                     # seconds per nested tool call
max_wall = 300.0                         # seconds per run_code call
max_result_chars = 20000                 # characters returned to the model
max_scopes = 8                           # REPL scopes kept (LRU by thread)
max_scope_dump = "64MiB"                 # a larger REPL is not stored across restarts
max_snippet_bytes = "256KiB"             # a larger snippet is refused before it runs
catalog_budget = 6000                    # stub characters; over it: names + search_tools/describe
preamble = "preamble.py"                 # example: Python run in every new scope

[mcp_servers.simple]
command = "asyncai-mcp-simple"
args = ["--deny-private"]

[mcp_servers.kcp]
command = "asyncai-mcp-kcp"
args = ["--readonly"]
env = { KUBECONFIG = "/etc/asyncai/kubeconfig" }

[channels]
url = "ws://127.0.0.1:6680/"
# token = "..."                          # better: ATIRC_TOKEN
nick = "asyncai"
channels = ["#ops", "#dev"]              # example (default none)
shared = ["#dev"]                        # example: only mentions and own threads here
allowed_senders = []                     # empty: everyone
takeover_seconds = 30.0                  # nats:// only: a silent daemon's threads move within

[runtime]
max_concurrent_runs = 4                  # at most code_mode.max_scopes
max_queued_prompts = 256
history_turns = 20
history_chars = 24000
max_run_seconds = 900.0
shutdown_grace = 20.0
publish_timeout = 60.0
# max_runs_per_sender_per_hour = 20      # unset: unlimited; counted from the database
# max_tokens_per_sender_per_day = 500000 # unset: unlimited; prompt + completion tokens

[sessions]
db = ".asyncai/asyncai.db"               # relative to this file's directory
scope_retention_days = 30                # saved thread REPLs unused this long are deleted

[approvals]
mode = "ask"                             # mutating calls: "ask" a person, "allow" or "deny"
allow = []                               # "server.tool" globs that never ask: ["kcp.scale_*"]
deny = []                                # globs that are always refused
approvers = []                           # nicks that may decide; empty: the prompt's sender
expire_after = 86400                     # seconds a request waits before it counts as denied

[telemetry]
# otlp_endpoint = "http://127.0.0.1:4318" # unset: no traces; or OTEL_EXPORTER_OTLP_ENDPOINT
# metrics_listen = "127.0.0.1:9464"      # unset: /metrics only on the console's address
"""


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` and return it."""
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """No ./asyncai.toml is fine: the built-in defaults, as DESIGN.md gives them."""
    monkeypatch.chdir(tmp_path)
    config = load_config(environ={})
    assert config == Config()
    assert config.path is None
    assert config.model.request_timeout == 300
    assert config.model.max_rounds == 8
    assert config.runtime.history_turns == 20
    assert config.runtime.history_chars == 24_000
    assert config.runtime.max_run_seconds == 900
    assert config.sessions.db == Path(".asyncai/asyncai.db")
    assert config.channels.url == "ws://127.0.0.1:6680/"


def test_the_readme_example_loads(tmp_path: Path):
    """Every key of the documented example parses, and the limits reach CodeModeLimits."""
    write(tmp_path / "preamble.py", "KCP = 'root'\n")
    write(
        tmp_path / "mcp.json", json.dumps({"mcpServers": {"time": {"command": "mcp-server-time"}}})
    )
    config = load_config(write(tmp_path / "asyncai.toml", EXAMPLE), environ={})
    assert config.model.model == "qwen-coder-1.5b"
    assert config.model.base_url == "http://127.0.0.1:8080/v1"
    assert list(config.mcp_servers) == ["simple", "kcp", "time"]
    assert config.mcp_servers["kcp"].env == {"KUBECONFIG": "/etc/asyncai/kubeconfig"}
    assert config.channels.shared == ["#dev"]
    assert config.sessions.db == tmp_path / ".asyncai/asyncai.db"
    assert config.approvals == ApprovalsConfig()  # the example's values are the defaults
    limits = config.code_mode.limits()
    assert limits == CodeModeLimits(
        preamble="KCP = 'root'\n"
    )  # the example's values are the defaults


def test_unknown_keys_are_errors_that_name_the_key(tmp_path: Path):
    """A typo fails at start, naming the key, the file and the likely intent."""
    path = write(tmp_path / "asyncai.toml", "[code_mode]\nmax_wal = 10\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert str(err.value) == (
        f"unknown key 'code_mode.max_wal' in {path} (did you mean 'code_mode.max_wall'?)"
    )
    with pytest.raises(ConfigError, match=r"unknown key 'modle' in .*did you mean 'model'"):
        load_config(write(tmp_path / "b.toml", "[modle]\nmodel = 'x'\n"), environ={})
    with pytest.raises(ConfigError, match=r"unknown key 'mcp_servers\.s\.argv'"):
        load_config(
            write(tmp_path / "c.toml", "[mcp_servers.s]\ncommand='x'\nargv=[]\n"), environ={}
        )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[model]\nrequest_timeout = '300'",
            "'model.request_timeout' in F must be a number, not str '300'",
        ),
        ("[model]\nmax_rounds = 2.5", "'model.max_rounds' in F must be an integer, not float 2.5"),
        ("[model]\nmax_rounds = true", "'model.max_rounds' in F must be an integer, not bool True"),
        (
            "[model]\ntool_mode = 'mcp'",
            "'model.tool_mode' in F must be one of 'code', 'direct', not",
        ),
        ("[model]\napi_key = 12345678", "'model.api_key' in F must be a string, not int (hidden)"),
        (
            "[channels]\nchannels = '#ops'",
            "'channels.channels' in F must be a list of strings, not",
        ),
        ("[model]\nmax_rounds = 0", "'model.max_rounds' in F must be at least 1, not 0"),
        (
            "[model]\nrequest_timeout = 0",
            "'model.request_timeout' in F must be greater than 0, not 0.0",
        ),
        (
            "[model]\nrequest_timeout = inf",
            "'model.request_timeout' in F must be a finite number, not inf",
        ),
        (
            "[runtime]\nshutdown_grace = inf",
            "'runtime.shutdown_grace' in F must be a finite number, not inf",
        ),
        (
            "[code_mode]\nmax_memory = '4 lots'",
            "'code_mode.max_memory' in F must be a size like 4GiB",
        ),
        ("model = 'x'", "key 'model' in F must be a table ([model])"),
        ("[mcp_servers.s]\nargs = []", "missing key 'mcp_servers.s.command' in F"),
        ("[mcp_servers.s]\nurl = 'http://x'", "'mcp_servers.s' in F has a 'url': only stdio MCP"),
    ],
)
def test_wrong_types_and_values_are_errors_that_name_the_key(
    tmp_path: Path, text: str, message: str
):
    """Types, ranges and shapes are checked, naming key and file; secrets are never echoed."""
    path = write(tmp_path / "asyncai.toml", text + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert message.replace(" in F", f" in {path}") in str(err.value)


def test_invalid_toml_says_where(tmp_path: Path):
    """A syntax error names the file and the line."""
    path = write(tmp_path / "asyncai.toml", "[model]\nmodel = \n")
    with pytest.raises(ConfigError, match=r"asyncai\.toml is not valid TOML: .*line 2"):
        load_config(path, environ={})


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path, capsys):
    """TOML is UTF-8: a Latin-1 or binary file names the file and the byte, exit 2.
    It used to end `asyncai serve` and `config show` in a UnicodeDecodeError traceback."""
    path = tmp_path / "asyncai.toml"
    path.write_bytes(b"[model]\nmodel = 'caf\xe9'\n")
    with pytest.raises(ConfigError, match=r"asyncai\.toml is not UTF-8 text: .*byte 0xe9"):
        load_config(path, environ={})
    assert main(["config", "show", "--config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"asyncai config show: {path} is not UTF-8 text: ")
    assert len(err.splitlines()) == 1


def test_a_config_path_too_long_is_a_config_error(tmp_path: Path):
    """--config with a name longer than the system takes: one line, not pathlib's
    OSError (ENAMETOOLONG) traceback from the existence check."""
    path = tmp_path / ("a" * 300)
    with pytest.raises(ConfigError, match=r"^cannot read config file .*: File name too long$"):
        load_config(path, environ={})


@pytest.mark.parametrize(
    "url",
    ["localhost:8080", "", "ftp://gpu-box/v1", "http://[::1", "http://127.0.0.1:99999/v1"],
)
def test_a_base_url_that_is_no_http_url_is_a_config_error(tmp_path: Path, url: str):
    """The endpoint's address is checked at start, from the file, the environment or
    --base-url: before, `asyncai ask` ended in httpx's InvalidURL or an OverflowError
    traceback, or retried four times a request that could not be made."""
    wanted = (
        r" must be an http:// or https:// URL like http://127\.0\.0\.1:8080/v1, "
        rf"not '{re.escape(url)}'$"
    )
    empty = write(tmp_path / "empty.toml", "")
    with pytest.raises(ConfigError, match=r"^key 'model\.base_url' in the command line" + wanted):
        load_config(empty, {"model.base_url": url}, environ={})
    if url:  # an empty variable counts as unset
        with pytest.raises(ConfigError, match=r"^key 'model\.base_url' in .*_BASE_URL" + wanted):
            load_config(empty, environ={"OPENAI_BASE_URL": url})
    path = write(tmp_path / "asyncai.toml", f"[models.big]\nbase_url = {json.dumps(url)}\n")
    with pytest.raises(ConfigError, match=r"^key 'models\.big\.base_url' in .*\.toml" + wanted):
        load_config(path, environ={})


def test_a_bad_base_url_hides_its_password(tmp_path: Path):
    """The message shows the URL as config show does: a user and password hidden."""
    empty = write(tmp_path / "empty.toml", "")
    with pytest.raises(ConfigError, match=r"not 'http://\(hidden\)@\[::1'$"):
        load_config(empty, {"model.base_url": "http://me:s3cret@[::1"}, environ={})


@pytest.mark.parametrize(
    "url", ["http://hub:6680/", "ws://", "ws://127.0.0.1:99999/", "ws://[::1", "hub:6680", ""]
)
def test_a_channel_url_that_is_no_hub_or_nats_url_is_a_config_error(tmp_path: Path, url: str):
    """[channels] url (or ATIRC_URL) is checked at load: before, `asyncai serve` opened its
    database, then ended with exit 1 at its first connection, which systemd's
    Restart=on-failure starts again for ever; `config show` said nothing."""
    wanted = (
        r" must be ws://HOST:PORT/ \(an atirc hub\) or nats://HOST:PORT \(NATS\), "
        rf"not '{re.escape(url)}'$"
    )
    path = write(tmp_path / "asyncai.toml", f"[channels]\nurl = {json.dumps(url)}\n")
    with pytest.raises(ConfigError, match=r"^key 'channels\.url' in .*\.toml" + wanted):
        load_config(path, environ={})
    if url:  # an empty variable counts as unset
        empty = write(tmp_path / "empty.toml", "")
        with pytest.raises(ConfigError, match=r"^key 'channels\.url' in .*ATIRC_URL" + wanted):
            load_config(empty, environ={"ATIRC_URL": url})


@pytest.mark.parametrize(
    "url", ["ws://127.0.0.1:6680/", "wss://hub.example/", "nats://[::1]:4222", "TLS://n:4222"]
)
def test_hub_and_nats_urls_are_taken_as_written(tmp_path: Path, url: str):
    """Both transports' schemes, any case, a host name or an IPv6 address."""
    path = write(tmp_path / "asyncai.toml", f"[channels]\nurl = {json.dumps(url)}\n")
    assert load_config(path, environ={}).channels.url == url


def test_a_bad_channel_url_hides_its_credentials(tmp_path: Path):
    """NATS takes USER:PASSWORD in the URL: the message does not repeat them."""
    empty = write(tmp_path / "empty.toml", "")
    with pytest.raises(ConfigError, match=r"not 'nats://\(hidden\)@n:99999'$"):
        load_config(empty, environ={"ATIRC_URL": "nats://me:s3cret@n:99999"})


def test_a_missing_explicit_file_is_an_error(tmp_path: Path):
    """--config names a file: its absence is a mistake, not a default."""
    with pytest.raises(ConfigError, match=r"config file .*nope\.toml does not exist"):
        load_config(tmp_path / "nope.toml", environ={})


def test_the_default_file_is_read_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """./asyncai.toml is used when present."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "asyncai.toml", "[model]\nmodel = 'from-file'\n")
    config = load_config(environ={})
    assert config.model.model == "from-file"
    assert config.path == Path("asyncai.toml")


def test_environment_overrides_the_file_and_flags_override_both(tmp_path: Path):
    """File < OPENAI_BASE_URL / OPENAI_API_KEY / ASYNCAI_MODEL < flags."""
    path = write(
        tmp_path / "asyncai.toml",
        "[model]\nmodel = 'file'\nbase_url = 'http://file/v1'\napi_key = 'file-key-123'\n",
    )
    env = {
        "OPENAI_BASE_URL": "http://env/v1",
        "OPENAI_API_KEY": "env-key-456",
        "ASYNCAI_MODEL": "env",
        "ATIRC_TOKEN": "tok-789xyz",
    }
    config = load_config(path, environ=env)
    assert (config.model.model, config.model.base_url) == ("env", "http://env/v1")
    assert config.model.api_key == "env-key-456"
    assert config.channels.token == "tok-789xyz"
    flags = {"model.model": "flag", "model.base_url": "http://flag/v1", "model.tool_mode": None}
    config = load_config(path, flags, environ=env)
    assert (config.model.model, config.model.base_url) == ("flag", "http://flag/v1")
    assert config.model.tool_mode == "code"  # None: the flag was not given


def test_command_line_flags_map_to_keys(tmp_path: Path):
    """The shared flags of add_config_arguments become load_config overrides."""
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    args = parser.parse_args(
        [
            "--model", "m", "--base-url", "http://x/v1", "--tool-mode", "direct",
            "--mcp-stdio", "asyncai-mcp-simple --deny-private",
            "--mcp-stdio", "asyncai-mcp-simple",
            "--mcp-stdio", "'/opt/my server/run' --flag 'two words'",
            "--verbose",
        ]
    )  # fmt: skip
    config = load_config(write(tmp_path / "a.toml", ""), overrides_from_args(args), environ={})
    assert args.verbose
    assert (config.model.model, config.model.base_url, config.model.tool_mode) == (
        "m",
        "http://x/v1",
        "direct",
    )
    assert config.mcp_servers == {
        "asyncai-mcp-simple": McpServerConfig("asyncai-mcp-simple", ["--deny-private"]),
        "asyncai-mcp-simple-2": McpServerConfig("asyncai-mcp-simple", []),
        "run": McpServerConfig("/opt/my server/run", ["--flag", "two words"]),
    }


def test_mcp_json_servers_join_the_toml_ones(tmp_path: Path):
    """An mcpServers file is read as is: stdio entries, disabled ones skipped, cwd beside it."""
    servers = {
        "mcpServers": {
            "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
            "fs": {"type": "stdio", "command": "fs-server", "env": {"ROOT": "/srv"}, "cwd": "srv"},
            "off": {"command": "unused", "disabled": True},
        }
    }
    write(tmp_path / "servers.json", json.dumps(servers))
    path = write(
        tmp_path / "asyncai.toml",
        'mcp_json = "servers.json"\n[mcp_servers.simple]\ncommand = "asyncai-mcp-simple"\n',
    )
    config = load_config(path, environ={})
    assert list(config.mcp_servers) == ["simple", "time", "fs"]
    assert config.mcp_servers["time"].args == ["--local-timezone", "UTC"]
    assert config.mcp_servers["fs"].cwd == tmp_path / "srv"
    assert config.mcp_servers["fs"].entry() == {
        "command": "fs-server",
        "args": [],
        "env": {"ROOT": "/srv"},
        "cwd": str(tmp_path / "srv"),
    }


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"mcpServers": {"simple": {"command": "x"}}}, "mcp server 'simple' is defined both in"),
        ({"mcpServers": {"web": {"type": "http", "url": "http://x"}}}, "type 'http': only stdio"),
        ({"mcpServers": {"a": {"command": "x", "auto": []}}}, "unknown key 'mcpServers.a.auto'"),
        ({"servers": {}}, "has no 'mcpServers' object"),
    ],
)
def test_bad_mcp_json_is_an_error(tmp_path: Path, servers: dict, message: str):
    """Collisions, non-stdio servers, unknown keys and wrong shapes are named."""
    write(tmp_path / "servers.json", json.dumps(servers))
    path = write(
        tmp_path / "asyncai.toml",
        'mcp_json = "servers.json"\n[mcp_servers.simple]\ncommand = "asyncai-mcp-simple"\n',
    )
    with pytest.raises(ConfigError, match=message):
        load_config(path, environ={})


def test_a_missing_mcp_json_is_an_error(tmp_path: Path):
    """mcp_json names a file that must exist."""
    with pytest.raises(ConfigError, match=r"cannot read mcp_json .*missing\.json"):
        load_config(None, {"mcp_json": str(tmp_path / "missing.json")}, environ={})


def test_the_preamble_is_read_at_load_time(tmp_path: Path):
    """code_mode.preamble is a path; its text becomes CodeModeLimits.preamble, read at load."""
    write(tmp_path / "pre.py", "NS = 'prod'\n")
    config = load_config(None, {"code_mode.preamble": str(tmp_path / "pre.py")}, environ={})
    assert config.code_mode.preamble_text == "NS = 'prod'\n"
    assert config.code_mode.limits().preamble == "NS = 'prod'\n"
    with pytest.raises(ConfigError, match=r"cannot read code_mode\.preamble .*absent\.py"):
        load_config(None, {"code_mode.preamble": str(tmp_path / "absent.py")}, environ={})


def test_sizes_and_limits_reach_code_mode(tmp_path: Path):
    """Sizes take units; set limits override CodeModeLimits' defaults, unset ones keep them."""
    path = write(
        tmp_path / "asyncai.toml",
        "[code_mode]\nmax_memory = '512MiB'\nmax_print_bytes = '64 KiB'\nmax_wall = 60\n"
        "max_scope_dump = '8MiB'\n",
    )
    limits = load_config(path, environ={}).code_mode.limits()
    assert limits.max_memory == 512 * 1024**2
    assert limits.max_print_bytes == 64 * 1024
    assert limits.max_wall == 60.0
    assert limits.max_scope_dump == 8 * 1024**2
    assert limits.max_feed_duration == CodeModeLimits().max_feed_duration


def test_concurrent_runs_may_not_exceed_scopes(tmp_path: Path):
    """Every concurrent run holds a REPL scope, so max_concurrent_runs ≤ max_scopes."""
    path = write(tmp_path / "asyncai.toml", "[runtime]\nmax_concurrent_runs = 9\n")
    with pytest.raises(
        ConfigError, match=r"max_concurrent_runs \(9\) may not exceed code_mode\.max_scopes \(8\)"
    ):
        load_config(path, environ={})
    ok = write(
        tmp_path / "ok.toml", "[runtime]\nmax_concurrent_runs = 9\n[code_mode]\nmax_scopes = 12\n"
    )
    assert load_config(ok, environ={}).runtime.max_concurrent_runs == 9


def test_secrets_stay_out_of_reprs(tmp_path: Path):
    """API key, channel token and server env values never show in a repr; secrets() lists them."""
    path = write(
        tmp_path / "asyncai.toml",
        "[model]\napi_key = 'sk-secret-value-1'\n[channels]\ntoken = 'tok-secret-value-2'\n"
        "[mcp_servers.gh]\ncommand = 'gh-mcp'\n"
        "env = { GITHUB_TOKEN = 'ghp-secret-3', MODE = 'ro' }\n",
    )
    config = load_config(path, environ={})
    text = repr(config)
    for secret in ("sk-secret-value-1", "tok-secret-value-2", "ghp-secret-3"):
        assert secret not in text
    assert "GITHUB_TOKEN" in text  # the names are useful, the values are not shown
    assert sorted(config.secrets()) == ["ghp-secret-3", "sk-secret-value-1", "tok-secret-value-2"]


def test_require_model_says_where_to_set_it():
    """Without a model the message names the file key, the flag and the variable."""
    with pytest.raises(
        ConfigError,
        match=r"set 'model' in \[model\] of asyncai\.toml, pass --model, or set ASYNCAI_MODEL",
    ):
        Config().require_model()
    assert Config(model=ModelConfig(model="m")).require_model() == "m"


def test_per_sender_limits_are_unset_by_default_and_positive_when_set(tmp_path: Path):
    """[runtime] max_runs_per_sender_per_hour and max_tokens_per_sender_per_day: unset is
    unlimited; a value must be a positive integer."""
    assert Config().runtime.max_runs_per_sender_per_hour is None
    assert Config().runtime.max_tokens_per_sender_per_day is None
    path = write(
        tmp_path / "asyncai.toml",
        "[runtime]\nmax_runs_per_sender_per_hour = 20\nmax_tokens_per_sender_per_day = 500000\n",
    )
    runtime = load_config(path, environ={}).runtime
    assert (runtime.max_runs_per_sender_per_hour, runtime.max_tokens_per_sender_per_day) == (
        20,
        500_000,
    )
    zero = write(tmp_path / "zero.toml", "[runtime]\nmax_runs_per_sender_per_hour = 0\n")
    with pytest.raises(ConfigError, match="max_runs_per_sender_per_hour"):
        load_config(zero, environ={})
