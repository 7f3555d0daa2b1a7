"""The code-block protocol of the small-model profile (code mode with ``[model] harness`` on).

The model replies with a fenced ``python`` block instead of a tool call (a
1.5B model never calls run_code by itself; forced, it wrote JavaScript); the
loop mends and runs it as a ``run_code`` call and answers with a user
message: a failure (or a result that shows nothing) asks for a corrected
block, at most :data:`~daemon.model.harness.MAX_FAILED_SNIPPETS` times and
warmer; a good result asks for the answer to the repeated question. The
text it sends comes from the harness's pure modules (prompts, feedback, keys,
peek...); the transcript records are shaped as in the tool-call protocol
(``daemon.model.rounds``). :class:`~daemon.model.harness.profile.CodeBlockTurns`
gives it to the loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

from daemon.code_mode.catalog import NO_OUTPUT, RESERVED_NAMES, SEARCH_HELPERS
from daemon.errors import ToolTransportError
from daemon.model.calls import ToolCall, made_up_call, parse_calls
from daemon.model.conversation import LoopState, Paused
from daemon.model.endpoint import ChatEndpoint
from daemon.model.execute import run_call
from daemon.model.harness.feedback import (
    answer_instruction,
    failure_reply,
    fetched_url,
    quote_result,
    replays_code,
    result_message,
    short_reply,
    unfetched_message,
    unfetched_url,
)
from daemon.model.harness.keys import key_hint, missing_key
from daemon.model.harness.look import Look, read_look
from daemon.model.harness.loopfix import loop_fix
from daemon.model.harness.mending import mend_call, text_calls
from daemon.model.harness.parsing import code_message, extract_code
from daemon.model.harness.peek import assigned_names, peek_code, read_names
from daemon.model.harness.prompts import (
    CODE_STOP,
    MAX_FAILED_SNIPPETS,
    WORKED_EXAMPLE,
    Signature,
    echoes_example,
    retry_seed,
    warm_retry,
)
from daemon.model.harness.rules import on
from daemon.model.harness.topics import Topic, topic_hint
from daemon.model.harness.vote import (
    REREAD,
    VOTE_TEMPERATURE,
    majority,
    may_rerun,
    vote_key,
    vote_samples,
)
from daemon.model.prompts import EMPTY_REPLY
from daemon.model.records import RunState, assistant_record, count_result, user_record
from daemon.tools import ToolCallOutput, ToolExecutor

__all__ = ["MAX_RERUNS", "after_block", "code_blocks"]

_RUN_CODE = {"run_code": "run_code"}  # a vote sample's call, by the model's name for it
_PEEK_TIMEOUT = 30.0  # the harness's look at a snippet's variables (no tools are called)
MAX_RERUNS = 2  # reruns of a run's snippets the harness fixed itself (loop_fix)
# The assistant turn of a snippet the harness ran again itself: no model request, no tokens.
_HARNESS_TURN = SimpleNamespace(
    id=None, model=None, usage=None, choices=[SimpleNamespace(finish_reason="tool_calls")]
)


async def code_blocks(
    endpoint: ChatEndpoint,
    state: RunState,
    caller: ToolExecutor,
    names: dict[str, str],
    ls: LoopState,
    *,
    functions: dict[str, Signature],
    topics: Mapping[str, Topic] | None = None,
    example: str = WORKED_EXAMPLE,
) -> None:
    """The harness's code-block protocol for small models (code mode).

    The model replies with a fenced ``python`` block (no ``tools`` in the
    request: forced JSON tool calls drove a 1.5B model to one-line
    JavaScript); the harness mends and runs it as a ``run_code`` call and
    answers with a user message that carries the result. A failure asks
    for a corrected block (at :data:`~daemon.model.harness.RETRY_TEMPERATURE`,
    at most :data:`~daemon.model.harness.MAX_FAILED_SNIPPETS` times); a good
    result, or the last failure, asks for the answer to the repeated
    question. A reply without code is the answer. The records hold the
    calls as ``tool_use``/``tool_result`` blocks, as in the plain loop;
    the result messages are harness text and stay out of them. The loop's
    position lives in ``ls``, so a run paused at a block goes on from there
    (:func:`after_block`, then this again). ``example``: the worked example(s) the
    system message showed (an answer that retells them is no answer).
    """
    messages = ls.messages
    max_rounds = endpoint.params.max_rounds
    while ls.round_no < max_rounds:
        settled = _gave_up(state, ls) if ls.answering else None
        if settled is None and ls.answering and ls.short_reply is not None:
            # [model] reply_with_short_result: the value the code computed is the
            # answer as it stands; the model is not asked to phrase it
            settled = ls.short_reply
            state.metrics.reply_from_result = True
        if settled is not None:  # the answer round would only guess (or rephrase): not asked
            state.records.append(
                assistant_record(_HARNESS_TURN, settled, [], "stop", endpoint.model_name)
            )
            state.reply = settled
            return
        ls.round_no += 1
        round_no = ls.round_no
        final = ls.answering or round_no == max_rounds
        body: dict[str, Any] = {"model": endpoint.model_name, "messages": messages}
        if final and not ls.answering and round_no > 1:
            instruction = answer_instruction(ls.question, "the results above")
            body["messages"] = [*messages, {"role": "user", "content": instruction}]
            state.metrics.final_round_forced = True
        endpoint.sampling(body)
        # greedy unless configured: a server's own default (llama.cpp: 0.8) made the same
        # question come out right or wrong from run to run; retries and votes go warmer
        body.setdefault("temperature", 0.0)
        if not final:
            body["stop"] = [CODE_STOP]
            if ls.failures:  # at temperature 0 the failed snippet would come back as it was
                warm_retry(body, endpoint.params.temperature)

        response = await endpoint.complete(body, state.metrics, state.request.run_id, final=final)
        choice = response.choices[0]
        content = choice.message.content or ""
        call = None if final else _code_call(choice.message, content, state)
        if call is None:
            state.records.append(
                assistant_record(response, content, [], choice.finish_reason, endpoint.model_name)
            )
            state.reply = _reply(state, ls, content, example)
            return
        mend_call(call, state)
        output = await _run_block(endpoint, state, caller, names, ls, call, response=response)
        await after_block(
            endpoint,
            state,
            caller,
            ls,
            call,
            output,
            functions=functions,
            topics=topics,
        )


async def _run_block(
    endpoint: ChatEndpoint,
    state: RunState,
    caller: ToolExecutor,
    names: dict[str, str],
    ls: LoopState,
    call: ToolCall,
    *,
    response: Any,
) -> ToolCallOutput:
    """Record the model's block as a ``run_code`` call and run it; a call that
    needs an approval pauses the run (:class:`Paused`)."""
    assistant = assistant_record(
        response, "", [call.tool_use()], response.choices[0].finish_reason, endpoint.model_name
    )
    state.records.append(assistant)
    ls.calls, ls.next_call, ls.assistant_uuid = [call], 0, assistant.uuid
    output = await run_call(
        caller, names, call, assistant.uuid, state, endpoint.params.tool_call_timeout
    )
    if output.pause is not None:  # in a vote sample: an [approvals] rule on a read-only tool
        raise Paused(output.pause)
    return output


async def after_block(
    endpoint: ChatEndpoint,
    state: RunState,
    caller: ToolExecutor,
    ls: LoopState,
    call: ToolCall,
    output: ToolCallOutput,
    *,
    functions: dict[str, Signature],
    topics: Mapping[str, Topic] | None = None,
) -> None:
    """Record a block's result and choose the next message: a retry, a look at the
    data, or the request for the answer. ``topics`` (the catalog's, by function)
    let a retry name the function the question is about."""
    messages = ls.messages
    max_rounds = endpoint.params.max_rounds
    code = call.arguments.get("code") if call.error is None else None
    ran = {"role": "assistant", "content": code_message(code or call.raw)}
    text = _shown(output)
    _record_result(state, call, output, text)
    ls.next_call = 1
    more = ls.round_no + 1 < max_rounds  # the last round must be the answer
    failed = output.is_error or text == NO_OUTPUT
    if failed:
        ls.failures += 1
    else:
        ls.last_result = text
    retry = failed and ls.failures < MAX_FAILED_SNIPPETS and more
    if failed and not retry:
        state.metrics.harness_gave_up = True
    look = fetch = start = None  # start: the call a new block should start with
    if retry and isinstance(code, str):
        if failed:  # trial unfetched-url: a URL the question names, never fetched
            fetch = unfetched_url(ls.question, code, functions)
        asked_url = fetched_url(ls.question, code, functions)  # the URL's data it is about
        topic = None if fetch or asked_url or not topics else topic_hint(ls.question, code, topics)
        if topic is not None:  # the question is about another function's data: what the
            fetch, start = topic  # called one returned (keys and all) only misleads: no look
        else:
            missing = missing_key(text) if failed else None
            look = await _peek(caller, code, state, functions, missing)
    fixes = state.metrics.key_fixes  # this run's (a paused run keeps its metrics)
    if failed and retry and look and isinstance(code, str) and fixes < MAX_RERUNS:
        fixed = loop_fix(code, text, look)
        if fixed is not None and may_rerun(code, ls.mutating):
            # the look found the one list of a dict the snippet looped over (rule
            # dict-loop): loop over it and run again, without a model round (not a
            # failure of the model's)
            ls.failures -= 1
            state.metrics.key_fixes += 1
            again = made_up_call("run_code", {"code": fixed}, state)
            output = await _run_block(
                endpoint, state, caller, _RUN_CODE, ls, again, response=_HARNESS_TURN
            )
            await after_block(
                endpoint,
                state,
                caller,
                ls,
                again,
                output,
                functions=functions,
                topics=topics,
            )
            return
    ls.looked = ls.looked or look is not None  # shown with the retry
    # where a missing key really is
    located = key_hint(text, look) if failed else None
    voting = vote_samples(ls.samples) > 1
    if not (failed or ls.voted) and isinstance(code, str) and voting:
        ls.voted = True
        code, text = await _vote(endpoint, state, caller, ls, code, text)
        ls.last_result = text
        ran = {"role": "assistant", "content": code_message(code)}
    if retry:
        located = "\n".join(h for h in (located, fetch) if h) or None
    reply = result_message(
        f"{text}\n{located}" if located else text,
        ls.question,
        failed=failed,
        retry=retry,
        look=look,
        start=start,
    )
    ls.answering = not retry
    refetch = None
    if ls.answering and more and not (failed or ls.refetched) and isinstance(code, str):
        refetch = unfetched_url(ls.question, code, functions)
    if refetch is not None:
        # trial unfetched-url: a good result of a snippet that never fetched a URL the
        # question names is not that URL's data; once, a new block is asked for
        ls.refetched = True
        ls.answering = False
        reply = unfetched_message(text, refetch, ls.question)
    answered = ls.answering and not failed and endpoint.params.reply_with_short_result
    ls.short_reply = short_reply(text) if answered else None
    # A retry follows the question alone, with the feedback: shown its failed
    # code, a small model sends it again verbatim. The answer sees the code.
    del messages[ls.base :]
    if replays_code(retry or refetch is not None):
        messages.append(ran)  # the answer (or the refetch request) sees the code
    messages.append({"role": "user", "content": reply})


async def _vote(
    endpoint: ChatEndpoint,
    state: RunState,
    caller: ToolExecutor,
    ls: LoopState,
    code: str,
    text: str,
) -> tuple[str, str]:
    """Self-consistency (:mod:`daemon.model.harness.vote`): for a short answer, draw
    another snippet warmer from the same question and run it; when the two
    results differ, a third decides. Returns the winning ``(code, result)``.

    A snippet that names a mutating function never runs again, and a sample
    that does is not run: a vote must not repeat a side effect.
    """
    first = vote_key(text)
    if first is None or not may_rerun(code, ls.mutating):
        return code, text
    samples: list[tuple[str, str, str | None]] = [(code, text, first)]
    wanted = vote_samples(ls.samples)
    drawn = 1
    # one failed draw is drawn again (a tie-break that times out decides nothing)
    while len(samples) < wanted and drawn <= wanted:
        if len(samples) == 2 and samples[0][2] == samples[1][2]:
            break
        drawn += 1
        sample = await _sample(endpoint, state, caller, ls, drawn)
        if sample is not None:
            samples.append(sample)
    state.metrics.vote_samples += drawn - 1
    best = majority([key for _, _, key in samples])
    return samples[best][0], samples[best][1]


async def _sample(
    endpoint: ChatEndpoint,
    state: RunState,
    caller: ToolExecutor,
    ls: LoopState,
    draw: int,
) -> tuple[str, str, str | None] | None:
    """One more snippet for the question (the ``draw``-th, the first snippet being 1),
    run in the thread's scope and recorded like any block; None when the model wrote
    none or one that may not run.

    Seeded by its prompt and ``draw``, as a retry is (:func:`retry_seed`): every
    sample of a vote sends the same messages, and llama.cpp's server draws from one
    random stream, so unseeded the same question's vote came out differently from
    run to run, and a held-out run of it could not be repeated.
    """
    messages = ls.messages[: ls.base]
    question = messages[-1]
    if question.get("role") == "user" and isinstance(question.get("content"), str):
        messages[-1] = {**question, "content": f"{question['content']}\n\n{REREAD}"}
    body: dict[str, Any] = {"model": endpoint.model_name, "messages": messages}
    endpoint.sampling(body)
    body["stop"] = [CODE_STOP]
    body["temperature"] = max(endpoint.params.temperature or 0.0, VOTE_TEMPERATURE)
    body["seed"] = (retry_seed(messages) + draw) % 2**32  # llama.cpp takes 32 bits
    response = await endpoint.complete(body, state.metrics, state.request.run_id, final=False)
    choice = response.choices[0]
    code = extract_code(choice.message.content or "")
    if code is None:
        return None
    call = made_up_call("run_code", {"code": code}, state)
    mend_call(call, state)
    code = call.arguments.get("code") if call.error is None else None
    if not isinstance(code, str) or not may_rerun(code, ls.mutating):
        return None
    state.metrics.code_blocks += 1
    output = await _run_block(endpoint, state, caller, _RUN_CODE, ls, call, response=response)
    ls.next_call = 1
    text = _shown(output)
    _record_result(state, call, output, text)
    if output.is_error or text == NO_OUTPUT:
        return None
    return code, text, vote_key(text)


def _shown(output: ToolCallOutput) -> str:
    """A block's result as the model is shown it: as run_code returned it."""
    return output.content if output.content != "" else "(empty result)"


def _record_result(state: RunState, call: ToolCall, output: ToolCallOutput, text: str) -> None:
    """Count a block's result and record it as the ``tool_result`` of ``call``."""
    count_result(state.metrics, output, text, True)
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id, "content": text}
    result["is_error"] = output.is_error
    state.records.append(user_record([result], tool_use_result=output.audit))


