"""The small-model profile: a harness that makes small models succeed with ``run_code``.

Measured with Qwen2.5-Coder-1.5B-Instruct on llama-cpp-python 0.3.36
(notes/local-model.md, issue 9 and its benchmark, ``bench/small_model.py``),
each piece fixes one observed failure:

| failure                                                   | fix here                       |
|-----------------------------------------------------------|--------------------------------|
| ``tool_choice="auto"``: it never calls run_code; it writes | the code-block protocol: the   |
| pseudo calls as text. Forced (a JSON grammar): with a real | model replies with a fenced    |
| catalog, 6 of 6 snippets were one-line JavaScript          | ``python`` block, the harness  |
|                                                           | runs it as run_code            |
|                                                           | (:func:`extract_code`)         |
| the API only in the tool description: it ignores it and   | :func:`system_prompt`: short   |
| uses the kubernetes client library; the full sandbox text | rules, the catalog and a       |
| (2 500 tokens) costs a minute of prompt processing        | worked example in the system   |
|                                                           | message                        |
| raw newlines, an unescaped ``"`` in arguments JSON (when a | :func:`recover_arguments`,     |
| server does return tool calls); calls written as text     | :func:`text_tool_calls`        |
| ``await f()['items']`` (await binds looser), a trailing    | :func:`repair_code`            |
| assignment or ``return`` (result None), stub redefinitions |                                |
| ``print(x)`` last: the result is ``{"output": "x"}``      | :func:`prints_as_result`       |
| at temperature 0 it resends the failing snippet verbatim  | :data:`RETRY_TEMPERATURE`,     |
|                                                           | :data:`MAX_FAILED_SNIPPETS`;   |
|                                                           | :func:`retry_seed` (the same   |
|                                                           | retry draws the same snippet)  |
| after the result it restates the code, or invents facts   | :func:`result_message` (the    |
|                                                           | result, then the question      |
|                                                           | again, in the last message)    |
| a wrong reading of the question (a filter dropped, "first | :mod:`vote`: a second sample   |
| N" read as "below N") gives a confident wrong number      | for a short answer, a third on |
|                                                           | a tie (:func:`vote_key`)       |
| a key only some items have, read a level too high; a key  | :func:`key_hint` after a look  |
| no value holds, read again and again                      | that counts the items with it  |
| a key read a level off (``r['components']``, not          | :func:`key_fix`: read where    |
| ``r['json']['components']``): a round, and new mistakes   | the look found it, run again   |
| a URL in the question fetched with the wrong function     | :func:`url_hint`               |
| the function named like a word of the question, not the   | :func:`topic_hint`: the one    |
| one holding what it asks about (workspaces for pods)      | whose stub covers its words    |
| a reply that retells the worked example                   | :func:`echoes_example`         |

The loop (``daemon.model.loop``) is given :class:`SmallModelProfile`
(``profile``) when ``[model] harness`` is on, and calls it at its named
points; the harness's control logic, the code-block protocol that asks,
mends, runs, looks and votes, is ``blocks`` (with ``mending``: a broken
``run_code`` call repaired, calls written as text read as calls). Everything
else here is pure, one module per job: ``prompts`` (the
system message, built from the :class:`~daemon.code_mode.catalog.Catalog`),
``parsing`` (code blocks, broken arguments, calls written as text),
``repair`` (AST repairs of the code), ``feedback`` (what a result tells the
model, and the value quoted in the answer), ``keys`` (where a missing key
really is), ``keyfix`` (a key read where the look found it), ``fields``
(result fields the stubs' sketches cut short), ``peek`` (the sandbox snippet
that looks at a failed snippet's variables), ``look`` (what it found, as
data: paths, values and counts, rendered only for the model), ``topics``
(which function a question is about) and ``vote`` (self-consistency for short
answers).

May import: what ``daemon.model`` may, and ``daemon.model``'s lower modules
(``calls``, ``conversation``, ``endpoint``, ``execute``, ``records``,
``prompts``, ``profile``, ``rounds``); never ``daemon.model.loop`` or
``daemon.model.profiles``, which choose it.
"""

from daemon.model.harness.blocks import MAX_KEY_FIXES
from daemon.model.harness.feedback import (
    answer_instruction,
    error_signature,
    fetched_url,
    holds_none,
    is_empty_result,
    prints_as_result,
    quote_result,
    readable,
    repeat_hint,
    result_message,
    retry_hint,
    url_hint,
    value_atoms,
)
from daemon.model.harness.fields import hidden_fields, hidden_paths
from daemon.model.harness.keyfix import key_fix
from daemon.model.harness.keys import key_hint, missing_key, value_hint
from daemon.model.harness.look import Look, read_look
from daemon.model.harness.mending import mend_call, text_calls
from daemon.model.harness.parsing import (
    code_message,
    extract_code,
    is_code_only,
    recover_arguments,
    text_tool_calls,
)
from daemon.model.harness.peek import (
    assigned_names,
    peek_code,
    read_names,
)
from daemon.model.harness.profile import HARNESS_CATALOG_BUDGET, CodeBlockTurns, SmallModelProfile
from daemon.model.harness.prompts import (
    CODE_STOP,
    HARNESS_RULES,
    HARNESS_SYSTEM_PROMPT,
    MAX_FAILED_SNIPPETS,
    RETRY_TEMPERATURE,
    WORKED_EXAMPLE,
    Signature,
    catalog_signatures,
    compact_description,
    echoes_example,
    retry_seed,
    system_prompt,
)
from daemon.model.harness.repair import repair_code
from daemon.model.harness.topics import Topic, catalog_topics, topic_hint
from daemon.model.harness.vote import (
    MAX_VOTE_SAMPLES,
    REREAD,
    VOTE_TEMPERATURE,
    majority,
    may_rerun,
    vote_key,
)

__all__ = [
    "CODE_STOP",
    "HARNESS_CATALOG_BUDGET",
    "HARNESS_RULES",
    "HARNESS_SYSTEM_PROMPT",
    "MAX_FAILED_SNIPPETS",
    "MAX_KEY_FIXES",
    "MAX_VOTE_SAMPLES",
    "REREAD",
    "RETRY_TEMPERATURE",
    "VOTE_TEMPERATURE",
    "WORKED_EXAMPLE",
    "CodeBlockTurns",
    "Look",
    "Signature",
    "SmallModelProfile",
    "Topic",
    "answer_instruction",
    "assigned_names",
    "catalog_signatures",
    "catalog_topics",
    "code_message",
    "compact_description",
    "echoes_example",
    "error_signature",
    "extract_code",
    "fetched_url",
    "hidden_fields",
    "hidden_paths",
    "holds_none",
    "is_code_only",
    "is_empty_result",
    "key_fix",
    "key_hint",
    "majority",
    "may_rerun",
    "mend_call",
    "missing_key",
    "peek_code",
    "prints_as_result",
    "quote_result",
    "read_look",
    "read_names",
    "readable",
    "recover_arguments",
    "repair_code",
    "repeat_hint",
    "result_message",
    "retry_hint",
    "retry_seed",
    "system_prompt",
    "text_calls",
    "text_tool_calls",
    "topic_hint",
    "url_hint",
    "value_atoms",
    "value_hint",
    "vote_key",
]
