"""The small-model harness's pure pieces: argument recovery, code repairs, result and
prompt text. The inputs are the shapes Qwen2.5-Coder-1.5B really produced
(notes/local-model.md and issue 9's probes)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.code_mode.catalog.catalog import Catalog
from daemon.code_mode.catalog.description import run_code_description
from daemon.model.harness import (
    HARNESS_RULES,
    WORKED_EXAMPLE,
    answer_instruction,
    assigned_names,
    catalog_signatures,
    code_message,
    compact_description,
    echoes_example,
    error_signature,
    extract_code,
    failure_reply,
    fetched_url,
    hidden_fields,
    hidden_paths,
    key_hint,
    missing_key,
    peek_code,
    quote_result,
    read_names,
    recover_arguments,
    repair_code,
    result_message,
    retry_seed,
    system_prompt,
    text_tool_calls,
    value_atoms,
)
from daemon.model.harness.feedback import STOPPED
from daemon.tools import ToolDefinition
from tests.fakes.look import as_look

# ---- arguments ----


def test_raw_newlines_in_the_code_string_are_recovered() -> None:
    """A JSON string with literal newlines (invalid JSON) still yields the code."""
    raw = "{ \"code\": \"pods = await list_objects(resource='pods')\nlen(pods['items'])\" }"
    with pytest.raises(ValueError, match="control character"):
        json.loads(raw)
    args, how = recover_arguments(raw)
    assert args == {"code": "pods = await list_objects(resource='pods')\nlen(pods['items'])"}
    assert how is not None
    assert "control" in how


def test_unescaped_quotes_inside_the_code_are_kept() -> None:
    """An unescaped quote does not end the code: everything up to the last quote is code,
    and the JSON escapes that were right are decoded."""
    raw = '{"code": "x = await http_get(url="http://a/b")\\nx["status"]", "restart": true}'
    args, how = recover_arguments(raw)
    assert args == {"code": 'x = await http_get(url="http://a/b")\nx["status"]', "restart": True}
    assert how == "unescaped quotes in the code string"


def test_python_dict_literal_is_accepted() -> None:
    """Single-quoted, Python-style arguments are read as a dict literal."""
    args, how = recover_arguments("{'code': 'sum(range(10))'}")
    assert args == {"code": "sum(range(10))"}
    assert how == "a Python dict instead of JSON"


def test_arguments_cut_off_keep_what_came() -> None:
    """Arguments that end early (max_tokens) keep the code that arrived."""
    args, how = recover_arguments('{"code": "a = 1\\nb = a + ')
    assert args == {"code": "a = 1\nb = a + "}
    assert how == "an arguments object cut off before its end"


def test_bare_code_and_fenced_code_are_taken_as_code() -> None:
    """Arguments that are not JSON at all are the code itself (a fence is removed)."""
    assert recover_arguments("sum(range(10))") == (
        {"code": "sum(range(10))"},
        "bare code, not JSON",
    )
    args, _ = recover_arguments("```python\nx = 1\nx + 1\n```")
    assert args == {"code": "x = 1\nx + 1"}


def test_unrecoverable_arguments_give_none() -> None:
    """JSON of the wrong shape, and other fields, are not guessed at."""
    assert recover_arguments('{"cmd": "ls"}') == (None, None)
    assert recover_arguments("[1, 2]") == (None, None)
    assert recover_arguments('{"url": "x', field="url") == (None, None)


# ---- code ----


def test_trailing_assignment_becomes_the_result() -> None:
    """A snippet that ends in an assignment gets the assigned name as its last expression."""
    fixed, repairs = repair_code("total = 0\nfor p in pods:\n    total += p['restarts']")
    assert fixed.endswith("total += p['restarts']")  # a loop last: nothing to add
    assert repairs == []
    fixed, repairs = repair_code("found = [p['name'] for p in pods]")
    assert fixed.splitlines()[-1] == "found"
    assert repairs == ["the assigned name found made the result"]


def test_code_that_needs_nothing_or_does_not_parse_is_unchanged() -> None:
    """Good code keeps its exact text (comments included); broken code is left for the
    sandbox to report."""
    good = "# count\npods = await list_objects(resource='pods')\nlen(pods['items'])  # n"
    assert repair_code(good) == (good, [])
    broken = "pods = await list_objects(resource='pods') sorted(pods)"
    assert repair_code(broken) == (broken, [])


def test_system_prompt_holds_the_catalog_and_the_example() -> None:
    """The system message carries the base text, the run_code description (catalog
    stubs) and the worked example, and is the same for the same inputs."""
    desc = "Run Python.\n\nAvailable functions:\nasync def list_objects(resource: str) -> dict:\n"
    text = system_prompt("You are asyncai.", desc)
    assert text.startswith("You are asyncai.")
    assert "async def list_objects(resource: str) -> dict:" in text
    assert text.endswith(WORKED_EXAMPLE.strip())
    assert text == system_prompt("You are asyncai.", desc)


def test_answer_instruction_repeats_the_question() -> None:
    """The answer request repeats the question and forbids code."""
    text = answer_instruction("  Which pods crash?\n")
    assert "Which pods crash?" in text
    assert "Do not write code" in text


def test_answer_instruction_gives_no_sentence_to_copy_for_an_error() -> None:
    """For an error the request asks for a sentence of the model's own: the old
    template ("say that you could not find out, and why") came back word for word."""
    text = answer_instruction("Which pods crash?")
    assert "could not find out" not in text
    assert f"if it is an error, write {STOPPED}." in text


def test_a_failure_reply_says_why_in_one_line() -> None:
    """The exception line of the last error (hint lines after it are not the reason),
    else its first line; long reasons are cut."""
    error = (
        'Traceback (most recent call last):\n  File "<python-input-1>", line 1\n'
        "ModuleNotFoundError: No module named 'pandas'\n"
        "Hint: the sandbox has no module 'pandas'."
    )
    reply = failure_reply(error)
    assert reply == (
        "I could not answer this: none of the code I ran returned a result. "
        "The last attempt ended with: ModuleNotFoundError: No module named 'pandas'"
    )
    assert "\n" not in reply
    assert failure_reply("(no output; the last expression was None)").endswith(
        "ended with: (no output; the last expression was None)"
    )
    assert failure_reply("KeyError: '" + "k" * 500 + "'").endswith(" …")


def test_code_is_taken_from_the_first_python_block() -> None:
    """A python (or unlabelled) block counts, closed or cut off at the stop sequence;
    other languages and prose do not."""
    assert extract_code("Here:\n```python\nx = 1\nx\n```\nmore") == "x = 1\nx"
    assert extract_code("```python\nx = 1\nx") == "x = 1\nx"  # cut at the stop
    assert extract_code("```\nsum([1])\n```") == "sum([1])"
    json_then_python = '```json\n{"a": 1}\n```\nthen\n```py\ny\n```'
    assert extract_code(json_then_python) == "y"
    assert extract_code("The answer is 3.") is None
    assert extract_code("```python\n\n```") is None
    assert code_message("x") == "```python\nx\n```"


def test_result_messages_ask_for_a_fix_or_for_the_answer() -> None:
    """A retriable failure asks for a corrected block; a result (or the last failure)
    asks for the answer to the repeated question; a long result is shortened."""
    retry = result_message("Traceback: boom", "how many?", failed=True, retry=True)
    assert retry.startswith("Your last attempt failed:\nTraceback: boom\n\n")
    assert "Write a new ```python block" in retry
    assert retry.endswith("how many?")
    done = result_message("3", "how many?", failed=False, retry=False)
    assert done.startswith("The code returned:\n3\n\nAnswer my question now")
    assert "how many?" in done
    last = result_message("Traceback: boom", "how many?", failed=True, retry=False)
    assert last.startswith("The code failed:")
    assert "Answer my question now" in last
    long = result_message("x" * 10_000, "q", failed=False, retry=False)
    assert "x" * 6_000 + " …" in long
    assert "x" * 6_001 not in long


def test_tool_calls_written_as_text_are_found() -> None:
    """Qwen's <tool_call> tags, a ```json block and a bare object all count, for offered
    tools only; string arguments are decoded; prose around them is ignored."""
    tags = '<tool_call>\n{"name": "get_logs", "arguments": {"pod": "api-2"}}\n</tool_call>'
    assert text_tool_calls(tags, ["get_logs"]) == [("get_logs", {"pod": "api-2"})]
    fenced = 'I will call:\n```json\n{"name": "http_get", "arguments": "{\\"url\\": \\"u\\"}"}\n```'
    assert text_tool_calls(fenced, ["http_get"]) == [("http_get", {"url": "u"})]
    bare = '{"name": "list_kcps", "arguments": {}}'
    assert text_tool_calls(bare, ["list_kcps"]) == [("list_kcps", {})]
    assert text_tool_calls(bare, ["http_get"]) == []  # not offered
    assert text_tool_calls("The answer is 3.", ["http_get"]) == []
    assert text_tool_calls("```python\nx = 1\n```", ["http_get"]) == []


def test_compact_description_keeps_helpers_and_catalog_only() -> None:
    """The long sandbox rules give way to the harness's short ones; the helpers (all but
    parse_records, which the 1.5B model used where it does not fit) and the catalog stay
    word for word as run_code's description has them, built from the catalog itself."""
    for catalog in (CATALOG, Catalog([])):
        desc = run_code_description(catalog)
        compact = compact_description(catalog)
        assert compact.startswith(HARNESS_RULES + "\n\nHelpers, defined in every scope")
        assert "Return contract" not in compact
        assert "parse_records" in desc
        assert "parse_records" not in compact
        listed = "\n".join(
            line for line in desc.splitlines() if not line.startswith("- parse_records(")
        ).replace(", parse_records)", ")")
        helpers = compact.removeprefix(HARNESS_RULES + "\n\n")
        assert listed.endswith("\n\n" + helpers)
    assert "async def list_objects(*, workspace: str" in compact_description(CATALOG)
    assert compact_description(Catalog([])).endswith("(none: no tools are connected)")