async def _peek(
    caller: ToolExecutor,
    code: str,
    state: RunState,
    skip: Iterable[str],
    missing: str | None = None,
    *,
    rule: str = "look",
) -> Look | None:
    """What the variables a failed (or empty-handed) snippet assigned, or read from an
    earlier snippet, hold now (their access paths and values), from the same REPL scope;
    None when there is nothing to show. ``skip`` are the catalog's functions (not data);
    ``missing`` (a KeyError's key) adds how many items of each list hold it. Rule
    ``look`` (or the ``rule`` that asks for the look): off, there is never a look."""
    names = assigned_names(code) + read_names(code, {*skip, *RESERVED_NAMES, *SEARCH_HELPERS})
    if not names or not on(rule):
        return None
    try:
        async with asyncio.timeout(_PEEK_TIMEOUT):
            output = await caller.call_tool("run_code", {"code": peek_code(names, missing)})
    except (TimeoutError, ToolTransportError):
        return None
    try:  # the snippet's value: the look's records, as compact JSON (the return contract)
        look = None if output.is_error else read_look(json.loads(output.content))
    except ValueError:
        look = None
    if look is None:
        return None
    state.metrics.peeks += 1
    return look


def _reply(state: RunState, ls: LoopState, content: str, example: str) -> str:
    """The run's reply, from the model's answer ``content`` and what the run's snippets
    returned (``example``: the worked example(s) the system message showed)."""
    said = content.strip() or EMPTY_REPLY
    if ls.last_result is None:  # no snippet ran to a result (or none ran)
        honest = _gave_up(state, ls)
        if honest is not None:  # rule failed-honest: words with no data behind them
            return honest
        error = _last_result(state)
        if error is not None and echoes_example(content, example):
            # the worked example retold after failed snippets: why the code failed
            return failure_reply(error)
        return said
    if echoes_example(content, example):
        # the model retold the worked example: the result is the answer
        state.metrics.reply_from_result = True
        return f"The result of run_code: {ls.last_result}"
    # the value the code computed is the answer: what the words drop is quoted
    return quote_result(said, ls.last_result)


