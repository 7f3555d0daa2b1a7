"""The notice a thread gets when its run was cut off after it started a mutating call.

Recovery's rule (issue 13, "No silent re-runs"): a prompt whose run was
interrupted (a crash, or a shutdown whose grace ran out) is run again only
when that run made no call that can change something. Otherwise the daemon
posts this notice in the thread instead: the calls the run started, in order,
how each ended, and a request to ask again. :func:`interrupted_notice` is
the text; :func:`report_interrupted` posts it and fails the prompts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from daemon.runtime.ports import PublishRefused, RuntimePublisher, RuntimeStore, reply_client_id
from sessions.model import InterruptedRun, StartedCall

__all__ = [
    "INTERRUPTED_HEAD",
    "INTERRUPTED_TAIL",
    "call_line",
    "interrupted_notice",
    "report_all_interrupted",
    "report_interrupted",
]

log = structlog.get_logger("asyncai.runtime")

INTERRUPTED_HEAD = (
    "The run answering this was interrupted before it finished (the daemon stopped), "
    "after it had started calls that can change something, so it was not run again. "
    "The calls it started, in order:"
)
INTERRUPTED_TAIL = "Please check what they did, then ask again if you still need it."

_MAX_CALLS = 30  # listed one per line; the rest are counted
_VALUE_CHARS = 40
_CALL_CHARS = 200

_OUTCOMES = {
    "ok": "ok",
    "error": "failed",
    "cancelled": "cancelled before it finished (it may have taken effect)",
    "started": "did not finish (outcome unknown)",
    "unknown": "did not finish (outcome unknown)",
}


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_line(call: StartedCall) -> str:
    """``- scale(name='web', replicas=3) [mutating]: ok`` (values shortened, one line)."""
    args = ", ".join(f"{k}={_short(repr(v), _VALUE_CHARS)}" for k, v in call.arguments.items())
    head = _short(f"{call.tool}({args})", _CALL_CHARS).replace("\n", " ")
    outcome = _OUTCOMES.get(call.outcome, call.outcome)
    if call.outcome == "cancelled" and not call.mutating:
        outcome = "cancelled"
    return f"- {head}{' [mutating]' if call.mutating else ''}: {outcome}"


def interrupted_notice(calls: Sequence[StartedCall]) -> str:
    """The thread's notice for a run cut off after it started ``calls`` (some mutating)."""
    lines = [INTERRUPTED_HEAD, *(call_line(c) for c in calls[:_MAX_CALLS])]
    rest = calls[_MAX_CALLS:]
    if rest:
        mutating = sum(1 for c in rest if c.mutating)
        lines.append(f"- … and {len(rest)} more ({mutating} of them mutating)")
    lines.append(INTERRUPTED_TAIL)
    return "\n".join(lines)


async def report_interrupted(
    run: InterruptedRun,
    store: RuntimeStore,
    publisher: RuntimePublisher,
    publish_timeout: float,
) -> None:
    """Post the notice in the run's thread, then mark its prompts failed.

    The notice goes out with the reply's ``client_id``: if the reply itself
    was acked before the crash, the hub answers with it and the thread sees
    no second message. If the notice cannot be published the prompts stay
    pending (the caller does not run them), so the next start posts it again;
    a notice the hub refuses for what it is (:class:`PublishRefused`) is not
    tried again: the prompts are marked failed all the same.
    """
    last = run.prompt_ids[-1]
    bound = log.bind(run_id=run.run_id, channel=run.channel, thread=run.thread_id)
    try:
        async with asyncio.timeout(publish_timeout):
            await publisher.publish(
                run.channel,
                interrupted_notice(run.calls),
                thread=run.thread_id,
                reply_to=last,
                client_id=reply_client_id(run.channel, last),
            )
    except PublishRefused as exc:
        # Refused for what it is: the next start would fail the same way.
        bound.error("runtime.interrupted_notice_refused", error=str(exc))
    except Exception as exc:
        bound.error(
            "runtime.interrupted_notice_failed",
            error=f"{type(exc).__name__}: {exc}",
            action="prompts kept pending, not run; the next start posts the notice",
        )
        return
    await store.set_prompt_status(list(run.prompt_ids), "failed")
    bound.warning(
        "runtime.not_rerun",
        prompts=list(run.prompt_ids),
        calls=len(run.calls),
        mutating=sum(1 for c in run.calls if c.mutating),
    )


async def report_all_interrupted(
    store: RuntimeStore, publisher: RuntimePublisher, publish_timeout: float
) -> set[str]:
    """:func:`report_interrupted` for every run of :meth:`RuntimeStore.interrupted_runs`;
    the ids of their prompts, which must not be run again."""
    held: set[str] = set()
    for run in await store.interrupted_runs():
        held.update(run.prompt_ids)
        await report_interrupted(run, store, publisher, publish_timeout)
    return held
