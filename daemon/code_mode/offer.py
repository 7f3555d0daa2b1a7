"""What ``run_code`` offers: the catalog and the tool definition, rebuilt as shapes are learned.

The catalog comes from the inner executor's tools, the learned return shapes
(:class:`~daemon.code_mode.catalog.learned.ShapeBook`, issue 19) and
``limits.catalog_budget``; the ``run_code`` definition from the catalog.
Both are built when the executor starts, and again only when a shape was
learned or refreshed since (the book's version moved) or the inner tools grew
(an MCP server that failed at start came up: ``tools_version``), so the description
stays byte-identical from run to run otherwise. A snippet sees the catalog
of the moment it starts, and its nested calls (:meth:`ToolOffer.calls`)
show their results to the book.
"""

from __future__ import annotations

from daemon.approvals import ApprovalGate
from daemon.code_mode.catalog import (
    SEARCH_HELPERS,
    Catalog,
    LearnedShape,
    ShapeBook,
    ShapeStore,
    is_helper,
    run_code_definition,
    shape_notice,
)
from daemon.code_mode.contract import StartedCall
from daemon.code_mode.sandbox import NestedCalls
from daemon.limits import CodeModeLimits
from daemon.tools import AuditObserver, ToolDefinition, ToolExecutor

__all__ = ["ToolOffer"]


class ToolOffer:
    """The catalog and ``run_code`` of one executor, over its inner tools and learned shapes."""

    def __init__(self, inner: ToolExecutor, limits: CodeModeLimits, store: ShapeStore | None):
        self._inner = inner
        self._limits = limits
        self.shapes = ShapeBook(store)
        self._catalog: Catalog | None = None
        self._definition: ToolDefinition | None = None
        self._built: tuple[int, int] | None = None  # the versions they were built at

    async def start(self) -> Catalog:
        """Load the stored shapes, then build (the inner executor is started)."""
        await self.shapes.load()
        self._build()
        return self.catalog

    def _versions(self) -> tuple[int, int]:
        """The book's version and the inner tools' (an MCP executor's ``tools_version``)."""
        return self.shapes.version, getattr(self._inner, "tools_version", 0)

    def _build(self) -> None:
        self._built = self._versions()
        self._catalog = Catalog(
            self._inner.definitions(),
            observed=self.shapes.shape_for,
            budget=self._limits.catalog_budget,
        )
        self._definition = run_code_definition(self._catalog, self._limits)

    def _fresh(self) -> None:
        if self._catalog is None or self._built != self._versions():
            self._build()

    @property
    def built(self) -> Catalog | None:
        """The catalog, or None while nothing was built (never builds)."""
        if self._catalog is not None:
            self._fresh()
        return self._catalog

    @property
    def catalog(self) -> Catalog:
        """The current catalog (built now if needed: the inner tools must be listed)."""
        self._fresh()
        assert self._catalog is not None
        return self._catalog

    @property
    def helpers(self) -> tuple[str, ...]:
        """The search helpers the sandbox has now (none below the budget), which
        a snippet may not rebind, like the built-in helpers."""
        catalog = self.built
        if catalog is None:
            return ()
        return tuple(name for name in SEARCH_HELPERS if is_helper(catalog, name))

    def definition(self) -> ToolDefinition:
        """The current ``run_code`` definition (built now if needed)."""
        self._fresh()
        assert self._definition is not None
        return self._definition

    def calls(
        self,
        thread_id: str | None,
        observer: AuditObserver | None,
        started: list[StartedCall] | None,
        gate: ApprovalGate | None,
    ) -> NestedCalls:
        """The nested calls of one ``run_code`` call, each asking ``gate`` where it is made;
        what they return teaches :attr:`shapes`."""
        return NestedCalls(
            self._inner,
            self._limits,
            thread_id=thread_id,
            observer=observer,
            started=started,
            shapes=self.shapes,
            gate=gate,
        )

    async def settle(self, learned: list[LearnedShape], notices: list[str] | None) -> None:
        """Store the shapes learned so far (an approved call's too), and tell the thread
        (``notices``) once of those its snippet's calls (``learned``) taught."""
        await self.shapes.flush()
        if notices is not None:
            notices.extend(shape_notice(shape) for shape in learned)
