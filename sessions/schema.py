"""The schema, as numbered migrations recorded in the database.

Each migration is a named async function that receives the writer
connection inside an open ``BEGIN IMMEDIATE`` transaction. ``migrate``
applies the pending ones in order, one transaction each, and records every
one twice: ``PRAGMA user_version`` (cheap to read, and what the "newer than
this code" check uses) and a row in ``schema_migrations`` (the names, so a
database whose history differs from the code's is refused instead of being
half-understood). Never edit a released migration: add the next one.

Statements are executed one by one rather than with ``executescript``,
because ``sqlite3.Connection.executescript`` commits any open transaction
first, which would make a failing migration half-applied.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiosqlite

from .errors import MigrationError
from .ids import now_iso

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration", "migrate"]


@dataclass(frozen=True)
class Migration:
    """One numbered schema change."""

    version: int
    name: str
    apply: Callable[[aiosqlite.Connection], Awaitable[None]]


_INITIAL = [
    # A thread is (channel, thread id); its key is ids.thread_key(channel, thread_id).
    """CREATE TABLE threads (
        id          TEXT PRIMARY KEY,
        channel     TEXT NOT NULL,
        thread_id   TEXT NOT NULL,
        session_id  TEXT NOT NULL UNIQUE,
        created     TEXT NOT NULL,
        last_active TEXT NOT NULL,
        UNIQUE (channel, thread_id)
    )""",
    "CREATE INDEX threads_last_active ON threads (last_active)",
    "CREATE INDEX threads_thread_id ON threads (thread_id)",
    """CREATE TABLE runs (
        id                 TEXT PRIMARY KEY,
        thread             TEXT NOT NULL REFERENCES threads (id),
        started            TEXT NOT NULL,
        finished           TEXT,
        status             TEXT NOT NULL DEFAULT 'running'
                           CHECK (status IN ('running', 'done', 'failed', 'interrupted')),
        rounds             INTEGER NOT NULL DEFAULT 0,
        run_code_calls     INTEGER NOT NULL DEFAULT 0,
        nested_calls       INTEGER NOT NULL DEFAULT 0,
        bytes_in           INTEGER NOT NULL DEFAULT 0,
        bytes_out          INTEGER NOT NULL DEFAULT 0,
        final_round_forced INTEGER NOT NULL DEFAULT 0 CHECK (final_round_forced IN (0, 1)),
        prompt_tokens      INTEGER NOT NULL DEFAULT 0,
        completion_tokens  INTEGER NOT NULL DEFAULT 0,
        extra              TEXT CHECK (extra IS NULL OR json_valid(extra)),
        error              TEXT
    )""",
    "CREATE INDEX runs_thread ON runs (thread, started)",
    "CREATE INDEX runs_status ON runs (status)",
    """CREATE TABLE prompts (
        id       TEXT PRIMARY KEY,
        thread   TEXT NOT NULL REFERENCES threads (id),
        sender   TEXT NOT NULL,
        text     TEXT NOT NULL,
        ts       TEXT NOT NULL,
        received TEXT NOT NULL,
        status   TEXT NOT NULL DEFAULT 'queued'
                 CHECK (status IN ('queued', 'running', 'done', 'failed')),
        run_id   TEXT REFERENCES runs (id),
        updated  TEXT NOT NULL
    )""",
    "CREATE INDEX prompts_thread ON prompts (thread, ts)",
    "CREATE INDEX prompts_run ON prompts (run_id)",
    # recovery reads only the unfinished few; a partial index stays small
    "CREATE INDEX prompts_pending ON prompts (ts, id) WHERE status IN ('queued', 'running')",
    """CREATE TABLE records (
        seq             INTEGER PRIMARY KEY,
        uuid            TEXT NOT NULL UNIQUE,
        parent_uuid     TEXT REFERENCES records (uuid),
        thread          TEXT NOT NULL REFERENCES threads (id),
        session_id      TEXT NOT NULL,
        run_id          TEXT NOT NULL REFERENCES runs (id),
        type            TEXT NOT NULL CHECK (type IN ('user', 'assistant')),
        timestamp       TEXT NOT NULL,
        message         TEXT NOT NULL CHECK (json_valid(message)),
        tool_use_result TEXT CHECK (tool_use_result IS NULL OR json_valid(tool_use_result)),
        cwd             TEXT NOT NULL,
        version         TEXT NOT NULL,
        is_sidechain    INTEGER NOT NULL DEFAULT 0 CHECK (is_sidechain IN (0, 1)),
        user_type       TEXT NOT NULL DEFAULT 'external'
    )""",
    "CREATE INDEX records_thread ON records (thread, seq)",
    "CREATE INDEX records_run ON records (run_id)",
    """CREATE TABLE tool_calls (
        id          INTEGER PRIMARY KEY,
        run_id      TEXT NOT NULL REFERENCES runs (id),
        thread      TEXT NOT NULL REFERENCES threads (id),
        record_uuid TEXT,
        tool        TEXT NOT NULL,
        arguments   TEXT NOT NULL CHECK (json_valid(arguments)),
        is_error    INTEGER NOT NULL CHECK (is_error IN (0, 1)),
        bytes       INTEGER NOT NULL,
        mutating    INTEGER NOT NULL CHECK (mutating IN (0, 1)),
        started     TEXT NOT NULL,
        duration_ms REAL NOT NULL
    )""",
    # One index per audit filter, each ending in `started` (and the implicit
    # rowid), so "newest first" is an index walk, never a sort.
    "CREATE INDEX tool_calls_started ON tool_calls (started)",
    "CREATE INDEX tool_calls_thread ON tool_calls (thread, started)",
    "CREATE INDEX tool_calls_tool ON tool_calls (tool, started)",
    "CREATE INDEX tool_calls_mutating ON tool_calls (mutating, started)",
    # one thread's mutating calls: `audit --thread T --mutating` and the
    # per-thread count in `asyncai threads`, without reading every call
    "CREATE INDEX tool_calls_thread_mutating ON tool_calls (thread, started) WHERE mutating = 1",
    "CREATE INDEX tool_calls_run ON tool_calls (run_id)",
    """CREATE TABLE cursors (
        channel    TEXT PRIMARY KEY,
        message_id TEXT NOT NULL,
        updated    TEXT NOT NULL
    )""",
]


_APPROVALS = [
    # A nested call's audit row is written when the call starts ('started') and
    # completed when it ends, so a crash leaves the evidence of what began.
    """ALTER TABLE tool_calls ADD COLUMN outcome TEXT NOT NULL DEFAULT 'ok'
        CHECK (outcome IN ('started', 'ok', 'error', 'cancelled', 'unknown'))""",
    "UPDATE tool_calls SET outcome = 'error' WHERE is_error = 1",
    # how a call that needed approval was decided, by whom, after how long a wait
    """ALTER TABLE tool_calls ADD COLUMN decision TEXT
        CHECK (decision IS NULL OR decision IN ('approved', 'denied', 'expired'))""",
    "ALTER TABLE tool_calls ADD COLUMN decided_by TEXT",
    "ALTER TABLE tool_calls ADD COLUMN wait_ms REAL",
    "CREATE INDEX tool_calls_unfinished ON tool_calls (run_id) WHERE outcome = 'started'",
    # A paused run: the pending call(s), the Monty snapshot (NULL in direct
    # mode), the model conversation so far; one row per request, kept after
    # its decision as the record of it.
    """CREATE TABLE approvals (
        id           TEXT PRIMARY KEY,
        run_id       TEXT NOT NULL REFERENCES runs (id),
        thread       TEXT NOT NULL REFERENCES threads (id),
        requested    TEXT NOT NULL,
        expires      TEXT NOT NULL,
        requested_by TEXT NOT NULL,
        calls        TEXT NOT NULL CHECK (json_valid(calls)),
        snapshot     BLOB,
        conversation TEXT NOT NULL CHECK (json_valid(conversation)),
        status       TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'stopped')),
        scope        TEXT CHECK (scope IS NULL OR scope IN ('call', 'run')),
        decided_by   TEXT,
        decided      TEXT,
        reason       TEXT,
        resumed      TEXT
    )""",
    "CREATE INDEX approvals_pending ON approvals (expires) WHERE status = 'pending'",
    "CREATE INDEX approvals_thread ON approvals (thread, requested)",
    # decided while the daemon was down, or before it could resume: resumed at start
    "CREATE INDEX approvals_unresumed ON approvals (decided)"
    " WHERE resumed IS NULL AND decided IS NOT NULL",
]


_SCOPES = [
    # A thread's REPL scope, dumped by Monty, so it survives eviction and a
    # restart: one row per thread (the latest dump replaces the one before).
    # ``size`` is stored beside the bytes so listing threads never reads them;
    # ``mac`` is the caller's hex HMAC-SHA256 over the dump, checked before a load.
    """CREATE TABLE scopes (
        thread        TEXT PRIMARY KEY REFERENCES threads (id),
        monty_version TEXT NOT NULL,
        dumped        TEXT NOT NULL,
        size          INTEGER NOT NULL CHECK (size = length(data)),
        data          BLOB NOT NULL,
        mac           TEXT NOT NULL
    )""",
    # retention: prune_scopes deletes by age
    "CREATE INDEX scopes_dumped ON scopes (dumped)",
]


_TOOLS = [
    # How long a nested call waited for its server's ``max_concurrent`` slot
    # before it started (issue 19); NULL when the server has no limit.
    "ALTER TABLE tool_calls ADD COLUMN queue_ms REAL",
    # A return shape learned from a tool without an output schema: the sketch
    # (the same 4-level / 12-property form as a declared one) of its first
    # successful parsed result, per server and tool and the server's version,
    # replaced when a later result no longer fits it.
    """CREATE TABLE tool_shapes (
        server         TEXT NOT NULL,
        tool           TEXT NOT NULL,
        server_version TEXT NOT NULL,
        shape          TEXT NOT NULL,
        observed       TEXT NOT NULL,
        PRIMARY KEY (server, tool)
    )""",
]


_RUN_SENDERS = [
    # Whose prompts each run was started for (issue 26): the per-sender token
    # limit counts a run's tokens for its senders however the run ended. A
    # prompt's own ``run_id`` moves to the next run when a cut-off run's prompt
    # is run again, so it cannot say this. Keyed for the limit's read: one
    # sender's runs since a moment.
    """CREATE TABLE run_senders (
        sender  TEXT NOT NULL,
        started TEXT NOT NULL,
        run_id  TEXT NOT NULL REFERENCES runs (id),
        PRIMARY KEY (sender, started, run_id)
    ) WITHOUT ROWID""",
    # the runs so far: their senders as their prompts name them now
    "INSERT OR IGNORE INTO run_senders (sender, started, run_id)"
    " SELECT DISTINCT p.sender, r.started, r.id FROM prompts p JOIN runs r ON r.id = p.run_id",
]


_SCOPE_CHANNELS = [
    # Issue 26: a dump's MAC now covers its thread's channel. The dumps stored
    # before were signed over the thread id alone; they move here until the
    # daemon (which holds the MAC key) re-signs each one whose channel the
    # threads table proves, or drops it. Same columns as scopes.
    """CREATE TABLE unbound_scopes (
        thread        TEXT PRIMARY KEY REFERENCES threads (id),
        monty_version TEXT NOT NULL,
        dumped        TEXT NOT NULL,
        size          INTEGER NOT NULL CHECK (size = length(data)),
        data          BLOB NOT NULL,
        mac           TEXT NOT NULL
    )""",
    "INSERT INTO unbound_scopes SELECT thread, monty_version, dumped, size, data, mac FROM scopes",
    "DELETE FROM scopes",
]


_OUTBOX = [
    # A run's reply, committed with the run's end and published after it
    # (sessions/outbox.py): a crash between the two publishes it at the next
    # start with the same client_id, and never runs the prompts again.
    """CREATE TABLE outbox (
        run_id     TEXT PRIMARY KEY REFERENCES runs (id),
        channel    TEXT NOT NULL,
        thread_id  TEXT NOT NULL,
        reply_to   TEXT NOT NULL,
        client_id  TEXT NOT NULL,
        text       TEXT NOT NULL,
        committed  TEXT NOT NULL,
        status     TEXT NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'acked', 'refused')),
        acked      TEXT,
        message_id TEXT
    )""",
    # the next start reads only the unacknowledged few
    "CREATE INDEX outbox_pending ON outbox (committed) WHERE status = 'pending'",
]


_APPROVAL_RULES = [
    # Issue 29: "!approve ID always" leaves a rule: ``tool`` (server.tool) no
    # longer asks in ``channel``. Kept after it is revoked, as the record of
    # who allowed what and when; at most one rule in force per (channel, tool).
    # ``request_id`` names the request it was granted with (no reference: a
    # rule copied from a cluster's broker was granted on another daemon).
    # ``shared``: when it was known to be on the cluster's broker (NULL alone),
    # so a rule gone from the broker is known to be revoked elsewhere.
    """CREATE TABLE approval_rules (
        id          TEXT PRIMARY KEY,
        channel     TEXT NOT NULL,
        tool        TEXT NOT NULL,
        granted_by  TEXT NOT NULL,
        granted     TEXT NOT NULL,
        request_id  TEXT NOT NULL DEFAULT '',
        revoked     TEXT,
        revoked_by  TEXT,
        shared      TEXT
    )""",
    "CREATE UNIQUE INDEX approval_rules_in_force ON approval_rules (channel, tool)"
    " WHERE revoked IS NULL",
]


_SHAPE_CHANNELS = [
    # Issue 29: a learned return shape is its channel's. What a tool returned in a run
    # of #ops (the keys of a private result) was shown in every channel's stubs; now
    # each shape is kept per (channel, server, tool) and shown only to that channel.
    # The shapes stored before were learned in some channel nobody recorded: they are
    # dropped (a cache: the next result of each tool teaches its channel again), not
    # kept for every channel or for calls outside a thread, which would show them again.
    "DROP TABLE tool_shapes",
    """CREATE TABLE tool_shapes (
        channel        TEXT NOT NULL,
        server         TEXT NOT NULL,
        tool           TEXT NOT NULL,
        server_version TEXT NOT NULL,
        shape          TEXT NOT NULL,
        observed       TEXT NOT NULL,
        PRIMARY KEY (channel, server, tool)
    ) WITHOUT ROWID""",
]


def _executing(statements: Sequence[str]) -> Callable[[aiosqlite.Connection], Awaitable[None]]:
    """A migration's ``apply``: ``statements``, executed one by one, in order."""

    async def apply(db: aiosqlite.Connection) -> None:
        for statement in statements:
            await db.execute(statement)

    return apply


