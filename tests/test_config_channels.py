"""Per-channel policies: ``[channel."#name"]`` over the globals, ``[models.NAME]``, the errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from daemon.config import (
    ApprovalsConfig,
    ChannelApprovalsConfig,
    ChannelConfig,
    Config,
    EndpointConfig,
    ModelConfig,
    load_config,
)
from daemon.errors import ConfigError

SERVERS = """\
[mcp_servers.simple]
command = "asyncai-mcp-simple"

[mcp_servers.kcp]
command = "asyncai-mcp-kcp"
"""

# The issue's three channels (and the configuration reference's worked example).
THREE = (
    SERVERS
    + """
[channels]
channels = ["#ops", "#help", "#team"]

[channel."#help"]
servers = ["simple"]
tools_deny = ["*.delete_*"]
max_runs_per_sender_per_hour = 20

[channel."#help".approvals]
mode = "deny"

[channel."#ops"]
servers = ["kcp", "simple"]
tool_mode = "code"

[channel."#ops".approvals]
mode = "ask"
approvers = ["alice", "bob"]

[channel."#team"]
endpoint = "big"

[models.big]
base_url = "http://gpu-box:8000/v1"
model = "qwen2.5-coder-32b"
"""
)


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` and return it."""
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, text: str, **environ: str) -> Config:
    """The configuration of ``text`` as ``asyncai.toml`` in ``tmp_path``."""
    return load_config(write(tmp_path / "asyncai.toml", text), environ=environ)


def error(tmp_path: Path, text: str) -> str:
    """The one-line message of the ConfigError that loading ``text`` raises."""
    path = write(tmp_path / "asyncai.toml", text)
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    message = str(err.value).replace(str(path), "F")
    assert "\n" not in message
    return message


def test_the_three_channels_resolve_as_the_issue_says(tmp_path: Path) -> None:
    """#help: simple only, delete_* gone, 20 runs an hour, approvals denied; #ops: both
    servers, asking alice and bob; #team: the big endpoint; others: the globals."""
    config = load(tmp_path, "[model]\nmodel = 'small'\n" + THREE, OPENAI_API_KEY="sk-global")
    help_, ops, team = config.policy("#help"), config.policy("#ops"), config.policy("#team")
    assert help_.channel == "#help"
    assert help_.servers == frozenset({"simple"})
    assert help_.tools_deny == ("*.delete_*",)
    assert help_.max_runs_per_sender_per_hour == 20
    assert help_.approvals == ApprovalsConfig(mode="deny")
    assert help_.model.model == "small"
    assert help_.model.api_key == "sk-global"
    assert ops.servers == frozenset({"kcp", "simple"})
    assert ops.approvals.approvers == ["alice", "bob"]
    assert ops.max_runs_per_sender_per_hour is None
    assert team.endpoint == "big"
    assert team.model.base_url == "http://gpu-box:8000/v1"
    assert team.model.model == "qwen2.5-coder-32b"
    assert team.model.api_key is None  # a named endpoint never inherits [model]'s key
    assert team.servers is None
    other = config.policy("#elsewhere")
    assert other == config.policy("") == config.policies()[""]
    assert other.channel == ""
    assert list(config.policies()) == ["", "#help", "#ops", "#team"]


def test_a_channel_key_overrides_only_its_own_channel() -> None:
    """Each key of a section replaces the global value for that channel, key by key."""
    config = Config(
        model=ModelConfig(model="m", tool_mode="direct", system_prompt="global prompt"),
        approvals=ApprovalsConfig(mode="ask", allow=["a.*"], approvers=["root"]),
        channel={
            "#x": ChannelConfig(
                tool_mode="code",
                system_prompt="x prompt",
                approvals=ChannelApprovalsConfig(deny=["k.*"], expire_after=60),
                max_tokens_per_sender_per_day=1000,
                max_concurrent_runs=2,
            )
        },
    )
    config.runtime.max_runs_per_sender_per_hour = 5
    x = config.policy("#x")
    assert x.tool_mode == x.model.tool_mode == "code"
    assert x.model.system_prompt == "x prompt"
    assert x.approvals == ApprovalsConfig(
        mode="ask", allow=["a.*"], deny=["k.*"], approvers=["root"], expire_after=60
    )
    assert x.max_runs_per_sender_per_hour == 5
    assert x.max_tokens_per_sender_per_day == 1000
    assert x.max_concurrent_runs == 2
    base = config.policy("#y")
    assert base.tool_mode == "direct"
    assert base.model.system_prompt == "global prompt"
    assert base.approvals == config.approvals
    assert base.max_concurrent_runs is None
    x.approvals.allow.append("mutated")  # a copy: the config and other policies keep theirs
    assert config.approvals.allow == ["a.*"]
    assert config.policy("#x").approvals.allow == ["a.*"]