def test_assigned_names_are_the_top_level_targets() -> None:
    """Names a snippet assigns at the top level, in order, without private ones, at most
    four; code that does not parse has none."""
    code = "a = 1\nb, c = 2, 3\nx += 1\n_y = 2\nfor i in r:\n    z = 1\ne: int = 5"
    assert assigned_names(code) == ["a", "b", "c", "x"]
    assert assigned_names("x = (") == []
    peek = peek_code(["pods"])
    assert "_peek_paths(pods, 'pods', _peek_out)" in peek
    assert "except Exception" in peek  # an unset name is skipped, not an error


def test_variables_named_like_helpers_are_renamed() -> None:
    """`items = items(r)` would be refused (it rebinds a helper): the variable becomes
    items_ everywhere it is read or written, while calls of items() stay the helper's."""
    code = "r = await f()\nitems = items(r)\nbest = min(items, key=lambda x: x['n'])\nbest"
    fixed, repairs = repair_code(code)
    assert fixed.splitlines()[1:3] == [
        "items_ = items(r)",
        "best = min(items_, key=lambda x: x['n'])",
    ]
    assert repairs == ["renamed variables that shadowed helpers: items"]


def _tool(name: str, description: str, required: list[str], optional: list[str]) -> ToolDefinition:
    props = {p: {"type": "string"} for p in [*required, *optional]}
    return ToolDefinition(
        name, description, {"type": "object", "properties": props, "required": required}
    )


