"""The systemd units: they verify, and carry the settings the daemon relies on."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parent.parent / "systemd"
INSTALLED_VENV = "/opt/asyncai/.venv"  # where the units expect the virtual environment
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze is not installed (apt-get install systemd)"
)


def directives(unit: str) -> dict[str, list[str]]:
    """Every ``Key=value`` of a unit file, values in order (keys may repeat)."""
    found: dict[str, list[str]] = {}
    for line in (UNITS / unit).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key, []).append(value)
    return found


def localized(tmp_path: Path, unit: str) -> Path:
    """A copy of the unit whose commands point at this checkout's virtual environment,
    since `verify` checks that ExecStart= names an executable."""
    text = (UNITS / unit).read_text().replace(INSTALLED_VENV, sys.prefix)
    copy = tmp_path / unit
    copy.write_text(text)
    return copy


@needs_analyze
@pytest.mark.parametrize("unit", ["asyncai.service", "atirc-hub.service"])
def test_unit_passes_systemd_analyze_verify(tmp_path, unit):
    """`systemd-analyze verify` accepts the unit without a single warning."""
    copy = localized(tmp_path, unit)
    proc = subprocess.run(
        [ANALYZE, "verify", "--man=no", "--recursive-errors=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == ""


@needs_analyze
@pytest.mark.parametrize("unit", ["asyncai.service", "atirc-hub.service"])
def test_unit_is_hardened(tmp_path, unit):
    """`systemd-analyze security --offline` rates the unit's exposure below 3 (OK)."""
    copy = localized(tmp_path, unit)
    proc = subprocess.run(
        [ANALYZE, "security", "--offline=true", "--no-pager", str(copy)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout + proc.stderr)
    assert match, proc.stdout + proc.stderr
    assert float(match.group(1)) < 3.0


@pytest.mark.parametrize("unit", ["asyncai.service", "atirc-hub.service"])
def test_unit_has_the_required_settings(unit):
    """Type=notify with a watchdog, restart on failure, state dir, a memory cap that
    does not stop the service, a non-root user and the hardening DESIGN.md asks for."""
    d = directives(unit)
    required = {
        "Type": "notify",
        "Restart": "on-failure",
        "OOMPolicy": "continue",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    }
    for key, value in required.items():
        assert d.get(key) == [value], key
    for key in ("WatchdogSec", "StateDirectory", "MemoryMax", "ExecStart"):
        assert d.get(key), key
    assert d.get("User") == ["asyncai"] or d.get("DynamicUser") == ["yes"]


@pytest.mark.parametrize("unit", ["asyncai.service", "asyncai@.service"])
def test_a_configuration_error_stops_the_daemon_unit_instead_of_restarting_it(
    tmp_path: Path, unit: str
):
    """`asyncai serve` exits 2 on a configuration error, before it opens anything: the
    units do not restart that exit every RestartSec for ever."""
    assert directives(unit).get("RestartPreventExitStatus") == ["2"]
    bad = tmp_path / "asyncai.toml"
    bad.write_text('[model]\nmodel = "m"\n[channels]\nchannels = ["#ops"]\nurl = "http://hub/"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("asyncai serve: key 'channels.url' in ")
    assert list(tmp_path.iterdir()) == [bad]  # no database, no state: nothing was opened


def test_daemon_unit_reads_etc_asyncai_and_keeps_exec():
    """The daemon takes its config from /etc/asyncai, and may start subprocesses
    (Monty workers, MCP servers): nothing forbids exec."""
    d = directives("asyncai.service")
    assert "--config /etc/asyncai/asyncai.toml" in d["ExecStart"][0]
    assert d["EnvironmentFile"] == ["-/etc/asyncai/asyncai.env"]
    assert "NoExecPaths" not in d
    assert "MemoryDenyWriteExecute" not in d
    sysusers = (UNITS / "asyncai.sysusers").read_text()
    assert re.search(r"^u asyncai ", sysusers, flags=re.MULTILINE)


def test_env_example_names_the_model_and_hub_variables():
    """The example environment file sets what the daemon reads from the environment."""
    text = (UNITS / "asyncai.env.example").read_text()
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ASYNCAI_MODEL", "ATIRC_URL"):
        assert re.search(rf"^#?{name}=", text, flags=re.MULTILINE), name


def test_example_config_loads():
    """The example /etc/asyncai/asyncai.toml is valid and keeps state in the StateDirectory."""
    from daemon.config import load_config

    config = load_config(UNITS / "asyncai.toml.example", environ={})
    assert str(config.sessions.db) == "/var/lib/asyncai/asyncai.db"
    assert config.channels.channels == ["#ops"]
    assert config.mcp_servers["http"].command == "asyncai-mcp-simple"