MIGRATIONS: tuple[Migration, ...] = (
    # Threads, prompts, runs, records, tool_calls and cursors.
    Migration(1, "initial_schema", _executing(_INITIAL)),
    # Call outcomes and decisions in the audit; the approvals table.
    Migration(2, "approvals", _executing(_APPROVALS)),
    # The scopes table: each thread's last dumped REPL scope.
    Migration(3, "scopes", _executing(_SCOPES)),
    # Per-server concurrency waits in the audit; learned return shapes.
    Migration(4, "tools", _executing(_TOOLS)),
    # The senders each run was started for.
    Migration(5, "run_senders", _executing(_RUN_SENDERS)),
    # Dumps signed without their channel set apart, to be re-signed or dropped.
    Migration(6, "scope_channels", _executing(_SCOPE_CHANNELS)),
    # The outbox of replies committed with their run's end.
    Migration(7, "outbox", _executing(_OUTBOX)),
    # The rules "!approve ID always" leaves, per channel and tool.
    Migration(8, "approval_rules", _executing(_APPROVAL_RULES)),
    # Learned return shapes per channel; the channel-less ones dropped.
    Migration(9, "shape_channels", _executing(_SHAPE_CHANNELS)),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def _check_sequence(migrations: Sequence[Migration]) -> None:
    """Migrations must be numbered 1, 2, 3 … with no gap and no repeat."""
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise MigrationError(
                f"migration {migration.name!r} is numbered {migration.version}, expected {expected}"
            )


async def _one_value(db: aiosqlite.Connection, sql: str) -> int:
    rows = list(await db.execute_fetchall(sql))
    return int(rows[0][0]) if rows else 0


async def migrate(
    db: aiosqlite.Connection, migrations: Sequence[Migration] = MIGRATIONS
) -> list[int]:
    """Bring the database up to the last of ``migrations``; return the versions applied.

    ``db`` must be in autocommit mode (``isolation_level=None``). Each
    migration runs in its own ``BEGIN IMMEDIATE`` transaction, so two
    processes opening the same file at once cannot both apply it, and a
    migration that fails leaves the database at the version before it.
    Raises ``MigrationError`` when the database is newer than ``migrations``
    or its recorded history names different migrations.
    """
    _check_sequence(migrations)
    latest = len(migrations)
    applied: list[int] = []
    while True:
        step = "the version check"
        try:
            await db.execute("BEGIN IMMEDIATE")
            try:
                current = await _one_value(db, "PRAGMA user_version")
                if current > latest:
                    raise MigrationError(
                        f"the database is at schema version {current}, newer than this "
                        f"asyncai's {latest}: upgrade asyncai to read it"
                    )
                await db.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)"
                )
                recorded: dict[int, str] = {
                    version: name
                    for version, name in await db.execute_fetchall(
                        "SELECT version, name FROM schema_migrations"
                    )
                }
                for migration in migrations[:current]:
                    if recorded.get(migration.version) != migration.name:
                        raise MigrationError(
                            f"the database's migration {migration.version} is "
                            f"{recorded.get(migration.version)!r}, this asyncai's is "
                            f"{migration.name!r}: it was made by another program or version"
                        )
                if current == latest:
                    await db.commit()
                    return applied
                migration = migrations[current]
                step = f"migration {migration.version} {migration.name!r}"
                await migration.apply(db)
                await db.execute(
                    "INSERT INTO schema_migrations (version, name, applied) VALUES (?, ?, ?)",
                    (migration.version, migration.name, now_iso()),
                )
                # PRAGMA takes no parameters; the value is an int we made.
                await db.execute(f"PRAGMA user_version = {int(migration.version)}")
                await db.commit()
                applied.append(migration.version)
            except BaseException:
                await db.rollback()
                raise
        except sqlite3.Error as exc:
            raise MigrationError(f"{step} failed: {exc}") from exc
