"""``asyncai config show``: every channel's effective values, secrets masked, with origins.

Run as the real console script (a subprocess, with a real environment) and
in-process through ``daemon.cli.main``; the rows come from
:func:`daemon.config.effective_settings`, tested here too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.cli import main
from daemon.config import Config, effective_settings, load_config, settings_json

ASYNCAI = Path(sys.executable).with_name("asyncai")

SECRETS = {
    "file_key": "sk-big-file-secret-1",
    "env_key": "sk-env-secret-2",
    "file_token": "atirc-file-token-3",
    "env_token": "atirc-env-token-4",
    "github": "ghp-github-secret-5",
    "password": "hunter2-password-6",
}

CONFIG = f"""\
[model]
model = "small"

[mcp_servers.simple]
command = "asyncai-mcp-simple"
env = {{ GITHUB_TOKEN = "{SECRETS["github"]}", DB_PASSWORD = "{SECRETS["password"]}", \
REGION = "eu-west" }}

[mcp_servers.kcp]
command = "asyncai-mcp-kcp"

[channels]
channels = ["#ops", "#help", "#team", "#dev"]
token = "{SECRETS["file_token"]}"

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
api_key = "{SECRETS["file_key"]}"
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """The issue's three channels, a fourth without a section, and secrets everywhere."""
    path = tmp_path / "asyncai.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def lines_of(text: str) -> dict[str, list[str]]:
    """The text output's lines by table header (``""`` before the first), comments kept."""
    tables: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        if line.startswith("[") or line.startswith("# every channel"):
            current = line.split("  #")[0]
            tables[current] = []
        elif line:
            tables[current].append(" ".join(line.split()))
    return tables


