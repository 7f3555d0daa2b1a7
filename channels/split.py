"""Splitting texts that are longer than one frame allows.

Sizes are counted the way the hub counts them: the bytes the text takes inside
a JSON frame (UTF-8, with JSON's escapes), so a chunk that fits here fits on
the wire. Chunks end on character boundaries (never inside a UTF-8 sequence),
preferably after a newline, else after a space, and joining them gives back
the original text exactly.

Pure: no I/O.
"""

from __future__ import annotations

import json

__all__ = ["MIN_CHUNK_BYTES", "json_text_size", "split_text"]

MIN_CHUNK_BYTES = 16
"""The smallest chunk size accepted: room for any character's longest escape."""


def json_text_size(text: str) -> int:
    """Bytes ``text`` takes as a JSON string body (UTF-8, escapes counted, no quotes)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2


def _fitting_prefix(text: str, max_bytes: int) -> int:
    """The longest prefix length of ``text`` whose JSON size is at most ``max_bytes``."""
    # Every character costs 1 to 6 bytes (``\\u0001``), which bounds the search.
    lo = min(len(text), max_bytes // 6)
    hi = min(len(text), max_bytes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if json_text_size(text[:mid]) <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def split_text(text: str, max_bytes: int) -> list[str]:
    """Split ``text`` into chunks of at most ``max_bytes`` JSON bytes each.

    A text that fits is returned as one chunk (also the empty text). A break
    is placed after the last newline in the second half of the window, else
    after the last space there, else at the window's end.
    """
    if max_bytes < MIN_CHUNK_BYTES:
        raise ValueError(f"max_bytes must be at least {MIN_CHUNK_BYTES}")
    if len(text) <= max_bytes and json_text_size(text) <= max_bytes:
        return [text]
    chunks: list[str] = []
    start = 0
    while start < len(text):
        # Every character takes at least one byte, so a chunk lies within the next
        # max_bytes characters: only that window is measured and copied, never the
        # whole rest (which made splitting quadratic in the text's length).
        window = text[start : start + max_bytes]
        if start + len(window) == len(text) and json_text_size(window) <= max_bytes:
            chunks.append(window)
            break
        cut = _fitting_prefix(window, max_bytes)
        # Prefer a natural boundary, but not so early that chunks get tiny.
        floor = cut // 2
        for sep in ("\n", " "):
            at = window.rfind(sep, floor, cut)
            if at != -1:
                cut = at + 1
                break
        chunks.append(window[:cut])
        start += cut
    return chunks
