"""The tool-call protocol: rounds of requests whose tool calls run, as the OpenAI API has them.

Each tool call the model makes goes to the executor, its result goes back as
a tool message, for at most ``max_rounds`` requests. The last request
withdraws the tools and asks for an answer from the results so far, so a run
always ends with a reply. A profile (:mod:`daemon.model.profile`) gives it
the text of that last request, and how to read calls the model wrote as text.

An assistant message carrying tool calls is sent with ``"content": ""``,
never null (some servers reject null).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.model.calls import ToolCall, parse_calls
from daemon.model.conversation import LoopState, Paused
from daemon.model.endpoint import ChatEndpoint
from daemon.model.execute import run_call
from daemon.model.profile import RunTools
from daemon.model.prompts import CODE_MODE_SYSTEM_PROMPT, DIRECT_SYSTEM_PROMPT, EMPTY_REPLY
from daemon.model.records import RunState, assistant_record, count_result, user_record
from daemon.tools import ToolCallOutput

__all__ = ["TextCalls", "ToolCallTurns"]

#: Tool calls a model wrote in its text instead of sending them: ``(content, the
#: model's names for the tools, the run)`` → the calls (made-up ids), or none.
TextCalls = Callable[[str, dict[str, str], RunState], list[ToolCall]]


def _no_text_calls(content: str, names: dict[str, str], run: RunState) -> list[ToolCall]:
    """A capable model sends its calls as calls: text is its answer."""
    return []


class ToolCallTurns:
    """The rounds of the tool-call protocol (:class:`~daemon.model.profile.Turns`)."""

    mode = "plain"
    offers_tools = True

    def __init__(
        self,
        endpoint: ChatEndpoint,
        tools: RunTools,
        *,
        final_instruction: Callable[[str], str],
        text_calls: TextCalls = _no_text_calls,
    ) -> None:
        self.endpoint = endpoint
        self.tools = tools
        self.final_instruction = final_instruction  # the question → the last request's text
        self.text_calls = text_calls

    def system_prompt(self) -> str:
        """``[model] system_prompt``, else the one for code mode or for direct tools."""
        code_mode = self.tools.code_mode
        return self.endpoint.params.system_prompt or (
            CODE_MODE_SYSTEM_PROMPT if code_mode else DIRECT_SYSTEM_PROMPT
        )

    def loop_state(self, messages: list[dict[str, Any]], question: str) -> LoopState:
        """A new run's position: no code-block counters."""
        return LoopState(
            mode=self.mode,
            messages=messages,
            question=question,
            code_mode=self.tools.code_mode,
            base=len(messages),
        )

    async def rounds(self, run: RunState, ls: LoopState) -> None:
        """Make what is left of a resumed message's calls, then ask until the model answers."""
        await self._calls(run, ls)
        endpoint, ctx = self.endpoint, self.tools
        max_rounds = endpoint.params.max_rounds
        messages = ls.messages
        while ls.round_no < max_rounds:
            ls.round_no += 1
            round_no = ls.round_no
            final = round_no == max_rounds
            body: dict[str, Any] = {"model": endpoint.model_name, "messages": messages}
            if final and round_no > 1:
                instruction = self.final_instruction(ls.question)
                body["messages"] = [*messages, {"role": "user", "content": instruction}]
                run.metrics.final_round_forced = True
            if ctx.tools and not final:
                body["tools"] = ctx.tools
            endpoint.sampling(body)

            response = await endpoint.complete(body, run.metrics, run.request.run_id, final=final)
            choice = response.choices[0]
            content = choice.message.content or ""
            calls = [] if final else parse_calls(choice.message.tool_calls or [], run)
            if not calls and not final and ctx.tools:
                calls = self.text_calls(content, ctx.names, run)
                if calls:
                    content = ""
            assistant = assistant_record(
                response,
                content,
                [c.tool_use() for c in calls],
                choice.finish_reason,
                endpoint.model_name,
            )
            run.records.append(assistant)
            if not calls:
                run.reply = content.strip() or EMPTY_REPLY
                return
            messages.append(
                {
                    "role": "assistant",
                    "content": content,  # "" not null: some servers reject null
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.wire_arguments},
                        }
                        for c in calls
                    ],
                }
            )
            ls.calls, ls.next_call, ls.assistant_uuid = calls, 0, assistant.uuid
            await self._calls(run, ls)

    async def after_call(
        self, run: RunState, ls: LoopState, call: ToolCall, output: ToolCallOutput
    ) -> None:
        """A decided call's result goes back as its tool message; the next call is due."""
        self._record_result(run, ls, call, output)
        ls.next_call += 1

    async def _calls(self, run: RunState, ls: LoopState) -> None:
        """Make the current message's calls from ``ls.next_call`` on, in order."""
        ctx = self.tools
        while ls.next_call < len(ls.calls):
            call = ls.calls[ls.next_call]
            output = await run_call(
                ctx.caller,
                ctx.names,
                call,
                ls.assistant_uuid,
                run,
                self.endpoint.params.tool_call_timeout,
                gate=ctx.gate,
                definitions=ctx.definitions,
            )
            if output.pause is not None:
                raise Paused(output.pause)
            self._record_result(run, ls, call, output)
            ls.next_call += 1

    def _record_result(
        self, run: RunState, ls: LoopState, call: ToolCall, output: ToolCallOutput
    ) -> None:
        text = output.content if output.content != "" else "(empty result)"
        ls.messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        count_result(run.metrics, output, text, self.tools.code_mode)
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id}
        result["content"] = text
        result["is_error"] = output.is_error
        run.records.append(user_record([result], tool_use_result=output.audit))
