"""The end of a run in its thread: the run recorded with its reply, then the reply published.

A transactional outbox (issue 26 §2.2, :mod:`sessions.outbox`): the reply is
committed first, in the same transaction as the run's records, metrics and
status, its prompts' status (``done``, or ``failed`` for a failed run) and
the thread's REPL dump; then it is published in the prompt's thread with
``reply_to`` = the run's last prompt and a ``client_id`` derived from it;
then, once the hub acked it, its outbox row is marked ``acked``. A crash
anywhere after the commit leaves the reply in the outbox: the next start
publishes it (:func:`publish_reply`, same ``client_id``, so a copy the hub
already stored is acked again, never stored twice) and does not run the
prompts again, nor ask the model again. A publish that times out or loses
the connection keeps the reply in the outbox for the next start likewise.

A reply the hub refuses for what it is (:class:`PublishRefused`: retrying
cannot help) ends the run and its prompts as failed, with a short notice
in the thread saying why. Notices (a stop, a refusal) are not kept in the
outbox: a failure to publish one is only logged.
"""

from __future__ import annotations

import asyncio

import structlog

from daemon.crashpoints import crash_point
from daemon.runtime.context import Run, RunContext
from daemon.runtime.ports import (
    PublishRefused,
    RuntimePublisher,
    RuntimeStore,
    notice_client_id,
    reply_client_id,
)
from daemon.runtime.runs import RunResult
from sessions.model import PromptStatus
from sessions.outbox import OutboxReply

__all__ = [
    "MAX_ERROR_REPLY",
    "deliver",
    "error_reply",
    "publish_quietly",
    "publish_reply",
    "publish_unacked",
]

log = structlog.get_logger("asyncai.runtime")

# A failed run's reply is a short line, not a traceback: details are in the log
# and on the run row.
MAX_ERROR_REPLY = 300


def error_reply(error: str | None) -> str:
    """The short reply of a failed run."""
    text = f"Sorry, this run failed: {error or 'unknown error'}"
    if len(text) > MAX_ERROR_REPLY:
        text = text[: MAX_ERROR_REPLY - 1] + "…"
    return text


async def deliver(context: RunContext, run: Run, result: RunResult) -> None:
    """Commit the run with its reply in the outbox, then publish the reply."""
    if result.status != "done":
        run.log.warning("runtime.run_failed", error=result.error, status=result.status)
        reply = result.reply.strip() or error_reply(result.error)
    else:
        reply = result.reply.strip() or "(the model returned an empty reply)"
    channel, ids = run.channel, run.prompt_ids
    last = run.prompts[-1].id
    outbox = OutboxReply(
        run.run_id, channel, run.thread_id, last, reply_client_id(channel, last), reply, tuple(ids)
    )
    status: PromptStatus = "done" if result.status == "done" else "failed"
    await context.store.finish_run(run.run_id, result, ids, status, reply=outbox)
    crash_point("reply_committed")
    await publish_reply(
        context.store, context.publisher, context.options.publish_timeout, outbox, run.log
    )


async def publish_unacked(store: RuntimeStore, publisher: RuntimePublisher, seconds: float) -> None:
    """After a restart: publish each reply committed and not acknowledged, oldest first
    (:func:`publish_reply`). Their prompts are done: the model is not asked again."""
    for reply in await store.unacked_replies():
        bound = log.bind(run_id=reply.run_id, channel=reply.channel, thread=reply.thread_id)
        bound.info("runtime.reply_from_outbox", prompts=list(reply.prompt_ids))
        await publish_reply(store, publisher, seconds, reply, bound)


async def publish_reply(
    store: RuntimeStore,
    publisher: RuntimePublisher,
    seconds: float,  # the bound on the publish (publish_timeout)
    reply: OutboxReply,
    bound: structlog.typing.FilteringBoundLogger,
) -> None:
    """Publish a committed reply, then mark it acknowledged (see the module docstring)."""
    try:
        async with asyncio.timeout(seconds):
            ack = await publisher.publish(
                reply.channel,
                reply.text,
                thread=reply.thread_id,
                reply_to=reply.reply_to,
                client_id=reply.client_id,
            )
        crash_point("reply_published")
    except PublishRefused as exc:
        bound.error("runtime.reply_refused", error=str(exc), action="prompts marked failed")
        await publish_quietly(
            publisher,
            seconds,
            reply.channel,
            reply.thread_id,
            reply.reply_to,
            error_reply(f"the reply could not be published ({exc})"),
            client_id=notice_client_id(reply.channel, reply.reply_to),
        )
        await store.reply_refused(reply.run_id, f"reply refused: {exc}")
        return
    except Exception as exc:
        # Not acked: the reply stays in the outbox, and the next start publishes it
        # (its client_id keeps a copy the hub stored late from doubling).
        bound.error(
            "runtime.publish_failed",
            error=f"{type(exc).__name__}: {exc}",
            action="kept in the outbox: the next start publishes it",
        )
        return
    await store.reply_acked(reply.run_id, ack)
    crash_point("run_finished")
    bound.info("runtime.run_finished", reply_id=ack)


async def publish_quietly(
    publisher: RuntimePublisher,
    seconds: float,  # the bound on the publish (publish_timeout)
    channel: str,
    thread_id: str,
    reply_to: str,
    text: str,
    *,
    client_id: str | None = None,
) -> None:
    """Publish a short notice in reply to message ``reply_to``; a failure is logged,
    never raised (it is only a notice).

    ``client_id`` defaults to the reply's to that message (:func:`reply_client_id`).
    """
    try:
        async with asyncio.timeout(seconds):
            await publisher.publish(
                channel,
                text,
                thread=thread_id,
                reply_to=reply_to,
                client_id=client_id or reply_client_id(channel, reply_to),
            )
    except Exception as exc:
        log.warning("runtime.notice_failed", error=f"{type(exc).__name__}: {exc}")