CATALOG = Catalog(
    [
        _tool("list_objects", "List objects.", ["workspace", "resource"], ["namespace"]),
        _tool("get_object", "Get one object.", ["workspace", "resource", "name"], []),
    ]
)


def test_catalog_signatures_read_the_stubs() -> None:
    """Each catalog function's keyword parameters and the required ones."""
    sigs = catalog_signatures(CATALOG)
    assert sigs["list_objects"] == (
        frozenset({"workspace", "resource", "namespace"}),
        frozenset({"workspace", "resource"}),
    )
    assert sigs["get_object"][1] == frozenset({"workspace", "resource", "name"})


TRACEBACK = "Traceback (most recent call last):\n  File \"<snippet>\", line 2\n    x['k']\n{}"


def test_error_signature_is_the_exception_line_not_a_hint() -> None:
    """The last exception line of a traceback names the error; hint lines after it and
    source lines quoted in it do not."""
    text = TRACEBACK.format("KeyError: 'phase'\nHint: look at the keys")
    assert error_signature(text) == "KeyError: 'phase'"
    assert error_signature("ModuleNotFoundError: No module named 'requests'") == (
        "ModuleNotFoundError: No module named 'requests'"
    )
    assert error_signature("(empty result)") is None


# ---- the value is the answer ----


