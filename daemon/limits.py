"""The limits of code mode, tunable by library users and the ``[code_mode]`` config.

Defaults follow spec 0004 (Limits, A4, A5). Time limits are in seconds, sizes
in bytes or characters as named. A shared module, below both readers: code
mode enforces the limits (and hands the class on as
``daemon.code_mode.CodeModeLimits``), and the ``[code_mode]`` section of the
configuration sets them, without importing code mode (and code mode without
importing the configuration, whose pydantic would double its import time).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CodeModeLimits"]


@dataclass(frozen=True)
class CodeModeLimits:
    """Every bound code mode enforces, in one place.

    - ``max_feed_duration``: execution time per snippet; time spent waiting
      for tools is not counted. Breach: error result, REPL state reset.
    - ``max_suspensions``: host round trips (tool calls, name lookups,
      awaits) per snippet, counted by the host. Breach: REPL state reset.
    - ``max_nested_calls``: tool calls per snippet. Breach: a catchable
      ``RuntimeError`` at the call site.
    - ``max_print_bytes``: collected ``print()`` output per snippet.
      Breach: ``MemoryError``; the REPL is kept.
    - ``max_memory``: sandbox heap per scope. Breach: ``MemoryError``, REPL
      state reset.
    - ``tool_timeout``: one nested tool call. Breach: ``RuntimeError`` in
      the snippet.
    - ``max_wall``: one ``run_code`` call, wall clock. Breach: in-flight
      calls dropped, REPL state reset.
    - ``max_result_chars``: the text returned to the model. Breach: an error
      result with the size and a preview.
    - ``max_scopes``: REPL scopes kept (an LRU keyed by thread id).
    - ``max_scope_dump``: bytes of a thread's stored REPL dump (issue 14).
      Breach: the REPL is not stored (so it will not survive an eviction
      or a restart) and the note says so.
    - ``max_snippet_bytes``: the UTF-8 size of one snippet's text. Breach:
      an error result before any work (nothing runs; the REPL is kept).
      256 KiB is some 60 000 tokens of code, past what a model writes in one
      tool call, while a pasted manifest or table still fits; it bounds the
      pre-run checks (which parse the text, in a worker thread) and the
      sandbox's own parse.
    - ``catalog_budget``: characters of rendered stubs the ``run_code``
      description shows (issue 19). Over it, the description lists each
      function by name and one line, and the sandbox gets
      ``search_tools``/``describe``; every function stays callable.
    - ``preamble``: operator Python fed into every new scope after the
      built-in imports.
    """

    max_feed_duration: float = 30.0
    max_suspensions: int = 10_000
    max_nested_calls: int = 100
    max_print_bytes: int = 1024 * 1024
    max_memory: int = 4 * 1024**3
    tool_timeout: float = 120.0
    max_wall: float = 300.0
    max_result_chars: int = 20_000
    max_scopes: int = 8
    max_scope_dump: int = 64 * 1024**2
    max_snippet_bytes: int = 256 * 1024
    catalog_budget: int = 6000
    preamble: str = ""

    def __post_init__(self) -> None:
        for name in (
            "max_feed_duration",
            "max_suspensions",
            "max_nested_calls",
            "max_print_bytes",
            "max_memory",
            "tool_timeout",
            "max_wall",
            "max_result_chars",
            "max_scopes",
            "max_scope_dump",
            "max_snippet_bytes",
            "catalog_budget",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"CodeModeLimits.{name} must be a positive number, got {value!r}")
        if not isinstance(self.preamble, str):
            raise ValueError("CodeModeLimits.preamble must be Python source text")

    @property
    def request_timeout(self) -> float:
        """The pool's per-request deadline: the snippet limit plus 10 s (spec A5).

        Monty raises its own ``TimeoutError`` at ``max_feed_duration``; this
        backstop kills a worker that fails to.
        """
        return self.max_feed_duration + 10.0
