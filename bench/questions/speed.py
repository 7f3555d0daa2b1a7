"""Where a question's seconds go, and the machine's limit for it (issue 31).

Each question's run is timed by the daemon's own timeline
(:mod:`daemon.runtime.timing`): the model's slot wait, its prompt evaluation
(up to the streamed reply's first token), its generation, the sandbox, the
tools, the approvals and the daemon's rest. :func:`split_table` prints their
medians beside the measured wall time and the *machine's limit*: the tokens
the question's requests evaluated and generated, divided by this endpoint's
speeds on this machine, measured by :func:`calibrate` at the bench's start
through the same endpoint code.

The server's prefix cache spares most prompt tokens (91 % of them in a quick
run of 2026-12-02), and the tokens it did evaluate are known only to the
server: llama-cpp-python's ``usage`` counts every prompt token. Its verbose
log prints llama.cpp's own count per request (``prompt eval time = … ms /
N tokens``), so when the bench can read that log (a server it starts, or
``--server-log``), :class:`ServerLog` takes each question's lines and the
limit counts only the tokens evaluated. Without the log the limit counts
every prompt token, gives no credit for the cache, and says so.
"""

from __future__ import annotations

import asyncio
import random
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import openai

from daemon.backoff import Backoff
from daemon.config import ModelConfig
from daemon.model.endpoint import ChatEndpoint
from daemon.runtime.timing import SPLIT_PARTS, Timelines
from sessions.model import RunMetrics

__all__ = [
    "Evaluated",
    "ServerLog",
    "Speeds",
    "calibrate",
    "compare_table",
    "limit_seconds",
    "median",
    "split_table",
]

# the calibration prompt's size in words (random letters: about 3.5 tokens each; 900 of
# them made 3,158 tokens and a 92 s calibration on 2026-12-02) and the reply's tokens
_WORDS = 300
_REPLY_TOKENS = 48


@dataclass(frozen=True)
class Speeds:
    """An endpoint's speeds on this machine, in tokens a second."""

    prompt: float  # prompt evaluation, nothing cached
    generation: float
    prompt_tokens: int  # what the calibration measured them on
    generated: int


async def calibrate(model: ModelConfig, *, seed: int | None = None) -> Speeds | None:
    """One streamed request through the daemon's endpoint code: a fresh prompt of about
    1,100 tokens (random words first, so that no cached prefix helps), then 48 tokens
    generated. None when the server's reply gives no first token or no counts."""
    rng = random.Random(seed)
    words = " ".join(
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
        for _ in range(_WORDS)
    )
    body: dict[str, Any] = {
        "model": model.model,
        "messages": [
            {"role": "system", "content": "You repeat text."},
            {"role": "user", "content": f"{words}\n\nRepeat the words above, in order."},
        ],
        "temperature": 0.0,
        "max_tokens": _REPLY_TOKENS,
    }
    client = openai.AsyncOpenAI(
        base_url=model.base_url, api_key=model.api_key or "local", max_retries=0
    )
    endpoint = ChatEndpoint(client, model, model.model or "", Backoff(1.0, 1.0))
    metrics = RunMetrics()
    try:
        async with Timelines().timing_run("calibration", {}) as timeline:
            await endpoint.complete(body, metrics, "calibration")
    finally:
        await client.close()
    (span,) = timeline.of_kind("model.request")
    first = span.marks.get("first_token")
    if first is None or span.end is None or not metrics.prompt_tokens:
        return None
    evaluating, generating = first - span.start, span.end - first
    if evaluating <= 0 or generating <= 0 or metrics.completion_tokens < 2:
        return None
    return Speeds(
        prompt=metrics.prompt_tokens / evaluating,
        # the first token came with the prompt's evaluation
        generation=(metrics.completion_tokens - 1) / generating,
        prompt_tokens=metrics.prompt_tokens,
        generated=metrics.completion_tokens,
    )


def limit_seconds(prompt_tokens: int, completion_tokens: int, speeds: Speeds) -> float:
    """The machine's limit for a question: its tokens at the calibrated speeds."""
    return prompt_tokens / speeds.prompt + completion_tokens / speeds.generation


