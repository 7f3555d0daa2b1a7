"""A streamed chat completion put back together: pure, no I/O.

The endpoint streams each reply (``"stream": true``) for one reason: the
moment its first chunk arrives splits the model's time into prompt
evaluation and generation (issue 31; llama-cpp-python's server reports no
timings). The loop itself reads whole completions, so :class:`Assembly`
folds the chunks back into the body a non-streamed request would have had,
and that body goes through the same checks
(:func:`~daemon.model.response.completion_problem`) as any other.

What is folded, as OpenAI's streaming format has it: ``delta.content``
pieces concatenated; ``delta.tool_calls`` fragments by their ``index`` (the
first carries ``id`` and ``function.name``, the later ones append to
``function.arguments``); the last ``finish_reason``; ``usage`` from the
chunk that carries it (``stream_options.include_usage``). A server that
streams no usage (llama-cpp-python 0.3.36 does not) leaves
:attr:`Assembly.usage_reported` False, and :attr:`Assembly.pieces` counts
the chunks that carried text or call fragments: one per generated token on
llama.cpp's servers.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["Assembly", "Events"]


class Events:
    """The ``data`` of each server-sent event, from a stream's lines, as the SSE
    standard parses them (a ``data:`` field, one space after the colon dropped;
    several joined by newlines; a blank line ends the event; comments and other
    fields skipped). The endpoint reads the body's lines itself, to its end,
    rather than iterate the SDK's ``AsyncStream``: that stops at ``[DONE]`` and
    leaves its four nested async generators to the loop's finalizer hook, each a
    thread-safe wake-up and a task of its own on the loop (issue 31, measured
    in the benchmarks)."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def line(self, line: str) -> str | None:
        """Read one line; the event's data when the line ends an event that has any."""
        if not line:
            return self.end()
        field, _, value = line.partition(":")
        if field == "data":  # a line "data" alone is the field with an empty value
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def end(self) -> str | None:
        """The event in progress, dispatched as a blank line dispatches it (the endpoint
        does not call it when the body ends: an event the body ended inside is dropped,
        as the standard and the SDK's decoder drop it)."""
        if not self._data:
            return None
        data, self._data = "\n".join(self._data), []
        return data


class Assembly:
    """The chunks of one streamed completion, folded as they arrive."""

    def __init__(self) -> None:
        self.chunks = 0  # every chunk with a choice or usage
        self.pieces = 0  # chunks that carried text or a call fragment (about one per token)
        self.usage_reported = False
        self._id: Any = None
        self._model: Any = None
        self._created: Any = None
        self._content: list[str] = []
        self._saw_content = False
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: Any = None
        self._usage: Any = None
        self.problem: str | None = None  # what made a chunk unreadable (the first thing)

    def add(self, chunk: Any) -> None:
        """Fold one chunk (a decoded ``data:`` event). The first chunk of the wrong
        shape sets :attr:`problem` and ends the folding."""
        if self.problem is not None:
            return
        if not isinstance(chunk, dict):
            self.problem = "a streamed chunk is not a JSON object"
            return
        self._id = self._id or chunk.get("id")
        self._model = self._model or chunk.get("model")
        self._created = self._created or chunk.get("created")
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
            self.usage_reported = True
            self.chunks += 1
        choices = chunk.get("choices")
        if not choices:
            return
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            self.problem = "a streamed chunk's choices is not a list of objects"
            return
        self.chunks += 1
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
        delta = choice.get("delta")
        if delta is None:
            return
        if not isinstance(delta, dict):
            self.problem = "a streamed chunk's delta is not an object"
            return
        piece = False
        content = delta.get("content")
        if content is not None:
            if not isinstance(content, str):
                self.problem = "a streamed chunk's delta.content is not a string"
                return
            self._saw_content = True
            if content:
                self._content.append(content)
                piece = True
        calls = delta.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                self.problem = "a streamed chunk's delta.tool_calls is not a list"
                return
            for fragment in calls:
                if not self._call_fragment(fragment):
                    return
            piece = piece or bool(calls)
        self.pieces += piece

    def _call_fragment(self, fragment: Any) -> bool:
        if not isinstance(fragment, dict) or not isinstance(fragment.get("index", 0), int):
            self.problem = "a streamed tool call fragment has no integer index"
            return False
        call = self._calls.setdefault(
            fragment.get("index", 0),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if fragment.get("id"):
            call["id"] = fragment["id"]
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            self.problem = "a streamed tool call's function is not an object"
            return False
        for key in ("name", "arguments"):
            part = function.get(key)
            if part is None:
                continue
            if not isinstance(part, str):
                self.problem = f"a streamed tool call's function.{key} is not a string"
                return False
            call["function"][key] += part
        return True

    @property
    def finished(self) -> bool:
        """Whether a chunk said why the reply ended (``finish_reason``): a stream that
        ends without one was cut short (llama-cpp-python ends a stream that way when
        another request arrives, unless started with ``--interrupt_requests false``)."""
        return self._finish is not None

    @property
    def usage(self) -> dict[str, Any] | None:
        """The usage the server streamed (None when it sent none)."""
        return self._usage if isinstance(self._usage, dict) else None

    def body(self, usage: dict[str, int] | None = None) -> bytes:
        """The completion as a non-streamed server would have sent it (JSON bytes);
        ``usage`` stands in for a usage the server did not stream. Read :attr:`problem`
        first: after a chunk of the wrong shape the body holds only what came before."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._content) if self._saw_content or not self._calls else None,
        }
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        data: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created if isinstance(self._created, int) else 0,
            "model": self._model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
        }
        if self._usage is not None or usage is not None:
            data["usage"] = self._usage if self._usage is not None else usage
        return json.dumps(data).encode()  # ASCII: a lone surrogate stays for the checks to name
