"""One updating line on a terminal: someone's progress, with the seconds waited so far.

``atirc pub --wait`` shows the replier's ``status`` frames with it while it
waits (only when stdout is a terminal: a pipe gets the reply and nothing
else). The line is redrawn in place (carriage return, then erase to the end
of the line), cut to the terminal's width so it never wraps (a wrapped line
could not be erased), and erased before anything else is printed.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["ERASE", "StatusLine"]

ERASE = "\r\x1b[K"
"""Back to the line's start, then erase to its end (ANSI EL)."""


class StatusLine:
    """The status line on ``out``: :meth:`show` a text, :meth:`redraw` it, :meth:`clear` it.

    ``clock`` (seconds, default monotonic) measures the time since the line
    was made; ``width`` (default: the terminal's) bounds what is drawn.
    """

    def __init__(
        self,
        out: TextIO,
        *,
        clock: Callable[[], float] = time.monotonic,
        width: Callable[[], int] | None = None,
    ) -> None:
        self._out = out
        self._clock = clock
        self._width = width or (lambda: shutil.get_terminal_size().columns)
        self._start = clock()
        self.text: str | None = None  # None: nothing shown

    def render(self) -> str:
        """What the line says now: ``[12s] asyncai: thinking`` (no control characters)."""
        elapsed = int(self._clock() - self._start)
        line = f"[{elapsed}s] {self.text or ''}"
        # One column is left free: writing the last one makes some terminals wrap.
        room = max(self._width() - 1, 8)
        return line if len(line) <= room else line[: room - 1] + "…"

    def show(self, text: str) -> None:
        """Draw ``text`` in place of what the line said."""
        self.text = text
        self.redraw()

    def redraw(self) -> None:
        """Draw the line again (the seconds move on); nothing before the first :meth:`show`."""
        if self.text is not None:
            self._out.write(ERASE + self.render())
            self._out.flush()

    def clear(self) -> None:
        """Erase the line, so what is printed next starts on a clean line."""
        if self.text is not None:
            self.text = None
            self._out.write(ERASE)
            self._out.flush()

    async def tick(self, interval: float = 1.0) -> None:
        """Redraw every ``interval`` seconds until cancelled (its owner cancels it)."""
        while True:
            await asyncio.sleep(interval)
            self.redraw()
