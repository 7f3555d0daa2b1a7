"""The runtime's boundaries as fakes: the channel's publish side and the run function.

Shared by tests/test_runtime.py (scheduling rules) and
tests/test_runtime_store.py (what lands in the real store). The store is
never faked: both use ``SessionsRuntimeStore`` over a real SQLite file.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from daemon.runtime.ports import InboundMessage
from daemon.runtime.runs import RunRequest, RunResult

__all__ = ["NICK", "FakePublisher", "Published", "ScriptedModel", "msg"]

NICK = "asyncai"


@dataclass
class Published:
    """One reply the fake channel acked."""

    channel: str
    text: str
    thread: str
    reply_to: str
    client_id: str


class FakePublisher:
    """The channel's publish side: acks everything unless told to fail."""

    def __init__(self) -> None:
        self.sent: list[Published] = []
        self.fail = False
        self.arrived = asyncio.Event()
        self._ids = itertools.count(1)

    @property
    def nick(self) -> str:
        """The daemon's nick."""
        return NICK

    async def publish(
        self, channel: str, text: str, *, thread: str, reply_to: str, client_id: str
    ) -> str:
        """Ack with a new id, or raise when told to fail."""
        if self.fail:
            raise ConnectionError("hub unreachable")
        self.sent.append(Published(channel, text, thread, reply_to, client_id))
        self.arrived.set()
        return f"r{next(self._ids)}"

    async def wait_for(self, count: int) -> None:
        """Until ``count`` replies were published (bounded)."""
        async with asyncio.timeout(5):
            while len(self.sent) < count:
                self.arrived.clear()
                await self.arrived.wait()


class ScriptedModel:
    """The run function: each run waits until the test releases it (no sleeps)."""

    def __init__(self, *, hold: bool = True) -> None:
        self.hold = hold
        self.requests: list[RunRequest] = []
        self.active = 0
        self.peak = 0
        self.started = asyncio.Event()
        self.cancelled: list[str] = []
        self._gates: dict[str, asyncio.Event] = {}
        self.fail_with: BaseException | None = None

    async def __call__(self, request: RunRequest) -> RunResult:
        """Record the request, wait for release, answer with the prompt texts."""
        self.requests.append(request)
        self.active += 1
        self.peak = max(self.peak, self.active)
        gate = self._gates.setdefault(request.run_id, asyncio.Event())
        self.started.set()
        try:
            if self.hold:
                await gate.wait()
            if self.fail_with is not None:
                raise self.fail_with
            return RunResult(reply="re: " + " | ".join(p.text for p in request.prompts))
        except asyncio.CancelledError:
            self.cancelled.append(request.run_id)
            raise
        finally:
            self.active -= 1

    async def wait_started(self, count: int) -> None:
        """Until ``count`` runs have started (bounded)."""
        async with asyncio.timeout(5):
            while len(self.requests) < count:
                self.started.clear()
                await self.started.wait()

    def release(self, index: int) -> None:
        """Let the ``index``-th run answer."""
        run_id = self.requests[index].run_id
        self._gates.setdefault(run_id, asyncio.Event()).set()

    def release_all(self) -> None:
        """Let every run answer, now and later."""
        self.hold = False
        for gate in self._gates.values():
            gate.set()


_ids = itertools.count(1)


def msg(
    text: str, *, thread: str | None = None, sender: str = "alice", channel: str = "#ops"
) -> InboundMessage:
    """A channel message with a fresh sortable id (a root when no thread is given)."""
    mid = f"m{next(_ids):06d}"
    return InboundMessage(channel=channel, id=mid, thread=thread or mid, sender=sender, text=text)
