"""Each channel's lane (issue 29): which channels share an executor and a model client,
and what a lane is built from. Built from a real configuration file; nothing starts
(executors and pools start lazily, a model client connects on its first request).

The end-to-end behaviour (tools, endpoints, limits, caps in a running daemon) is
tests/test_daemon_channels.py.
"""

from __future__ import annotations

import pytest

from daemon.code_mode import CodeModeToolExecutor
from daemon.config import ChannelPolicy, Config, load_config
from daemon.lanes import Lanes, build_tool_executor, channel_tools, code_mode_limits, lane_config
from daemon.model.harness import SmallModelProfile
from daemon.tools import ThreadKey, ToolExecutor
from tests.fakes.executor import FakeToolExecutor
from tests.fakes.fake_openai import FakeOpenAI, Reply

TOML = """
[channels]
channels = ["#help", "#faq", "#team", "#direct", "#ops", "#dev", "#big"]

[mcp_servers.simple]
command = "asyncai-mcp-simple"

[model]
base_url = "http://127.0.0.1:9/v1"
model = "fake-model"

[models.small]
base_url = "http://127.0.0.1:8/v1"
model = "tiny"
harness = true

[models.big]
base_url = "http://127.0.0.1:7/v1"
model = "big-model"

[channel."#big"]
endpoint = "big"

[channel."#help"]
servers = ["simple"]

[channel."#faq"]
servers = ["simple"]

[channel."#team"]
endpoint = "small"

[channel."#direct"]
tool_mode = "direct"
"""


@pytest.fixture
def config(tmp_path) -> Config:
    """The configuration above, loaded as the daemon loads it."""
    path = tmp_path / "asyncai.toml"
    path.write_text(TOML)
    return load_config(path, environ={})


@pytest.fixture
async def lanes(config):
    """Lanes over an in-memory executor, their model clients closed after the test."""
    inner = FakeToolExecutor()

    def build(lane: Config, policy: ChannelPolicy) -> tuple[ToolExecutor, ToolExecutor]:
        view = channel_tools(inner, policy.sees)
        return build_tool_executor(lane, inner=view), view

    made = Lanes(config, build, gate=None)
    yield made
    for lane in made.lanes:
        await lane.backend.aclose()
    for executor in made.executors:
        await executor.aclose()


def test_channels_whose_policies_agree_share_a_lane(lanes):
    """#help and #faq see the same tools with the same model: one lane; a channel without
    a section is the global lane; #team (another endpoint) and #direct (another mode) have
    their own."""
    assert lanes.lane("#help") is lanes.lane("#faq")
    assert lanes.lane("#ops") is lanes.lane("#dev")
    assert lanes.lane("#team") is not lanes.lane("#ops")
    assert lanes.lane("#direct") is not lanes.lane("#ops")
    assert len(lanes.lanes) == 4


def test_lanes_that_differ_only_in_their_model_share_the_executor(lanes):
    """#big asks another endpoint with the same tools, mode and catalog budget: a lane (a
    model client) of its own on the global lane's executor, one pool; #team's endpoint
    wants the harness's catalog budget, so it has an executor of its own."""
    big, ops, team = lanes.lane("#big"), lanes.lane("#ops"), lanes.lane("#team")
    assert big is not ops
    assert big.backend is not ops.backend
    assert big.executor is ops.executor
    assert team.executor is not ops.executor
    assert lanes.executors == [ops.executor, team.executor]
    assert lanes.built == lanes.executors


def test_a_lane_runs_on_its_channels_endpoint_with_its_profile(lanes, config):
    """#team's model client is [models.small]'s, with the small-model harness it asks for,
    and code mode's catalog budget follows that endpoint; #ops' is [model]'s."""
    team, ops = lanes.lane("#team"), lanes.lane("#ops")
    assert str(team.backend.client.base_url).startswith("http://127.0.0.1:8/v1")
    assert team.backend.params.model == "tiny"
    assert isinstance(team.backend.profile, SmallModelProfile)
    assert str(ops.backend.client.base_url).startswith("http://127.0.0.1:9/v1")
    assert not isinstance(ops.backend.profile, SmallModelProfile)
    assert isinstance(team.executor, CodeModeToolExecutor)
    assert isinstance(ops.executor, CodeModeToolExecutor)
    budget = code_mode_limits(lane_config(config, config.policy("#team"))).catalog_budget
    assert team.executor.limits.catalog_budget == budget
    assert budget != ops.executor.limits.catalog_budget


async def test_reset_says_whether_the_channel_has_a_repl(lanes):
    """!reset in a direct-mode channel has no REPL to reset (False); in code mode it does."""
    lanes.lane("#ops")
    assert await lanes.reset(ThreadKey("#direct", "t")) is False
    assert await lanes.reset(ThreadKey("#ops", "t")) is True
    assert lanes.persistent


async def test_warm_up_asks_only_the_lanes_at_the_local_endpoint(tmp_path):
    """``asyncai up`` warms the embedded model's prompt cache: the lanes whose endpoint is
    [model]'s are warmed, a lane on another endpoint is not asked."""
    async with FakeOpenAI(fallback=Reply("ok")) as local, FakeOpenAI(fallback=Reply("ok")) as big:
        path = tmp_path / "asyncai.toml"
        path.write_text(
            f'[channels]\nchannels = ["#ops", "#team"]\n[model]\nbase_url = "{local.base_url}"\n'
            f'model = "m"\n[models.big]\nbase_url = "{big.base_url}"\nmodel = "b"\n'
            '[channel."#team"]\nendpoint = "big"\n'
        )
        config = load_config(path, environ={})
        made = Lanes(
            config,
            lambda c, _p: (build_tool_executor(c, inner=FakeToolExecutor()), None),
            gate=None,
        )
        try:
            made.lane("#ops")
            made.lane("#team")
            await made.warm_up(config.model.base_url)
            assert len(local.requests) == 1
            assert big.requests == []
        finally:
            for lane in made.lanes:
                await lane.backend.aclose()
            for executor in made.executors:
                await executor.aclose()