# llama.cpp's per-request counters, as llama-cpp-python's verbose server prints them
_PERF = re.compile(
    r"^llama_perf_context_print:\s+(prompt eval|eval) time =\s*([\d.]+) ms"
    r" /\s*(\d+) (?:tokens|runs)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Evaluated:
    """What a server evaluated and generated over some requests, by its own count."""

    prompt_tokens: int = 0  # evaluated: the tokens its prefix cache did not hold
    prompt_seconds: float = 0.0
    generated: int = 0
    generation_seconds: float = 0.0
    requests: int = 0

    def __add__(self, other: Evaluated) -> Evaluated:
        return Evaluated(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


class ServerLog:
    """A llama-cpp-python server's verbose log, read as it grows: :meth:`take` sums the
    requests logged since the last take (from the file's size at construction on)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = path.stat().st_size if path.exists() else 0

    def take(self) -> Evaluated:
        """The counters of the complete lines written since the last take."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return Evaluated()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next take
        self._offset += end
        total = Evaluated()
        for kind, ms, count in _PERF.findall(data[:end].decode("utf-8", "replace")):
            if kind == "prompt eval":
                total += Evaluated(
                    prompt_tokens=int(count), prompt_seconds=float(ms) / 1e3, requests=1
                )
            else:
                total += Evaluated(generated=int(count), generation_seconds=float(ms) / 1e3)
        return total

    async def take_requests(self, requests: int, wait: float = 2.0) -> Evaluated | None:
        """The counters of the next ``requests`` requests logged, waiting up to ``wait``
        seconds for their lines (the server prints them as a reply ends, about when the
        client has it); None when they did not all come (the count would be wrong)."""
        total = Evaluated()
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            total += self.take()
            if total.requests >= requests:
                return total if total.requests == requests else None
            if asyncio.get_running_loop().time() >= deadline:
                return None
            await asyncio.sleep(0.05)


def median(values: Iterable[float]) -> float:
    """The median, 0.0 of nothing (every report's medians)."""
    found = list(values)
    return statistics.median(found) if found else 0.0


_PARTS = SPLIT_PARTS[1:]  # a column each, after the wall time (the split's total)
_HEADS = [{"model_slot": "slot", "prompt_eval": "prompt"}.get(p, p) for p in _PARTS]


def split_row(label: str, rows: Sequence[Any], speeds: Speeds | None) -> str:
    """One table row: the medians of ``rows`` (outcomes with ``seconds``, ``timing``,
    ``prompt_tokens`` and ``completion_tokens``)."""
    cells = [f"{median(o.seconds for o in rows):.1f}"]
    cells += [f"{median(o.timing.get(part, 0.0) for o in rows):.2f}" for part in _PARTS]
    if speeds is not None:
        limits = [limit_seconds(_evaluated(o), o.completion_tokens, speeds) for o in rows]
        cells.append(f"{median(limits):.1f}")
    else:
        cells.append("–")
    return f"| {label} | " + " | ".join(cells) + " |"


def _evaluated(outcome: Any) -> int:
    """The prompt tokens a question's requests evaluated: the server log's count when the
    bench read one, else every prompt token."""
    found = getattr(outcome, "evaluated_tokens", None)
    return outcome.prompt_tokens if found is None else found


def split_table(
    groups: Sequence[tuple[str, Sequence[Any]]], speeds: Speeds | None, *, footnote: bool = True
) -> str:
    """The medians of each group's split, wall time and the machine's limit; ``footnote``:
    the calibrated speeds under it."""
    lines = [
        "| questions | wall s | " + " | ".join(_HEADS) + " | limit s |",
        "|---|" + "---|" * (len(_HEADS) + 2),
    ]
    lines += [split_row(label, rows, speeds) for label, rows in groups if rows]
    if speeds is not None and footnote:
        lines += [
            "",
            f"Medians in seconds. The limit is each question's tokens at this endpoint's "
            f"speeds, calibrated at the start: prompt evaluation {speeds.prompt:.1f} tokens/s "
            f"({speeds.prompt_tokens} tokens, nothing cached), generation "
            f"{speeds.generation:.1f} tokens/s ({speeds.generated} tokens). "
            + (
                "It counts the prompt tokens the server evaluated (its log's count: the "
                "prefix cache held the rest)."
                if all(
                    getattr(o, "evaluated_tokens", None) is not None
                    for _, rows in groups
                    for o in rows
                )
                else "It counts every prompt token where no server log was read (no credit "
                "for the prefix cache there)."
            ),
        ]
    return "\n".join(lines)


def compare_table(outcomes: Sequence[Any]) -> str:
    """Arm A against arm B (``--compare``), over the questions both answered: pass@1, the
    medians of wall time and its model parts, and per question the ratio of B's wall time
    to A's (its median: the issue's "halved" is 0.50x or less), with which answers moved."""
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for o in outcomes:
        by_key.setdefault((o.mode, o.id, o.seed, o.split), {})[o.arm] = o
    pairs = [(p["A"], p["B"]) for p in by_key.values() if "A" in p and "B" in p]
    if not pairs:
        return "(no question was answered in both arms)"
    lines = [
        "| arm | right | median wall s | median prompt s | median generation s "
        "| median rounds | median tokens in / out |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, arm in enumerate("AB"):
        rows = [pair[k] for pair in pairs]
        lines.append(
            f"| {arm} | {sum(o.ok for o in rows)}/{len(rows)} "
            f"| {median(o.seconds for o in rows):.1f} "
            f"| {median(o.timing.get('prompt_eval', 0.0) for o in rows):.1f} "
            f"| {median(o.timing.get('generation', 0.0) for o in rows):.1f} "
            f"| {median(o.rounds for o in rows):g} "
            f"| {median(o.prompt_tokens for o in rows):,.0f} / "
            f"{median(o.completion_tokens for o in rows):,.0f} |"
        )
    ratio = median(b.seconds / a.seconds for a, b in pairs if a.seconds > 0)
    only_a = sum(a.ok and not b.ok for a, b in pairs)
    only_b = sum(b.ok and not a.ok for a, b in pairs)
    lines += [
        "",
        f"B's wall time over A's, per question: median {ratio:.2f}x over {len(pairs)} "
        f"questions; right in both {sum(a.ok and b.ok for a, b in pairs)}, only in A "
        f"{only_a}, only in B {only_b}.",
    ]
    copied = sum(b.copied for _, b in pairs)
    checks = [b.same_as_a for _, b in pairs if b.same_as_a is not None]
    if copied or checks:
        lines.append(
            f"--skip-unchanged: B's outcome is A's on {copied} questions where nothing B "
            f"changes applied (its trials, its rules off); of {len(checks)} such questions "
            f"asked in B anyway, {sum(checks)} replied as A did."
        )
    return "\n".join(lines)
