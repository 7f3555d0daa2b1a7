"""The catalog room: what the model is told about the inner tools, and how it finds them.

Holds the catalog of inner tools as typed ``async def`` stubs (``catalog``,
from JSON schemas by ``schema``), the one tool the model sees and its
description (``description``: ``run_code``'s schema and text), the index,
``search_tools`` and ``describe`` for a catalog over its budget (``search``),
and the return shapes learned from results and where they are kept (``shapes``,
``learned``: its ``ShapeStore`` port). Pure
code apart from the shapes' store, which it reaches through
:class:`~daemon.code_mode.catalog.ShapeStore`.

This is code mode's public face to the rest of the daemon: the small-model
harness and the runtime's restart note import what they need of the catalog
from here, never from its modules. It also hands on two facts that
``run_code``'s description states and the harness relies on: the result of a
snippet that shows nothing (``NO_OUTPUT``, the return contract's) and the
helpers defined in every scope (``RESERVED_NAMES``, the helpers').

May import: ``daemon.code_mode``'s shared modules (``contract``, ``convert``,
``helpers``), ``daemon.limits``, ``daemon.tools``, ``daemon.logging`` and
pydantic-monty; never ``daemon.code_mode.sandbox`` or
``daemon.code_mode.repl``, which stand above it.
"""

from daemon.code_mode.catalog.catalog import (
    CallRejected,
    Catalog,
    CatalogEntry,
    CatalogSource,
    python_name,
)
from daemon.code_mode.catalog.description import (
    RUN_CODE,
    catalog_section,
    helpers_section,
    run_code_definition,
)
from daemon.code_mode.catalog.learned import (
    ChannelShapes,
    LearnedShape,
    ShapeBook,
    ShapeRecord,
    ShapeStore,
    shape_notice,
)
from daemon.code_mode.catalog.schema import (
    SKETCH_MAX_DEPTH,
    Resolver,
    schema_type,
    unwrap_result,
)
from daemon.code_mode.catalog.search import SEARCH_HELPERS, helper_result, is_helper
from daemon.code_mode.contract import NO_OUTPUT
from daemon.code_mode.helpers import RESERVED_NAMES

__all__ = [
    "NO_OUTPUT",
    "RESERVED_NAMES",
    "RUN_CODE",
    "SEARCH_HELPERS",
    "SKETCH_MAX_DEPTH",
    "CallRejected",
    "Catalog",
    "CatalogEntry",
    "CatalogSource",
    "ChannelShapes",
    "LearnedShape",
    "Resolver",
    "ShapeBook",
    "ShapeRecord",
    "ShapeStore",
    "catalog_section",
    "helper_result",
    "helpers_section",
    "is_helper",
    "python_name",
    "run_code_definition",
    "schema_type",
    "shape_notice",
    "unwrap_result",
]