def test_value_atoms_are_the_scalars_of_a_short_result() -> None:
    """JSON results give their scalar leaves; text gives its lines; long ones give None."""
    assert value_atoms('["api-2", "etl-1"]') == ["api-2", "etl-1"]
    assert value_atoms('{"version": "2.7.1", "healthy": false}') == ["2.7.1", "false"]
    assert value_atoms("162.75") == ["162.75"]
    assert value_atoms("washers\n8") == ["washers", "8"]
    assert value_atoms(json.dumps(list(range(50)))) is None
    assert value_atoms("[]") is None


def test_a_value_the_words_leave_out_is_quoted() -> None:
    """An answer that states every value stays as it is; one that drops a value gets the
    result appended, verbatim and on one line; empty and long results are not quoted."""
    names = '["api-2", "ledger-1", "etl-1"]'
    full = "api-2, ledger-1 and etl-1 are not running."
    assert quote_result(full, names) == full
    short = "api-2 and etl-1 are not running."
    assert quote_result(short, names) == (
        f"{short}\n\nThe result of run_code: api-2, ledger-1, etl-1"
    )
    assert quote_result("It is healthy.", '{"version": "2.7.1", "healthy": false}').endswith(
        "The result of run_code: version: 2.7.1, healthy: false"
    )
    assert quote_result("Nothing.", "(empty result: the last expression was an empty list)") == (
        "Nothing."
    )
    long = json.dumps(["x" * 50] * 20)
    assert quote_result("Many.", long) == "Many."


@given(st.text(max_size=300), st.text(max_size=300))
def test_quote_result_never_fails_and_keeps_the_reply(reply: str, result: str) -> None:
    """Any reply and result: the reply comes back, possibly with the result after it."""
    assert quote_result(reply, result).startswith(reply.rstrip())


# ---- fields the sketches cut short ----

_DEEP = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                    "status": {
                        "type": "object",
                        "properties": {
                            "phase": {"type": "string"},
                            "containerStatuses": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {"restartCount": {"type": "integer"}},
                                },
                            },
                        },
                    },
                },
            },
        }
    },
}


def test_fields_a_sketch_elides_are_listed_as_paths() -> None:
    """A restart count five containers down a list (shown as [...] in the Returns: line)
    is spelled out as the access path a snippet writes; shallow fields are not."""
    assert hidden_paths(_DEEP) == [
        'x["items"][i]["status"]["containerStatuses"][j]["restartCount"]: int'
    ]
    shallow = {"type": "object", "properties": {"phase": {"type": "string"}}}
    assert hidden_paths(shallow) == []
    deep = ToolDefinition("list_pods", "List pods.", {"type": "object"}, output_schema=_DEEP)
    catalog = Catalog([deep, _tool("get_object", "Get one.", ["name"], [])])
    section = hidden_fields(catalog)
    assert section.startswith("Fields the Returns: lines above shorten")
    assert '- list_pods: x["items"][i]["status"]["containerStatuses"][j]' in section
    assert compact_description(catalog).endswith(section)
    assert hidden_fields(CATALOG) == ""


