"""The model: the OpenAI-compatible loop that answers one run, and the profiles it is given.

Holds the loop (``loop``: a run's start, its deadline, a paused run's
resumption), the interface of a model profile (``profile``: what differs
for one kind of model), the profiles a config chooses from (``profiles``:
the default one, or the small-model harness, ``daemon.model.harness``), the
tool-call protocol (``rounds``), the endpoint with its retries and error
mapping, its streamed replies and its slots (``endpoint``, ``stream``), tool
calls (``calls``: parsing, name sanitising; ``execute``: running one), where
a loop stands (``conversation``), transcript records and metrics
(``records``), and the fixed prompt text of the tool-call protocol
(``prompts``).

May import: ``daemon.errors``, ``daemon.tools``, ``daemon.approvals``, ``daemon.config``,
``daemon.backoff``, ``daemon.logging``, ``daemon.local_model.fetch`` (the
embedded model's name), ``daemon.runtime.runs`` (the request and result),
``daemon.code_mode`` (the catalog the harness reads) and ``sessions.model``
(record rows); never ``daemon.cli``, ``daemon.app`` or the MCP executor.
"""

from daemon.model.endpoint import ModelSlots
from daemon.model.loop import OpenAiCompatibleBackend
from daemon.model.profile import ModelProfile
from daemon.model.profiles import model_profile

__all__ = ["ModelProfile", "ModelSlots", "OpenAiCompatibleBackend", "model_profile"]
