"""The end of a run in its thread: the reply published, then the run recorded.

A reply is published in the prompt's thread with ``reply_to`` = the run's last
prompt and a ``client_id`` derived from it (a retry after a crash is acked
with the first copy, never stored twice); the prompts are marked done (or
failed) only after the hub acked it, in the same transaction as the run's
records and metrics. Notices (a stop, a refusal) are published the same way
but a failure to publish one is only logged.

A reply the hub refuses for what it is (:class:`PublishRefused`: retrying
cannot help) ends the prompts as failed, with a short notice in the thread
saying why, instead of keeping them pending for a next start that would fail
the same way. Any other publish failure keeps them pending.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import structlog

from daemon.crashpoints import crash_point
from daemon.runtime.ports import (
    InboundMessage,
    PublishRefused,
    RuntimeOptions,
    RuntimePublisher,
    RuntimeStore,
    reply_client_id,
)
from daemon.runtime.runs import RunResult

__all__ = [
    "MAX_ERROR_REPLY",
    "deliver",
    "error_reply",
    "notice_client_id",
    "publish_quietly",
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


def notice_client_id(channel: str, last_prompt_id: str) -> str:
    """The ``client_id`` of the notice that replaces a refused reply.

    Not the reply's own: the hub may have stored the first chunks of a split
    reply before it refused a later one, and would ack the notice with them.
    """
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"asyncai-refused:{channel}/{last_prompt_id}"))


async def deliver(
    store: RuntimeStore,
    publisher: RuntimePublisher,
    options: RuntimeOptions,
    channel: str,
    thread_id: str,
    prompts: list[InboundMessage],
    run_id: str,
    ids: list[str],
    result: RunResult,
    bound: structlog.typing.FilteringBoundLogger,
) -> None:
    """Publish the run's reply, then record the run and its prompts' status."""
    if result.status != "done":
        bound.warning("runtime.run_failed", error=result.error, status=result.status)
        reply = result.reply.strip() or error_reply(result.error)
    else:
        reply = result.reply.strip() or "(the model returned an empty reply)"
    try:
        async with asyncio.timeout(options.publish_timeout):
            ack = await publisher.publish(
                channel,
                reply,
                thread=thread_id,
                reply_to=prompts[-1].id,
                client_id=reply_client_id(channel, prompts[-1].id),
            )
        crash_point("reply_published")
    except PublishRefused as exc:
        bound.error("runtime.reply_refused", error=str(exc), action="prompts marked failed")
        await publish_quietly(
            publisher,
            options.publish_timeout,
            channel,
            thread_id,
            prompts[-1].id,
            error_reply(f"the reply could not be published ({exc})"),
            client_id=notice_client_id(channel, prompts[-1].id),
        )
        failed = replace(result, status="failed", error=f"reply refused: {exc}")
        await store.finish_run(run_id, failed, ids, "failed")
        return
    except Exception as exc:
        # Not acked: keep the prompts pending so the next start answers them
        # (or, when the run started a mutating call, posts the interrupted
        # notice); the reply's client_id keeps a late-stored copy from doubling.
        bound.error("runtime.publish_failed", error=f"{type(exc).__name__}: {exc}")
        await store.finish_run(run_id, result, ids, "queued")
        return
    await store.finish_run(run_id, result, ids, "done" if result.status == "done" else "failed")
    crash_point("run_finished")
    bound.info("runtime.run_finished", status=result.status, reply_id=ack)


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
