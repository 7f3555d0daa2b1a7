"""The bench's shared data: about 1 MB of Kubernetes-ish rows, the same on every side.

Its own module so ``bench/code_mode.py`` and ``bench/peer_pai.py`` (which
``code_mode.py --peer pai`` starts) both take it without importing each other.
"""

from __future__ import annotations

import random

__all__ = ["make_rows"]


def make_rows(n: int = 11_000) -> list[dict]:
    """About 1 MB of Kubernetes-ish rows, deterministic."""
    rng = random.Random(0)
    return [
        {
            "id": i,
            "name": f"object-{i}",
            "kcp": rng.choice("abc"),
            "size": rng.randint(0, 10_000),
            "tags": [rng.choice("xyz") for _ in range(2)],
        }
        for i in range(n)
    ]
