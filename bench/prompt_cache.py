"""Two threads interleaved on the embedded model's server, with and without
llama-cpp-python's RAM prompt cache, side by side (issue 31).

The server keeps one prompt state: the longest common prefix with the request
before. Questions asked one at a time (the question bench) share the system
message and nothing more, so a saved state never helps them (measured
2026-12-02: 1.07x slower, no token saved). Two people talking to the daemon at
once are the other case: thread A's follow-up comes after thread B's request,
which replaced A's state, so the server evaluates A's whole conversation again.
``--cache true --cache_type ram`` keeps states by prefix and loads the longest
one that matches.

Both servers run at once (the shipped flags, and the same plus the cache), and
the same conversation goes to each, one request at a time, alternating between
the two so that the machine's drift falls on both: threads A and B, ``--turns``
turns each, interleaved (A1, B1, A2, B2 ...). A turn's user message is a fixed
piece of this repository's docs (about 250 tokens) with a one-sentence ask; the
system message is a longer piece (about 1,500 tokens); replies are at most 24
tokens at temperature 0. Each request is streamed and timed to its first token
(the prompt's evaluation) and to its end (the cache saves its state there).

Prints a Markdown table, one row per request, and the totals with their ratio.
Run: ``.venv/bin/python bench/prompt_cache.py [--turns 3]`` (about 5 minutes on 2
cores; exits 0 without a fetched model). Nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai

from daemon.local_model import (
    LocalModelError,
    LocalModelServer,
    model_is_fetched,
    prompt_cache_args,
)

ROOT = Path(__file__).resolve().parents[1]
CACHE_FLAGS = prompt_cache_args(2 << 30)  # [model] local_prompt_cache = "2GiB"
SYSTEM_CHARS = 6_000  # about 1,500 tokens
TURN_CHARS = 1_000  # about 250 tokens
REPLY_TOKENS = 24


@dataclass
class Timed:
    """One request to one server."""

    first_token: float  # seconds to the first streamed chunk: the prompt's evaluation
    total: float  # seconds to the stream's end


def texts() -> tuple[str, list[str]]:
    """The system message and the turns' pieces, from the docs (fixed, so runs compare)."""
    system = (ROOT / "docs" / "code-mode.md").read_text()[:SYSTEM_CHARS]
    body = (ROOT / "docs" / "durability.md").read_text()
    pieces = [body[i : i + TURN_CHARS] for i in range(0, len(body), TURN_CHARS)]
    return system, pieces


async def ask(
    client: openai.AsyncOpenAI, model: str, messages: list[dict[str, str]]
) -> tuple[Timed, str]:
    """One streamed request: its timing and the reply's text."""
    started = time.perf_counter()
    first: float | None = None
    parts: list[str] = []
    stream = await client.chat.completions.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=REPLY_TOKENS,
        temperature=0,
        seed=1,
        stream=True,
    )
    async for chunk in stream:
        if first is None:
            first = time.perf_counter() - started
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    total = time.perf_counter() - started
    return Timed(first if first is not None else total, total), "".join(parts)


LABELS = ("shipped", "RAM cache")


def table(rows: list[tuple[str, list[Timed]]]) -> str:
    """One row a request (``A1``, ``B1`` ...: the thread's letter, then its turn), then
    the seconds of all requests and of the follow-ups, with their ratio."""
    shipped, cached = LABELS
    lines = [
        f"| request | first token, {shipped} | first token, {cached} "
        f"| to the end, {shipped} | to the end, {cached} |",
        "|---|---|---|---|---|",
    ]
    for label, (a, b) in rows:
        lines.append(
            f"| {label} | {a.first_token:.1f} s | {b.first_token:.1f} s "
            f"| {a.total:.1f} s | {b.total:.1f} s |"
        )
    everything = [(a, b) for _, (a, b) in rows]
    follow_ups = [(a, b) for label, (a, b) in rows if label[1:] != "1"]
    for what, pairs in (("all requests", everything), ("follow-ups", follow_ups)):
        if pairs:
            before = sum(a.total for a, _ in pairs)
            after = sum(b.total for _, b in pairs)
            lines.append(
                f"\n{what}: {before:.1f} s {shipped}, {after:.1f} s with the {cached} "
                f"({after / before:.2f}x)"
            )
    return "\n".join(lines)


async def main(turns: int) -> int:
    if not model_is_fetched():
        print("the local model is not fetched (asyncai model fetch): nothing to measure")
        return 0
    system, pieces = texts()
    if len(pieces) < 2 * turns:
        raise SystemExit(f"--turns {turns}: the docs give {len(pieces) // 2} turns a thread")
    servers = [
        LocalModelServer.default(),
        LocalModelServer.default(extra_args=CACHE_FLAGS),
    ]
    rows: list[tuple[str, list[Timed]]] = []
    try:
        for server in servers:
            await server.start()
        clients = [openai.AsyncOpenAI(base_url=s.base_url, api_key="none") for s in servers]
        # each server's own conversations: their replies are their own
        threads = [
            {
                "A": [{"role": "system", "content": system}],
                "B": [{"role": "system", "content": system}],
            }
            for _ in servers
        ]
        for turn in range(turns):
            for k, name in enumerate("AB"):
                ask_text = f"{pieces[2 * turn + k]}\n\nSay in one sentence what this part is about."
                timed: list[Timed] = []
                for i, (server, client) in enumerate(zip(servers, clients, strict=True)):
                    history = threads[i][name]
                    history.append({"role": "user", "content": ask_text})
                    result, reply = await ask(client, server.model, history)
                    history.append({"role": "assistant", "content": reply})
                    timed.append(result)
                rows.append((f"{name}{turn + 1}", timed))
                print(
                    f"{name}{turn + 1}: " + ", ".join(f"{t.first_token:.1f} s" for t in timed),
                    file=sys.stderr,
                )
    except LocalModelError as exc:
        raise SystemExit(f"the model server did not start: {exc}") from exc
    finally:
        for server in servers:
            await server.aclose()

    print(
        f"Two threads interleaved, {turns} turns each, the embedded model on 2 cores "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n"
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3, help="turns a thread (default 3)")
    sys.exit(asyncio.run(main(parser.parse_args().turns)))
