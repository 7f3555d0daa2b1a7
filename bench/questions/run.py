"""The question set's runner: ``python -m bench.questions``.

Per seed, a fresh world with all six servers connected; every selected
template is asked once in a fresh thread through the daemon's own backend,
temperature 0. Code mode asks all its questions (over ``--seeds`` seeds)
before direct mode starts (over ``--direct-seeds``), so llama.cpp's
prompt-prefix cache stays warm. The report (stdout, Markdown) has, per mode
and split, pass@1, pass^3 (a template counts when all three seeds are right),
the invented answers (data stated when no tool call returned any), and the
medians of rounds, bytes read back by the model and seconds; per-question
rows for dev only. Held-out questions show as aggregate scores only, their
ids, replies and code neither printed nor saved, unless ``--show-held-out``
(for after a change is final).

Run::

    python -m bench.questions                       # starts the local model: 3 + 1 seeds
    python -m bench.questions --quick               # 1 seed, held-out only (ablations)
    python -m bench.questions --base-url http://127.0.0.1:8080/v1 --model NAME
    python -m bench.questions --split dev --only kcp.some-id --modes code --json out.json
    python -m bench.questions --examples bench/questions/examples.toml --quick
    python -m bench.questions --list                # id, split, shape, servers
    python -m bench.questions --install-servers     # the third-party servers' venvs
    python -m bench.questions --tools               # every tool of the six servers
    python -m bench.questions --call git.git_log '{"repo_path": "/tmp/asyncai-bench/seed-0/repo"}'

Without ``--base-url`` it needs ``asyncai model fetch`` and the ``local``
extra, and skips (exit 0) when they are missing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import shlex
import signal
import socket
import sys
import tempfile
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.questions import probe
from bench.questions.core import SPLITS, Case, Template, says_cannot
from bench.questions.servers import install_all
from bench.questions.speed import (
    ServerLog,
    Speeds,
    calibrate,
    compare_table,
    median,
    split_table,
)
from bench.questions.startup import startup, startup_table
from bench.questions.world import HTTP_PORT, Served, example_templates, open_world, templates
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.code_mode.catalog import ShapeBook
from daemon.config import Config, ModelConfig
from daemon.errors import ConfigError
from daemon.lanes import code_mode_limits
from daemon.logging import configure_logging
from daemon.mcp.executor import McpToolExecutor
from daemon.model.harness import (
    RULES,
    TRIALS,
    Example,
    SmallModelProfile,
    noticing,
    parse_names,
    reaching,
)
from daemon.model.harness.examples import parse_examples
from daemon.runtime.runs import Prompt, RunRequest, RunResult
from daemon.runtime.timing import Timelines, time_split
from daemon.tools import ToolExecutor

MODES = ("code", "direct")


@dataclass
class Outcome:
    """One question (a template over one seed) in one mode."""

    id: str
    split: str
    shape: str
    mode: str
    seed: int
    ok: bool
    invented: bool  # stated data though no tool call returned any (see :func:`invented`)
    rounds: int
    tool_calls: int  # run_code calls in code mode, MCP calls in direct mode
    nested_calls: int
    bytes_in: int  # tool output that reached the sandbox (or the model, in direct mode)
    bytes_out: int  # what the model read back
    seconds: float
    status: str
    prompt_tokens: int
    completion_tokens: int
    question: str
    answer: str  # the expected answer
    reply: str
    code: list[dict[str, Any]] = field(default_factory=list)  # the tool calls and results
    extra: dict[str, Any] = field(default_factory=dict)  # the harness's counters
    # where its seconds went, by part (daemon.runtime.timing.time_split: issue 31)
    timing: dict[str, float] = field(default_factory=dict)
    arm: str = ""  # the configuration it was asked in (--compare: "A" or "B")
    # the prompt tokens the server evaluated (its log's count, the prefix cache left out);
    # None when no server log was read
    evaluated_tokens: int | None = None
    # the harness's trials that were off where they applied (daemon.model.harness.acts)
    noticed: list[str] = field(default_factory=list)
    # the harness's rules and trials the run reached (daemon.model.harness.reaching): a
    # rule not among them did not act in it, so the run is the same with that rule off
    reached: list[str] = field(default_factory=list)
    # --skip-unchanged: B's outcome is A's (nothing B changes applied in A's run), not asked
    copied: bool = False
    # --skip-unchanged's check: B asked although nothing B changes applied in A's run;
    # whether its reply was A's (None: not such a check)
    same_as_a: bool | None = None
    # the reply's sha256 (16 hex digits): a held-out reply compared without being shown
    reply_sha: str = ""
    # code mode: the learned return shapes the question started from, as rows
    # [channel, server, tool, version, shape]; None where they are the previous
    # question's of its arm in the same run (mode and seed). --a-run restores them
    shapes: list[list[Any]] | None = None

    def public(self, show_held_out: bool) -> dict[str, Any]:
        """The outcome for the JSON file: a held-out one without its id, question,
        answer, reply and code unless ``show_held_out``."""
        data = dataclasses.asdict(self)
        if self.split == "held-out" and not show_held_out:
            for key in ("id", "question", "answer", "reply", "code"):
                del data[key]
        return data


def limits_for(model: ModelConfig) -> CodeModeLimits:
    """Code mode's limits as the daemon sets them for ``model`` (the harness's own
    catalog budget when it is on)."""
    return code_mode_limits(Config(model=model))


def returned_data(result: RunResult, mode: str) -> bool:
    """Whether any tool call of the run returned data: in code mode a nested call
    that ended ``ok``, in direct mode a tool result that is not an error."""
    for record in result.records:
        if mode == "code":
            audit = record.tool_use_result
            calls = audit.get("nested_calls") if isinstance(audit, dict) else None
            for call in calls if isinstance(calls, list) else []:
                if (
                    isinstance(call, dict)
                    and not call.get("is_error")
                    and call.get("outcome") == "ok"
                ):
                    return True
            continue
        for block in _blocks([record]):
            if block.get("type") == "tool_result" and not block.get("is_error"):
                return True
    return False


def _blocks(records: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """The content blocks of ``records``' messages (tool uses, tool results, text)."""
    for record in records:
        content = record.message.get("content") if isinstance(record.message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict):
                yield block


