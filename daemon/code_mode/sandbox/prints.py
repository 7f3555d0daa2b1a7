"""The print cap: ``print()`` output of one snippet, collected up to ``max_print_bytes``."""

from __future__ import annotations

__all__ = ["PrintSink"]


class PrintSink:
    """Collects ``print()`` output up to ``max_bytes``; past it, drops it and flags the breach.

    The engine fails the snippet with :attr:`message` (a ``MemoryError``) at
    its next host call, or when it completes. Raising from the callback at
    the breach would end the checkout when the output is flushed just before
    a host call (Monty does that flush). A print loop that never reaches a
    host call is stopped by raising ``MemoryError`` once :data:`RUNAWAY_BYTES`
    more were dropped: far more than one flush interval (5 ms) of printing,
    so that raise comes in a timed flush, which keeps the checkout.
    """

    RUNAWAY_BYTES = 4 * 1024 * 1024

    def __init__(self, max_bytes: int, earlier: str = ""):
        # ``earlier``: what the snippet printed before it paused (counts against the cap)
        self.max_bytes = max_bytes
        self.used = len(earlier.encode())
        self.dropped = 0
        self.overflowed = False
        self._parts: list[str] = [earlier] if earlier else []

    @property
    def message(self) -> str:
        """The text of the breach's ``MemoryError``."""
        return (
            f"print output exceeded the {self.max_bytes:,}-byte cap; print less "
            "(a summary, a count) or return a value"
        )

    def __call__(self, stream: str, text: str) -> None:
        """Monty's ``print_callback``: ``stream`` is ``'stdout'`` or ``'stderr'``."""
        size = len(text.encode("utf-8", "surrogatepass"))
        if self.overflowed or self.used + size > self.max_bytes:
            self.overflowed = True
            self.dropped += size
            if self.dropped > self.RUNAWAY_BYTES:
                raise MemoryError(self.message)
            return
        self.used += size
        self._parts.append(text)

    @property
    def text(self) -> str:
        """Everything printed so far, stdout and stderr interleaved."""
        return "".join(self._parts)
