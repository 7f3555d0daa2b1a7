"""REPL dumps in a JetStream object store on a real nats-server: round trip, tamper, key."""

from __future__ import annotations

import json

import nats.js.errors
import pytest
from nats.aio.client import Client
from structlog.testing import capture_logs

from daemon.cluster.errors import ThreadMoved
from daemon.cluster.leases import Leases
from daemon.cluster.scopes import ObjectScopeStore, scope_bucket, scope_object, slot_object
from daemon.errors import ScopeRejected
from daemon.tools import ThreadKey

KEY = b"k" * 32


async def _store(nc: Client, key: bytes = KEY, max_bytes: int = 1 << 20) -> ObjectScopeStore:
    return await ObjectScopeStore(
        nc.jetstream(), "asyncai", key, max_bytes=max_bytes, version="1.4.0"
    ).open()


async def _two_daemons(
    nc: Client, running: dict[str, str | None]
) -> tuple[dict[str, Leases], dict[str, ObjectScopeStore]]:
    """Daemons "a" and "b": each one's leases, and its store bound to them; the newest
    prompt of the run going on in each is ``running[name]`` (None: no run)."""
    leases = {
        name: await Leases(nc.jetstream(), "asyncai", name, member_ttl=30.0).open()
        for name in ("a", "b")
    }
    stores = {name: await _store(nc) for name in ("a", "b")}
    for name, store in stores.items():
        store.bind(leases[name], lambda _t, name=name: running[name])
    return leases, stores


async def test_a_dump_saved_by_one_daemon_loads_in_another(nc: Client) -> None:
    """Two stores on one bucket (two daemons): what one saves, the other loads, intact."""
    one, two = await _store(nc), await _store(nc)
    assert await two.load(ThreadKey("#ops", "000000000001")) is None
    await one.save(ThreadKey("#ops", "000000000001"), b"\x00dump\nbytes")
    loaded = await two.load(ThreadKey("#ops", "000000000001"))
    assert loaded is not None
    assert loaded.data == b"\x00dump\nbytes"
    await one.save(ThreadKey("#ops", "000000000001"), b"newer")  # replaces
    again = await two.load(ThreadKey("#ops", "000000000001"))
    assert again is not None
    assert again.data == b"newer"
    await two.drop(ThreadKey("#ops", "000000000001"))
    assert await one.load(ThreadKey("#ops", "000000000001")) is None
    await two.drop(ThreadKey("#ops", "000000000001"))  # nothing stored: nothing to do


async def test_changed_bytes_a_moved_dump_and_another_key_are_refused(nc: Client) -> None:
    """The MAC covers the bytes and the thread; a daemon with another key refuses the dump."""
    store = await _store(nc)
    await store.save(ThreadKey("#ops", "000000000002"), b"genuine")
    bucket = await nc.jetstream().object_store(scope_bucket("asyncai"))
    raw = bytes((await bucket.get(slot_object(ThreadKey("#ops", "000000000002"), 0))).data or b"")
    await bucket.put(
        slot_object(ThreadKey("#ops", "000000000002"), 0), raw.replace(b"genuine", b"forged!")
    )
    with pytest.raises(ScopeRejected, match="MAC does not match"):
        await store.load(ThreadKey("#ops", "000000000002"))
    await bucket.put(
        slot_object(ThreadKey("#ops", "000000000003"), 0), raw
    )  # the genuine bytes under another thread
    with pytest.raises(ScopeRejected, match="MAC does not match"):
        await store.load(ThreadKey("#ops", "000000000003"))
    await store.save(ThreadKey("#ops", "000000000004"), b"genuine")
    with pytest.raises(ScopeRejected, match=r"another scope\.key"):
        await (await _store(nc, key=b"o" * 32)).load(ThreadKey("#ops", "000000000004"))


async def test_dumps_are_keyed_by_channel_and_one_moved_to_another_channel_is_refused(
    nc: Client,
) -> None:
    """Issue 26: one thread id in #ops and #pub names two dumps (two objects, by channel);
    #ops's bytes put under #pub's name fail the MAC, which covers the channel."""
    store = await _store(nc)
    ops, pub = ThreadKey("#ops", "000000000005"), ThreadKey("#pub", "000000000005")
    await store.save(ops, b"ops-secret-42")
    assert await store.load(pub) is None
    await store.save(pub, b"pub's own")
    loaded = await store.load(ops)
    assert loaded is not None
    assert loaded.data == b"ops-secret-42"
    bucket = await nc.jetstream().object_store(scope_bucket("asyncai"))
    names = {info.name for info in await bucket.list()}
    assert {slot_object(ops, 0), slot_object(pub, 0)} <= names
    assert not any(name.startswith("000000000005") for name in names)  # never by the id alone
    raw = bytes((await bucket.get(slot_object(ops, 0))).data or b"")
    await bucket.put(slot_object(pub, 0), raw)
    with pytest.raises(ScopeRejected, match="MAC does not match"):
        await store.load(pub)
    await store.drop(pub)
    assert await store.load(ops) is not None  # dropping #pub's leaves #ops's


