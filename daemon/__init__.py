"""asyncai: the agent daemon, one subpackage per concept.

``cli`` (the commands: parsing and wiring only), ``app`` (a daemon built from a
config), ``lanes`` (what a config builds to answer a channel: the tool
executors and each channel's lane), ``web`` (the operator's console),
``telemetry`` (traces and metrics), ``runtime`` (threads and runs), ``model``
(the OpenAI-compatible loop and the small-model harness), ``code_mode``
(run_code on Monty), ``mcp`` (MCP servers over stdio), ``local_model`` (the
embedded model); shared by all: ``config``, ``tools`` (the executor interface
and its values), ``approvals`` (pure, and lowest of all: the values that cross
the executor boundary, the policy, the commands and the words), ``limits``
(code mode's, which the config sets), ``errors``, ``backoff``, ``logging``,
``asgi`` (an ASGI app served on the daemon's loop: the console's and the
metrics' one way), ``crashpoints`` (the SIGKILL at a named step that only
tests arm); ``cluster`` (several daemons on NATS).
daemon/ may import ``channels`` and ``sessions``; neither imports daemon/.
"""

__all__: list[str] = []
