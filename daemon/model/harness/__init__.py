"""The small-model profile: a harness that makes small models succeed with ``run_code``.

Measured with Qwen2.5-Coder-1.5B-Instruct on llama-cpp-python 0.3.36
(notes/local-model.md, issue 9; the benchmark is ``python -m bench.questions``),
each piece fixes one observed failure:

| failure                                  | fix here                       | rule(s)            |
|------------------------------------------|--------------------------------|--------------------|
| ``tool_choice="auto"``: it never calls   | the code-block protocol: the   | (the protocol)     |
| run_code; it writes pseudo calls as      | model replies with a fenced    |                    |
| text. Forced (a JSON grammar): with a    | ``python`` block, the harness  |                    |
| real catalog, 6 of 6 snippets were       | runs it as run_code            |                    |
| one-line JavaScript                      | (:func:`extract_code`)         |                    |
| the API only in the tool description: it | :func:`system_prompt`: short   | worked-example,    |
| ignores it and uses the kubernetes       | rules, the catalog and a       | hidden-fields      |
| client library; the full sandbox text (2 | worked example in the system   |                    |
| 500 tokens) costs a minute of prompt     | message                        |                    |
| processing                               |                                |                    |
| raw newlines, an unescaped ``"`` in      | :func:`recover_arguments`,     | recover-arguments, |
| arguments JSON; calls written as text    | :func:`text_tool_calls`        | text-calls         |
| a trailing assignment (result None), a   | :func:`repair_code`            | last-assignment,   |
| variable named like a helper             |                                | rename-helpers     |
| at temperature 0 it resends the failing  | :func:`warm_retry`,            | warm-retry         |
| snippet verbatim                         | :data:`MAX_FAILED_SNIPPETS`,   | retry-alone        |
|                                          | :func:`replays_code`           |                    |
| after the result it restates the code,   | :func:`result_message` (the    | quote-result       |
| or invents facts                         | result, then the question      |                    |
|                                          | again), the result quoted      |                    |
| a wrong reading of the question (a       | :mod:`vote`: a second sample   | vote               |
| filter dropped, "first N" read as "below | for a short answer             |                    |
| N")                                      |                                |                    |
| a failed snippet's data unseen           | a look at its variables        | look               |
|                                          | (:mod:`peek`)                  |                    |
| a key only some items have, read a level | :func:`key_hint` after a look  | key-hint           |
| too high; a key no value holds, read     | that counts the items          |                    |
| again                                    |                                |                    |
| a loop over a dict whose items are read  | :func:`loop_fix`: loop over    | dict-loop          |
| as dicts (its one list one key below)    | that list, run again           |                    |
| the function named like a word of the    | :func:`topic_hint`: the one    | topic-hint         |
| question, not the one holding what it    | whose stub covers its words    |                    |
| asks about (workspaces for pods)         |                                |                    |
| a reply that retells the worked example  | :func:`echoes_example`         | echo-check         |
| one example about orders says nothing of | :func:`closest_examples` of    | examples           |
| a deployment's own tools                 | ``[model] examples``           |                    |
| (trial) a URL the question names that   | :func:`unfetched_url`: the     | unfetched-url      |
| the code never fetched (another tool's   | fetch, after a failure or a    |                    |
| data, an example's SQL)                  | good result                    |                    |
| every snippet failed, and the answer     | :func:`failure_reply` instead  | failed-honest      |
| states values it never computed          | of the model's words; no       |                    |
|                                          | answer round                   |                    |

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
really is), ``loopfix`` (a loop over a dict made a loop over its list),
``fields``
(result fields the stubs' sketches cut short), ``peek`` (the sandbox snippet
that looks at a failed snippet's variables), ``look`` (what it found, as
data: paths, values and counts, rendered only for the model), ``topics``
(which function a question is about), ``vote`` (self-consistency for short
answers), ``examples`` (solved questions of ``[model] examples``, the closest
shown per question) and ``rules`` (every rule's name, :data:`RULES`, and which
are on).

Every rule and mechanism has a stable name in :data:`RULES` (with the one-line
class of questions or data it serves) and can be switched off for a
measurement with ``ASYNCAI_HARNESS_OFF=name,name``; the table's right
column names the main ones, :data:`RULES` has them all.
:data:`TRIALS` are mechanisms under measurement, off until
``ASYNCAI_HARNESS_ON`` names them.

May import: what ``daemon.model`` may, and ``daemon.model``'s lower modules
(``calls``, ``conversation``, ``endpoint``, ``execute``, ``records``,
``prompts``, ``profile``, ``rounds``); never ``daemon.model.loop`` or
``daemon.model.profiles``, which choose it.
"""

