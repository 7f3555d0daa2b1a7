"""The CPU's vector extensions that a build of llama.cpp leaves unused.

llama.cpp prints what it was compiled for as it loads a model
(``llama_print_system_info``: ``CPU : SSE3 = 1 | ... | AVX2 = 1 | AVX512 = 1 | ...``),
and the kernel says what the CPU has (the ``flags`` line of ``/proc/cpuinfo``). The
Makefile builds for the extensions the CPU reports (its ``LLAMA_CPU_ARGS``, the same
table as :data:`EXTENSIONS`); a venv built before it did, or by hand with other
``CMAKE_ARGS``, runs the model slower than the machine can: on two Zen 4 cores the
AVX2 build evaluated prompts at 0.72x the AVX-512 build's speed (bench/llama_settings.py,
2026-12-04). ``asyncai up`` and ``asyncai model serve`` say so, and how to build again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "CPUINFO",
    "EXTENSIONS",
    "REBUILD",
    "built_for",
    "cpu_flags",
    "rebuild_note",
    "unused_extensions",
]

CPUINFO = Path("/proc/cpuinfo")

_AVX512 = frozenset({"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"})

#: ggml's name for an extension (as the build's CPU line prints it) → the CPU flags it
#: needs, as ``/proc/cpuinfo`` spells them (ggml's AVX-512 is F, CD, VL, DQ and BW).
EXTENSIONS: dict[str, frozenset[str]] = {
    "AVX512": _AVX512,
    "AVX512_VBMI": _AVX512 | {"avx512vbmi"},
    "AVX512_VNNI": _AVX512 | {"avx512_vnni"},
    "AVX512_BF16": _AVX512 | {"avx512_bf16"},
    "AVX_VNNI": frozenset({"avx_vnni"}),
}

REBUILD = (
    ".venv/bin/pip uninstall -y llama-cpp-python && rm -f .venv/.installed-local"
    " && make .venv/.installed-local"
)

_BUILT = re.compile(r"\b([A-Z0-9_]+) = 1\b")


def built_for(system_info: str) -> frozenset[str]:
    """The extensions a build's CPU line says it was compiled for (``NAME = 1``)."""
    _, _, cpu = system_info.partition("CPU :")
    return frozenset(_BUILT.findall(cpu))


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The first processor's flags as the kernel reports them; none where it does not
    (another system, no ``/proc``)."""
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def unused_extensions(system_info: str | None, flags: Iterable[str]) -> list[str]:
    """The extensions of :data:`EXTENSIONS` the CPU has and the build does not use, in
    the table's order; none when the build's CPU line is unknown (not printed yet, or
    another server)."""
    if not system_info or "CPU :" not in system_info:
        return []
    has, built = frozenset(flags), built_for(system_info)
    return [name for name, needs in EXTENSIONS.items() if needs <= has and name not in built]


def rebuild_note(unused: list[str]) -> str:
    """What to tell the user of a build that leaves ``unused`` extensions unused."""
    return (
        f"llama.cpp was built without {', '.join(unused)}, which this CPU has: the model "
        f"runs slower than it could (docs/local-model.md); build it again: {REBUILD}"
    )
