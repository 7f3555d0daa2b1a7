"""Thread REPL dumps in SQLite, authenticated (daemon.runtime.scopes), on a real store."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from daemon.errors import ConfigError, ScopeRejected
from daemon.runtime.scopes import (
    KEY_FILE,
    SignedScopeStore,
    keyed_mac,
    load_or_create_key,
    scope_mac,
)
from daemon.tools import ThreadKey
from sessions import Store, StoreError
from sessions.schema import MIGRATIONS

KEY = b"k" * 32


@pytest.fixture
async def store(tmp_path: Path):
    """A store with thread #ops/T1 recorded."""
    async with Store(tmp_path / "a.db") as store:
        await store.runs.record_prompt("#ops", "T1", "M1", "alice", "x", "2026-11-30T08:00:00Z")
        yield store


async def test_a_dump_comes_back_as_it_was_saved(store: Store) -> None:
    """Save then load: the same bytes, with the time they were saved."""
    scopes = SignedScopeStore(store.scopes, KEY, max_bytes=1024, version="1.4.0")
    await scopes.save(ThreadKey("#ops", "T1"), b"\x00dump\xff")
    loaded = await scopes.load(ThreadKey("#ops", "T1"))
    assert loaded is not None
    assert loaded.data == b"\x00dump\xff"
    assert loaded.saved_at.endswith("Z")
    assert await scopes.load(ThreadKey("#ops", "T9")) is None  # nothing recorded, nothing stored
    await scopes.drop(ThreadKey("#ops", "T1"))
    assert await scopes.load(ThreadKey("#ops", "T1")) is None


async def test_a_changed_byte_is_refused(store: Store) -> None:
    """A flipped byte in the stored dump: ScopeRejected, never loaded."""
    scopes = SignedScopeStore(store.scopes, KEY, max_bytes=1024, version="1.4.0")
    await scopes.save(ThreadKey("#ops", "T1"), b"abcdef")
    stored = await store.scopes.load_scope("#ops", "T1")
    assert stored is not None
    await store.scopes.save_scope(
        "#ops", "T1", monty_version="1.4.0", data=b"abcdeF", mac=stored.mac, dumped=stored.dumped
    )
    with pytest.raises(ScopeRejected, match="MAC does not match"):
        await scopes.load(ThreadKey("#ops", "T1"))


async def test_a_dump_moved_to_the_same_thread_id_in_another_channel_is_refused(
    store: Store,
) -> None:
    """Issue 26: #ops and #pub share a thread id; #ops's dump (bytes and MAC) copied into
    #pub's row fails the MAC, which covers the channel; each channel loads its own."""
    await store.runs.record_prompt("#pub", "T1", "M9", "mallory", "x", "2026-11-30T08:00:00Z")
    scopes = SignedScopeStore(store.scopes, KEY, max_bytes=1024, version="1.4.0")
    ops, pub = ThreadKey("#ops", "T1"), ThreadKey("#pub", "T1")
    await scopes.save(ops, b"ops-secret-42")
    assert await scopes.load(pub) is None
    stored = await store.scopes.load_scope("#ops", "T1")
    assert stored is not None
    await store.scopes.save_scope(
        "#pub", "T1", monty_version="1.4.0", data=stored.data, mac=stored.mac
    )
    with pytest.raises(ScopeRejected, match="MAC does not match"):
        await scopes.load(pub)
    await scopes.drop(pub)
    loaded = await scopes.load(ops)
    assert loaded is not None
    assert loaded.data == b"ops-secret-42"


async def test_a_dump_under_another_key_or_thread_is_refused(store: Store) -> None:
    """The MAC binds the key and the thread: a copied dump does not verify."""
    await store.runs.record_prompt("#ops", "T2", "M2", "alice", "x", "2026-11-30T08:00:00Z")
    other = SignedScopeStore(store.scopes, b"o" * 32, max_bytes=1024, version="1.4.0")
    await other.save(ThreadKey("#ops", "T1"), b"data")
    with pytest.raises(ScopeRejected, match="MAC"):
        await SignedScopeStore(store.scopes, KEY, max_bytes=1024, version="1.4.0").load(
            ThreadKey("#ops", "T1")
        )
    mac_for_t1 = scope_mac(KEY, "1.4.0", ThreadKey("#ops", "T1"), b"data")
    await store.scopes.save_scope("#ops", "T2", monty_version="1.4.0", data=b"data", mac=mac_for_t1)
    with pytest.raises(ScopeRejected, match="MAC"):
        await SignedScopeStore(store.scopes, KEY, max_bytes=1024, version="1.4.0").load(
            ThreadKey("#ops", "T2")
        )