from daemon.model.harness.blocks import MAX_RERUNS
from daemon.model.harness.examples import (
    CHOSEN_EXAMPLES,
    Example,
    closest_examples,
    foreign_calls,
    parse_examples,
    render_examples,
)
from daemon.model.harness.feedback import (
    answer_instruction,
    error_signature,
    failure_reply,
    fetched_url,
    quote_result,
    replays_code,
    result_message,
    unfetched_message,
    unfetched_url,
    value_atoms,
)
from daemon.model.harness.fields import hidden_fields, hidden_paths
from daemon.model.harness.keys import key_hint, missing_key
from daemon.model.harness.look import Look, read_look
from daemon.model.harness.loopfix import loop_fix
from daemon.model.harness.mending import mend_call, text_calls
from daemon.model.harness.parsing import (
    code_message,
    extract_code,
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
    HOW_TO_ANSWER,
    MAX_FAILED_SNIPPETS,
    RETRY_TEMPERATURE,
    WORKED_EXAMPLE,
    Signature,
    catalog_signatures,
    compact_description,
    echoes_example,
    retry_seed,
    system_prompt,
    warm_retry,
)
from daemon.model.harness.repair import repair_code
from daemon.model.harness.rules import (
    RULES,
    TRIALS,
    Switches,
    active,
    acts,
    from_environ,
    noticing,
    parse_names,
    reaching,
)
from daemon.model.harness.topics import Topic, catalog_topics, topic_hint
from daemon.model.harness.vote import (
    MAX_VOTE_SAMPLES,
    REREAD,
    VOTE_TEMPERATURE,
    majority,
    may_rerun,
    vote_key,
    vote_samples,
)

__all__ = [
    "CHOSEN_EXAMPLES",
    "CODE_STOP",
    "HARNESS_CATALOG_BUDGET",
    "HARNESS_RULES",
    "HARNESS_SYSTEM_PROMPT",
    "HOW_TO_ANSWER",
    "MAX_FAILED_SNIPPETS",
    "MAX_RERUNS",
    "MAX_VOTE_SAMPLES",
    "REREAD",
    "RETRY_TEMPERATURE",
    "RULES",
    "TRIALS",
    "VOTE_TEMPERATURE",
    "WORKED_EXAMPLE",
    "CodeBlockTurns",
    "Example",
    "Look",
    "Signature",
    "SmallModelProfile",
    "Switches",
    "Topic",
    "active",
    "acts",
    "answer_instruction",
    "assigned_names",
    "catalog_signatures",
    "catalog_topics",
    "closest_examples",
    "code_message",
    "compact_description",
    "echoes_example",
    "error_signature",
    "extract_code",
    "failure_reply",
    "fetched_url",
    "foreign_calls",
    "from_environ",
    "hidden_fields",
    "hidden_paths",
    "key_hint",
    "loop_fix",
    "majority",
    "may_rerun",
    "mend_call",
    "missing_key",
    "noticing",
    "parse_examples",
    "parse_names",
    "peek_code",
    "quote_result",
    "reaching",
    "read_look",
    "read_names",
    "recover_arguments",
    "render_examples",
    "repair_code",
    "replays_code",
    "result_message",
    "retry_seed",
    "system_prompt",
    "text_calls",
    "text_tool_calls",
    "topic_hint",
    "unfetched_message",
    "unfetched_url",
    "value_atoms",
    "vote_key",
    "vote_samples",
    "warm_retry",
]