def every_call_failed(result: RunResult) -> bool:
    """Whether the run's tool calls (its snippets, in code mode) all ended in an error:
    at least one was made, and every result the model was shown is an error."""
    shown = [block for block in _blocks(result.records) if block.get("type") == "tool_result"]
    return bool(shown) and all(block.get("is_error") for block in shown)


def right(template: Template, case: Case, result: RunResult) -> bool:
    """Whether the run answered the question: it ended, its reply passes the case's
    check, and it is not a failure that the check happens to pass.

    A reply given after every call failed reports that failure (the harness's
    "I could not answer this: none of the code I ran returned a result. The last
    attempt ended with: KeyError: 3"); a "none" check hears "none of the code", a
    number check the 3 of the error. Only for a question no tool can answer is
    such a reply right: there the calls fail because the data is not there, and
    saying so is the answer.
    """
    if result.status != "done" or not case.check(result.reply):
        return False
    return template.shape == "unanswerable" or not every_call_failed(result)


def invented(template: Template, case: Case, result: RunResult, mode: str) -> bool:
    """An answer made up: the question needs a server and has data to state, no tool
    call of the run returned any (every call failed or was refused, or none was made),
    and the reply states something rather than saying it cannot."""
    return (
        not case.no_data
        and bool(template.servers)
        and result.status == "done"
        and not returned_data(result, mode)
        and bool(result.reply.strip())
        and not says_cannot(result.reply)
    )


def _tool_inputs(records: list) -> list[dict[str, Any]]:
    """The tool calls and results of a run, in order, for the JSON report."""
    out: list[dict[str, Any]] = []
    for block in _blocks(records):
        if block.get("type") == "tool_use":
            out.append({"call": block.get("name"), "input": block.get("input")})
        elif block.get("type") == "tool_result":
            out.append({"result": str(block.get("content"))[:1500]})
    return out