def test_an_endpoint_has_the_model_keys_but_the_channel_ones() -> None:
    """[models.NAME] takes every [model] key but tool_mode, system_prompt and the local
    model's (local_max_rss, local_prompt_cache); its defaults are the built-in ones."""
    endpoint = {f.name for f in dataclasses.fields(EndpointConfig)}
    model = {f.name for f in dataclasses.fields(ModelConfig)}
    assert model - endpoint == {
        "tool_mode",
        "system_prompt",
        "local_max_rss",
        "local_prompt_cache",
    }
    for f in dataclasses.fields(EndpointConfig):
        assert getattr(EndpointConfig(), f.name) == getattr(ModelConfig(), f.name)
    approvals = {f.name for f in dataclasses.fields(ApprovalsConfig)}
    assert {f.name for f in dataclasses.fields(ChannelApprovalsConfig)} == approvals


def test_an_endpoints_examples_are_relative_to_the_file_and_read_at_load(tmp_path: Path) -> None:
    """models.NAME.examples is a path like model.examples: relative to the file, read at
    start, and it reaches the ModelConfig of the channel that uses the endpoint."""
    (tmp_path / "ex").mkdir()
    write(tmp_path / "ex" / "big.toml", "[[example]]\n")
    text = THREE + 'examples = "ex/big.toml"\nharness = true\n'
    config = load(tmp_path, text)
    assert config.models["big"].examples == tmp_path / "ex" / "big.toml"
    team = config.policy("#team").model
    assert team.examples_text == "[[example]]\n"
    assert team.harness is True
    assert config.policy("#help").model.harness is None
    message = error(tmp_path, THREE + 'examples = "missing.toml"\n')
    assert message.startswith("cannot read models.big.examples ")


def test_secrets_include_every_endpoints_key(tmp_path: Path) -> None:
    """The log redactor hears of a named endpoint's key too."""
    config = load(tmp_path, THREE + 'api_key = "sk-big-secret"\n')
    assert "sk-big-secret" in config.secrets()
    assert "sk-big-secret" not in repr(config)


def test_a_urls_password_reaches_the_log_redactor(tmp_path: Path) -> None:
    """A user and password inside a URL are secrets whatever the key's name: a server's
    argument or environment value, a base_url with basic auth. A log line that prints
    the URL (a server's command line on a failed start) shows neither."""
    import io

    import structlog

    from daemon.logging import configure_logging, reset_logging

    text = (
        '[model]\nbase_url = "https://bob:base-pass-77@llm.example/v1"\n'
        "[mcp_servers.db]\n"
        'command = "db-server"\n'
        'args = ["postgresql://app:hunter2222@db.example/prod"]\n'
        'env = { DATABASE_URL = "mysql://ro:swordfish9@db2.example/x" }\n'
    )
    config = load(tmp_path, text)
    secrets = config.secrets()
    for password in ("base-pass-77", "hunter2222", "swordfish9"):
        assert password in secrets
    stream = io.StringIO()
    configure_logging(True, stream, secrets=secrets)
    try:
        structlog.get_logger("asyncai.mcp").info(
            "mcp.start_failed",
            argv=config.mcp_servers["db"].args,
            env=config.mcp_servers["db"].env["DATABASE_URL"],
            base_url=config.model.base_url,
        )
    finally:
        reset_logging()
    logged = stream.getvalue()
    assert "db.example/prod" in logged  # the line is there, the secrets are not
    for password in ("base-pass-77", "hunter2222", "swordfish9"):
        assert password not in logged