def test_a_missing_key_is_located_in_the_look_at_the_variables() -> None:
    """A KeyError whose key the look shows deeper names its path; one shown in a list's
    first item says other items lack it."""
    shapes = (
        "r['status'] == 200\nlen(r['json']['components']) == 4\n"
        "r['json']['components'][0]['name'] == 'db'"
    )
    hint = key_hint(TRACEBACK.format("KeyError: components"), as_look(shapes))
    assert (
        hint == "Hint: components is not where your code looked; it is at r['json']['components']."
    )
    pods = "len(p['items']) == 12\np['items'][0]['status']['containerStatuses'][0]['ready'] == 1"
    hint = key_hint(TRACEBACK.format("KeyError: containerStatuses"), as_look(pods))
    assert hint is not None
    assert hint.startswith("Hint: containerStatuses is in the first item")
    assert key_hint(TRACEBACK.format("TypeError: x"), as_look(pods)) is None
    assert key_hint(TRACEBACK.format("KeyError: components"), as_look(None)) is None


def test_a_counted_key_gets_its_dig_with_path_and_default() -> None:
    """When the look counted the items holding a KeyError's key, the hint says how many
    lack it and writes dig() with the path from the item and a default of the value's
    kind; a key every item holds is located instead; the counted line wins over a
    first-item path."""
    error = TRACEBACK.format("KeyError: containerStatuses")
    assert missing_key(error) == "containerStatuses"
    assert missing_key(TRACEBACK.format("KeyError: 'phase'")) == "phase"
    assert missing_key(TRACEBACK.format("KeyError: 0")) is None
    assert missing_key(TRACEBACK.format("TypeError: x")) is None
    first = "p['items'][0]['status']['containerStatuses'][0]['ready'] == 1\n"
    counted = "p['items']: 10 of 12 items have ['status']['containerStatuses'] (a list)"
    assert key_hint(error, as_look(first + counted)) == (
        "Hint: only 10 of the 12 items of p['items'] have ['status']['containerStatuses']; "
        "the other 2 do not, so item['status']['containerStatuses'] fails on them. Read it "
        "with dig(item, 'status.containerStatuses', default=[]), which gives [] for those: "
        "[x for item in items(p) for x in dig(item, 'status.containerStatuses', default=[])]"
    )
    every = counted.replace("10 of", "12 of")
    assert key_hint(error, as_look(every)) == (
        "Hint: every item of p['items'] has containerStatuses, at "
        "item['status']['containerStatuses'] (for item in items(p)); your code looked for "
        "it somewhere else."
    )
    # several lists: the one with items lacking the key; a dotted key is one segment
    dotted = TRACEBACK.format("KeyError: 'app.kubernetes.io/name'")
    lines = (
        "a['x']: 2 of 2 items have ['labels']['app.kubernetes.io/name'] (a str)\n"
        "rows: 3 of 5 items have ['labels']['app.kubernetes.io/name'] (a str)"
    )
    hint = key_hint(dotted, as_look(lines))
    assert hint is not None
    assert hint.startswith("Hint: only 3 of the 5 items of rows have")
    assert hint.endswith(
        "[dig(item, 'labels', 'app.kubernetes.io/name', default='') for item in rows]"
    )


