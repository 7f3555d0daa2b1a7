"""The bench's worked examples (bench/questions/examples.toml): dev questions only, and right.

Each example is a dev template's question as seed 0 asks it (the default world
directory, port 8000). The slow test runs every snippet in the real code-mode
sandbox over seed 0's world with all six servers and holds its result to that
template's checker, so an example that teaches a wrong answer fails here.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bench.questions.core import SERVERS, Case, Template, World
from bench.questions.run import _parser, bench
from bench.questions.servers import PACKAGES, installed
from bench.questions.world import (
    EXAMPLES_ROOT,
    EXAMPLES_URL,
    build_world,
    example_templates,
    in_file_terms,
    open_world,
    templates,
)
from daemon.code_mode import CodeModeLimits, CodeModeToolExecutor
from daemon.mcp.executor import McpToolExecutor
from daemon.model.harness.examples import Example, parse_examples
from daemon.tools import ThreadKey

if TYPE_CHECKING:
    from pydantic_monty import AsyncMonty

FILE = Path(__file__).parent.parent / "bench" / "questions" / "examples.toml"
FILE_ROOT, FILE_URL = EXAMPLES_ROOT, EXAMPLES_URL  # the seed-0 world as the file names it


def _examples() -> list[Example]:
    return parse_examples(FILE.read_text(encoding="utf-8"), FILE.name)


def _in_world_terms(text: str, world: World) -> str:
    return text.replace(FILE_URL, world.base_url).replace(FILE_ROOT, str(world.root))


def _templates_of(world: World, examples: list[Example]) -> list[tuple[Template, Case] | None]:
    """Each example's template and case over ``world`` (seed 0), by
    :func:`~bench.questions.world.example_templates`, or None."""
    by_id = {t.id: t for t in templates()}
    owners = example_templates([e.question for e in examples])
    return [
        (by_id[owner], by_id[owner].make(world)) if owner is not None else None for owner in owners
    ]


def test_every_example_is_a_dev_question_of_seed_0(tmp_path: Path) -> None:
    """The file parses; each question is one dev template's seed-0 question, word for
    word, no template twice; together they use every one of the bench's servers."""
    examples = _examples()
    assert len(examples) >= 10
    world = build_world(0, tmp_path / "seed-0", FILE_URL)
    found = _templates_of(world, examples)
    unmatched = [e.question[:80] for e, f in zip(examples, found, strict=True) if f is None]
    assert not unmatched, f"not a template's seed-0 question: {unmatched}"
    chosen = [f[0] for f in found if f is not None]
    held_out = [t.id for t in chosen if t.split != "dev"]
    assert not held_out, f"held-out templates in the examples: {held_out}"
    ids = [t.id for t in chosen]
    assert len(ids) == len(set(ids)), ids
    used = {server for t in chosen for server in t.servers}
    assert used == set(SERVERS), set(SERVERS) - used
    assert len({t.shape for t in chosen}) >= 8
    assert all(e.note for e in examples)


async def test_runner_refuses_a_bad_examples_file_before_any_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--examples`` with a file that does not parse stops the run at once (exit 2,
    the file and the fault named), before a model is started or a server installed."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[[example]]\nquestion = "q"\n', encoding="utf-8")
    parser = _parser()
    args = parser.parse_args(["--examples", str(bad), "--http-port", "0", "--split", "dev"])
    assert args.examples == bad
    with pytest.raises(SystemExit) as exc:
        await bench(parser, args)
    assert exc.value.code == 2
    assert "bad.toml" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_every_snippet_answers_its_question_in_the_real_sandbox(
    monty_pool: AsyncMonty,
) -> None:
    """Seed 0 served with all six servers: each snippet, run by code mode's run_code in
    a fresh scope, returns a result that passes its template's checker."""
    missing = [name for name in PACKAGES if not installed(name)]
    assert not missing, "run `python -m bench.questions --install-servers`"
    examples = _examples()
    async with open_world(0, http_port=0) as served:
        world = served.world
        found = _templates_of(world, examples)
        inner = McpToolExecutor(served.servers, call_timeout=60.0)
        executor = CodeModeToolExecutor(inner, CodeModeLimits(), pool=monty_pool)
        wrong = {}
        try:
            await inner.start()
            assert inner.failed_servers == {}
            for example, match in zip(examples, found, strict=True):
                assert match is not None, example.question[:80]
                template, case = match
                scope = executor.thread_scope(ThreadKey("#examples", uuid.uuid4().hex))
                code = _in_world_terms(example.code, world)
                output = await scope.call_tool("run_code", {"code": code})
                if output.is_error or not case.check(output.content):
                    wrong[template.id] = (output.content[:300], case.answer)
        finally:
            await executor.aclose()
    assert not wrong, wrong


async def test_a_dev_question_is_not_shown_its_own_templates_example(tmp_path: Path) -> None:
    """The bench asks a dev question with ``[model] examples`` minus its own template's
    solved snippet, through the real backend (the model scripted): its run's system
    message shows the other closest examples, not that one, which the same question
    would otherwise be shown first."""
    from bench.questions.run import Arm, _ask
    from daemon.config import ModelConfig
    from daemon.model.harness import closest_examples
    from daemon.runtime.timing import Timelines
    from tests.fakes.executor import FakeToolExecutor
    from tests.fakes.fake_openai import FakeOpenAI

    examples = _examples()
    world = build_world(0, tmp_path / "seed-0", FILE_URL)
    owned = next(f for f in _templates_of(world, examples) if f is not None)
    template, case = owned
    own = next(e for e in examples if e.question == in_file_terms(case.text, world))
    assert own in closest_examples(own.question, examples)  # shown, were it not left out

    async with FakeOpenAI(fallback="It is 3.") as fake:
        model = ModelConfig(
            base_url=fake.base_url, model="m", harness=True, examples=FILE, retries=0
        )

        class _Arm(Arm):
            async def open(self, mode: str, served: object) -> None:
                from daemon.model import OpenAiCompatibleBackend

                self.executor = CodeModeToolExecutor(FakeToolExecutor())
                self.backend = OpenAiCompatibleBackend(self.model, self.executor)
                profile = self.backend.profile
                owners = example_templates([e.question for e in profile.examples])
                self.examples = list(zip(profile.examples, owners, strict=True))

        arm = _Arm("A", model)
        await arm.open("code", None)
        try:
            await _ask(arm, "code", case, template, 0, Timelines())
        finally:
            await arm.aclose()
    system = fake.requests[0]["messages"][0]["content"]
    assert "Worked examples" in system
    assert own.question not in system
    others = [e for e in examples if e is not own]
    shown = closest_examples(case.text, others)
    assert all(e.question in system for e in shown)
