"""The pure parts of the console's approvals, audit, usage and health pages (issue 30):
the command a button stands for, the audit's filters, the charts, the uptime."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from daemon.approvals import Approve, Deny, parse_decision
from daemon.web.approvals import command_of
from daemon.web.audit import filters_of
from daemon.web.charts import bar_chart
from daemon.web.health import uptime_text
from daemon.web.usage import LimitUse


def test_a_button_stands_for_the_chat_command() -> None:
    """Each action is the command a person would type, parsed by the chat's parser."""
    assert parse_decision(command_of("abc234", "approve") or "") == Approve("abc234")
    assert parse_decision(command_of("abc234", "run") or "") == Approve("abc234", whole_run=True)
    assert parse_decision(command_of("abc234", "always") or "") == Approve("abc234", always=True)
    assert parse_decision(command_of("abc234", "deny", " not\n today ") or "") == Deny(
        "abc234", "not today"
    )
    assert command_of("abc234", "deny") == "!deny abc234"
    assert command_of("abc234", "stop") is None
    assert command_of("abc 234", "approve") is None
    assert command_of("", "approve") is None


@given(st.text(max_size=30), st.sampled_from(["approve", "run", "always", "deny", "x"]), st.text())
def test_a_button_is_a_decision_of_that_id_or_nothing(rid: str, action: str, reason: str) -> None:
    """Whatever a form posts, the command is None or a decision of exactly that id (a
    reason never turns into another command or id)."""
    command = command_of(rid, action, reason)
    if command is None:
        return
    parsed = parse_decision(command)
    assert isinstance(parsed, Approve | Deny)
    assert parsed.request_id == rid.lower()


def test_the_audit_filters_are_read_or_refused_with_a_reason() -> None:
    """A server is its tools; mutating is yes/no; an unknown outcome, server or time is
    named, and nothing is guessed."""
    servers = {"kcp": ["list_objects", "delete_object"], "test": ["erase"]}
    found = filters_of(
        {
            "server": "kcp",
            "mutating": "yes",
            "outcome": "error",
            "sender": "bob",
            "since": "2026-11-29",
        },
        servers,
    )
    assert found.problems == []
    assert found.arguments == {
        "tools": ["list_objects", "delete_object"],
        "mutating": True,
        "outcome": "error",
        "sender": "bob",
        "since": "2026-11-29T00:00:00.000Z",
    }
    assert filters_of({"channel": "", "tool": " erase "}, servers).arguments == {"tool": "erase"}
    bad = filters_of(
        {"server": "nope", "mutating": "maybe", "outcome": "fine", "until": "soon"}, servers
    )
    assert len(bad.problems) == 4
    assert bad.problems[0] == "no server 'nope' (this daemon's: kcp, test)"
    assert bad.arguments == {}


def test_a_chart_escapes_its_labels_and_scales_to_the_largest() -> None:
    """Labels are text, never markup; the largest bar is the longest; empty says so."""
    svg = bar_chart("tokens per sender", [("<b>eve</b>", 10), ("bob", 5)])
    assert "<b>" not in svg
    assert "&lt;b&gt;eve&lt;/b&gt;" in svg
    assert svg.startswith("<svg")
    assert svg.endswith("</svg>")
    widths = [float(part.split('"')[0]) for part in svg.split('width="')[2:]]
    assert widths[0] == 2 * widths[1]
    assert "nothing yet" in bar_chart("runs per day", [])


def test_uptime_and_limit_shares() -> None:
    """Two units of uptime; a limit's share is capped at 1 and None when unlimited."""
    assert uptime_text(5) == "5s"
    assert uptime_text(250) == "4m 10s"
    assert uptime_text(7500) == "2h 5m"
    assert uptime_text(3 * 86400 + 4 * 3600 + 9) == "3d 4h"
    use = LimitUse("bob", "[runtime]", 3, 4, 900, None)
    assert use.runs_share == 0.75
    assert use.tokens_share is None
    assert LimitUse("bob", "#ops", 9, 4, 0, 10).runs_share == 1.0
