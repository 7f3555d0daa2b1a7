"""The model: the OpenAI-compatible loop that answers one run.

Holds the loop (rounds, the final round, the ``run_code`` tool list), its
retry and error mapping, transcript records, tool-call parsing, and
``daemon.model.harness`` for small models.

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.config``,
``daemon.backoff``, ``daemon.logging``, ``daemon.runtime.runs`` (the request
and result), ``daemon.code_mode`` (the catalog the harness reads) and
``sessions.model`` (record rows); never ``daemon.cli`` or ``daemon.mcp``.
"""

from daemon.model.backend import OpenAiCompatibleBackend

__all__ = ["OpenAiCompatibleBackend"]
