"""What the runs used, summed per day, per sender or per channel (the console's Usage page).

Pure SQL over the ``runs`` row's counters: tokens (prompt and completion),
runs, nested calls, and the bytes code mode kept out of the model's context
(what the nested calls brought into the sandbox, ``bytes_in``, less what the
model was sent back, ``bytes_out``; never below zero for one run). A run that
answered several senders' prompts (coalesced) counts for each of them, with
all its tokens, as the per-sender limits count it
(:meth:`sessions.queries.Queries.sender_runs`). Days are UTC days.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .connection import canonical_timestamp

__all__ = ["UsageBy", "UsageRow", "usage_query"]

UsageBy = Literal["day", "sender", "channel"]

_KEYS: dict[str, tuple[str, str]] = {
    # what a row is keyed by, and the join it needs
    "day": ("substr(r.started, 1, 10)", ""),
    "sender": ("s.sender", " JOIN run_senders s ON s.run_id = r.id"),
    "channel": ("th.channel", " JOIN threads th ON th.id = r.thread"),
}


@dataclass(frozen=True)
class UsageRow:
    """The runs of one day, sender or channel, summed."""

    key: str  # the day (YYYY-MM-DD), the sender's nick or the channel
    runs: int
    prompt_tokens: int
    completion_tokens: int
    nested_calls: int
    bytes_in: int  # what the nested calls brought into the sandbox
    bytes_kept_out: int  # of which never sent to the model

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> UsageRow:
        """A row of :func:`usage_query`'s select, in the order of the fields."""
        return cls(str(row[0]), *(int(v or 0) for v in row[1:]))


def usage_query(
    by: UsageBy, *, since: str | None = None, until: str | None = None
) -> tuple[str, list[Any]]:
    """The SQL and parameters of the usage per ``by``, for runs started at or after
    ``since`` and before ``until`` (ISO timestamps; None: no bound), ordered by key."""
    if by not in _KEYS:
        raise ValueError(f"usage is summed by day, sender or channel, not {by!r}")
    key, join = _KEYS[by]
    where: list[str] = []
    params: list[Any] = []
    if since is not None:
        where.append("r.started >= ?")
        params.append(canonical_timestamp(since, "since"))
    if until is not None:
        where.append("r.started < ?")
        params.append(canonical_timestamp(until, "until"))
    sql = (
        f"SELECT {key} AS k, count(*), sum(r.prompt_tokens), sum(r.completion_tokens),"
        " sum(r.nested_calls), sum(r.bytes_in), sum(max(r.bytes_in - r.bytes_out, 0))"
        f" FROM runs r{join}"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " GROUP BY k ORDER BY k"
    return sql, params