async def test_a_dump_stored_under_the_bare_thread_id_is_dropped_at_open(nc: Client) -> None:
    """A dump named and signed the old way (the thread id alone, no channel) cannot be
    proven to be one channel's: opening the store deletes it, one log line each."""
    store = await _store(nc)
    kept = ThreadKey("#ops", "000000000007")
    await store.save(kept, b"new")
    bucket = await nc.jetstream().object_store(scope_bucket("asyncai"))
    header = {"v": "1.4.0", "mac": "0" * 64, "saved": "2026-11-30T08:00:00.000Z"}
    await bucket.put("000000000006", json.dumps(header).encode() + b"\nops-secret-42")
    with capture_logs() as logs:
        await _store(nc)  # a daemon starting
    assert [(e["event"], e["thread"]) for e in logs if e["event"] == "cluster.scope_dropped"] == [
        ("cluster.scope_dropped", "000000000006")
    ]
    with pytest.raises(nats.js.errors.ObjectNotFoundError):
        await bucket.get("000000000006")
    assert await store.load(kept) is not None


async def test_bad_headers_other_versions_and_big_dumps_are_refused(nc: Client) -> None:
    """Every refusal is ScopeRejected with its reason in one line, never another error."""
    store = await _store(nc)
    bucket = await nc.jetstream().object_store(scope_bucket("asyncai"))
    await bucket.put(scope_object(ThreadKey("#ops", "t1")), b"no header at all")
    with pytest.raises(ScopeRejected, match="header"):
        await store.load(ThreadKey("#ops", "t1"))
    await bucket.put(scope_object(ThreadKey("#ops", "t2")), json.dumps({"v": 1}).encode() + b"\nx")
    with pytest.raises(ScopeRejected, match="header"):
        await store.load(ThreadKey("#ops", "t2"))
    other = await ObjectScopeStore(
        nc.jetstream(), "asyncai", KEY, max_bytes=100, version="9.9.9"
    ).open()
    await other.save(ThreadKey("#ops", "t3"), b"dump")
    with pytest.raises(ScopeRejected, match=r"pydantic-monty 9\.9\.9"):
        await store.load(ThreadKey("#ops", "t3"))
    await store.save(ThreadKey("#ops", "t4"), b"x" * 200)
    with pytest.raises(ScopeRejected, match=r"over code_mode\.max_scope_dump"):
        await other.load(ThreadKey("#ops", "t4"))


async def test_the_loaded_dump_reflects_exactly_the_answered_runs(nc: Client) -> None:
    """Issue 26 §2.2: a dump of a run whose end never reached the thread's entry (its
    daemon died between the save and the marker) is passed over for the one before it,
    so the daemon taking over runs the prompt again on the REPL as it was; and a daemon
    that lost the thread saves nothing there (§2.6)."""
    thread = ThreadKey("#ops", "000000000008")
    running: dict[str, str | None] = {"a": None, "b": None}
    leases, stores = await _two_daemons(nc, running)
    a, b = stores["a"], stores["b"]
    claim = await leases["a"].claim(thread.channel, thread.thread_id)
    running["a"] = "000000000008"
    await a.save(thread, b"x = 1")  # the run of P8 ends: its dump, then its marker
    await leases["a"].mark_answered(thread.channel, thread.thread_id, "000000000008")
    running["a"] = "000000000009"
    await a.save(thread, b"x = 2")  # the run of P9 saved its dump ... and a died here
    loaded = await a.load(thread)
    assert loaded is not None
    assert loaded.data == b"x = 1"  # a restarted a: P9 runs again on x = 1
    claim = await leases["a"].get(thread.channel, thread.thread_id)
    assert claim is not None
    await leases["b"].take_over(thread.channel, thread.thread_id, claim)
    loaded = await b.load(thread)
    assert loaded is not None
    assert loaded.data == b"x = 1"
    running["b"] = "000000000009"
    await b.save(thread, b"x = 2, once")  # P9 run again, on b
    with pytest.raises(ThreadMoved):
        await a.save(thread, b"x = 3, a's late run")  # fenced: a lost the thread
    await leases["b"].mark_answered(thread.channel, thread.thread_id, "000000000009")
    running["b"] = None
    loaded = await b.load(thread)
    assert loaded is not None
    assert loaded.data == b"x = 2, once"
    running["b"] = "000000000010"
    await b.save(thread, b"x = 3")  # the next run keeps P9's dump in the other slot
    loaded = await b.load(thread)
    assert loaded is not None
    assert loaded.data == b"x = 2, once"


async def test_the_dumps_of_a_run_not_run_again_are_forgotten_by_the_holder(
    nc: Client,
) -> None:
    """A run cut off after a mutating call gets the interrupted notice instead of a
    second run, and its prompts then count as answered: its dumps go first, so the REPL
    goes on from before it. Only the holder forgets them."""
    thread = ThreadKey("#ops", "000000000011")
    running: dict[str, str | None] = {"a": "000000000011", "b": None}
    leases, stores = await _two_daemons(nc, running)
    await leases["a"].claim(thread.channel, thread.thread_id)
    await stores["a"].save(thread, b"x = 1")
    await leases["a"].mark_answered(thread.channel, thread.thread_id, "000000000011")
    running["a"] = "000000000012"
    await stores["a"].save(thread, b"x = 2, cut off")  # then a died inside a mutating call
    claim = await leases["a"].get(thread.channel, thread.thread_id)
    assert claim is not None
    await leases["b"].take_over(thread.channel, thread.thread_id, claim)
    with pytest.raises(ThreadMoved):
        await stores["a"].forget_from(thread, "000000000012")
    await stores["b"].forget_from(thread, "000000000012")  # before the notice
    await leases["b"].mark_answered(thread.channel, thread.thread_id, "000000000012")
    loaded = await stores["b"].load(thread)
    assert loaded is not None
    assert loaded.data == b"x = 1"
