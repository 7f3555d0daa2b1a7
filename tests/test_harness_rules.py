"""The harness's named rules (``daemon.model.harness.rules``): each one is on by default,
and switched off (``ASYNCAI_HARNESS_OFF``) its behaviour is gone. Pure: every probe
calls a harness function on fixed input, with fakes and no I/O."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from daemon.config import ModelConfig
from daemon.errors import ConfigError
from daemon.model.calls import ToolCall
from daemon.model.conversation import LoopState
from daemon.model.harness import (
    RULES,
    TRIALS,
    CodeBlockTurns,
    Example,
    SmallModelProfile,
    Switches,
    active,
    acts,
    catalog_topics,
    closest_examples,
    compact_description,
    echoes_example,
    from_environ,
    key_hint,
    loop_fix,
    mend_call,
    noticing,
    quote_result,
    reaching,
    repair_code,
    replays_code,
    text_calls,
    topic_hint,
    unfetched_url,
    vote_samples,
    warm_retry,
)
from daemon.model.harness import blocks as harness_blocks
from daemon.model.harness.rules import BUILT
from daemon.model.profile import RunTools
from daemon.model.records import RunState, user_record
from daemon.runtime.runs import Prompt, RunRequest
from daemon.tools import ToolCallOutput, ToolDefinition
from tests.fakes.look import as_look
from tests.test_harness_topics import QUESTION, WRONG
from tests.test_harness_topics import catalog as topics_catalog

STR_AS_DATA = (
    "Traceback (most recent call last):\nTypeError: string indices must be integers, not 'str'"
)
ERROR = 'Traceback (most recent call last):\n  File "<python-input-1>"\nKeyError: {}'
LOOK = (
    "r['status'] == 200\n"
    "len(r['json']['components']) == 4\n"
    "r['json']['components'][0]['name'] == 'db'\n"
    "r['json']: has 'components'"
)
FETCHERS = {"http_get": (frozenset({"url"}), frozenset({"url"}))}


def _state() -> RunState:
    return RunState(RunRequest("r1", "#ops", "t1", [], [Prompt("m1", "alice", "q")]))


def _tools(code_mode: bool) -> RunTools:
    name = "run_code" if code_mode else "get_logs"
    definition = ToolDefinition(name, "A tool.", {"type": "object"})
    return RunTools(
        caller=cast(Any, None),
        thread=None,
        tools=[],
        names={name: name},
        definitions={name: definition},
        code_mode=code_mode,
        catalog=None,
        gate=None,
    )


def _system_prompt(switches: Switches) -> str:
    turns = CodeBlockTurns(cast(Any, None), _tools(True), ModelConfig(model="m"), switches)
    return turns.system_prompt()


def _direct(switches: Switches) -> Any:
    return SmallModelProfile(ModelConfig(model="m"), switches).turns(cast(Any, None), _tools(False))


def _mended(_: Switches) -> dict[str, Any]:
    call = ToolCall("c1", "run_code", '{"code": "a = 1\nb = 2"}', {}, "not JSON")
    mend_call(call, _state())
    return call.arguments


def _text_calls(switches: Switches) -> tuple[int, str]:
    tags = '<tool_call>\n{"name": "run_code", "arguments": {"code": "1"}}\n</tool_call>'
    found = text_calls(tags, {"run_code": "run_code"}, _state())
    return len(found), _direct(switches).text_calls.__name__


class _Caller:
    """A fake executor: the look's snippet answers one value line; calls are counted."""

    def __init__(self) -> None:
        self.calls = 0

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallOutput:
        self.calls += 1
        return ToolCallOutput("[]", is_error=False)


def _looked(_: Switches) -> int:
    caller = _Caller()
    asyncio.run(harness_blocks._peek(cast(Any, caller), "x = 1", _state(), ()))
    return caller.calls


def _warm(_: Switches) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "q"}]}
    warm_retry(body, None)
    return body


TOKYO = Example("What time is it in Tokyo?", "await now(tz='Asia/Tokyo')")
LIMA = Example("What time is it in Lima?", "await now(tz='America/Lima')")


def _with_examples(switches: Switches, examples: tuple[Example, ...] = (TOKYO,)) -> str:
    definition = ToolDefinition("run_code", "Run Python.", {"type": "object"})
    tools = replace(_tools(True), definitions={"run_code": definition})
    turns = CodeBlockTurns(
        cast(Any, None), tools, ModelConfig(model="m"), switches, examples=list(examples)
    )
    messages = [{"role": "system", "content": turns.system_prompt()}]
    turns.loop_state(messages, "What time is it in Paris?")
    return messages[0]["content"]


