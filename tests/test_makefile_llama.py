"""The Makefile's build of llama.cpp: AVX2 by default; with ``LLAMA_CPU=detect`` the
CPU's vector extensions as its flags report them.

``make`` itself evaluates the variables (a ``print-%`` rule given with ``--eval``), with
``CPU_FLAGS`` standing for the flags line ``LLAMA_CPU=detect`` reads from
``/proc/cpuinfo``, so no build runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ZEN4 = (
    "flags : fpu sse2 avx fma f16c bmi2 avx2 avx512f avx512dq avx512cd avx512bw avx512vl"
    " avx512vbmi avx512_vnni avx512_bf16 avx512_vbmi2"
)
HASWELL = "flags : fpu sse2 avx fma f16c bmi2 avx2"
ALDER_LAKE = "flags : fpu sse2 avx fma f16c bmi2 avx2 avx_vnni"
HALF_AVX512 = "flags : fpu avx2 avx512f avx512_vnni"  # no BW/VL/DQ/CD: not ggml's AVX-512


def _make_print(name: str, *settings: str) -> subprocess.CompletedProcess[str]:
    """``make`` evaluating the variable ``name`` with ``settings`` (``KEY=VALUE``)."""
    return subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", "print-%: ; @echo $($*)",
         f"print-{name}", *settings],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def _var(name: str, cpu_flags: str | None, *settings: str) -> str:
    flags = [] if cpu_flags is None else [f"CPU_FLAGS={cpu_flags}"]
    done = _make_print(name, *flags, *settings)
    done.check_returncode()
    return done.stdout.strip()


def _on(cpu_flags: str | None) -> set[str]:
    args = _var("LLAMA_CMAKE_ARGS", cpu_flags).split()
    return {
        a[2:].removesuffix("=ON") for a in args if a.startswith("-DGGML_") and a.endswith("=ON")
    }


def test_the_default_build_is_avx2_whatever_the_cpu_has() -> None:
    """The AVX-512 build moved the answers (issue 31, r38): it is asked for, not detected."""
    assert _on(None) == _on(HASWELL)
    assert _var("LLAMA_PIP_CACHE", None) == ""  # pip's own cache, as before


def test_detect_reads_this_machines_flags() -> None:
    # where there is no /proc/cpuinfo, detect reads no flags: the AVX2 build, as for ""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.is_file() else ""
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    assert _var("LLAMA_CMAKE_ARGS", None, "LLAMA_CPU=detect") == _var("LLAMA_CMAKE_ARGS", line)


def test_avx512_and_its_extensions_where_the_cpu_has_them() -> None:
    assert {"GGML_AVX512", "GGML_AVX512_VBMI", "GGML_AVX512_VNNI", "GGML_AVX512_BF16"} <= _on(ZEN4)
    assert "GGML_AVX_VNNI" not in _on(ZEN4)


def test_avx2_alone_where_it_is_all_there_is() -> None:
    assert _on(HASWELL) == {"GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2"}
    assert _on(ALDER_LAKE) == _on(HASWELL) | {"GGML_AVX_VNNI"}
    # VNNI on 512-bit registers needs the AVX-512 ggml builds with (F, CD, VL, DQ, BW)
    assert _on(HALF_AVX512) == _on(HASWELL)


def test_never_native_never_amx() -> None:
    for flags in (ZEN4, HASWELL, ALDER_LAKE, ""):
        args = _var("LLAMA_CMAKE_ARGS", flags).split()
        assert "-DGGML_NATIVE=OFF" in args
        assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(args)


def test_each_set_of_extensions_keeps_its_wheel_apart() -> None:
    caches = {_var("LLAMA_PIP_CACHE", flags) for flags in (ZEN4, HASWELL, ALDER_LAKE)}
    assert len(caches) == 3
    assert _var("LLAMA_PIP_CACHE", HASWELL) == _var("LLAMA_PIP_CACHE", HASWELL + " sse4_2")


def test_another_llama_cpu_is_refused_with_the_two_it_takes() -> None:
    done = _make_print("LLAMA_CMAKE_ARGS", "LLAMA_CPU=native")
    assert done.returncode != 0
    assert "LLAMA_CPU is avx2 (the default) or detect, not 'native'" in done.stderr
