"""bench/llama_settings.py's arithmetic and arguments (the measuring needs the model)."""

from __future__ import annotations

import pytest

from bench.llama_settings import CONFIGS, Measured, configs_of, main, table
from bench.questions.speed import Speeds


def _speeds(prompt: float, generation: float) -> Speeds:
    return Speeds(prompt=prompt, generation=generation, prompt_tokens=1100, generated=48)


def test_the_table_holds_every_configuration_to_the_first() -> None:
    """Medians of each configuration's calibrations; a question's tokens at them; the ratio
    to the first; a configuration whose server never started is shown without numbers."""
    shipped = Measured("shipped", "", [_speeds(60, 20), _speeds(50, 18), _speeds(70, 22)])
    other = Measured("n_threads 1", "--n_threads 1", [_speeds(60, 10)])
    broken = Measured("flash_attn", "--flash_attn true")
    text = table([shipped, other, broken], evaluated=600, generated=200)
    rows = text.splitlines()
    assert "a question (600 evaluated, 200 generated), s | vs shipped |" in rows[0]
    # 600/60 + 200/20 = 20 s; 600/60 + 200/10 = 30 s
    assert rows[2] == "| shipped | `(none)` | 60.0 | 20.0 | 20.0 | 1.00x |"
    assert rows[3] == "| n_threads 1 | `--n_threads 1` | 60.0 | 10.0 | 30.0 | 1.50x |"
    assert rows[4] == "| flash_attn | `--flash_attn true` | – | – | – | – |"


def test_configurations_are_label_equals_flags_or_the_defaults() -> None:
    assert configs_of(None) == CONFIGS
    assert next(iter(CONFIGS.values())) == ""  # the reference is the shipped server
    assert configs_of(["a=", "b = --n_batch 64"]) == {"a": "", "b": "--n_batch 64"}
    with pytest.raises(ValueError, match="LABEL=FLAGS"):
        configs_of(["--n_threads 1"])


def test_bad_arguments_are_refused_before_any_server_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (
        ["--config", "no label"],
        ["--question-tokens", "9"],
        ["--rounds", "0"],
        ["--config", "a=", "--python", "b=/usr/bin/python3"],
        ["--config", "a=", "--python", "/usr/bin/python3"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "LABEL=FLAGS" in err
    assert "--python names no configuration: b" in err
    assert "LABEL=PYTHON" in err
