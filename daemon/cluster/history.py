"""A moved thread's earlier conversation, read back from the channel's stream.

Each daemon keeps its transcripts in its own database, so the daemon that
takes a thread over has none of its earlier turns. The channel's stream has
them all: the thread's root and every message of the thread (its subject is
``atirc.<chan>.<thread id>``, :mod:`channels.nats.mapping`), prompts from
people and replies from the daemons' nick. :func:`stream_history` reads the
messages before the current run's first prompt as user and assistant turns,
joining split texts and leaving commands (``!stop``, ...) out.
"""

from __future__ import annotations

from datetime import UTC, datetime

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from channels.nats import mapping
from daemon.cluster.errors import ClusterError
from daemon.runtime.runs import HistoryTurn

__all__ = ["bounded", "stream_history"]

READ_TIMEOUT = 5.0  # seconds for one message of the thread to arrive


async def stream_history(
    js: JetStreamContext, channel: str, thread: str, before: str, nick: str
) -> list[HistoryTurn]:
    """The thread's turns before the message ``before``, oldest first; [] when the
    thread is not one of this stream's (a hub's id) or has nothing before it."""
    epoch = thread[: mapping.EPOCH_CHARS]
    root_seq = mapping.sequence_of(epoch, thread)
    if root_seq is None or thread >= before:
        return []
    stream = mapping.stream_name(channel)
    texts: list[tuple[str, str, bool]] = []  # (sender, text, more), in stream order
    try:
        root = await js.get_msg(stream, root_seq)
        texts.append(_entry(channel, epoch, root_seq, root.headers, root.data or b""))
        sub = await js.subscribe(
            mapping.message_subject(channel, thread),
            stream=stream,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        try:
            while True:
                msg = await sub.next_msg(timeout=READ_TIMEOUT)
                seq = msg.metadata.sequence.stream
                if mapping.message_id(epoch, seq) >= before:
                    break
                texts.append(_entry(channel, epoch, seq, msg.headers, msg.data))
                if msg.metadata.num_pending == 0:
                    break
        finally:
            await sub.unsubscribe()
    except (TimeoutError, nats.errors.Error) as exc:
        raise ClusterError(f"cannot read thread {thread} from the stream: {exc}") from exc
    return _turns(texts, nick)


def _entry(
    channel: str, epoch: str, seq: int, headers: dict[str, str] | None, data: bytes
) -> tuple[str, str, bool]:
    message = mapping.message_from(channel, epoch, seq, headers, data, datetime.now(UTC))
    return message.sender, message.text, message.more


def _turns(texts: list[tuple[str, str, bool]], nick: str) -> list[HistoryTurn]:
    """Split texts joined (a sender's chunks until the one without ``more``), commands
    left out, each text a user turn or (the nick's) an assistant turn."""
    turns: list[HistoryTurn] = []
    held: dict[str, str] = {}
    for sender, text, more in texts:
        whole = held.pop(sender, "") + text
        if more:
            held[sender] = whole
            continue
        if sender != nick and whole.lstrip().startswith("!"):
            continue
        turns.append(HistoryTurn(role="assistant" if sender == nick else "user", text=whole))
    return turns


def bounded(turns: list[HistoryTurn], max_turns: int, max_chars: int) -> list[HistoryTurn]:
    """The newest turns, at most ``max_turns`` of them and ``max_chars`` characters."""
    kept: list[HistoryTurn] = []
    size = 0
    for turn in reversed(turns[-max_turns:] if max_turns else []):
        size += len(turn.text)
        if size > max_chars:
            break
        kept.append(turn)
    return kept[::-1]