def test_sources_name_where_each_key_came_from(tmp_path: Path) -> None:
    """The loader's provenance is kept: file, environment, command line, per key."""
    path = write(tmp_path / "asyncai.toml", THREE)
    config = load_config(
        path, {"model.tool_mode": "direct"}, environ={"OPENAI_API_KEY": "sk-from-env"}
    )
    assert config.sources['channel."#help".servers'] == str(path)
    assert config.sources['channel."#help".approvals.mode'] == str(path)
    assert config.sources["models.big.base_url"] == str(path)
    assert config.sources["model.api_key"] == "environment variable OPENAI_API_KEY"
    assert config.sources["model.tool_mode"] == "the command line"
    assert config.sources["mcp_servers.kcp"] == str(path)
    assert "model.model" not in config.sources  # a default


def test_empty_sections_exist(tmp_path: Path) -> None:
    """An empty [channel."#x"] is a section (the globals, under its own name); an empty
    [models.x] an endpoint of built-in defaults."""
    text = '[channels]\nchannels = [\'#x\']\n[channel."#x"]\n[channel."#x".approvals]\n'
    config = load(tmp_path, text + "[models.x]\n")
    assert config.channel == {"#x": ChannelConfig()}
    assert config.models == {"x": EndpointConfig()}
    assert config.policy("#x").channel == "#x"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[channel."#help"]\ntool_deny = []',
            "unknown key 'channel.\"#help\".tool_deny' in F "
            "(did you mean 'channel.\"#help\".tools_deny'?)",
        ),
        (
            '[channel."#help".approvals]\nmodes = "ask"',
            "unknown key 'channel.\"#help\".approvals.modes' in F "
            "(did you mean 'channel.\"#help\".approvals.mode'?)",
        ),
        (
            '[channel."#help"]\nservers = ["kcpx"]',
            "key 'channel.\"#help\".servers' in F names an unknown server 'kcpx' "
            "(the [mcp_servers]: kcp, simple)",
        ),
        (
            '[channel."#help"]\ntools_allow = []',
            "key 'channel.\"#help\".tools_allow' in F is an empty list, which would leave "
            "every tool in the channel: leave the key out for every tool, or write "
            "servers = [] for a channel without tools",
        ),
        (
            '[channel."#help"]\nendpoint = "big"\n[models.big]\nbase_url = "http://gpu:8000/v1"',
            "key 'models.big.model' in F is not set, and channel #help's runs use that "
            "endpoint: name its model there (a named endpoint never takes [model]'s)",
        ),
        (
            '[channel."#help"]\nendpoint = "bigg"',
            "key 'channel.\"#help\".endpoint' in F names an unknown endpoint 'bigg' "
            "(the [models.NAME] sections: none)",
        ),
        (
            '[channel."#help".approvals]\nmode = "allow"\napprovers = ["alice"]',
            "key 'channel.\"#help\".approvals.approvers' in F lists approvers under "
            'mode = "allow", where no call asks',
        ),
        (
            '[approvals]\nmode = "allow"\napprovers = ["alice"]',
            "key 'approvals.approvers' in F lists approvers under mode = \"allow\"",
        ),
        (
            '[approvals]\nmode = "allow"\n[channel."#help".approvals]\napprovers = ["alice"]',
            "key 'channel.\"#help\".approvals.approvers' in F lists approvers under",
        ),
        (
            '[channel."help"]\nservers = []',
            "key 'channel.help' in F is not a channel name: a channel is '#' and 1-64",
        ),
        (
            '[channel."#hlep"]\nservers = []',
            "key 'channel.\"#hlep\"' in F is a section for a channel the daemon does not "
            "answer in: channels.channels lists #help; add #hlep there or remove the section",
        ),
        (
            '[channel."#help"]\nmax_concurrent_runs = 5',
            "key 'channel.\"#help\".max_concurrent_runs' in F is 5, over "
            "runtime.max_concurrent_runs (4)",
        ),
        (
            '[channel."#help"]\ntool_mode = "mcp"',
            "key 'channel.\"#help\".tool_mode' in F must be one of 'code', 'direct', not str",
        ),
        (
            '[channel."#help"]\nservers = "simple"',
            "key 'channel.\"#help\".servers' in F must be a list of strings, not str",
        ),
        (
            '[channel."#help"]\napprovals = "deny"',
            "key 'channel.\"#help\".approvals' in F must be a table, not str 'deny'",
        ),
        ("channel = 3", "key 'channel' in F must be a table of tables ([channel.NAME])"),
        ('[channel]\n"#help" = 3', "key 'channel.\"#help\"' in F must be a table"),
        (
            "[models.big]\ntool_mode = 'code'",
            "unknown key 'models.big.tool_mode' in F",
        ),
        (
            "[models.big]\napi_key = 12345678",
            "key 'models.big.api_key' in F must be a string, not int (hidden)",
        ),
    ],
)
def test_errors_at_start_name_the_section_and_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    """One line each, naming the channel section, the key and the file."""
    base = SERVERS + "[channels]\nchannels = ['#help']\n"
    # a top-level key must come before the first table
    document = base + text if text.startswith("[") else text + "\n" + base
    assert error(tmp_path, document + "\n").startswith(message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "channels = ['ops']",
            "key 'channels.channels' in F lists 'ops', which is not a channel name: "
            "a channel is '#' and 1-64 of A-Z a-z 0-9 _ . -",
        ),
        (
            "channels = ['#ops']\nshared = ['dev']",
            "key 'channels.shared' in F lists 'dev', which is not a channel name",
        ),
        (
            "channels = ['#ops', '#dev']\nshared = ['#dve']",
            "key 'channels.shared' in F lists #dve, a channel the daemon does not answer in: "
            "channels.channels lists #ops, #dev; add #dve there or remove it from shared",
        ),
        (
            "channels = ['#ops']\nnick = 'ops bot'",
            "key 'channels.nick' in F is not a nick: 'ops bot'; a nick is 1-64 of "
            "A-Z a-z 0-9 _ . -",
        ),
    ],
)
def test_the_channels_names_are_checked_at_load(tmp_path: Path, text: str, message: str) -> None:
    """A channel or nick the hub would refuse fails at load, naming the key (exit 2):
    `asyncai serve` used to start and end with exit 1 on the hub's 'bad_channel: invalid
    channel name' or 'invalid nick', naming no key; a shared entry not answered in was
    silently ignored, and the channel meant answered every message."""
    assert error(tmp_path, "[channels]\n" + text + "\n").startswith(message)