def _short(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@dataclass
class Arm:
    """One configuration the questions are asked in: a label, the model's keys (its
    endpoint among them), and its own servers and backend while a mode runs."""

    label: str
    model: ModelConfig
    inner: McpToolExecutor | None = None
    executor: ToolExecutor | None = None
    backend: Any = None
    log: ServerLog | None = None  # its server's verbose log, when the bench can read it
    # [model] examples with each one's template (None: no template's), read at open
    examples: list[tuple[Example, str | None]] = field(default_factory=list)

    async def open(self, mode: str, served: Served) -> None:
        """Its MCP servers (all six), its code-mode executor and its backend."""
        from daemon.model import OpenAiCompatibleBackend

        self.inner = McpToolExecutor(served.servers, call_timeout=60.0)
        self.executor = (
            self.inner
            if mode == "direct"
            else CodeModeToolExecutor(self.inner, limits_for(self.model))
        )
        config = dataclasses.replace(self.model, tool_mode="direct" if mode == "direct" else "code")
        self.backend = OpenAiCompatibleBackend(config, self.executor, max_run_seconds=1800.0)
        profile = self.backend.profile
        if isinstance(profile, SmallModelProfile) and profile.examples:
            owners = example_templates([e.question for e in profile.examples])
            self.examples = list(zip(profile.examples, owners, strict=True))
        await self.inner.start()
        if self.inner.failed_servers:  # every question is asked with all six, or not at all
            raise RuntimeError(f"servers that could not start: {self.inner.failed_servers}")

    async def aclose(self) -> None:
        """Close what :meth:`open` opened."""
        if self.backend is not None:
            await self.backend.aclose()
        if self.executor is not None:
            await self.executor.aclose()
        self.inner = self.executor = self.backend = None


@dataclass(frozen=True)
class Skip:
    """``--skip-unchanged``: the trials B switches on beyond A's, the rules it switches
    off beyond A's, and how often a question none of them could change is asked in B
    anyway (every ``check``-th)."""

    trials: frozenset[str]
    check: int = 5
    rules: frozenset[str] = frozenset()

    def asks(self, a: Outcome) -> bool:
        """Whether B must be asked the question of A's outcome ``a``: one of B's trials
        applied in A's run (noticed), or A's run reached one of the rules B has off."""
        return bool(self.trials & set(a.noticed) or self.rules & set(a.reached))


async def run_mode(
    mode: str,
    served: Served,
    arms: list[Arm],
    suite: list[Template],
    report: Callable[[str], None],
    outcomes: list[Outcome],
    saved: Callable[[], None] = lambda: None,
    show_held_out: bool = False,
    skip: Skip | None = None,
    a_run: Mapping[tuple[str, int, str], Outcome] | None = None,
) -> None:
    """Every template of ``suite`` once over ``served``'s world in each of ``arms``, each
    in a fresh thread, in ``mode``; with two arms a question is asked in both before the
    next, in turn first (issue 31: old and new interleaved, on the same machine state).
    Each arm has its own servers and executor (learned shapes stay in their arm). Each
    outcome is appended to ``outcomes`` as it comes, then ``saved`` is called.

    With ``skip`` (B differs from A by harness trials or rules alone), A goes first,
    and B is asked only where one of its trials applied in A's run or A's run reached
    one of the rules B has off; elsewhere B's outcome is a copy of A's, but for every
    ``skip.check``-th such question, asked to check that premise. With ``a_run`` too
    (``--a-run``: A's outcomes by mode, seed and template, read from A's run file, with
    the shapes each question started from), A is not opened or asked: its outcome is
    the file's, and B starts where A's question did."""
    world = served.world
    held_out = [t for t in suite if t.split == "held-out"]
    timelines = Timelines()  # each run timed as the daemon times it
    started_from: dict[str, list[list[Any]]] = {}  # each arm's last question's shapes
    try:
        asking = arms if a_run is None else arms[1:]
        for arm in asking:
            await arm.open(mode, served)
        unchanged = 0  # questions B's differences could not change, so far
        for k, template in enumerate(suite):
            case = template.make(world)
            first: Outcome | None = None
            # --skip-unchanged: B starts a question from the shapes A started it from,
            # which A's questions taught (B is not asked every question to learn them)
            if a_run is not None:
                first, shapes = _a_outcome(a_run, mode, world.seed, template)
                outcomes.append(first)
            elif skip is not None and mode == "code":
                shapes = _learned(arms[0]).snapshot()
            else:
                shapes = None
            for arm in asking if k % 2 == 0 or skip is not None else asking[::-1]:
                if shapes is not None and first is not None:
                    _learned(arm).restore(shapes)
                start = shape_rows(_learned(arm)) if mode == "code" else None
                if first is None or skip is None or skip.asks(first):
                    outcome = await _ask(arm, mode, case, template, world.seed, timelines)
                else:
                    unchanged += 1
                    if (unchanged - 1) % skip.check == 0:  # the 1st, the 1+check-th, ...
                        outcome = await _ask(arm, mode, case, template, world.seed, timelines)
                        outcome.same_as_a = outcome.reply_sha == first.reply_sha
                    else:
                        outcome = dataclasses.replace(first, arm=arm.label, copied=True)
                first = first or outcome
                if start is not None:  # recorded where they changed
                    outcome.shapes = None if start == started_from.get(arm.label) else start
                    started_from[arm.label] = start
                outcomes.append(outcome)
                saved()
                mark = "ok  " if outcome.ok else "FAIL"
                mark += " (A's)" if outcome.copied else ""
                where = f"[{mode:6} s{world.seed}{' ' + arm.label if len(arms) > 1 else ''}]"
                m = outcome
                if template.split == "held-out" and not show_held_out:
                    n = held_out.index(template) + 1
                    report(f"{where} held-out {n}/{len(held_out)} {mark} {m.seconds:6.1f}s")
                else:
                    report(
                        f"{where} {mark} {template.id:34} rounds={m.rounds} calls={m.tool_calls}"
                        f"{' INVENTED' if m.invented else ''} {m.seconds:6.1f}s  " + _short(m.reply)
                    )
    finally:
        for arm in arms:
            await arm.aclose()


def _a_outcome(
    a_run: Mapping[tuple[str, int, str], Outcome], mode: str, seed: int, template: Template
) -> tuple[Outcome, dict[tuple[str, str, str], tuple[str, dict[str, Any]]] | None]:
    """A's outcome of ``template`` from its run file (``--a-run``), and the shapes its
    question started from (code mode); ValueError when the file has no such question."""
    try:
        a = a_run[(mode, seed, template.id)]
    except KeyError:
        raise ValueError(
            f"--a-run: A's file has no {mode}-mode outcome of seed {seed} for this question "
            "(ask the same split and seeds as A's run)"
        ) from None
    rows = a.shapes if mode == "code" else None
    shapes = None if rows is None else {(c, s, t): (v, shape) for c, s, t, v, shape in rows}
    return dataclasses.replace(a, shapes=None), shapes


def a_run_outcomes(
    path: Path, expected: Mapping[str, Any], arm: str = "A"
) -> dict[tuple[str, int, str], Outcome]:
    """``--a-run``: the A arm's outcomes of a ``--json`` file, by mode, seed and template
    id, each with the whole shapes its question started from (the file stores them
    where they changed). ValueError, naming the file, when it is not a run of A's
    configuration (``expected``: the file's keys of :data:`_SAME_RUN` as A's), or was
    written before outcomes recorded their shapes and reply digests (2026-12-05).

    ``arm="B"`` (``--a-run-arm B``): the outcomes of the file's B arm instead, as A's. A
    B run whose rules off were then removed from the code is this code's run: its
    outcomes stand for A without asking every question again. (B started each question
    from the shapes A's started from, and its rows record them.)"""
    try:
        data = json.loads(Path(path).read_text())
        differ = [key for key in expected if data.get(key) != expected[key]]
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: not a run file of python -m bench.questions ({exc})") from exc
    if differ:
        raise ValueError(f"{path}: not a run of A's configuration: its {', '.join(differ)} differ")
    outcomes, _ = joined_runs([path], arm)
    if not outcomes:
        raise ValueError(f"{path}: no outcome of arm {arm}")
    held_out = [t.id for t in templates() if t.split == "held-out"]
    found: dict[tuple[str, int, str], Outcome] = {}
    started: dict[tuple[str, int], list[list[Any]]] = {}  # the last shapes of each run
    for o in outcomes:
        if o.id.startswith("held-out #"):  # joined_runs names them by their place
            o.id = held_out[int(o.id.removeprefix("held-out #")) - 1]
        run = (o.mode, o.seed)
        if o.shapes is not None:
            started[run] = o.shapes
        if (o.mode == "code" and run not in started) or not o.reply_sha:
            raise ValueError(
                f"{path}: its outcomes record no shapes or reply digests (a file written "
                "before 2026-12-05): ask A again"
            )
        found[(o.mode, o.seed, o.id)] = dataclasses.replace(
            o, shapes=started.get(run), arm="A", copied=False, same_as_a=None
        )
    return found


def shape_rows(book: ShapeBook) -> list[list[Any]]:
    """The shapes ``book`` knows, as JSON rows ``[channel, server, tool, version, shape]``
    (:attr:`Outcome.shapes`)."""
    return [[*key, version, shape] for key, (version, shape) in book.snapshot().items()]


def _learned(arm: Arm) -> ShapeBook:
    """The return shapes ``arm``'s code-mode executor has learned."""
    assert isinstance(arm.executor, CodeModeToolExecutor)
    return arm.executor.shapes


async def _ask(
    arm: Arm, mode: str, case: Case, template: Template, seed: int, timelines: Timelines
) -> Outcome:
    """One question in one arm, timed as the daemon times a run."""
    thread = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
    request = RunRequest(
        run_id=uuid.uuid4().hex,
        channel="#bench",
        thread_id=thread,
        history=[],
        prompts=[Prompt(id=uuid.uuid4().hex, sender="bench", text=case.text)],
    )
    if arm.log is not None:
        arm.log.take()  # what came before this question is not its own
    profile = arm.backend.profile
    if arm.examples:  # a dev question is not shown its own template's solved snippet
        profile.examples = [e for e, owner in arm.examples if owner != template.id]
    # without the harness no rule is asked, so none is reached
    harness = profile.switches if isinstance(profile, SmallModelProfile) else None
    started = time.monotonic()
    async with timelines.timing_run(request.run_id, {"channel": "#bench"}) as timeline:
        with (
            noticing() as noticed,
            reaching(harness) if harness is not None else contextlib.nullcontext(set()) as reached,
        ):
            result = await arm.backend.run(request)
        timeline.run.attributes["status"] = "done"  # no approvals here: never paused
    seconds = time.monotonic() - started
    evaluated = None
    if arm.log is not None:
        logged = await arm.log.take_requests(len(timeline.of_kind("model.request")))
        evaluated = logged.prompt_tokens if logged is not None else None
    m = result.metrics
    extra = m.extra()
    extra.pop("split", None)  # the summary's split, taken before the run's end
    return Outcome(
        id=template.id,
        split=template.split,
        shape=template.shape,
        mode=mode,
        seed=seed,
        ok=right(template, case, result),
        invented=invented(template, case, result, mode),
        rounds=m.rounds,
        tool_calls=m.run_code_calls,
        nested_calls=m.nested_calls,
        bytes_in=m.bytes_in,
        bytes_out=m.bytes_out,
        seconds=seconds,
        status=result.status,
        prompt_tokens=m.prompt_tokens,
        completion_tokens=m.completion_tokens,
        question=case.text,
        answer=case.answer,
        reply=result.reply,
        reply_sha=reply_sha(result.reply),
        noticed=sorted(noticed),
        reached=sorted(reached),
        code=_tool_inputs(result.records),
        extra=extra,
        timing=time_split(timeline).rounded(),
        arm=arm.label,
        evaluated_tokens=evaluated,
    )


def reply_sha(reply: str) -> str:
    """The first 16 hex digits of ``reply``'s sha256 (:attr:`Outcome.reply_sha`)."""
    return hashlib.sha256(reply.encode()).hexdigest()[:16]


# ---- the report ----------------------------------------------------------------------------


def scores(outcomes: list[Outcome], seeds: int) -> dict[str, Any]:
    """pass@1, pass^3 (when ``seeds`` is 3 or more: a template counts when every seed
    ran right), invented and the medians, over ``outcomes`` (one mode, one split)."""
    by_template: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_template.setdefault(o.id, []).append(o)
    ok = sum(o.ok for o in outcomes)
    out: dict[str, Any] = {
        "asked": len(outcomes),
        "right": ok,
        "pass@1": ok / len(outcomes) if outcomes else 0.0,
        "invented": sum(o.invented for o in outcomes),
        "median_rounds": median(o.rounds for o in outcomes),
        "median_bytes_out": median(o.bytes_out for o in outcomes),
        "median_seconds": median(o.seconds for o in outcomes),
    }
    if seeds >= 3:
        complete = [runs for runs in by_template.values() if len(runs) >= seeds]
        out["pass^3"] = sum(all(o.ok for o in runs) for runs in complete)
        out["templates"] = len(complete)
    return out


# What makes two run files one run: the model and the harness as each asked it.
_SAME_RUN = ("model", "harness", "harness_off", "harness_on", "answer_samples", "examples")


def joined_runs(paths: Sequence[Path], arm: str = "A") -> tuple[list[Outcome], dict[str, int]]:
    """``--scores``: the A arm's outcomes (or ``arm``'s) of ``--json`` files as one run, and
    the seeds each mode has, so that a standard run asked in parts (``--first-seed``)
    gets its pass^3. ValueError, naming the file, when they are not parts of one run:
    another model or harness, a question asked twice, a held-out seed not whole.

    A held-out outcome has no id in the file (``Outcome.public``); the templates'
    order is fixed, so it is the k-th held-out question of its mode and seed, and
    the k-th of every seed is the same template. A seed's held-out questions are
    therefore joined only when all of them were asked.
    """
    if not paths:
        raise ValueError("--scores: name one or more --json files of runs")
    # a file written with --show-held-out names them: by their place as well, so that
    # it joins a file that does not
    place = {t.id: k for k, t in enumerate(t for t in templates() if t.split == "held-out")}
    held_out = len(place)
    names = {f.name for f in dataclasses.fields(Outcome)}
    first: tuple[Path, dict[str, Any]] | None = None
    outcomes: list[Outcome] = []
    seen: set[tuple[str, int, str]] = set()
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
            rows = [r for r in data["outcomes"] if r.get("arm", "A") == arm]
            config = {key: data.get(key) for key in _SAME_RUN}
            # the arms' configurations: a B run's parts must have switched the same off
            config |= {label: data.get("arms", {}).get(label) for label in ("A", arm)}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"{path}: not a run file of python -m bench.questions ({exc})"
            ) from exc
        if first is None:
            first = (path, config)
        elif config != first[1]:
            differ = ", ".join(k for k in config if config[k] != first[1][k])
            raise ValueError(f"{path}: not the run of {first[0]}: its {differ} differ")
        counts: dict[tuple[str, int], int] = {}
        for row in rows:
            if row.get("split") == "held-out":
                if row.get("id") is None:
                    key = (row.get("mode"), row.get("seed"))
                    counts[key] = k = counts.get(key, 0) + 1
                elif row["id"] in place:
                    k = place[row["id"]] + 1
                else:
                    raise ValueError(f"{path}: {row['id']} is not a held-out template")
                hidden = {"question": "", "answer": "", "reply": "", "code": []}
                row = {**row, **hidden, "id": f"held-out #{k}"}
            try:
                outcome = Outcome(**{k: v for k, v in row.items() if k in names})
            except TypeError as exc:  # a field missing: not an outcome this bench wrote
                raise ValueError(f"{path}: an outcome this bench did not write ({exc})") from exc
            asked = (outcome.mode, outcome.seed, outcome.id)
            if asked in seen:
                raise ValueError(
                    f"{path}: {outcome.mode} mode, seed {outcome.seed}, {outcome.id} "
                    "is in another file too"
                )
            seen.add(asked)
            outcomes.append(outcome)
        for (mode, seed), n in counts.items():
            if n != held_out:
                raise ValueError(
                    f"{path}: {mode} mode, seed {seed} asked {n} of the {held_out} held-out "
                    "questions: only a whole split can be joined (its questions have no ids)"
                )
    seeds = {
        mode: len({o.seed for o in outcomes if o.mode == mode})
        for mode in MODES
        if any(o.mode == mode for o in outcomes)
    }
    return outcomes, seeds


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def seconds_report(
    outcomes: list[Outcome], modes: Iterable[str], speeds: Speeds | None, show_held_out: bool
) -> str:
    """Where the seconds went: the medians per mode and split, then one row per question
    (a held-out one by its number only, unless ``show_held_out``)."""
    groups = [
        (f"{mode} {split}", [o for o in outcomes if o.mode == mode and o.split == split])
        for mode in modes
        for split in SPLITS
    ]
    rows: list[tuple[str, list[Outcome]]] = []
    numbers: dict[str, int] = {}
    for o in outcomes:
        if o.split == "held-out" and not show_held_out:
            k = numbers.setdefault(o.id, len(numbers) + 1)
            label = f"{o.mode} s{o.seed} held-out {k}"
        else:
            label = f"{o.mode} s{o.seed} {o.id}"
        rows.append((label + (" ✓" if o.ok else " ✗"), [o]))
    return split_table(groups, speeds) + "\n\n" + split_table(rows, speeds, footnote=False)


