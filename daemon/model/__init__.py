"""The model: the OpenAI-compatible loop that answers one run.

Holds the loop (``loop``: rounds, the final round, the ``run_code`` tool
list), the code-block loop for small models (``small``), the endpoint with
its retries and error mapping (``endpoint``), tool calls (``calls``: parsing,
name sanitising; ``execute``: running one), transcript records and metrics
(``records``), the fixed prompt text (``prompts``), and
``daemon.model.harness`` for small models.

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.config``,
``daemon.backoff``, ``daemon.logging``, ``daemon.local_model.fetch`` (the
embedded model's name), ``daemon.runtime.runs`` (the request and result),
``daemon.code_mode`` (the catalog the harness reads) and ``sessions.model``
(record rows); never ``daemon.cli``, ``daemon.app`` or the MCP executor.
"""

from daemon.model.loop import HARNESS_CATALOG_BUDGET, OpenAiCompatibleBackend, harness_on

__all__ = ["HARNESS_CATALOG_BUDGET", "OpenAiCompatibleBackend", "harness_on"]
