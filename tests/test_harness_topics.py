"""Which function a question is about (``daemon.model.harness.topics``), without I/O.

The catalog is a real :class:`~daemon.code_mode.catalog.Catalog` built from tool
definitions shaped like the bundled kcp server's: a function named like the place
a question names (workspaces) beside the ones that hold what it asks about.
"""

from __future__ import annotations

from typing import Any

from daemon.code_mode.catalog.catalog import Catalog
from daemon.model.harness import catalog_topics, topic_hint
from daemon.model.harness.topics import question_words, words
from daemon.tools import ToolDefinition

WORKSPACE = {"type": "string", "description": "workspace path, e.g. root:app"}


def _tool(name: str, description: str, props: dict[str, Any], required: list[str], **kw: Any):
    return ToolDefinition(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": props, "required": required},
        **kw,
    )


def catalog() -> Catalog:
    pods = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {"nodeName": {"type": "string"}}},
                        "status": {
                            "type": "object",
                            "properties": {
                                "containerStatuses": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {"restartCount": {"type": "integer"}},
                                    },
                                }
                            },
                        },
                    },
                },
            }
        },
    }
    return Catalog(
        [
            _tool(
                "list_workspaces",
                "List the child workspaces of a workspace.\n"
                'Example: ws = await list_workspaces(workspace="root")',
                {"workspace": WORKSPACE},
                [],
            ),
            _tool(
                "list_objects",
                "List objects of one resource type.\n"
                'Example: pods = await list_objects(workspace="root:app", resource="pods")',
                {
                    "workspace": WORKSPACE,
                    "resource": {"type": "string", "description": "resource type, e.g. pods"},
                },
                ["workspace", "resource"],
                output_schema=pods,
            ),
            _tool(
                "get_logs",
                "A pod's logs as plain text.\n"
                'Example: text = await get_logs(workspace="root:app", pod="web-1")',
                {"workspace": WORKSPACE, "pod": {"type": "string"}},
                ["workspace", "pod"],
            ),
        ]
    )


QUESTION = "In kcp workspace root:shop, which pod has the most container restarts?"
WRONG = "ws = await list_workspaces(workspace='root:shop')\nmax(items(ws), key=len)"


def test_words_are_stemmed_split_and_stop_words_dropped() -> None:
    assert words("restartCount of the containerStatuses") == {
        "restart",
        "count",
        "container",
        "statuse",
    }
    assert words("Which pods, and how many nodes?") == {"pod", "node"}
    # a URL and names (a path, a pod, a key) are places and things, not topics
    assert question_words("Is pod api-2 in root:shop on http://h:1/pods.json?") == {"pod"}


def test_a_snippet_calling_a_function_named_like_the_place_gets_the_one_about_the_question():
    hint = topic_hint(QUESTION, WRONG, catalog_topics(catalog()))
    call = "pods = await list_objects(workspace='root:shop', resource='pods')"
    assert hint == (
        "Hint: my question is about container, pod, restart, and list_workspaces does not "
        f"return those. list_objects does, for example: {call}",
        call,
    )


def test_result_fields_the_sketch_cuts_short_count_as_what_a_function_is_about() -> None:
    topics = catalog_topics(catalog())
    assert {"restart", "container", "node"} <= topics["list_objects"].words
    assert "restart" not in topics["get_logs"].words
    # an example's string values are illustrations, not topics
    assert "web" not in topics["get_logs"].words


def test_no_hint_when_the_snippet_called_a_function_about_the_question() -> None:
    topics = catalog_topics(catalog())
    right = "pods = await list_objects(workspace='root:shop', resource='pods')\npods"
    assert topic_hint(QUESTION, right, topics) is None
    assert topic_hint(QUESTION, "1 + 1", topics) is None  # no call: nothing to compare
    assert topic_hint(QUESTION, "ws = await list_workspaces(", topics) is None  # no parse


def test_one_word_more_is_not_enough() -> None:
    """A single word in common is noise (a date question and a time zone function's
    day_of_week): at least MIN_GAIN words."""
    hint = topic_hint(
        "In workspace root:shop, which pod is oldest?", WRONG, catalog_topics(catalog())
    )
    assert hint is None


def test_a_tie_shows_both_in_the_catalog_order_fewest_required_first() -> None:
    topics = catalog_topics(catalog())
    hint = topic_hint("Which pod logs plain text lines?", WRONG, topics)
    assert hint is not None
    assert "get_logs does, for example: text = await get_logs(workspace='root:shop'" in hint[0]
    tie = topic_hint("Which pod objects have logs?", WRONG, topics)
    assert tie is not None
    assert "list_objects or get_logs do, for example: pods = await list_objects(" in tie[0]
    assert " or text = await get_logs(workspace='root:shop', pod='web-1')" in tie[0]
    assert tie[1] == "pods = await list_objects(workspace='root:shop', resource='pods')"