async def test_a_dump_of_another_monty_version_is_refused(store: Store) -> None:
    """Monty loads only its own dump version: say which versions, do not load."""
    await SignedScopeStore(store.scopes, KEY, max_bytes=1024, version="1.3.9").save(
        ThreadKey("#ops", "T1"), b"old"
    )
    with pytest.raises(ScopeRejected, match=r"saved by pydantic-monty 1\.3\.9.*runs 1\.4\.0"):
        await SignedScopeStore(store.scopes, KEY, max_bytes=1024, version="1.4.0").load(
            ThreadKey("#ops", "T1")
        )


async def test_a_dump_over_the_limit_is_refused(store: Store) -> None:
    """A limit lowered since the save: the dump is not loaded."""
    await SignedScopeStore(store.scopes, KEY, max_bytes=1024, version="1.4.0").save(
        ThreadKey("#ops", "T1"), b"x" * 100
    )
    with pytest.raises(ScopeRejected, match=r"over code_mode\.max_scope_dump"):
        await SignedScopeStore(store.scopes, KEY, max_bytes=10, version="1.4.0").load(
            ThreadKey("#ops", "T1")
        )


async def test_saving_for_an_unknown_thread_is_refused(store: Store) -> None:
    """No thread row, no dump."""
    scopes = SignedScopeStore(store.scopes, KEY, max_bytes=1024, version="1.4.0")
    with pytest.raises(StoreError, match="no such thread"):
        await scopes.save(ThreadKey("#ops", "T9"), b"x")


def test_the_key_is_made_once_private_and_kept(tmp_path: Path) -> None:
    """32 random bytes, mode 0600, the same on the next start."""
    state = tmp_path / "state"
    key = load_or_create_key(state)
    assert len(key) == 32
    assert stat.S_IMODE((state / KEY_FILE).stat().st_mode) == 0o600
    assert load_or_create_key(state) == key


def test_a_key_others_can_read_or_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    """A readable key lets others forge dumps: a ConfigError that says what to do."""
    load_or_create_key(tmp_path)
    path = tmp_path / KEY_FILE
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match=r"readable by others.*chmod 600"):
        load_or_create_key(tmp_path)
    os.chmod(path, 0o600)
    path.write_bytes(b"short")
    with pytest.raises(ConfigError, match="not 32 bytes"):
        load_or_create_key(tmp_path)


def signed_the_old_way(key: bytes, version: str, thread_id: str, data: bytes) -> str:
    """The MAC dumps had before issue 26: over the version, the thread id and the bytes."""
    return keyed_mac(key, version.encode(), thread_id.encode(), data)


async def test_dumps_signed_the_old_way_are_resigned_when_their_channel_is_proven(
    tmp_path: Path,
) -> None:
    """A version-5 database holds dumps signed without their channel. At the daemon's
    start (SignedScopeStore.open) the one whose thread id names one channel's thread and
    whose old MAC verifies is re-signed and loads; one whose id is in two channels, or
    whose MAC does not verify, is dropped with one log line each; it happens once."""
    path = tmp_path / "a.db"
    threads = [("#ops", "T1"), ("#ops", "T2"), ("#ops", "T3"), ("#pub", "T3")]
    async with Store(path, migrations=MIGRATIONS[:5]) as old:
        for n, (channel, thread) in enumerate(threads):
            await old.runs.record_prompt(
                channel, thread, f"M{n}", "alice", "x", "2026-11-30T08:00:00Z"
            )
        for thread, data, key in [
            ("T1", b"ops-secret-42", KEY),
            ("T2", b"forged", b"o" * 32),
            ("T3", b"which channel?", KEY),
        ]:
            mac = signed_the_old_way(key, "1.4.0", thread, data)
            await old.scopes.save_scope("#ops", thread, monty_version="1.4.0", data=data, mac=mac)
    async with Store(path) as store:
        assert len(await store.scopes.unbound_scopes()) == 3  # the migration set them apart
        with capture_logs() as logs:
            scopes = await SignedScopeStore.open(store.scopes, KEY, max_bytes=1024, version="1.4.0")
        loaded = await scopes.load(ThreadKey("#ops", "T1"))
        assert loaded is not None
        assert loaded.data == b"ops-secret-42"
        assert await scopes.load(ThreadKey("#ops", "T2")) is None
        assert await scopes.load(ThreadKey("#ops", "T3")) is None
        dropped = [
            (e["channel"], e["thread"], e["reason"])
            for e in logs
            if e["event"] == "daemon.scope_dropped"
        ]
        assert dropped == [
            ("#ops", "T2", "its MAC does not match"),
            ("#ops", "T3", "its thread id names threads of 2 channels"),
        ]
        assert await store.scopes.unbound_scopes() == []
        with capture_logs() as again:
            await SignedScopeStore.open(store.scopes, KEY, max_bytes=1024, version="1.4.0")
        assert again == []
        stored = await store.scopes.load_scope("#ops", "T1")
        assert stored is not None
        assert stored.mac == scope_mac(KEY, "1.4.0", ThreadKey("#ops", "T1"), b"ops-secret-42")