def test_the_real_cli_masks_secrets_and_names_origins(config_file: Path, tmp_path: Path) -> None:
    """The console script, with secrets in the file and the environment: none is printed,
    and each value says where it came from (file, environment, flag, channel section)."""
    env = {
        **os.environ,
        "OPENAI_API_KEY": SECRETS["env_key"],
        "ATIRC_TOKEN": SECRETS["env_token"],
    }
    done = subprocess.run(
        [str(ASYNCAI), "config", "show", "--config", str(config_file), "--tool-mode", "direct"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    for secret in SECRETS.values():
        assert secret not in done.stdout
    tables = lines_of(done.stdout)
    f = str(config_file)
    assert "api_key = (hidden) # environment OPENAI_API_KEY" in tables["[model]"]
    assert 'model = "small" # file ' + f in tables["[model]"]
    assert 'tool_mode = "direct" # flag' in tables["[model]"]
    assert "token = (hidden) # environment ATIRC_TOKEN" in tables["[channels]"]
    assert "env.GITHUB_TOKEN = (hidden) # file " + f in tables["[mcp_servers.simple]"]
    assert "env.DB_PASSWORD = (hidden) # file " + f in tables["[mcp_servers.simple]"]
    assert 'env.REGION = "eu-west" # file ' + f in tables["[mcp_servers.simple]"]
    assert "api_key = (hidden) # file " + f in tables["[models.big]"]
    assert "request_timeout = 300.0 # default" in tables["[models.big]"]
    help_ = tables['[channel."#help"]']
    assert 'servers = ["simple"] # channel section in ' + f in help_
    assert 'approvals.mode = "deny" # channel section in ' + f in help_
    assert "approvals.expire_after = 86400.0 # default (approvals.expire_after)" in help_
    assert 'tool_mode = "direct" # flag (model.tool_mode)' in help_
    assert "model.api_key = (hidden) # environment OPENAI_API_KEY (model.api_key)" in help_
    ops = tables['[channel."#ops"]']
    assert 'tool_mode = "code" # channel section in ' + f in ops
    assert 'approvals.approvers = ["alice", "bob"] # channel section in ' + f in ops
    team = tables['[channel."#team"]']
    base_url = 'model.base_url = "http://gpu-box:8000/v1"'
    assert f"{base_url} # file {f} (models.big.base_url)" in team
    assert "model.api_key = (hidden) # file " + f + " (models.big.api_key)" in team
    assert "# every channel without a section (#dev)" in tables


def test_json_has_the_same_values_origins_and_digests(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json: sections and channels, each value with its origin and source, secrets masked."""
    status = main(["config", "show", "--config", str(config_file), "--json"])
    out, err = capsys.readouterr()
    assert (status, err) == (0, "")
    for secret in SECRETS.values():
        assert secret not in out
    data = json.loads(out)
    config = load_config(config_file, environ={})
    assert data["path"] == str(config_file)
    assert data["sections"]["channels"]["token"] == {
        "value": "(hidden)",
        "origin": "file",
        "source": str(config_file),
    }
    help_ = data["channels"]["#help"]
    assert help_["digest"] == config.policy("#help").digest()
    assert help_["settings"]["servers"] == {
        "value": ["simple"],
        "origin": "channel section",
        "source": str(config_file),
    }
    assert help_["settings"]["max_concurrent_runs"] == {"value": None, "origin": "default"}
    assert data["channels"][""]["applies_to"] == ["#dev"]
    assert data["channels"]["#team"]["settings"]["model.model"]["via"] == "models.big.model"


def test_a_config_error_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad section fails as serve would fail: one line naming the section and the key."""
    path = tmp_path / "asyncai.toml"
    path.write_text('[channels]\nchannels = ["#help"]\n[channel."#help"]\nendpoint = "x"\n')
    status = main(["config", "show", "--config", str(path)])
    out, err = capsys.readouterr()
    assert status == 2
    assert out == ""
    assert err == (
        f"asyncai config show: key 'channel.\"#help\".endpoint' in {path} names an unknown "
        "endpoint 'x' (the [models.NAME] sections: none)\n"
    )


def test_the_defaults_show_as_defaults() -> None:
    """Config() has no sources: every value is a default, and there is one policy."""
    view = effective_settings(Config())
    assert {s.origin for rows in view.sections.values() for s in rows} == {"default"}
    assert list(view.channels) == [""]
    data = settings_json(view)
    assert data["channels"][""]["settings"]["approvals.mode"] == {
        "value": "ask",
        "origin": "default",
        "via": "approvals.mode",
    }


def test_the_references_sample_output_is_what_config_show_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every line of docs/configuration.md's sample output is a line config show prints for
    the worked example (digests included), with OPENAI_API_KEY set."""
    docs = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text()
    section = docs[docs.index("### Worked example: three channels") :]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    shown = section[section.index("### `asyncai config show`") :]
    sample = shown.split("```\n", 1)[1].split("```", 1)[0]
    (tmp_path / "asyncai.toml").write_text(example, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-doc-example")
    for var in ("OPENAI_BASE_URL", "ASYNCAI_MODEL", "ATIRC_URL", "ATIRC_TOKEN", "ATIRC_NICK"):
        monkeypatch.delenv(var, raising=False)
    assert main(["config", "show", "--config", "asyncai.toml"]) == 0
    out = capsys.readouterr().out
    printed = {" ".join(line.split()) for line in out.splitlines()}
    for line in sample.splitlines():
        if line:
            assert " ".join(line.split()) in printed, line


def test_a_password_inside_a_url_is_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A secret need not be under a secret-looking name: the reference postgres MCP server
    takes ``postgresql://user:PASSWORD@host/db`` as an argument, ``DATABASE_URL`` carries
    the same, and an endpoint behind basic auth has it in ``base_url``. The userinfo of
    every URL shown is hidden, in text and JSON; the rest of the URL still shows."""
    path = tmp_path / "asyncai.toml"
    path.write_text(
        """
[model]
model = "small"
base_url = "https://alice:pw-model-1@gpu.example/v1"

[models.big]
base_url = "http://tok-big-2@gpu-box:8000/v1"
model = "big"

[channels]
url = "nats://bob:pw-nats-3@broker:4222"
channels = ["#team"]

[mcp_servers.db]
command = "mcp-server-postgres"
args = ["--url=postgresql://app:pw-arg-4@db/prod"]
env = { DATABASE_URL = "postgres://app:pw-env-5@db/prod" }

[channel."#team"]
endpoint = "big"
""",
        encoding="utf-8",
    )
    for flag in ([], ["--json"]):
        status = main(["config", "show", "--config", str(path), *flag])
        out, err = capsys.readouterr()
        assert (status, err) == (0, "")
        for secret in ("pw-model-1", "tok-big-2", "pw-nats-3", "pw-arg-4", "pw-env-5"):
            assert secret not in out, secret
        assert "gpu.example/v1" in out
        assert "postgres://(hidden)@db/prod" in out
