"""A moved thread's earlier conversation, read back from the channel's stream.

Each daemon keeps its transcripts in its own database, so the daemon that
takes a thread over has none of its earlier turns. The channel's stream has
them all: the thread's root and every message of the thread (its subject is
``atirc.<chan>.<thread id>``, :mod:`channels.nats.mapping`), prompts from
people and replies from the daemons' nick. :func:`stream_history` reads the
messages before the current run's first prompt as user and assistant turns,
joining split texts and leaving commands (``!stop``, ...) out.

The stream also says which prompts were answered, whatever the thread's entry
says: :func:`stream_replied` finds the newest prompt whose reply is whole in
the thread (its last chunk stored under the reply's ``client_id``), for the
daemon taking the thread over from one that died between its reply's ack and
its ``answered`` marker (:meth:`daemon.cluster.router.ThreadRouter`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from datetime import UTC, datetime

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from channels.nats import mapping
from daemon.cluster.errors import ClusterError
from daemon.runtime.ports import notice_client_id, reply_client_id
from daemon.runtime.runs import HistoryTurn

__all__ = ["bounded", "is_command", "stream_history", "stream_replied"]

READ_TIMEOUT = 5.0  # seconds for one message of the thread to arrive


def is_command(text: str) -> bool:
    """A command (``!stop``, ``!tools``, ``!approve``, ...), by the cluster's reading: for
    the daemon holding the thread, never a turn of its history nor a prompt to remember."""
    return text.lstrip().startswith("!")


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
        async with aclosing(_thread(js, channel, thread)) as messages:
            async for seq, msg in messages:
                if mapping.message_id(epoch, seq) >= before:
                    break
                texts.append(_entry(channel, epoch, seq, msg.headers, msg.data))
    except (TimeoutError, nats.errors.Error) as exc:
        raise ClusterError(f"cannot read thread {thread} from the stream: {exc}") from exc
    return _turns(texts, nick)


async def stream_replied(js: JetStreamContext, channel: str, thread: str, nick: str) -> str:
    """The newest prompt of the thread whose reply from ``nick`` is whole in the stream,
    "" when there is none (or the thread is not one of this stream's).

    A reply counts by what the hub keeps once: the message stored under the
    reply's ``client_id`` (:func:`daemon.runtime.ports.reply_client_id` of the
    prompt in its ``Atirc-Reply-To``), or, for a split text, its last chunk.
    That is the final reply of a run or the notice standing for it (the run
    interrupted, its prompts refused by a limit or dropped by ``!stop``), or
    the notice of a reply the hub refused (under its own ``client_id``); an
    approval request, stored under its own ``client_id``, does not count, nor
    the answer to a command (``!tools``, ``!reset``), which is no prompt and says
    nothing of the prompts before it. A reply answers its run's last prompt
    and, since a thread's prompts run in order, every prompt of the thread
    before it.
    """
    epoch = thread[: mapping.EPOCH_CHARS]
    if mapping.sequence_of(epoch, thread) is None:
        return ""
    stream = mapping.stream_name(channel)
    newest = ""
    try:
        try:
            await js.get_last_msg(stream, mapping.message_subject(channel, thread))
        except nats.js.errors.NotFoundError:
            return ""  # nothing in the thread but its root: no reply to wait 5 s for
        commands: set[str] = set()  # the ids of the thread's commands (before their answers)
        async with aclosing(_thread(js, channel, thread)) as messages:
            async for seq, msg in messages:
                headers = msg.headers or {}
                text = msg.data.decode("utf-8", "replace")
                if headers.get(mapping.FROM) != nick and is_command(text):
                    commands.add(mapping.message_id(epoch, seq))
                prompt = _replied(channel, headers, nick)
                if prompt not in commands:
                    newest = max(newest, prompt)
    except (TimeoutError, nats.errors.Error) as exc:
        raise ClusterError(f"cannot read thread {thread} from the stream: {exc}") from exc
    return newest


def _replied(channel: str, headers: dict[str, str], nick: str) -> str:
    """The prompt a stored message is the (last chunk of the) reply to, else ""."""
    prompt = headers.get(mapping.REPLY_TO) or ""
    if not prompt or headers.get(mapping.FROM) != nick or headers.get(mapping.MORE) == "1":
        return ""
    answers = {  # the reply's id, and the notice's that stands for a reply the hub refused
        mapping.msg_id(nick, reply_client_id(channel, prompt)),
        mapping.msg_id(nick, notice_client_id(channel, prompt)),
    }
    return prompt if mapping.chunk_base(headers.get(mapping.MSG_ID) or "") in answers else ""


async def _thread(
    js: JetStreamContext, channel: str, thread: str
) -> AsyncGenerator[tuple[int, Msg]]:
    """The messages stored under the thread's subject (its root aside), oldest first, with
    their stream sequences, up to the newest one there when the read began. The caller
    catches what reading raises (a message not arriving within READ_TIMEOUT: TimeoutError)."""
    sub = await js.subscribe(
        mapping.message_subject(channel, thread),
        stream=mapping.stream_name(channel),
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
    )
    try:
        while True:
            msg = await sub.next_msg(timeout=READ_TIMEOUT)
            yield msg.metadata.sequence.stream, msg
            if msg.metadata.num_pending == 0:
                break
    finally:
        await sub.unsubscribe()


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
        if sender != nick and is_command(whole):
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
