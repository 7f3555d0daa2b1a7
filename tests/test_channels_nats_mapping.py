"""The NATS mapping without a server: names, ids, where a subscription starts, headers."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.ids import ZERO_ID, IdGenerator, id_for_time, is_id
from channels.nats import mapping

CREATED = datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC)
EPOCH = mapping.stream_epoch("ATIRC_ops", CREATED)


@given(st.from_regex(r"#[A-Za-z0-9_.\-]{1,64}", fullmatch=True))
def test_a_channel_name_round_trips_through_a_safe_subject_token(channel):
    """Every channel name gives one subject token without separators or wildcards, and back."""
    token = mapping.encode_token(channel)
    assert re.fullmatch(r"[A-Za-z0-9_\-]+", token)
    assert mapping.decode_token(token) == channel
    assert mapping.stream_name(channel) == "ATIRC_" + token
    assert mapping.channel_filter(channel) == f"atirc.{token}.>"


def test_names_that_look_like_escapes_stay_apart():
    """``.``, ``_`` and a literal ``_2E`` give three different tokens."""
    tokens = {mapping.encode_token(c) for c in ("#a.b", "#a_b", "#a_2Eb", "#a_5Fb")}
    assert len(tokens) == 4
    with pytest.raises(ValueError, match="invalid channel"):
        mapping.encode_token("ops")
    with pytest.raises(ValueError, match="not a channel token"):
        mapping.decode_token("a.b")


def test_subjects_of_roots_threads_and_statuses():
    """A root goes to ``root``, a reply to its thread's subject, a status outside the stream."""
    thread = EPOCH + "000000000007"
    assert mapping.message_subject("#ops.eu", None) == "atirc.ops_2Eeu.root"
    assert mapping.message_subject("#ops.eu", thread) == f"atirc.ops_2Eeu.{thread}"
    assert mapping.status_subject("#ops.eu", thread) == f"atirc-status.ops_2Eeu.{thread}"
    assert mapping.status_filter("#ops.eu") == "atirc-status.ops_2Eeu.*"


def test_ids_have_the_hub_syntax_and_sort_in_sequence_order():
    """Ids are valid ULID-syntax ids that sort as their sequences, and give them back."""
    ids = [mapping.message_id(EPOCH, seq) for seq in (1, 9, 10, 99, 100, 10**11)]
    assert all(is_id(i) for i in ids)
    assert ids == sorted(ids)
    assert [mapping.sequence_of(EPOCH, i) for i in ids] == [1, 9, 10, 99, 100, 10**11]
    assert mapping.sequence_of(EPOCH, ZERO_ID) is None
    with pytest.raises(ValueError, match="out of range"):
        mapping.message_id(EPOCH, 0)


def test_two_streams_never_share_ids_and_a_newer_stream_sorts_after():
    """Streams created in the same millisecond differ; a re-created one sorts after the old."""
    same_ms = mapping.stream_epoch("ATIRC_dev", CREATED)
    assert same_ms[:10] == EPOCH[:10]
    assert same_ms != EPOCH
    later = mapping.stream_epoch("ATIRC_ops", CREATED + timedelta(seconds=1))
    assert mapping.message_id(later, 1) > mapping.message_id(EPOCH, 10**11)
    assert mapping.sequence_of(later, mapping.message_id(EPOCH, 5)) is None


def test_where_a_subscription_starts():
    """None: new only; an id of this stream: after it; any other id: its time."""
    assert mapping.start_for(None, EPOCH, CREATED).policy == "new"
    start = mapping.start_for(mapping.message_id(EPOCH, 41), EPOCH, CREATED)
    assert (start.policy, start.seq) == ("seq", 42)
    assert mapping.start_for(ZERO_ID, EPOCH, CREATED).policy == "all"
    hub_id_before = IdGenerator(clock=lambda: 1_700_000_000_000).new()
    assert mapping.start_for(hub_id_before, EPOCH, CREATED).policy == "all"
    first_start = id_for_time(int(CREATED.timestamp() * 1000) + 60_000)
    start = mapping.start_for(first_start, EPOCH, CREATED)
    assert start.policy == "time"
    assert start.time == CREATED.replace(microsecond=123000) + timedelta(seconds=60)


