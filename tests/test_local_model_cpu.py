"""Which of the CPU's vector extensions a build of llama.cpp leaves unused (pure)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from daemon.local_model.cpu import (
    EXTENSIONS,
    REBUILD,
    built_for,
    cpu_flags,
    rebuild_note,
    unused_extensions,
)

# The two builds' lines on this project's machine, 2026-12-04 (llama-cpp-python 0.3.36).
AVX2_BUILD = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
AVX512_BUILD = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | LLAMAFILE = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)
ZEN4 = frozenset({
    "fpu", "vme", "sse2", "ssse3", "fma", "avx", "f16c", "bmi2", "avx2", "avx512f",
    "avx512dq", "avx512ifma", "avx512cd", "avx512bw", "avx512vl", "avx512_bf16",
    "avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bitalg",
})  # fmt: skip


def test_the_build_line_names_what_it_was_compiled_for() -> None:
    assert built_for(AVX2_BUILD) == {
        "SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE", "OPENMP", "REPACK",
    }  # fmt: skip
    assert "AVX512_VNNI" in built_for(AVX512_BUILD)
    assert built_for("system_info: n_threads = 2 | CPU : AVX2 = 1 | AVX512 = 0 | ") == {"AVX2"}


def test_an_avx2_build_on_zen4_leaves_avx512_and_its_extensions_unused() -> None:
    assert unused_extensions(AVX2_BUILD, ZEN4) == [
        "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16",
    ]  # fmt: skip
    assert unused_extensions(AVX512_BUILD, ZEN4) == []


def test_a_cpu_without_the_extensions_or_an_unknown_build_says_nothing() -> None:
    haswell = ["fpu", "avx", "avx2", "fma", "f16c", "bmi2"]
    assert unused_extensions(AVX2_BUILD, haswell) == []
    assert unused_extensions(AVX2_BUILD, [*haswell, "avx_vnni"]) == ["AVX_VNNI"]
    # VNNI on 512-bit registers needs the whole of ggml's AVX-512 (F, CD, VL, DQ, BW)
    assert unused_extensions(AVX2_BUILD, ["avx512f", "avx512_vnni"]) == []
    assert unused_extensions(None, ZEN4) == []
    assert unused_extensions("loading model", ZEN4) == []


@given(st.sets(st.sampled_from(sorted(set().union(*EXTENSIONS.values()) | {"avx2", "sse3"}))))
def test_an_extension_is_unused_only_when_the_cpu_has_all_it_needs(flags: set[str]) -> None:
    unused = unused_extensions(AVX2_BUILD, flags)
    assert unused == [name for name in EXTENSIONS if name in unused]  # the table's order
    for name, needs in EXTENSIONS.items():
        assert (name in unused) == (needs <= flags)
    assert unused_extensions(AVX512_BUILD + "AVX_VNNI = 1 |", flags) == []


def test_the_kernels_flags_come_from_the_first_processor(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f\n\n"
        "processor\t: 1\nflags\t\t: fpu\n"
    )
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512f"}
    assert cpu_flags(tmp_path / "missing") == frozenset()
    (tmp_path / "empty").write_text("processor\t: 0\n")
    assert cpu_flags(tmp_path / "empty") == frozenset()


def test_the_note_names_what_is_unused_and_how_to_build_again() -> None:
    note = rebuild_note(["AVX512", "AVX512_VNNI"])
    assert note.startswith("llama.cpp was built without AVX512, AVX512_VNNI, which this CPU has")
    assert note.endswith(REBUILD)
    assert "make .venv/.installed-local" in REBUILD
