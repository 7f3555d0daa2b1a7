"""A thread's earlier user and assistant text, within bounds: pure functions.

The model sees earlier *text* only (spec A10): the text blocks of user and
assistant records, never ``tool_use`` or ``tool_result`` blocks. Consecutive
texts of one role (an assistant's remark before a tool call and its final
answer; a prompt whose run produced no reply followed by the next prompt)
merge into one turn, so the history alternates as chat APIs expect.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .model import HistoryText

__all__ = ["ELLIPSIS", "HistoryBuilder", "build_history", "message_text"]

ELLIPSIS = "…"


def message_text(message: dict[str, Any]) -> str:
    """The text of a Claude Code ``message``: its ``text`` blocks joined, nothing else."""
    content = message.get("content")
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    parts = [
        block["text"].strip()
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and block["text"].strip()
    ]
    return "\n".join(parts)


class HistoryBuilder:
    """Collects turns newest first, then yields the bounded history oldest first.

    Feed records newest first with ``add``; ``full`` says when older records
    can no longer change the result, so the caller can stop reading.
    """

    def __init__(self, turns: int, chars: int) -> None:
        if turns < 0 or chars < 0:
            raise ValueError("history bounds must not be negative")
        self.turns = turns
        self.chars = chars
        self._newest_first: list[list[str]] = []  # [role, text] pairs, merged
        self._final_chars = 0  # chars of every entry but the oldest (which may still grow)

    def add(self, role: str, message: dict[str, Any]) -> None:
        """Add the next older record (its text, if any)."""
        text = message_text(message)
        if not text:
            return
        if self._newest_first and self._newest_first[-1][0] == role:
            # an older text of the same role goes before the newer one
            self._newest_first[-1][1] = f"{text}\n\n{self._newest_first[-1][1]}"
            return
        if self._newest_first:
            self._final_chars += len(self._newest_first[-1][1])
        self._newest_first.append([role, text])

    @property
    def full(self) -> bool:
        """True when no older record can change ``result()``."""
        return len(self._newest_first) > self.turns or self._final_chars >= self.chars

    def result(self) -> list[HistoryText]:
        """The newest turns within both bounds, oldest first.

        Whole turns are kept while they fit in ``chars``; when even the
        newest does not fit, its end is kept behind an ellipsis, since the
        end of a long answer is usually its conclusion.
        """
        kept: list[HistoryText] = []
        used = 0
        for role, text in self._newest_first[: self.turns]:
            if used + len(text) <= self.chars:
                kept.append(HistoryText(role, text))  # type: ignore[arg-type]  # a record type: the schema CHECKs user|assistant
                used += len(text)
                continue
            if not kept and self.chars > len(ELLIPSIS):
                tail = text[-(self.chars - len(ELLIPSIS)) :]
                kept.append(HistoryText(role, ELLIPSIS + tail))  # type: ignore[arg-type]  # as above
            break
        kept.reverse()
        return kept


def build_history(
    records_newest_first: Iterable[tuple[str, dict[str, Any]]], turns: int, chars: int
) -> list[HistoryText]:
    """``HistoryBuilder`` over an iterable of ``(type, message)``, newest first."""
    builder = HistoryBuilder(turns, chars)
    for role, message in records_newest_first:
        if builder.full:
            break
        builder.add(role, message)
    return builder.result()