def _repaired(code: str) -> Callable[[Switches], Any]:
    return lambda _: repair_code(code)


def _gave_up(_: Switches) -> str | None:
    state = _state()
    result = {"type": "tool_result", "tool_use_id": "c1", "is_error": True}
    state.records.append(user_record([{**result, "content": ERROR.format("'items'")}]))
    return harness_blocks._gave_up(state, LoopState("small", failures=1, answering=True))


# Each rule: what it changes, called with the run's switches current.
PROBES: dict[str, Callable[[Switches], Any]] = {
    "worked-example": _system_prompt,
    "hidden-fields": lambda _: compact_description(topics_catalog()),
    "text-calls": _text_calls,
    "recover-arguments": _mended,
    "rename-helpers": _repaired("items = items(r)\nlen(items)"),
    "last-assignment": _repaired("x = 1"),
    "warm-retry": _warm,
    "retry-alone": lambda _: replays_code(True),
    "look": _looked,
    "key-hint": lambda _: key_hint(ERROR.format("components"), as_look(LOOK)),
    "topic-hint": lambda _: topic_hint(QUESTION, WRONG, catalog_topics(topics_catalog())),
    "vote": lambda _: vote_samples(3),
    "examples": lambda sw: _with_examples(sw),
    "echo-check": lambda _: echoes_example("THE QUESTION names the store; and asks about pods"),
    "quote-result": lambda _: quote_result("Two.", '["a", "b"]'),
    "failed-honest": _gave_up,
    "dict-loop": lambda _: loop_fix(
        "sum(1 for e in events if e['reason'] == 'BackOff')",
        STR_AS_DATA,
        as_look("events['kind'] == 'List'\nlen(events['items']) == 9"),
    ),
    "example-source": lambda _: closest_examples(
        "The revenue of http://h:1/sales.csv?",
        [
            Example("The revenue in our database?", "1"),
            Example("The revenue by price at http://h:1/p?", "2"),
        ],
        k=1,
    ),
    "direct-answer-instruction": lambda sw: _direct(sw).final_instruction("How many pods?"),
}


# Each trial: what it changes once switched on.
TRIAL_PROBES: dict[str, Callable[[Switches], Any]] = {
    "unfetched-url": lambda _: unfetched_url(
        "Total of http://h:1/o.csv?", "r = await read_query(query='select 1')", FETCHERS
    ),
}


def test_unfetched_url_names_the_first_url_neither_written_nor_its_path() -> None:
    """A URL written whole, or its path (a base joined to it), counts as fetched; the
    first other one is named with the call that fetches it; without a function that
    takes a url there is no hint."""
    two = "Join http://h:1/a.csv and http://h:1/api/b, please."
    with active(Switches(trials=frozenset({"unfetched-url"}))):
        hint = unfetched_url(two, "r = await http_get(url='http://h:1/a.csv')", FETCHERS)
        assert hint == (
            "Hint: my question names http://h:1/api/b, and your code never fetched it: "
            "r = await http_get(url='http://h:1/api/b')."
        )
        both = "a = await http_get(url='http://h:1/a.csv')\nb = await http_get(url=B + '/api/b')"
        assert unfetched_url(two, both, FETCHERS) is None
        assert unfetched_url(two, "x = 1", {}) is None
        assert unfetched_url("How many pods?", "x = 1", FETCHERS) is None


def test_every_rule_has_a_kebab_case_name_a_statement_and_a_probe() -> None:
    """RULES names every probed rule and only those; names are kebab-case, statements
    one line; no name is both a rule and a trial."""
    assert set(PROBES) == set(RULES)
    assert set(TRIAL_PROBES) == set(TRIALS)
    for name, statement in {**RULES, **TRIALS}.items():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", name), name
        assert statement
        assert "\n" not in statement
    assert not set(RULES) & set(TRIALS)


@pytest.mark.parametrize("name", sorted(RULES))
def test_a_rule_acts_by_default_and_not_when_switched_off(name: str) -> None:
    """The probe's outcome with every rule on (the default, with no switches current)
    differs from its outcome with only this rule off."""
    probe = PROBES[name]
    default = probe(Switches())
    off = Switches(off=frozenset({name}))
    with active(off):
        switched = probe(off)
    assert default != switched, name
    assert probe(Switches()) == default  # the switches were current only in the block