def test_a_stored_message_becomes_a_message_frame():
    """A root's thread is its own id; a reply keeps its headers; odd headers are survived."""
    stored = datetime(2026, 11, 30, 10, 1, 2, 345678, tzinfo=UTC)
    chunk = mapping.Chunk("c1", "hello", more=True)
    headers = mapping.message_headers("alice", chunk, thread=None, reply_to=None)
    assert headers == {
        "Nats-Msg-Id": "alice:c1",
        "Atirc-From": "alice",
        "Atirc-Thread": "",
        "Atirc-More": "1",
    }
    root = mapping.message_from("#ops", EPOCH, 3, headers, b"hello", stored)
    assert (root.id, root.thread, root.sender, root.more) == (
        mapping.message_id(EPOCH, 3),
        mapping.message_id(EPOCH, 3),
        "alice",
        True,
    )
    assert root.ts == "2026-11-30T10:01:02.345Z"
    reply_headers = mapping.message_headers(
        "bob", mapping.Chunk("c2", "hi", False), thread=root.id, reply_to=root.id
    )
    reply = mapping.message_from("#ops", EPOCH, 4, reply_headers, "hé".encode(), stored)
    assert (reply.thread, reply.reply_to, reply.text, reply.more) == (root.id, root.id, "hé", False)
    foreign = mapping.message_from("#ops", EPOCH, 5, {"Atirc-Thread": "nope"}, b"\xff", stored)
    assert (foreign.thread, foreign.sender, foreign.text) == (foreign.id, "?", "\ufffd")


def test_a_thread_of_another_stream_is_not_a_thread_of_this_channel():
    """Issue 26: a thread id of another stream (another channel) has a problem, and a
    stored message naming one starts its own thread; this stream's ids and ids of no
    stream (a hub's, a made-up one) are taken as given."""
    other = mapping.stream_epoch("ATIRC_pub", CREATED)
    ours, theirs = mapping.message_id(EPOCH, 7), mapping.message_id(other, 7)
    assert mapping.thread_problem(EPOCH, "#ops", ours) is None
    assert (
        mapping.thread_problem(EPOCH, "#ops", theirs) == f"thread {theirs} is not a thread of #ops"
    )
    hub_id = IdGenerator().new()
    assert mapping.thread_problem(EPOCH, "#ops", hub_id) is None
    stored = datetime(2026, 11, 30, 10, 1, 2, tzinfo=UTC)
    headers = {"Atirc-Thread": theirs, "Atirc-From": "eve"}
    smuggled = mapping.message_from("#ops", EPOCH, 8, headers, b"x", stored)
    assert smuggled.thread == smuggled.id == mapping.message_id(EPOCH, 8)
    kept = mapping.message_from("#ops", EPOCH, 9, {"Atirc-Thread": ours}, b"x", stored)
    assert kept.thread == ours


def test_a_long_text_is_chunked_like_the_hub_client_does():
    """Chunks fit, join back, and carry ``ID``, ``ID.1``… with ``more`` but on the last."""
    text = "line of text\n" * 100
    chunks = mapping.chunks(text, "c", 256)
    assert "".join(c.text for c in chunks) == text
    assert [c.client_id for c in chunks][:3] == ["c", "c.1", "c.2"]
    assert [c.more for c in chunks] == [True] * (len(chunks) - 1) + [False]
    assert mapping.chunks("short", "c", 256) == [mapping.Chunk("c", "short", False)]
    assert [mapping.chunk_base(c.client_id) for c in chunks] == ["c"] * len(chunks)
    assert mapping.chunk_base("nick:c.12") == "nick:c"
    assert mapping.chunk_base("c.v2") == "c.v2"  # not a chunk's suffix


def test_statuses_from_foreign_subjects_are_ignored():
    """Only ``atirc-status.<token>.<thread id>`` is a status."""
    thread = mapping.message_id(EPOCH, 1)
    status = mapping.status_from(
        f"atirc-status.ops.{thread}", mapping.status_headers("bot", CREATED), b"thinking"
    )
    assert status is not None
    assert (status.channel, status.thread, status.sender, status.text) == (
        "#ops",
        thread,
        "bot",
        "thinking",
    )
    assert mapping.status_from("atirc-status.ops.notanid", {}, b"x") is None
    assert mapping.status_from(f"atirc-status.a.b.{thread}", {}, b"x") is None
    assert mapping.status_from(f"other.ops.{thread}", {}, b"x") is None


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (None, {}),
        ("s3cr3t-token", {"token": "s3cr3t-token"}),
        ("alice:pw:with:colons", {"user": "alice", "password": "pw:with:colons"}),
        ("/etc/nats/alice.creds", {"user_credentials": "/etc/nats/alice.creds"}),
    ],
)
def test_credentials_from_the_token_setting(token, expected):
    """A token, USER:PASSWORD or a creds file path."""
    assert mapping.credentials(token) == expected


def test_a_password_in_the_url_is_not_shown():
    """Errors and logs name the server without the URL's password."""
    assert (
        mapping.shown_url("nats://alice:s3cret@10.0.0.1:4222") == "nats://alice:***@10.0.0.1:4222"
    )
    assert mapping.shown_url("nats://10.0.0.1:4222") == "nats://10.0.0.1:4222"
    assert mapping.shown_url("nats://tok3n@10.0.0.1:4222") == "nats://tok3n@10.0.0.1:4222"
