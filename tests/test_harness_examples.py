"""Worked examples from ``[model] examples`` (``daemon.model.harness.examples``): the file's
two formats, the closest entries per question, and the system message that shows them.
Pure, but for the config test, which writes the file it loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from daemon.config import ModelConfig, load_config
from daemon.errors import ConfigError
from daemon.model.harness import (
    HOW_TO_ANSWER,
    WORKED_EXAMPLE,
    CodeBlockTurns,
    Example,
    SmallModelProfile,
    Switches,
    closest_examples,
    echoes_example,
    foreign_calls,
    parse_examples,
    render_examples,
)
from daemon.model.harness.examples import source_kinds
from daemon.model.harness.rules import active
from daemon.model.profile import RunTools
from daemon.tools import ToolDefinition

TOML = '''
[[example]]
question = "How many commits did each author make in the repository?"
code = """
log = await git_log(repo_path='/r')
count_by(log, 'author')
"""
note = "git_log returns text: parse it first."

[[example]]
question = "Which table holds the most rows in the database?"
code = "await read_query(query='SELECT 1')"

[[example]]
question = "What time is it now in Tokyo?"
code = "await get_current_time(timezone='Asia/Tokyo')"
'''
EXAMPLES = parse_examples(TOML, "examples.toml")


def test_toml_and_jsonl_give_the_same_examples() -> None:
    """[[example]] tables, or one JSON object per line; the code keeps its lines, the
    note is optional."""
    assert EXAMPLES[0] == Example(
        "How many commits did each author make in the repository?",
        "log = await git_log(repo_path='/r')\ncount_by(log, 'author')",
        "git_log returns text: parse it first.",
    )
    lines = "\n".join(
        json.dumps(
            {"question": e.question, "code": e.code, "note": e.note}
            if e.note
            else {"question": e.question, "code": e.code}
        )
        for e in EXAMPLES
    )
    assert parse_examples(lines + "\n\n", "solved.jsonl") == EXAMPLES


@pytest.mark.parametrize(
    ("text", "name", "error"),
    [
        ("[[example]]\nquestion = 'q'\n", "x.toml", "example 1 needs a question and its code"),
        ("x = 1", "x.toml", "no [[example]] tables"),
        ("[[example]\n", "x.toml", "not valid TOML"),
        ('{"question": "q", "code": "c", "answer": 3}', "x.jsonl", "unknown keys: answer"),
        ('{"question": "q", "code": 3}', "x.jsonl", "line 1: code must be text"),
        ("[1]", "x.jsonl", "line 1 is not a table or an object"),
        ("{", "x.jsonl", "line 1 is not JSON"),
        ("", "x.jsonl", "no examples"),
    ],
)
def test_a_bad_file_says_what_is_wrong_and_where(text: str, name: str, error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("[", r"\[")):
        parse_examples(text, name)


def test_the_closest_examples_share_the_rarest_words() -> None:
    """The entries that share the question's words come first, at most two; with no word
    in common, the first entry (the model still sees an answer's shape)."""
    assert closest_examples("How many commits touched the README?", EXAMPLES) == [EXAMPLES[0]]
    both = closest_examples("Which author made the most commits to the database table?", EXAMPLES)
    assert both == [EXAMPLES[0], EXAMPLES[1]]
    assert closest_examples("Is it raining?", EXAMPLES) == [EXAMPLES[0]]
    assert closest_examples("What time is it in Tokyo?", EXAMPLES, k=1) == [EXAMPLES[2]]
    assert closest_examples("anything", []) == []


def _turns(examples: list[Example], switches: Switches | None = None) -> CodeBlockTurns:
    definition = ToolDefinition("run_code", "Run Python.", {"type": "object"})
    tools = RunTools(
        caller=cast(Any, None),
        thread=None,
        tools=[],
        names={"run_code": "run_code"},
        definitions={"run_code": definition},
        code_mode=True,
        catalog=None,
        gate=None,
    )
    return CodeBlockTurns(
        cast(Any, None), tools, ModelConfig(model="m"), switches, examples=examples
    )


def test_a_run_shows_the_examples_closest_to_its_question() -> None:
    """The system message ends with the how-to and the chosen examples in place of the
    worked example; what comes before them is the same for every question."""
    turns = _turns(EXAMPLES)
    first = turns.system_prompt()
    assert first.endswith(f"{HOW_TO_ANSWER}\n\n{render_examples(EXAMPLES[:1])}")
    assert WORKED_EXAMPLE not in first
    messages = [{"role": "system", "content": first}, {"role": "user", "content": "q"}]
    turns.loop_state(messages, "What time is it now in Tokyo?")
    shown = messages[0]["content"]
    assert shown.endswith(render_examples([EXAMPLES[2]]))
    prefix = first[: first.index(HOW_TO_ANSWER)]
    assert shown.startswith(prefix)
    assert "```python\nawait get_current_time(timezone='Asia/Tokyo')\n```" in shown


def test_without_the_file_or_with_the_rule_off_the_worked_example_stays() -> None:
    """No examples, or rule ``examples`` off: the worked example, and loop_state leaves
    the system message alone."""
    off = Switches(off=frozenset({"examples"}))
    for turns in (_turns([]), _turns(EXAMPLES, off)):
        system = turns.system_prompt()
        assert system.endswith(WORKED_EXAMPLE)
        messages = [{"role": "system", "content": system}]
        turns.loop_state(messages, "What time is it now in Tokyo?")
        assert messages[0]["content"] == system


def test_the_config_reads_the_file_beside_it_and_a_bad_one_fails_at_start(tmp_path: Path):
    """``[model] examples`` is relative to the config file and read at load; the profile
    parses it once; a bad file is a ConfigError naming it."""
    (tmp_path / "solved.toml").write_text(TOML)
    config = tmp_path / "asyncai.toml"
    config.write_text('[model]\nmodel = "m"\nharness = true\nexamples = "solved.toml"\n')
    params = load_config(config, environ={}).model
    assert params.examples == tmp_path / "solved.toml"
    assert SmallModelProfile(params).examples == EXAMPLES
    (tmp_path / "solved.toml").write_text("[[example]]\nquestion = 'q'\n")
    with pytest.raises(ConfigError, match=r"model\.examples .*solved\.toml: example 1 needs"):
        SmallModelProfile(load_config(config, environ={}).model)
    (tmp_path / "solved.toml").unlink()
    with pytest.raises(ConfigError, match=r"cannot read model\.examples"):
        load_config(config, environ={})


def test_a_reply_that_retells_a_shown_example_echoes_it() -> None:
    """The echo check reads the example the system message showed: a chosen entry's
    note retold is an echo of it, not of the built-in example."""
    shown = f"{HOW_TO_ANSWER}\n\n{render_examples([EXAMPLES[0]])}"
    assert echoes_example("git_log returns text: parse it first. So I did.", shown)
    assert not echoes_example("git_log returns text: parse it first. So I did.")
    assert not echoes_example("There are 3 authors.", shown)


def test_foreign_calls_are_the_functions_an_example_needs_from_elsewhere() -> None:
    """What a snippet calls that neither the given functions, a builtin, nor the snippet
    itself (a def, an import, an assignment) provide; unparsable code calls nothing."""
    code = (
        "import math\n"
        "def top(xs):\n    return sorted(xs)[:3]\n"
        "f = await delete_object(name='x')\n"
        "g = f\n"
        "top(items(await list_pods()))\n"
        "len(math.floor(2))\n"
        "g()\n"
    )
    assert foreign_calls(code, ["list_pods", "items"]) == ["delete_object"]
    assert foreign_calls(code, ["list_pods", "items", "delete_object"]) == []
    assert foreign_calls("await (", []) == []


REVENUE = [
    Example(
        "What revenue did each product bring in our shop database?", "await read_query(query='…')"
    ),
    Example("Which customer spent the most in our shop database?", "await read_query(query='…')"),
    Example(
        "Which product in http://h:8000/api/products is the cheapest?", "await http_get(url='…')"
    ),
]


def test_the_examples_that_name_the_questions_kind_of_source_come_first() -> None:
    """Rule example-source: of the examples that share a word with the question, the
    ones that name the same kinds of source (a URL, a path, or neither) come first; off,
    the words alone decide. A question that names no source keeps the word order."""
    csv = "Which product brought in the most revenue in http://h:8000/data/sales.csv?"
    assert source_kinds(csv) == {"url"}
    assert source_kinds("How many commits in /tmp/x/repo?") == {"path"}
    assert source_kinds("Which customer spent the most?") == frozenset()
    assert closest_examples(csv, REVENUE) == [REVENUE[2], REVENUE[0]]
    assert closest_examples("Which customer spent the most?", REVENUE)[0] == REVENUE[1]
    with active(Switches(off=frozenset({"example-source"}))):
        assert closest_examples(csv, REVENUE) == [REVENUE[0], REVENUE[2]]