def _gave_up(state: RunState, ls: LoopState) -> str | None:
    """Rule ``failed-honest``: the reply of a run whose snippets all failed, or None when
    the rule is off, a snippet ran to a result, or none ran (a question answered
    without code keeps the model's words).

    Serves every question whose code never ran to a result: the answer request
    shows the last traceback, and a small model answered it with values it never
    computed. Nested calls may have returned data inside the sandbox, but no
    result reached the model.
    """
    if ls.last_result is not None or not on("failed-honest"):
        return None
    error = _last_result(state)
    return failure_reply(error) if error is not None else None


def _last_tool_result(state: RunState) -> dict[str, Any] | None:
    """The run's last ``tool_result`` block (from the records, so a run resumed after a
    pause sees it too), or None when the run has none."""
    for record in reversed(state.records):
        content = record.message.get("content") if isinstance(record.message, dict) else None
        for block in reversed(content if isinstance(content, list) else []):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                return block
    return None


def _last_result(state: RunState) -> str | None:
    """The text of the run's last tool result (a snippet's error, or its empty output),
    or None when the run has none."""
    block = _last_tool_result(state)
    text = block.get("content") if block is not None else None
    return None if block is None else text if isinstance(text, str) else ""


def _code_call(message: Any, content: str, state: RunState) -> ToolCall | None:
    """The run_code call in a reply: a real tool call, one written as text, or the
    first fenced Python block; None when the reply holds no code (an answer)."""
    calls = parse_calls(message.tool_calls or [], state)
    calls = [c for c in calls if c.name == "run_code"] or text_calls(
        content, {"run_code": "run_code"}, state
    )
    if calls:
        return calls[0]
    code = extract_code(content)
    if code is None:
        return None
    state.metrics.code_blocks += 1
    return made_up_call("run_code", {"code": code}, state)