def report(outcomes: list[Outcome], seeds: dict[str, int], show_held_out: bool) -> str:
    """The Markdown report: scores per mode and split, then per-question rows (dev only
    unless ``show_held_out``)."""
    lines = [
        "| mode | split | pass@1 | pass^3 | invented | median rounds | median bytes_out "
        "| median s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    modes = [m for m in MODES if m in seeds]
    for mode in modes:
        for split in SPLITS:
            chosen = [o for o in outcomes if o.mode == mode and o.split == split]
            if not chosen:
                continue
            s = scores(chosen, seeds[mode])
            p3 = f"{s['pass^3']}/{s['templates']}" if "pass^3" in s else "–"
            lines.append(
                f"| {mode} | {split} | **{s['right']}/{s['asked']} ({_pct(s['pass@1'])})** | "
                f"{p3} | {s['invented']} | {s['median_rounds']:g} | "
                f"{s['median_bytes_out']:,.0f} | {s['median_seconds']:.0f} |"
            )
    shown = [o for o in outcomes if o.split == "dev" or show_held_out]
    if shown:
        lines += [
            "",
            "| question | split | "
            + " | ".join(f"{m}: right | rounds | bytes_out | s" for m in modes)
            + " |",
            "|---|---|" + "---|---|---|---|" * len(modes),
        ]
        ids = list(dict.fromkeys(o.id for o in shown))
        for tid in ids:
            cells = []
            for mode in modes:
                runs = [o for o in shown if o.id == tid and o.mode == mode]
                if not runs:
                    cells.append("– | – | – | –")
                    continue
                marks = "".join(("✓" if o.ok else "✗") + ("!" if o.invented else "") for o in runs)
                cells.append(
                    f"{marks} | {median(o.rounds for o in runs):g} | "
                    f"{median(o.bytes_out for o in runs):,.0f} | "
                    f"{median(o.seconds for o in runs):.0f}"
                )
            split = next(o.split for o in shown if o.id == tid)
            lines.append(f"| {tid} | {split} | " + " | ".join(cells) + " |")
        lines.append("")
        lines.append("✓ right, ✗ wrong, one per seed; ! invented; the rest are medians.")
    code = [o for o in outcomes if o.mode == "code" and o.arm in ("", "A")]
    if table := reached_table(code):
        lines += ["", "Where the harness's rules could act (code mode, arm A):", "", table]
    return "\n".join(lines)


def reached_table(outcomes: list[Outcome]) -> str:
    """Where each harness rule could act: per split, the questions whose run reached it
    (:func:`daemon.model.harness.reaching`) and how many of those were right, most
    reached first, then the rules no question reached (each could be switched off
    without changing one of these answers). Empty when no outcome recorded its rules
    (a file from before 2026-12-04, or the harness off)."""
    if not any(o.reached for o in outcomes):
        return ""
    splits = [s for s in SPLITS if any(o.split == s for o in outcomes)]
    totals = {s: sum(o.split == s for o in outcomes) for s in splits}
    count: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        for name in o.reached:
            count.setdefault((name, o.split), []).append(o)
    reached = Counter(name for o in outcomes for name in o.reached)
    names = sorted(reached, key=lambda n: (-reached[n], n))
    lines = [
        "| rule | " + " | ".join(f"{s}: reached (of {totals[s]}) | right" for s in splits) + " |",
        "|---|" + "---|---|" * len(splits),
    ]
    for name in names:
        cells = []
        for split in splits:
            runs = count.get((name, split), [])
            cells.append(f"{len(runs)} | {sum(o.ok for o in runs)}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    never = sorted(set(RULES) - set(names))
    lines.append("")
    lines.append(
        "Reached by no question here: "
        + (", ".join(f"`{n}`" for n in never) if never else "none")
        + "."
    )
    return "\n".join(lines)


# ---- the command line ----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.questions", description=(__doc__ or "").split("\n\n")[0]
    )
    what = parser.add_argument_group("what to ask")
    what.add_argument("--seeds", type=int, default=3, help="code mode's seeds (default 3)")
    what.add_argument("--direct-seeds", type=int, default=1, help="direct mode's (default 1)")
    what.add_argument(
        "--first-seed",
        type=int,
        default=0,
        metavar="K",
        help="count the seeds from K (default 0): a long run in parts, joined by --scores",
    )
    what.add_argument("--quick", action="store_true", help="1 seed, held-out only")
    what.add_argument("--split", choices=("dev", "held-out", "all"), help="default: all")
    what.add_argument("--only", help="comma-separated template ids")
    what.add_argument("--modes", default="code,direct", help="comma-separated: code, direct")
    model = parser.add_argument_group("the model")
    model.add_argument(
        "--base-url", help="an OpenAI-compatible endpoint (default: start the local model)"
    )
    model.add_argument("--model", help="model name at --base-url")
    model.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY") or "local")
    model.add_argument("--python", default=sys.executable, help="Python with llama-cpp-python")
    model.add_argument(
        "--harness",
        choices=("auto", "on", "off"),
        default="auto",
        help="the small-model harness (auto: on for the local model)",
    )
    model.add_argument(
        "--harness-off",
        metavar="NAMES",
        help="comma-separated harness rules to switch off (ASYNCAI_HARNESS_OFF)",
    )
    model.add_argument(
        "--answer-samples",
        type=int,
        choices=(1, 2, 3),
        help="[model] answer_samples: the harness's vote (1: off; default: the config's)",
    )
    model.add_argument(
        "--examples",
        type=Path,
        metavar="FILE",
        help="[model] examples: solved questions, the closest two shown per question "
        "(the bench's own: bench/questions/examples.toml, dev questions only)",
    )
    model.add_argument(
        "--server-args",
        metavar="ARGS",
        help="more arguments for the local model's server (llama_cpp.server flags, one string)",
    )
    model.add_argument(
        "--compare",
        metavar="ARGS",
        help="B: a second local model server with these arguments; every question is asked "
        "in A and in B, interleaved (issue 31's side-by-side runs)",
    )
    model.add_argument(
        "--compare-python",
        metavar="PY",
        help="with --compare: B's server runs under this Python (another venv, another build "
        "of llama-cpp-python, e.g. one compiled for more of the CPU's instructions)",
    )
    model.add_argument(
        "--compare-set",
        metavar="KEY=VALUE",
        type=_model_key,
        action="append",
        default=[],
        help="B's [model] key (repeatable), e.g. max_tokens=512; alone, B asks A's server",
    )
    model.add_argument(
        "--skip-unchanged",
        action="store_true",
        help="with --compare-set harness_trials=NAMES and/or harness_off=NAMES alone: A "
        "first, and B only where one of those trials applied in A's run or A's run reached "
        "one of those rules; elsewhere B's outcome is A's (temperature 0)",
    )
    model.add_argument(
        "--skip-check",
        type=int,
        default=5,
        metavar="N",
        help="--skip-unchanged: still ask B every N-th question its differences could not "
        "change, to check that its reply is A's (default 5)",
    )
    model.add_argument(
        "--a-run",
        type=Path,
        metavar="FILE",
        help="--skip-unchanged: A's outcomes from FILE (a --json file of A's configuration "
        "over the same split and seeds) instead of asking A; B starts each question it is "
        "asked from the shapes A's question started from",
    )
    model.add_argument(
        "--a-run-arm",
        choices=("A", "B"),
        default="A",
        help="--a-run: the file's arm whose outcomes are A's (default A); B for a B run "
        "whose rules off the code has since removed: its B outcomes are this code's",
    )
    model.add_argument(
        "--server-log",
        type=Path,
        metavar="FILE",
        help="with --base-url: that llama-cpp-python server's verbose log (asyncai model "
        "serve --log FILE), read for the tokens it evaluated (the limit column); a server "
        "the bench starts logs to a file of its own",
    )
    model.add_argument(
        "--no-calibrate",
        action="store_true",
        help="skip the speed calibration at the start (no machine's limit column)",
    )
    what.add_argument(
        "--startup",
        action="store_true",
        help="first the startup phase: the seconds to the first replies, as `asyncai up` runs",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--json", type=Path, help="every outcome, rewritten after each question")
    out.add_argument("--log", type=Path, help="the daemon's verbose NDJSON log goes here")
    out.add_argument(
        "--show-held-out",
        action="store_true",
        help="print and save held-out questions, replies and code (after a change is final)",
    )
    tools = parser.add_argument_group("the servers, without a model")
    tools.add_argument(
        "--install-servers",
        action="store_true",
        help="make the third-party servers' venvs (pip, pinned) and exit",
    )
    tools.add_argument("--list", action="store_true", help="one line per template and exit")
    tools.add_argument(
        "--scores",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="the scores of --json files as one run (a standard run asked in parts, "
        "--first-seed) and exit: pass@1 and pass^3 per mode and split",
    )
    tools.add_argument(
        "--scores-arm",
        choices=("A", "B"),
        default="A",
        help="--scores: the arm whose outcomes are joined (default A); B for a B run "
        "asked in parts (its parts must have the same A and B configurations)",
    )
    tools.add_argument("--tools", action="store_true", help="list every tool and exit")
    tools.add_argument(
        "--call",
        nargs=2,
        metavar=("SERVER.TOOL", "JSON-ARGS"),
        help="build the world, start all servers, call one tool and print its result as "
        "the sandbox receives it ({base_url} in JSON-ARGS: the HTTP server's URL)",
    )
    tools.add_argument("--seed", type=int, default=0, help="the world of --call/--tools")
    parser.add_argument(
        "--http-port",
        type=int,
        default=HTTP_PORT,
        help=f"the loopback HTTP server's port, in the web questions' text (default "
        f"{HTTP_PORT}; 0: any free port)",
    )
    return parser


def _model_key(text: str) -> tuple[str, Any]:
    """``--compare-set KEY=VALUE``: a ``[model]`` key and its value, read as TOML."""
    key, sep, value = text.partition("=")
    names = {f.name for f in dataclasses.fields(ModelConfig) if f.init}
    if not sep or key.strip() not in names:
        raise argparse.ArgumentTypeError(f"KEY=VALUE with KEY one of [model]'s: {sorted(names)}")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value  # a bare word: a string
    return key.strip(), parsed


#: The [model] keys by which --skip-unchanged's B may differ from A.
_SKIPPABLE = frozenset({"harness_trials", "harness_off"})


def _skip(
    parser: argparse.ArgumentParser, args: argparse.Namespace, arms: list[Arm]
) -> Skip | None:
    """``--skip-unchanged``'s differences: B's ``harness_trials`` beyond A's and B's
    ``harness_off`` beyond A's; B must differ from A by them alone (no server arguments
    of its own, no other key)."""
    if not args.skip_unchanged:
        return None
    if args.skip_check < 1:
        parser.error("--skip-check must be 1 or more")
    keys = {key for key, _ in args.compare_set}
    if len(arms) != 2 or not keys or keys - _SKIPPABLE or (args.compare or "").strip():
        parser.error(
            "--skip-unchanged: B must differ from A by --compare-set harness_trials=NAMES "
            "and/or harness_off=NAMES alone (--compare with no arguments, or none)"
        )
    try:
        a, b = (parse_names(arm.model.harness_trials, TRIALS, "harness_trials") for arm in arms)
        a_off, b_off = (parse_names(arm.model.harness_off, RULES, "harness_off") for arm in arms)
    except ConfigError as exc:
        parser.error(str(exc))
    if not b - a and not b_off - a_off:
        parser.error(
            "--skip-unchanged: B switches on no trial that A does not, and off no rule A has on"
        )
    return Skip(frozenset(b - a), args.skip_check, frozenset(b_off - a_off))


def _arm_text(arm: Arm, args: argparse.Namespace) -> str:
    """What sets an arm apart, for the report."""
    if arm.label == "A":
        return f"server args {args.server_args or '(none)'}"
    keys = ", ".join(f"{k} = {v!r}" for k, v in args.compare_set)
    server = f"server args {args.compare}" if args.compare is not None else "A's server"
    if args.compare_python:
        server += f" under {args.compare_python}"
    return server + (f", {keys}" if keys else "")


def list_templates() -> list[str]:
    """``--list``: one line per template: id, split, shape, servers."""
    return [f"{t.id:40} {t.split:8} {t.shape:12} {','.join(t.servers) or '-'}" for t in templates()]


def select(args: argparse.Namespace) -> list[Template]:
    """The templates ``--split`` and ``--only`` choose (``--quick``: held-out)."""
    split = args.split or ("held-out" if args.quick else "all")
    chosen = [t for t in templates() if split == "all" or t.split == split]
    if args.only:
        wanted = {w.strip() for w in args.only.split(",") if w.strip()}
        unknown = wanted - {t.id for t in templates()}
        if unknown:
            raise SystemExit(f"--only: no template {', '.join(sorted(unknown))}")
        chosen = [t for t in chosen if t.id in wanted]
    return chosen


def _port_free(port: int) -> bool:
    with socket.socket() as probe_socket:
        # as asyncio's server does: a port a finished run left in TIME_WAIT is free
        probe_socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe_socket.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def stopped_by_sigterm(run: Coroutine[Any, Any, int]) -> int:
    """``run``, cancelled by SIGTERM as asyncio.run cancels it on Ctrl-C, so that its
    cleanup stops the model servers it started; 143 (128 + SIGTERM) when it was.

    Without it a SIGTERM ended the bench at once, and the llama-cpp-python
    servers it had started (1.5 GB and both cores each, no stdin to see the
    parent go) ran on as orphans. A second SIGTERM while that cleanup runs is
    ignored: it cancelled the cleanup, and left the model server running.
    """
    task = asyncio.ensure_future(run)
    signalled = False

    def stop() -> None:
        nonlocal signalled
        if not signalled:
            signalled = True
            task.cancel()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop)
    try:
        return await task
    except asyncio.CancelledError:
        if not signalled:  # cancelled from outside, not by the signal
            raise
        return 128 + signal.SIGTERM
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def main(argv: list[str] | None = None) -> int:
    """Parse flags and do what they ask."""
    parser = _parser()
    args = parser.parse_args(argv)
    say = lambda s: print(s, flush=True)  # noqa: E731
    note = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if args.list:
        for line in list_templates():
            say(line)
        return 0
    if args.scores_arm != "A" and not args.scores:
        parser.error("--scores-arm names the arm of the --scores files: give those too")
    if args.scores:
        try:
            outcomes, seeds = joined_runs(args.scores, args.scores_arm)
        except ValueError as exc:
            parser.error(str(exc))
        say(report(outcomes, seeds, show_held_out=False))
        asked = {mode: sorted({o.seed for o in outcomes if o.mode == mode}) for mode in seeds}
        say(
            f"\n{len(args.scores)} run files as one run, seeds "
            + "; ".join(f"{mode} {', '.join(map(str, n))}" for mode, n in asked.items())
        )
        return 0
    # the daemon warns of every call of a tool not annotated read-only (all four
    # third-party servers' tools): on stderr that would bury the progress lines and
    # show held-out questions' calls, so without --log it goes nowhere
    log_file = (args.log or Path(os.devnull)).open("a")
    configure_logging(bool(args.log), log_file)
    if args.install_servers:
        install_all(note)
        return 0
    if args.call or args.tools:
        install_all(note)
        port = args.http_port
        if port and not _port_free(port):  # a bench run holds it, say
            note(f"# port {port} is taken: any free port instead")
            port = 0
        async with open_world(args.seed, http_port=port) as served:
            note(f"# world at {served.world.root}, {served.world.base_url}")
            if args.tools:
                await probe.list_tools(served, say)
                return 0
            return await probe.call(served, args.call[0], args.call[1], say)
    return await bench(parser, args)


async def bench(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The benchmark run itself."""
    if args.harness_off is not None:  # read by the harness as backends are built
        os.environ["ASYNCAI_HARNESS_OFF"] = args.harness_off
    harness_off = os.environ.get("ASYNCAI_HARNESS_OFF")  # given here or in the environment
    harness_on = os.environ.get("ASYNCAI_HARNESS_ON")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - set(MODES):
        parser.error(f"--modes: one or more of {', '.join(MODES)}")
    seeds = {
        "code": 1 if args.quick else args.seeds,
        "direct": 1 if args.quick else args.direct_seeds,
    }
    seeds = {m: seeds[m] for m in modes}
    if args.server_log is not None and args.base_url is None:
        parser.error("--server-log names the log of the server at --base-url")
    if args.compare_python and args.compare is None:
        parser.error("--compare-python names the Python of B's server: give --compare too")
    if args.first_seed < 0:
        parser.error("--first-seed: a seed is 0 or more")
    if args.a_run is not None and not args.skip_unchanged:
        parser.error("--a-run gives A's outcomes to --skip-unchanged: give that too")
    if args.a_run_arm != "A" and args.a_run is None:
        parser.error("--a-run-arm names an arm of the --a-run file: give that too")
    if args.a_run is not None and not args.a_run.is_file():
        parser.error(f"--a-run {args.a_run}: no such file")
    suite = select(args)
    if not suite:
        parser.error("no template selected")
    if args.http_port and not _port_free(args.http_port):
        parser.error(f"--http-port {args.http_port} is taken; pass another, or 0")
    if args.examples is not None:  # a bad file fails here, not after the model has loaded
        try:
            parse_examples(args.examples.read_text(encoding="utf-8"), args.examples.name)
        except (OSError, ValueError) as exc:
            parser.error(f"--examples {args.examples}: {exc}")
    note = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    install_all(note)

    async with contextlib.AsyncExitStack() as stack:
        base_url, model_name = args.base_url, args.model
        compare_url: str | None = None
        server_seconds = None
        server = None
        logs: dict[str, Path | None] = {"A": args.server_log, "B": args.server_log}
        if base_url is None:
            from daemon.local_model import LocalModelError, LocalModelServer

            # each server's verbose log: llama.cpp's own count of the tokens it evaluated
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-llm-")))
            logs = {"A": folder / "a.log", "B": folder / "a.log"}
            try:
                server = LocalModelServer.default(
                    python=args.python,
                    extra_args=shlex.split(args.server_args or ""),
                    log_path=logs["A"],
                )
                note("starting the local model…")
                loading = time.monotonic()
                await stack.enter_async_context(server)
                server_seconds = time.monotonic() - loading
                if args.compare is not None:  # B's own server, idle while A's question runs
                    logs["B"] = folder / "b.log"
                    other = LocalModelServer.default(
                        python=args.compare_python or args.python,
                        extra_args=shlex.split(args.compare),
                        log_path=logs["B"],
                    )
                    note(f"starting the local model for B ({args.compare})…")
                    await stack.enter_async_context(other)
                    compare_url = other.base_url
            except LocalModelError as exc:
                note(f"python -m bench.questions: skipped: {exc}")
                return 0
            base_url, model_name = server.base_url, server.model
        elif args.compare is not None:
            parser.error("--compare starts a second local model: not with --base-url")
        if not model_name:
            parser.error("--model is required with --base-url")
        model = ModelConfig(
            base_url=base_url,
            api_key=args.api_key,
            model=model_name,
            temperature=0.0,
            request_timeout=900.0,
            retries=0,
        )
        if args.harness != "auto":
            model.harness = args.harness == "on"
        if args.answer_samples is not None:
            model.answer_samples = args.answer_samples
        if args.examples is not None:
            model.examples = args.examples
        arms = [Arm("A", model)]
        if args.compare is not None or args.compare_set:
            other_model = dataclasses.replace(model, base_url=compare_url or model.base_url)
            for key, value in args.compare_set:
                setattr(other_model, key, value)
            arms.append(Arm("B", other_model))
        skip = _skip(parser, args, arms)
        # what makes a run file this run's (_SAME_RUN): written by save, checked by --a-run
        config = {
            "model": model_name,
            "harness": args.harness,
            "harness_off": harness_off,
            "harness_on": harness_on,
            "answer_samples": model.answer_samples,
            "examples": str(args.examples) if args.examples else None,
        }
        a_run = None
        if args.a_run is not None:
            try:
                a_run = a_run_outcomes(args.a_run, config, args.a_run_arm)
            except ValueError as exc:
                parser.error(f"--a-run {exc}")
        readers: dict[Path, ServerLog] = {}  # one reader per file: B may share A's server
        for arm in arms:
            path = logs[arm.label]
            arm.log = readers.setdefault(path, ServerLog(path)) if path is not None else None
        started = datetime.datetime.now(datetime.UTC)
        speeds = None
        if not args.no_calibrate:
            note("calibrating the endpoint's speeds…")
            speeds = await calibrate(model)
            note(
                "no first token or token counts: no machine's limit"
                if speeds is None
                else f"prompt evaluation {speeds.prompt:.1f} tokens/s, "
                f"generation {speeds.generation:.1f} tokens/s"
            )
        outcomes: list[Outcome] = []
        boot: list[tuple[str, float, bool | None, str]] = []
        if server_seconds is not None:
            boot.append(("model server start (load)", server_seconds, None, ""))
        if args.startup:
            boot += await startup(model, note)

        def save() -> None:  # after every question, so a long run can be read as it goes
            if not args.json:
                return
            held = {t.split for t in suite}
            args.json.write_text(
                json.dumps(
                    {
                        "date": started.isoformat(),
                        **config,
                        "base_url": base_url,
                        "arms": {arm.label: _arm_text(arm, args) for arm in arms},
                        "seeds": seeds,
                        "first_seed": args.first_seed,
                        "splits": sorted(held),
                        "templates": len(suite),
                        "show_held_out": args.show_held_out,
                        "scores": _all_scores(outcomes, seeds),
                        "speeds": dataclasses.asdict(speeds) if speeds else None,
                        "outcomes": [o.public(args.show_held_out) for o in outcomes],
                        "memory": memory,
                        "startup": [
                            {"step": w, "seconds": t, "ok": ok, "reply": reply}
                            for w, t, ok, reply in boot
                        ],
                    },
                    indent=2,
                    default=str,
                )
            )

        def rss() -> str:
            size = server.rss() if server is not None else None
            return "unknown (not started here)" if size is None else f"{size / 2**30:.2f} GiB"

        memory = [("start", rss())]
        if boot:
            memory.append(("after the startup phase", rss()))
        for mode in modes:  # code mode's questions all before direct mode's (the prefix cache)
            for seed in range(args.first_seed, args.first_seed + seeds[mode]):
                async with open_world(seed, http_port=args.http_port) as served:
                    await run_mode(
                        mode,
                        served,
                        arms,
                        suite,
                        note,
                        outcomes,
                        save,
                        args.show_held_out,
                        skip,
                        a_run,
                    )
            memory.append((f"after {mode} mode", rss()))
        print(
            f"\nThe question set, {started:%Y-%m-%d %H:%M} UTC, model {model_name} at {base_url}, "
            f"harness {args.harness}"
            + (f" (off: {harness_off})" if harness_off else "")
            + (f" (on: {harness_on})" if harness_on else "")
            + f", answer_samples {model.answer_samples}"
            + (f", examples {args.examples}" if args.examples else "")
            + f", {len(suite)} templates, seeds "
            + ", ".join(f"{m} {n}" for m, n in seeds.items())
            + "\n"
        )
        for arm in arms:
            mine = [o for o in outcomes if o.arm == arm.label]
            if len(arms) > 1:
                print(f"\n### {arm.label}: {_arm_text(arm, args)}\n")
            print(report(mine, seeds, args.show_held_out))
            print("\nWhere the seconds went (issue 31):\n")
            print(seconds_report(mine, seeds, speeds, args.show_held_out))
        if len(arms) > 1:
            print("\nA against B, interleaved (each question in both, in turn first):\n")
            print(compare_table(outcomes))
        if boot:
            print("\nStartup, as `asyncai up` runs (code mode, the bundled http_get only):\n")
            print(startup_table(boot))
        if server is not None:
            print(
                "\nThe model server's resident memory: " + ", ".join(f"{w} {m}" for w, m in memory)
            )
        save()
    return 0


def _all_scores(outcomes: list[Outcome], seeds: dict[str, int]) -> dict[str, Any]:
    return {
        f"{mode} {split}": scores(chosen, seeds[mode])
        for mode in seeds
        for split in SPLITS
        if (chosen := [o for o in outcomes if o.mode == mode and o.split == split])
    }
