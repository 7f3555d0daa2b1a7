"""The hub's only writer: stores publishes in batches and prunes the store now and then.

Publishes queue up (bounded: when the store falls behind, readers wait, and
TCP pushes back on the clients); the writer task stores up to
:data:`WRITE_BATCH` of them per transaction, hands each newly stored message
to ``deliver`` (the fan-out) in id order, then resolves each publish's
future with its stored message (the first copy's, for a duplicate), or with
a ``bad_thread`` :class:`~channels.errors.ProtocolError` for a publish in a
thread of another channel (:class:`~channels.store.Refused`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from channels.errors import HubStoreError, ProtocolError
from channels.frames import ErrorCode, Message
from channels.hub.stats import HubStats
from channels.store import MessageStore, NewMessage, Refused

__all__ = ["WRITE_BATCH", "Write", "Writer"]

log = structlog.get_logger("channels.hub")

WRITE_BATCH = 256  # publishes per transaction: bounds a batch's latency and statement size
_STOP = object()  # tells the writer to finish


@dataclass(slots=True)
class Write:
    """A publish waiting for the writer."""

    new: NewMessage
    future: asyncio.Future[Message]


class Writer:
    """Owns the writer task: :meth:`start` it, :meth:`put` publishes, :meth:`stop` it.

    ``clock`` (monotonic seconds) paces the pruning: at most once per
    ``prune_interval``, of the channels written since the last pruning.
    """

    def __init__(
        self,
        store: MessageStore,
        stats: HubStats,
        *,
        deliver: Callable[[Message], None],
        queue_size: int,
        prune_interval: float,
        close_timeout: float,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._stats = stats
        self._deliver = deliver
        self._prune_interval = prune_interval
        self._close_timeout = close_timeout
        self._clock = clock
        self._writes: asyncio.Queue[Write | object] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task[None] | None = None
        self._touched: set[str] = set()
        self._last_prune = 0.0

    @property
    def running(self) -> bool:
        """True while the writer task runs (the watchdog's health check)."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the writer task (the store must be open)."""
        self._last_prune = self._clock()
        self._task = asyncio.create_task(self._write_loop(), name="atirc-hub-writer")

    async def put(self, write: Write) -> None:
        """Queue a publish; waits while the queue is full."""
        # Bounded: when the store falls behind, readers wait here, and TCP pushes back.
        await self._writes.put(write)

    async def stop(self) -> None:
        """Let the writer store what it was given, then end it (cancelled after the timeout)."""
        if self._task is None or self._task.done():
            return
        try:
            async with asyncio.timeout(self._close_timeout):
                await self._writes.put(_STOP)
                await asyncio.shield(self._task)
        except TimeoutError:
            log.error("hub.writer_stuck", timeout=self._close_timeout)
            self._task.cancel()
            await asyncio.wait([self._task])

    async def _write_loop(self) -> None:
        """The only writer: store batches, fan out in id order, prune now and then."""
        while True:
            try:
                # Wake up now and then when idle, for the age bound; never spin.
                async with asyncio.timeout(max(self._prune_interval, 1.0)):
                    item = await self._writes.get()
            except TimeoutError:
                await self._maybe_prune()  # also when idle, for the age bound
                continue
            batch: list[Write] = []
            stop = item is _STOP
            if isinstance(item, Write):
                batch.append(item)
            while not stop and len(batch) < WRITE_BATCH and not self._writes.empty():
                more = self._writes.get_nowait()
                if more is _STOP:
                    stop = True
                elif isinstance(more, Write):
                    batch.append(more)
            if batch:
                await self._write_batch(batch)
                await self._maybe_prune()
            if stop:
                return

    async def _write_batch(self, batch: list[Write]) -> None:
        try:
            results = await self._store.store([w.new for w in batch])
        except HubStoreError as exc:
            log.error("hub.store_failed", error=str(exc), batch=len(batch))
            for w in batch:
                if not w.future.done():
                    w.future.set_exception(exc)
            return
        for w, stored in zip(batch, results, strict=True):
            if isinstance(stored, Refused):
                # answered with an error frame; the connection stays up
                if not w.future.done():
                    w.future.set_exception(ProtocolError(ErrorCode.BAD_THREAD, stored.reason))
                continue
            if stored.duplicate:
                self._stats.duplicates += 1
            else:
                self._stats.published += 1
                self._touched.add(stored.message.channel)
                self._deliver(stored.message)
            if not w.future.done():
                w.future.set_result(stored.message)

    async def _maybe_prune(self) -> None:
        now = self._clock()
        if now - self._last_prune < self._prune_interval:
            return
        self._last_prune = now
        channels, self._touched = self._touched, set()
        try:
            dropped = await self._store.prune(channels)
        except HubStoreError as exc:
            log.error("hub.prune_failed", error=str(exc))
            return
        if dropped:
            log.debug("hub.pruned", dropped=dropped)