def test_a_key_in_no_variable_is_said_to_be_nowhere_or_a_value() -> None:
    """A KeyError's key that the look found in a dict outside a list is located there;
    one that no path holds is made up (do not read it); one that is a word of a text
    (a CSV column, a word of a log line) is inside text to parse first; one that is a
    value of the data was used as a key of a dict the snippet fills (start it with .get)."""
    looked = "r['status'] == 200\nr['json']['version'] == '1'\nr['json']: has 'components'"
    assert key_hint(TRACEBACK.format("KeyError: components"), as_look(looked)) == (
        "Hint: components is not where your code looked; it is at r['json']['components']."
    )
    ws = "len(ws['workspaces']) == 2\nws['workspaces'][0]['name'] == 'app'"
    assert key_hint(TRACEBACK.format("KeyError: nodes"), as_look(ws)) == (
        "Hint: no value your variables hold has a key nodes (see what they hold above): "
        "do not read it. Use only the keys shown there, or get the data from another function."
    )
    for first in ("['item,stock', 'bolts,40', 'nuts,25']", "['10:00 ERROR stock low', '10:01']"):
        text = "r['body'] is a str of 9 lines (text, not parsed)\n"
        hint = key_hint(
            TRACEBACK.format("KeyError: stock"),
            as_look(f"{text}r['body'].splitlines()[:3] == {first}"),
        )
        assert hint is not None
        assert hint.startswith("Hint: stock is only inside text (a str shown above")
    pods = "len(p['items']) == 12\np['items'][0]['spec']['nodeName'] == 'node-a'"
    hint = key_hint(TRACEBACK.format("KeyError: 'node-a'"), as_look(pods))
    assert hint is not None
    assert hint == (
        "Hint: 'node-a' is a value in your data (p['items'][0]['spec']['nodeName'] == "
        "'node-a'), not a key. To test for it, compare: item['nodeName'] == 'node-a'. To "
        "count by it, a dict you fill starts empty: counts[k] = counts.get(k, 0) + 1, or "
        "count_by(xs, 'a.b')."
    )


def test_the_names_a_snippet_reads_from_earlier_snippets() -> None:
    """Names read but never bound in the snippet (data an earlier one fetched), first
    read first, without builtins, modules, private names, lambda and loop variables
    and the names to skip; at most ``limit``; none for code that does not parse."""
    code = (
        "counts = {n: 0 for n in names(ws['workspaces'][0]['nodes'])}\n"
        "for pod in items(await list_objects(workspace='w')):\n"
        "    counts[pod['spec']['nodeName']] += 1\n"
        "best = max(counts.items(), key=lambda x: x[1])\n"
        "json.dumps([best, _hidden, pods_before, len(ws)])"
    )
    skip = {"names", "items", "list_objects"}
    assert read_names(code, skip) == ["ws", "pods_before"]
    assert read_names(code, skip, limit=1) == ["ws"]
    assert read_names("x = (", skip) == []


def test_the_look_after_a_key_error_counts_the_items_holding_it() -> None:
    """peek_code with a missing key adds the counting snippet for each name; without one
    it is the plain look."""
    plain = peek_code(["pods"])
    counting = peek_code(["pods", "r"], missing="it's")
    assert counting.startswith(plain.removesuffix("\n"))
    assert "_peek_missing(pods, 'pods', \"it's\", _peek_out)" in counting
    assert "_peek_missing(r, 'r', \"it's\", _peek_out)" in counting
    assert "_peek_missing" not in plain


def test_a_reply_repeating_six_words_of_the_worked_example_echoes_it() -> None:
    """Six words in a row of the worked example (case and punctuation aside) make an
    echo; an answer that shares a few words with it does not."""
    assert echoes_example("THE QUESTION names the store; and asks about pods, so ...")
    assert not echoes_example("The question is about the store: 3 open orders.")
    assert not echoes_example("")


def test_a_retry_seed_is_a_function_of_the_prompt_alone():
    """The same messages give the same seed (a run repeats); any change gives another."""
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "q"}]
    seed = retry_seed(messages)
    assert seed == retry_seed([dict(m) for m in messages])
    assert 0 <= seed < 2**32
    assert retry_seed([*messages[:1], {"role": "user", "content": "q!"}]) != seed


def test_fetched_url_needs_a_url_in_the_question_and_a_fetch_of_it() -> None:
    """True only when the question names a URL and the code calls a function that takes
    a url (by its name, as a call)."""
    fns = {"http_get": (frozenset({"url"}), None), "list_pods": (frozenset({"ns"}), None)}
    q = "Which items are low in http://127.0.0.1:8000/inventory.csv?"
    assert fetched_url(q, "r = await http_get(url='x')", fns)
    assert not fetched_url(q, "r = await list_pods(ns='x')", fns)
    assert not fetched_url(q, "http_get_result = 1", fns)
    assert not fetched_url("Which items are low?", "r = await http_get(url='x')", fns)
