"""The units of a cluster (issue 18): nats-server with JetStream, and asyncai@NAME."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.fakes.nats_server import nats_server_binary
from tests.test_systemd import ANALYZE, UNITS, directives, localized, needs_analyze

CLUSTER_UNITS = ["nats-server.service", "asyncai@.service"]


@needs_analyze
@pytest.mark.parametrize("unit", CLUSTER_UNITS)
def test_cluster_unit_verifies_and_is_hardened(tmp_path: Path, unit: str) -> None:
    """`systemd-analyze verify` accepts it silently; `security` rates it below 3 (OK)."""
    copy = localized(tmp_path, unit)
    assert ANALYZE is not None
    verify = subprocess.run(
        [ANALYZE, "verify", "--man=no", "--recursive-errors=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    assert verify.stderr.strip() == ""
    security = subprocess.run(
        [ANALYZE, "security", "--offline=true", "--no-pager", str(copy)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", security.stdout)
    assert match, security.stdout + security.stderr
    assert float(match.group(1)) < 3.0


def test_each_instance_has_its_own_config_and_state() -> None:
    """asyncai@a reads /etc/asyncai/a.toml and keeps its database in /var/lib/asyncai/a."""
    d = directives("asyncai@.service")
    assert "--config /etc/asyncai/%i.toml" in d["ExecStart"][0]
    assert d["StateDirectory"] == ["asyncai/%i"]
    assert d["Type"] == ["notify"]
    assert d["User"] == ["asyncai"]
    assert "nats-server.service" in d["After"][0]
    nats = directives("nats-server.service")
    assert "--jetstream" in nats["ExecStart"][0]
    assert nats["DynamicUser"] == ["yes"]


def test_the_broker_config_is_one_nats_server_accepts() -> None:
    """`nats-server -t` reads systemd/nats-server.conf without an error."""
    proc = subprocess.run(
        [nats_server_binary(), "-t", "-c", str(UNITS / "nats-server.conf")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_cluster_example_config_loads() -> None:
    """The example of daemon "a" is valid: a nats:// URL, its own database."""
    from daemon.config import load_config

    config = load_config(UNITS / "asyncai-cluster.toml.example", environ={})
    assert config.channels.url.startswith("nats://")
    assert config.channels.takeover_seconds == 30
    assert str(config.sessions.db) == "/var/lib/asyncai/a/asyncai.db"
