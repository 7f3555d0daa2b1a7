"""The embedded model's server settings for 2 cores, side by side (issue 31).

Each configuration is the shipped server (``asyncai model serve``'s flags) plus
the llama-cpp-python flags it names, which come last and win. The configurations
run in turns, ``--rounds`` times (each start reloads the model from the page
cache, a few seconds), and each measures ``--repeats`` fresh calibrations: the
question bench's, one streamed request through the daemon's endpoint code, a
prompt of about 1,100 random words' tokens that no cached prefix holds, then
48 tokens generated, timed at its first token. Prints a Markdown table: the
median prompt evaluation and generation speeds, what a typical question's
tokens (``--question-tokens EVALUATED,GENERATED``, by default the medians of
the dev run of 2026-12-03: 970 evaluated, 200 generated) take at those speeds,
and that time against the shipped server's.

Run: ``.venv/bin/python bench/llama_settings.py [--rounds 2] [--repeats 3]
[--config 'LABEL=FLAGS' ...] [--python 'LABEL=PYTHON' ...]`` (about 2 minutes a
configuration and round on 2 cores; exits 0 without a fetched model). ``--python``
names the interpreter of another venv whose llama-cpp-python (another build of it)
serves configuration LABEL. Nothing else should run meanwhile:
the two cores are what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.questions.speed import Speeds, calibrate
from daemon.config import ModelConfig
from daemon.local_model import LocalModelError, LocalModelServer, model_is_fetched

#: label → the flags added to the shipped server's (``--n_threads 2``, n_batch 512)
CONFIGS: dict[str, str] = {
    "shipped": "",
    "n_threads 1": "--n_threads 1",
    "n_threads_batch 1": "--n_threads_batch 1",
    "n_batch 128": "--n_batch 128 --n_ubatch 128",
    "n_batch 1024": "--n_batch 1024 --n_ubatch 1024",
    "flash_attn": "--flash_attn true",
}


@dataclass
class Measured:
    """One configuration's calibrations, over every round."""

    label: str
    flags: str
    speeds: list[Speeds] = field(default_factory=list)

    def prompt(self) -> float:
        return statistics.median(s.prompt for s in self.speeds)

    def generation(self) -> float:
        return statistics.median(s.generation for s in self.speeds)

    def question_seconds(self, evaluated: int, generated: int) -> float:
        """``evaluated`` prompt tokens and ``generated`` tokens at the median speeds."""
        return evaluated / self.prompt() + generated / self.generation()


def table(measured: list[Measured], evaluated: int, generated: int) -> str:
    """The Markdown table; the first configuration is the one the others are held to."""
    base = measured[0].question_seconds(evaluated, generated)
    lines = [
        "| settings | flags | prompt evaluation, tokens/s | generation, tokens/s | "
        f"a question ({evaluated:,} evaluated, {generated:,} generated), s "
        f"| vs {measured[0].label} |",
        "|---|---|---|---|---|---|",
    ]
    for m in measured:
        if not m.speeds:
            lines.append(f"| {m.label} | `{m.flags}` | – | – | – | – |")
            continue
        seconds = m.question_seconds(evaluated, generated)
        lines.append(
            f"| {m.label} | `{m.flags or '(none)'}` | {m.prompt():.1f} | {m.generation():.1f} | "
            f"{seconds:.1f} | {seconds / base:.2f}x |"
        )
    return "\n".join(lines)


async def measure(
    configs: dict[str, str],
    rounds: int,
    repeats: int,
    interpreters: dict[str, str] | None = None,
) -> list[Measured]:
    """Every configuration ``repeats`` times in each of ``rounds`` turns; one whose server
    does not start (a flag this llama-cpp-python lacks) says why and is left out.
    ``interpreters`` names, by label, another Python whose llama-cpp-python serves that
    configuration (another build of it); the others run under this one."""
    measured = [Measured(label, flags) for label, flags in configs.items()]
    pythons = interpreters or {}
    for round_ in range(rounds):
        for m in measured:
            server = LocalModelServer.default(
                extra_args=shlex.split(m.flags), python=pythons.get(m.label, sys.executable)
            )
            try:
                async with server:
                    model = ModelConfig(base_url=server.base_url, model=server.model)
                    for k in range(repeats):
                        got = await calibrate(model, seed=1000 * round_ + k)
                        if got is not None:
                            m.speeds.append(got)
            except LocalModelError as exc:
                _say(f"round {round_ + 1}, {m.label}: the server did not start: {exc}")
                continue
            last = m.speeds[-1] if m.speeds else None
            speeds = f"{last.prompt:.1f} / {last.generation:.1f} tokens/s" if last else "none"
            _say(f"round {round_ + 1}, {m.label}: {speeds}")
    return measured


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--config",
        action="append",
        default=None,
        metavar="LABEL=FLAGS",
        help="a configuration to measure (repeatable; the first is the reference); "
        "default: the shipped server and five variations",
    )
    parser.add_argument(
        "--python",
        action="append",
        default=None,
        metavar="LABEL=PYTHON",
        help="the interpreter whose llama-cpp-python serves configuration LABEL "
        "(repeatable; another build of it, in a venv of its own); default this one",
    )
    parser.add_argument("--question-tokens", default="970,200", metavar="EVALUATED,GENERATED")
    return parser


def configs_of(given: list[str] | None) -> dict[str, str]:
    """``LABEL=FLAGS`` items as a dict (the defaults when none are given)."""
    return _labelled(given, "--config", "FLAGS") if given else dict(CONFIGS)


def _labelled(given: list[str] | None, option: str, what: str) -> dict[str, str]:
    """``LABEL=VALUE`` items of a repeatable ``option`` as a dict."""
    found = {}
    for item in given or ():
        label, sep, value = item.partition("=")
        if not sep or not label.strip():
            raise ValueError(f"{option} {item!r}: write LABEL={what}")
        found[label.strip()] = value.strip()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        configs = configs_of(args.config)
        pythons = _labelled(args.python, "--python", "PYTHON")
        unknown = sorted(set(pythons) - set(configs))
        if unknown:
            raise ValueError(f"--python names no configuration: {', '.join(unknown)}")
        evaluated, generated = (int(x) for x in args.question_tokens.split(","))
    except ValueError as exc:
        parser.error(str(exc))
    if args.rounds < 1 or args.repeats < 1:
        parser.error("--rounds and --repeats are at least 1")
    if not model_is_fetched():
        _say("bench/llama_settings.py: skipped: the local model is not fetched")
        return 0
    measured = asyncio.run(measure(configs, args.rounds, args.repeats, pythons))
    print(table(measured, evaluated, generated))
    return 0


if __name__ == "__main__":
    sys.exit(main())
