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

Each channel has its own catalog and ``run_code`` (issue 29): the same tools,
with the shapes learned in that channel only (one executor may serve several
channels whose tools agree; what a tool returned in ``#ops`` is not ``#help``'s
to see). ``""`` is the channel of calls made outside any thread.
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
    """The catalogs and ``run_code`` of one executor, one per channel, over its inner tools
    and the shapes learned in that channel."""

    def __init__(self, inner: ToolExecutor, limits: CodeModeLimits, store: ShapeStore | None):
        self._inner = inner
        self._limits = limits
        self.shapes = ShapeBook(store)
        self._started = False
        # by channel: the catalog, its run_code, and the versions they were built at
        self._built: dict[str, tuple[Catalog, ToolDefinition, tuple[int, int]]] = {}

    async def start(self) -> Catalog:
        """Load the stored shapes, then build (the inner executor is started); the
        catalog of calls outside any thread."""
        await self.shapes.load()
        self._started = True
        return self.catalog()

    def _versions(self, channel: str) -> tuple[int, int]:
        """The channel's shapes' version and the inner tools' (``tools_version``)."""
        return self.shapes.version_of(channel), getattr(self._inner, "tools_version", 0)

    def _fresh(self, channel: str) -> tuple[Catalog, ToolDefinition]:
        versions = self._versions(channel)
        built = self._built.get(channel)
        if built is None or built[2] != versions:
            catalog = Catalog(
                self._inner.definitions(),
                observed=self.shapes.channel(channel).shape_for,
                budget=self._limits.catalog_budget,
            )
            built = self._built[channel] = (
                catalog,
                run_code_definition(catalog, self._limits),
                versions,
            )
        return built[0], built[1]

    def built(self, channel: str = "") -> Catalog | None:
        """The channel's catalog, or None while nothing was built (never lists the tools)."""
        if not self._started and not self._built:
            return None
        return self._fresh(channel)[0]

    def catalog(self, channel: str = "") -> Catalog:
        """The channel's current catalog (built now if needed: the inner tools must be listed)."""
        return self._fresh(channel)[0]

    def helpers(self, channel: str = "") -> tuple[str, ...]:
        """The search helpers the channel's sandbox has now (none below the budget), which
        a snippet may not rebind, like the built-in helpers."""
        catalog = self.built(channel)
        if catalog is None:
            return ()
        return tuple(name for name in SEARCH_HELPERS if is_helper(catalog, name))

    def definition(self, channel: str = "") -> ToolDefinition:
        """The channel's current ``run_code`` definition (built now if needed)."""
        return self._fresh(channel)[1]

    def calls(
        self,
        channel: str,
        thread_id: str | None,
        observer: AuditObserver | None,
        started: list[StartedCall] | None,
        gate: ApprovalGate | None,
    ) -> NestedCalls:
        """The nested calls of one ``run_code`` call in ``channel``, each asking ``gate`` where
        it is made; what they return teaches :attr:`shapes` in that channel."""
        return NestedCalls(
            self._inner,
            self._limits,
            thread_id=thread_id,
            observer=observer,
            started=started,
            shapes=self.shapes.channel(channel),
            gate=gate,
        )

    async def settle(self, learned: list[LearnedShape], notices: list[str] | None) -> None:
        """Store the shapes learned so far (an approved call's too), and tell the thread
        (``notices``) once of those its snippet's calls (``learned``) taught."""
        await self.shapes.flush()
        if notices is not None:
            notices.extend(shape_notice(shape) for shape in learned)