@pytest.mark.parametrize("name", sorted(TRIALS))
def test_a_trial_is_off_by_default_and_acts_when_switched_on(name: str) -> None:
    """A trial changes nothing until ASYNCAI_HARNESS_ON names it."""
    probe = TRIAL_PROBES[name]
    default = probe(Switches())
    on = Switches(trials=frozenset({name}))
    with active(on):
        switched = probe(on)
    assert default != switched, name


@pytest.mark.parametrize("name", sorted(TRIALS))
def test_an_off_trial_is_noticed_where_it_applies_and_only_there(name: str) -> None:
    """Off, a trial's probe notices it (the bench's --skip-unchanged asks B only then);
    switched on it acts and is not noticed; outside noticing() nothing is collected."""
    probe = TRIAL_PROBES[name]
    with noticing() as noticed:
        probe(Switches())
    assert noticed == {name}
    with active(Switches(trials=frozenset({name}))), noticing() as noticed:
        probe(Switches())
    assert noticed == set()
    probe(Switches())  # no collector: nothing to add to, nothing fails


def test_nothing_is_noticed_where_a_trial_does_not_apply_or_for_a_rule() -> None:
    """A snippet without a dead import and a long result: no trial applied; a rule
    switched off is the ablation's business, not a trial's."""
    with noticing() as noticed:
        repair_code("r = await f()\nr")
        unfetched_url("How many pods?", "x = 1", FETCHERS)
        assert not acts("vote", False)
        with active(Switches(off=frozenset({"rename-helpers"}))):
            assert not acts("rename-helpers", True)
    assert noticed == set()


def test_the_docs_list_every_rule() -> None:
    """docs/local-model.md's table names every rule and trial, as `name`."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "local-model.md").read_text()
    for name in (*RULES, *TRIALS):
        assert f"| `{name}` |" in page, name


def test_the_environment_names_rules_and_groups_and_rejects_unknown_names() -> None:
    """A comma list, spaces and empty items aside; an unknown name is a ConfigError
    naming the known ones."""
    assert from_environ({}) == Switches()
    switches = from_environ({"ASYNCAI_HARNESS_OFF": " vote, dict-loop,,"})
    assert switches.off == {"vote", "dict-loop"}
    assert not switches.on("vote")
    assert switches.on("look")
    with pytest.raises(ConfigError, match=r"unknown harness rule 'votes'.*dict-loop.*vote"):
        from_environ({"ASYNCAI_HARNESS_OFF": "votes"})
    with pytest.raises(ConfigError, match="ASYNCAI_HARNESS_ON"):
        from_environ({"ASYNCAI_HARNESS_ON": "vote"})  # a rule, not a trial


def test_the_profile_reads_the_environment_once_where_it_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """model_profile gives the harness the switches of the environment; an unknown
    name fails there, before any run."""
    from daemon.model import model_profile

    monkeypatch.setenv("ASYNCAI_HARNESS_OFF", "dict-loop,vote")
    profile = model_profile(ModelConfig(model="m", harness=True), "m")
    assert isinstance(profile, SmallModelProfile)
    assert profile.switches.off == {"dict-loop", "vote"}
    monkeypatch.setenv("ASYNCAI_HARNESS_OFF", "nope")
    with pytest.raises(ConfigError):
        model_profile(ModelConfig(model="m", harness=True), "m")


def test_model_harness_trials_adds_to_the_environments_trials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``[model] harness_trials`` (one endpoint's, so one arm of a side-by-side run)
    switches trials on beside ASYNCAI_HARNESS_ON's; a name that is no trial fails at
    the profile, naming the key."""
    from daemon.model import model_profile

    monkeypatch.setenv("ASYNCAI_HARNESS_ON", "unfetched-url")
    from_env = model_profile(ModelConfig(model="m", harness=True), "m")
    assert isinstance(from_env, SmallModelProfile)
    assert from_env.switches.trials == {"unfetched-url"}
    monkeypatch.delenv("ASYNCAI_HARNESS_ON")
    params = ModelConfig(model="m", harness=True, harness_trials="unfetched-url")
    profile = model_profile(params, "m")
    assert isinstance(profile, SmallModelProfile)
    assert profile.switches.trials == {"unfetched-url"}
    plain = model_profile(ModelConfig(model="m", harness=True), "m")
    assert isinstance(plain, SmallModelProfile)
    assert plain.switches.trials == frozenset()
    with pytest.raises(ConfigError, match=r"\[model\] harness_trials: unknown harness rule 'vote'"):
        model_profile(ModelConfig(model="m", harness=True, harness_trials="vote"), "m")


