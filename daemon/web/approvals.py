"""Page 4, the approvals: pending requests with every argument, decided ones searched, and
the "always" rules in force with a button that revokes each.

A button sends what a person would type in the thread (:func:`command_of`:
``!approve ID``, ``!approve ID run``, ``!approve ID always``, ``!deny ID
reason``) to :meth:`daemon.runtime.desk.ApprovalDesk.decide` as the session's
nick: the very code of the chat's commands decides, with the same rights (the
request's channel's approvers, or the prompt's author; "always" only for the
listed approvers), once, and the thread reads who decided. The page greys out
the buttons of a nick that may not decide and says who may; a decision posted
anyway is refused by the desk with the chat's line (HTTP 403).

A revoke takes the rule out of force in the store (the row is kept with who
revoked it, as ``asyncai approvals --revoke`` does) and the desk reads its
rules again at once, so the tool asks again from the next call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from daemon.approvals import call_text
from daemon.web.console import Console, session_of
from sessions import StoredApproval

__all__ = ["PendingView", "command_of", "routes"]

Action = Literal["approve", "run", "always", "deny"]
STATUSES = ("decided", "pending", "approved", "denied", "expired", "stopped")


def command_of(request_id: str, action: str, reason: str = "") -> str | None:
    """The chat command a console button stands for; None for an unknown action or an id
    that is not one word (nothing is decided then)."""
    if not request_id or request_id.split() != [request_id]:
        return None
    if action == "approve":
        return f"!approve {request_id}"
    if action == "run":
        return f"!approve {request_id} run"
    if action == "always":
        return f"!approve {request_id} always"
    if action == "deny":
        reason = " ".join(reason.split())
        return f"!deny {request_id} {reason}" if reason else f"!deny {request_id}"
    return None


@dataclass(frozen=True)
class PendingView:
    """A pending request as the page shows it to one nick."""

    request: StoredApproval
    calls: list[str]  # server.tool(arguments), every argument in full
    whys: list[str]
    deciders: str  # who may decide, in the chat's words
    may_decide: bool
    may_always: bool  # the channel offers always, and this nick may say it
    offers_always: bool


def _pending_view(desk: Any, request: StoredApproval, nick: str) -> PendingView:
    policy = desk.policy_of(request.channel)
    offers = desk.offers_always(request.channel)
    return PendingView(
        request=request,
        calls=[
            call_text(str(c["tool"]), c.get("server"), dict(c.get("arguments") or {}))
            for c in request.calls
        ],
        whys=[str(c.get("why") or "") for c in request.calls],
        deciders=policy.who_decides(request.requested_by),
        may_decide=policy.may_decide(nick, request.requested_by),
        may_always=offers and policy.may_grant_always(nick),
        offers_always=offers,
    )


def routes(console: Console) -> list[BaseRoute]:
    """``/approvals`` (the page), its decisions and its revokes; and the nav entry."""
    console.page("Approvals", "/approvals")
    store = console.sources.store

    async def page(request: Request, said: list[str] | None = None, status: int = 200) -> Response:
        nick = session_of(request).nick
        desk = console.sources.desk
        query = request.query_params
        text = query.get("q", "").strip()
        wanted = query.get("status", "decided")
        status_filter = wanted if wanted in STATUSES else "decided"
        channel = query.get("channel", "").strip() or None
        pending = await store.approvals.pending_approvals()
        decided = await store.approvals.search(
            text=text,
            status=status_filter,  # type: ignore[arg-type]  # one of STATUSES
            channel=channel,
            limit=200,
        )
        context = {
            "pending": [_pending_view(desk, r, nick) for r in pending] if desk else [],
            "decided": decided,
            "rules": await store.rules.rules(),
            "q": text,
            "status": status_filter,
            "statuses": STATUSES,
            "channel": channel or "",
            "said": said or [],
            "no_desk": desk is None,
        }
        return console.render(request, "approvals.html", context, status_code=status)

    async def show(request: Request) -> Response:
        return await page(request)

    async def decide(request: Request) -> Response:
        nick = session_of(request).nick
        desk = console.sources.desk
        async with request.form() as form:  # closed: a file part is a spooled temporary file
            action, reason = str(form.get("action", "")), str(form.get("reason", ""))
        request_id = str(request.path_params["request_id"])
        command = command_of(request_id, action, reason)
        if desk is None or command is None:
            return await page(request, ["That is not a decision this console can take."], 400)
        decided = await desk.decide(command, by=nick)
        return await page(request, decided.lines, 200 if decided.decided else 403)

    async def revoke(request: Request) -> Response:
        nick = session_of(request).nick
        rule_id = str(request.path_params["rule_id"])
        revoked = await store.rules.revoke_rule(rule_id, by=f"{nick} (console)")
        desk = console.sources.desk
        if revoked and desk is not None:
            await desk.refresh_rules()  # the tool asks again from the next call
        if revoked:
            return await page(request, [f"Rule {rule_id} revoked: its tool asks again."])
        return await page(request, [f"No rule {rule_id} in force."], 404)

    return [
        Route("/approvals", show, methods=["GET"]),
        Route("/approvals/{request_id}/decide", decide, methods=["POST"]),
        Route("/approvals/rules/{rule_id}/revoke", revoke, methods=["POST"]),
    ]
