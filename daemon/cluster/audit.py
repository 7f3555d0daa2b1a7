"""Every finished run's rows on the ``asyncai.audit`` subject, and a collector of them.

Each daemon keeps its own SQLite; :class:`AuditExporter` publishes each
finished run's document (:meth:`sessions.replica.Replica.run_rows`) to the
subject ``asyncai.audit`` of the stream ``asyncai_audit``. What it has
published is a marker file beside the database (``audit.published``: the
``finished`` time and id of the newest run sent), moved only after the
broker acked, so a daemon that was down or cut off from the broker sends the
rest later; ``Nats-Msg-Id`` = ``audit:RUN:FINISHED`` drops a repeat within
the stream's duplicate window, and applying a document twice stores it once.

:func:`collect` follows the stream with a durable consumer into one SQLite
file of the same schema (``asyncai audit-collect --db PATH``), acking each
document after its transaction: the audit queries (``asyncai audit``,
``threads``, ``transcript``) then work across daemons.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from daemon.cluster.errors import ClusterError, honour_cancel
from sessions.errors import StoreError
from sessions.replica import MalformedRunDocument, Replica

__all__ = [
    "AUDIT_STREAM",
    "AUDIT_SUBJECT",
    "AuditExporter",
    "CollectStats",
    "collect",
    "ensure_audit_stream",
]

log = structlog.get_logger("asyncai.cluster")

AUDIT_STREAM = "asyncai_audit"
AUDIT_SUBJECT = "asyncai.audit"
MARKER_FILE = "audit.published"
BATCH = 100  # documents per fetch (collector) and per look at the database (exporter)
BATCH_DELAY = 1.0  # seconds the exporter lets runs finish after a kick, to send them together


async def ensure_audit_stream(js: JetStreamContext) -> None:
    """Create the stream if it is missing (an existing one is used as it is)."""
    try:
        await js.stream_info(AUDIT_STREAM)
        return
    except nats.js.errors.NotFoundError:
        pass
    except nats.errors.Error as exc:
        raise ClusterError(f"cannot look up the audit stream: {exc}") from exc
    try:
        await js.add_stream(StreamConfig(name=AUDIT_STREAM, subjects=[AUDIT_SUBJECT]))
    except nats.js.errors.BadRequestError:
        pass  # another daemon created it meanwhile
    except nats.errors.Error as exc:
        raise ClusterError(f"cannot create the audit stream: {exc}") from exc


class AuditExporter:
    """Publishes the finished runs of ``store`` that were not published yet.

    :meth:`run` loops until cancelled: after :meth:`kick` (a run finished),
    or every ``interval`` seconds, it sends what is new. A failed publish is
    logged and tried again at the next round; nothing is skipped.
    """

    def __init__(
        self,
        js: JetStreamContext,
        store: Replica,
        state_dir: Path,
        *,
        interval: float,
        gather: float = BATCH_DELAY,
    ):
        self._js = js
        self._store = store
        self._marker = state_dir / MARKER_FILE
        self._interval = interval
        self._gather = gather
        self._wake = asyncio.Event()
        self.published = 0

    def kick(self) -> None:
        """A run finished: look for it now rather than at the next interval."""
        self._wake.set()

    def _read_marker(self) -> tuple[str, str]:
        try:
            data = json.loads(self._marker.read_text())
            return str(data["finished"]), str(data["id"])
        except FileNotFoundError:
            return "", ""
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("cluster.audit_marker_unreadable", path=str(self._marker), error=str(exc))
            return "", ""  # everything again: the collector stores each run once

    def _write_marker(self, finished: str, run_id: str) -> None:
        tmp = self._marker.with_suffix(".tmp")
        tmp.write_text(json.dumps({"finished": finished, "id": run_id}))
        os.replace(tmp, self._marker)

    async def send_new(self) -> int:
        """Publish every run finished since the marker; how many were sent."""
        sent = 0
        finished, run_id = self._read_marker()
        while True:
            runs = await self._store.finished_runs_after(finished, run_id, BATCH)
            for finished, run_id in runs:
                document = await self._store.run_rows(run_id)
                try:
                    await self._js.publish(
                        AUDIT_SUBJECT,
                        json.dumps(document).encode(),
                        stream=AUDIT_STREAM,
                        headers={"Nats-Msg-Id": f"audit:{run_id}:{finished}"},
                    )
                except nats.errors.Error as exc:
                    raise ClusterError(f"cannot publish the audit of run {run_id}: {exc}") from exc
                self._write_marker(finished, run_id)
                sent += 1
            if len(runs) < BATCH:
                self.published += sent
                return sent

    async def run(self) -> None:
        """Send new runs after each :meth:`kick` or ``interval``, until cancelled."""
        while True:
            honour_cancel()  # one the NATS client swallowed in the last send
            # asyncio.timeout, not wait_for: on 3.11, wait_for whose inner wait ends as
            # the task is cancelled returns instead of raising, and the cancel is lost
            # (a kick at the end of a daemon's last run left the shutdown waiting on
            # this loop for ever; tests/test_cluster_approvals_process.py, under load)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            await asyncio.sleep(self._gather)  # a burst of runs is one round, not one each
            self._wake.clear()
            try:
                await self.send_new()
            except (ClusterError, StoreError, OSError) as exc:
                log.warning("cluster.audit_not_published", error=str(exc), action="retried later")


@dataclass
class CollectStats:
    """What :func:`collect` did."""

    applied: int = 0
    refused: int = 0


async def collect(
    js: JetStreamContext,
    store: Replica,
    *,
    durable: str = "audit-collect",
    until_caught_up: bool = False,
    fetch_timeout: float = 1.0,
) -> CollectStats:
    """Apply the stream's run documents to ``store``, acking each after its commit.

    Runs until cancelled, or (``until_caught_up``) until a fetch finds
    nothing. A document that is not one is logged, acked and counted as
    refused; a store failure leaves it unacked (the broker redelivers it).
    """
    await ensure_audit_stream(js)
    stats = CollectStats()
    try:
        sub = await js.pull_subscribe(
            AUDIT_SUBJECT,
            durable=durable,
            stream=AUDIT_STREAM,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT),
        )
    except nats.errors.Error as exc:
        raise ClusterError(f"cannot follow the audit stream: {exc}") from exc
    try:
        while True:
            try:
                messages = await sub.fetch(BATCH, timeout=fetch_timeout)
            except TimeoutError:
                # Not only nats.errors.TimeoutError (a subclass): nats-py's fetch
                # raises the builtin one when its deadline passes between its two
                # pull requests, which under load is a normal empty fetch.
                if until_caught_up:
                    return stats
                continue
            for message in messages:
                try:
                    document = json.loads(message.data)
                    await store.apply_run_rows(document)
                except (ValueError, MalformedRunDocument) as exc:
                    log.warning("cluster.audit_refused", error=str(exc))
                    stats.refused += 1
                else:
                    stats.applied += 1
                await message.ack()
    finally:
        await sub.unsubscribe()