def test_a_bad_nick_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    """ATIRC_NICK is checked like the key it sets."""
    with pytest.raises(ConfigError, match=r"^key 'channels\.nick' in .*ATIRC_NICK is not a nick"):
        load(tmp_path, "", ATIRC_NICK="me@host")


def test_approvers_with_a_channel_allow_inheriting_global_approvers_is_fine(
    tmp_path: Path,
) -> None:
    """A channel that sets mode = "allow" wrote no approvers; the inherited list is no error."""
    text = (
        "[channels]\nchannels = ['#x']\n[approvals]\napprovers = ['alice']\n"
        "[channel.\"#x\".approvals]\nmode = 'allow'\n"
    )
    assert load(tmp_path, text).policy("#x").approvals.mode == "allow"


def test_sees_filters_by_server_allow_and_deny() -> None:
    """servers, then deny, then allow; deny wins; a bare tool matches by its name."""
    config = Config(
        channel={
            "#x": ChannelConfig(
                servers=["kcp", "simple"],
                tools_allow=["kcp.get_*", "simple.*"],
                tools_deny=["*.get_secret", "simple.delete_*"],
            )
        }
    )
    x = config.policy("#x")
    assert x.sees("kcp", "get_pods")
    assert not x.sees("kcp", "scale")  # no allow glob
    assert not x.sees("kcp", "get_secret")  # deny wins over allow
    assert x.sees("simple", "fetch")
    assert not x.sees("simple", "delete_all")
    assert not x.sees("git", "log")  # not one of its servers
    assert config.policy("#y").sees("git", "log")