def test_model_harness_off_adds_to_the_environments_rules_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``[model] harness_off`` (one arm of a side-by-side run) switches rules off beside
    ASYNCAI_HARNESS_OFF's; a name that is no rule (a trial) fails at the profile, naming
    the key."""
    from daemon.model import model_profile

    monkeypatch.setenv("ASYNCAI_HARNESS_OFF", "vote")
    params = ModelConfig(model="m", harness=True, harness_off="look, dict-loop")
    profile = model_profile(params, "m")
    assert isinstance(profile, SmallModelProfile)
    assert profile.switches.off == {"vote", "look", "dict-loop"}
    assert not profile.switches.on("look")
    assert profile.switches.on("key-hint")
    monkeypatch.delenv("ASYNCAI_HARNESS_OFF")
    plain = model_profile(ModelConfig(model="m", harness=True), "m")
    assert isinstance(plain, SmallModelProfile)
    assert plain.switches.off == frozenset()
    with pytest.raises(
        ConfigError, match=r"\[model\] harness_off: unknown harness rule 'unfetched-url'"
    ):
        model_profile(ModelConfig(model="m", harness=True, harness_off="unfetched-url"), "m")


def test_a_loop_over_a_dict_loops_over_the_one_list_below_it() -> None:
    """Rule dict-loop: after a str read as data, a for loop or a comprehension over a
    plain path that the look shows holding exactly one list one key below loops over that
    list; a path that is a list itself, a dict with two lists, another kind of error or no
    look leave the snippet alone."""
    look = as_look(
        "r['status'] == 200\nlen(r['json']['items']) == 4\n"
        "events['kind'] == 'List'\nlen(events['items']) == 9\n"
        "two['kind'] == 'List'\nlen(two['a']) == 1\nlen(two['b']) == 2"
    )
    code = (
        "for p in r['json']:\n    print(p['id'])\n"
        "n = sum(1 for e in events if e['reason'] == 'BackOff')\n"
        "[x for x in two]\n"
        "[y for y in events['items']]"
    )
    with active(Switches()):
        fixed = loop_fix(code, STR_AS_DATA, look)
        assert fixed == (
            "for p in r['json']['items']:\n    print(p['id'])\n"
            "n = sum((1 for e in events['items'] if e['reason'] == 'BackOff'))\n"
            "[x for x in two]\n"
            "[y for y in events['items']]"
        )
        assert loop_fix("[x for x in two]", STR_AS_DATA, look) is None
        assert loop_fix(code, "KeyError: 'id'", look) is None
        assert loop_fix(code, STR_AS_DATA, None) is None


def _reached(act: Callable[[], object]) -> set[str]:
    """The rules ``act`` reached with every rule on (those read at build time aside)."""
    with reaching(Switches()) as reached:
        act()
    return reached - BUILT


@pytest.mark.parametrize(
    ("name", "idle", "acting"),
    [
        (
            "quote-result",
            lambda: quote_result("It is 3.", "3"),
            lambda: quote_result("It is three.", "3"),
        ),
        ("last-assignment", lambda: repair_code("x = 1\nx"), lambda: repair_code("x = 1")),
        (
            "rename-helpers",
            lambda: repair_code("x = items(r)\nx"),
            lambda: repair_code("items = items(r)\nlen(items)"),
        ),
        ("vote", lambda: vote_samples(1), lambda: vote_samples(3)),
        ("retry-alone", lambda: replays_code(False), lambda: replays_code(True)),
    ],
)
def test_a_rule_is_reached_only_where_it_changes_something(
    name: str, idle: Callable[[], object], acting: Callable[[], object]
) -> None:
    """reaching() collects a rule where it acts, not where it is merely passed: the
    premise that lets an ablation skip the questions whose run never reached a rule.
    Off, a rule is never reached."""
    assert name not in _reached(idle)
    assert name in _reached(acting)
    with active(Switches(off=frozenset({name}))), reaching(Switches()) as reached:
        acting()
    assert name not in reached