def test_digest_is_stable_and_sees_what_a_cluster_must_share() -> None:
    """Same policy, same digest (order of globs aside); a different tool set, approvals or
    endpoint name changes it; an endpoint's address, key and a daemon's cap do not."""

    def digest(**section: object) -> str:
        config = Config(
            models={"big": EndpointConfig(), "other": EndpointConfig()},
            channel={"#x": ChannelConfig(**section)},  # type: ignore[arg-type]  # test kwargs
        )
        return config.policy("#x").digest()

    base = digest(tools_deny=["a.*", "b.*"])
    assert base == digest(tools_deny=["b.*", "a.*"])
    assert len(base) == 64
    assert base != digest(tools_deny=["a.*"])
    assert base != digest(tools_deny=["a.*", "b.*"], servers=["s"])
    assert base != digest(
        tools_deny=["a.*", "b.*"], approvals=ChannelApprovalsConfig(approvers=["x"])
    )
    assert base != digest(tools_deny=["a.*", "b.*"], endpoint="big")
    assert base == digest(tools_deny=["a.*", "b.*"], max_concurrent_runs=1)
    keyed = Config(model=ModelConfig(api_key="sk-1", base_url="http://a"))
    assert keyed.policy("").digest() == Config().policy("").digest()
    assert "sk-1" not in keyed.policy("").digest()


DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def fenced_after(heading: str, language: str = "toml") -> str:
    """The first ``language`` code block after ``heading`` in the configuration reference."""
    text = DOCS.read_text(encoding="utf-8")
    after = text[text.index(heading) :]
    start = after.index(f"```{language}\n") + len(language) + 4
    return after[start : after.index("```", start)]


def test_the_references_worked_example_loads_as_the_issue_says(tmp_path: Path) -> None:
    """docs/configuration.md's three channels are the issue's, and they load as written."""
    example = fenced_after("### Worked example: three channels")
    config = load(tmp_path, example)
    assert config == load(tmp_path, THREE)  # the same file as this module's
    assert config.policy("#help").servers == frozenset({"simple"})
    assert config.policy("#team").model.model == "qwen2.5-coder-32b"
    assert config.policy("#ops").approvals.approvers == ["alice", "bob"]


def test_servers_from_mcp_json_and_flags_count_as_known(tmp_path: Path) -> None:
    """A section's servers are checked after every source of servers: the file's tables,
    its mcp_json and --mcp-stdio, so a server named by any of them is known."""
    write(tmp_path / "mcp.json", '{"mcpServers": {"time": {"command": "mcp-server-time"}}}')
    text = (
        'mcp_json = "mcp.json"\n[channels]\nchannels = ["#x"]\n'
        '[channel."#x"]\nservers = ["time", "asyncai-mcp-simple"]\n'
    )
    path = write(tmp_path / "asyncai.toml", text)
    config = load_config(path, {"mcp_stdio": ["asyncai-mcp-simple"]}, environ={})
    assert config.policy("#x").servers == frozenset({"time", "asyncai-mcp-simple"})
    assert config.sources["mcp_servers.time"] == str(tmp_path / "mcp.json")
    assert config.sources["mcp_servers.asyncai-mcp-simple"] == "the command line"


def test_idle_globs_are_the_ones_that_name_no_tool_of_the_daemon() -> None:
    """A tools_allow or tools_deny glob that names none of the daemon's tools (a typo, most
    often: a deny glob that matches nothing refuses nothing) is listed with its key; one
    that names a tool of a server the channel does not see is not idle."""
    config = Config(
        channel={
            "#x": ChannelConfig(
                servers=["simple"],
                tools_allow=["simple.*", "simple.fecth"],
                tools_deny=["simple.delete_*", "kcp.*", "*.delete_objcet"],
            )
        }
    )
    tools = [("simple", "fetch"), ("kcp", "delete_object"), ("", "bare")]
    assert config.policy("#x").idle_globs(tools) == [
        ("tools_allow", "simple.fecth"),
        ("tools_deny", "simple.delete_*"),
        ("tools_deny", "*.delete_objcet"),
    ]
    assert config.policy("#y").idle_globs(tools) == []
