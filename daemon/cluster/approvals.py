"""Runs paused for approval, movable with their thread: shared state and decisions taken once.

When a daemon of a cluster pauses a run for approval (:mod:`daemon.runtime.desk`),
:class:`ClusterApprovals` (the desk's :class:`~daemon.runtime.desk.ApprovalMirror`):

- puts the paused state in the ``asyncai_approvals_<nick>`` object store: the
  same bytes the daemon's SQLite keeps (the request: pending calls, Monty
  snapshot, model conversation, id, expiry; and the run's rows: thread, run,
  prompts, audited calls, as :mod:`sessions.replica` exports them), signed
  like the REPL dumps (HMAC-SHA256 under the shared ``scope.key``,
  :func:`daemon.runtime.scopes.keyed_mac`, over a domain, the channel,
  thread and request id, and the body), under the name ``<thread key>.<request id>``;
- then points the thread's entry at it (``paused``, :mod:`.leases`), before the
  request's id is published;
- takes each decision (``!approve``, ``!deny``, ``!stop``, the expiry) in the
  thread's entry first, revision-checked: only the daemon holding the thread,
  and only once, may decide. A daemon that takes the thread over after that
  never resumes the run a second time: the approved calls are written to the
  entry's ``mutating`` as they start (the resumed run is known to
  :class:`~daemon.cluster.store.ClusterRuntimeStore`), so it posts the
  interrupted notice then; before any started, it runs the prompts again.

The ``!approve ID always`` rules are the broker's too (:mod:`.rules`): shared
before the decision they ride on, withdrawn when it was not taken here, and
read back (with this daemon's SQLite copy brought in line) at each of the
desk's refreshes.

A daemon that takes a thread over whose entry points at an undecided request
(:class:`MovedApproval`, from :mod:`.router`) loads the state, checks its MAC,
writes the rows and the request into its own SQLite and hands the request to
its desk (:meth:`~daemon.runtime.desk.ApprovalDesk.adopt`): ``!approve ID``
with the original id resumes the snapshot there. State that is missing or
refused (another key, changed bytes) is logged, and the run's prompts are run
again instead (the request is asked again): nothing is lost.
"""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext
from nats.js.object_store import ObjectStore

from daemon.cluster.errors import ClusterError
from daemon.cluster.leases import Leases, PausedEntry, bucket_name, thread_key
from daemon.cluster.router import MovedApproval
from daemon.cluster.rules import ClusterRules
from daemon.cluster.scopes import open_object_store
from daemon.cluster.store import ClusterRuntimeStore
from daemon.runtime.context import Outcome
from daemon.runtime.desk import ApprovalDesk, Shared
from daemon.runtime.scopes import keyed_mac
from sessions.approvals import NewApproval, StoredApproval
from sessions.errors import StoreError
from sessions.rules import NewRule, StoredRule
from sessions.store import Store

__all__ = ["ClusterApprovals", "PausedRejected", "PausedStates", "approvals_bucket"]

log = structlog.get_logger("asyncai.cluster")

STATE_VERSION = 1
_MAC_DOMAIN = "asyncai-approval/1"  # in the MAC's version slot: never a scope dump's


class PausedRejected(ClusterError):
    """A paused state that is not loaded: missing, malformed, or its MAC does not match."""


def approvals_bucket(nick: str) -> str:
    """The object store bucket of the paused runs of the daemons sharing ``nick``."""
    return bucket_name("approvals", nick)


def _name(channel: str, thread: str, approval: str) -> str:
    return f"{thread_key(channel, thread)}.{approval}"


def _mac(key: bytes, channel: str, thread: str, approval: str, body: bytes) -> str:
    name = f"{channel}\0{thread}\0{approval}".encode("utf-8", "surrogatepass")
    return keyed_mac(key, _MAC_DOMAIN.encode(), name, body)


class PausedStates:
    """Signed paused-run documents in a JetStream object store."""

    def __init__(
        self, js: JetStreamContext, nick: str, key: bytes, *, retention_seconds: float = 0.0
    ):
        self._js = js
        self._bucket_name = approvals_bucket(nick)
        self._key = key
        self._retention = retention_seconds
        self._bucket: ObjectStore | None = None

    async def open(self) -> PausedStates:
        """Create (or bind to) the bucket."""
        self._bucket = await open_object_store(
            self._js, self._bucket_name, self._retention, "approvals"
        )
        return self

    @property
    def _store(self) -> ObjectStore:
        if self._bucket is None:
            raise ClusterError("the approvals store is not open")
        return self._bucket

    async def put(self, channel: str, thread: str, approval: str, state: dict[str, Any]) -> None:
        """Store one paused run's document, signed."""
        body = json.dumps(state, ensure_ascii=True, separators=(",", ":")).encode()
        header = {"v": STATE_VERSION, "mac": _mac(self._key, channel, thread, approval, body)}
        try:
            await self._store.put(
                _name(channel, thread, approval), json.dumps(header).encode() + b"\n" + body
            )
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot share approval request {approval}: {exc}") from exc

    async def get(self, channel: str, thread: str, approval: str) -> dict[str, Any]:
        """The document; PausedRejected when missing, malformed or not intact."""
        try:
            result = await self._store.get(_name(channel, thread, approval))
        except (nats.js.errors.ObjectNotFoundError, nats.js.errors.ObjectDeletedError):
            raise PausedRejected(f"approval request {approval}: no paused state stored") from None
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot load approval request {approval}: {exc}") from exc
        head, sep, body = bytes(result.data or b"").partition(b"\n")
        try:
            header: Any = json.loads(head) if sep else None
            version, mac = header["v"], str(header["mac"])
        except (ValueError, TypeError, KeyError):
            raise PausedRejected(f"approval request {approval}: not a paused state") from None
        if not hmac.compare_digest(_mac(self._key, channel, thread, approval, body), mac):
            raise PausedRejected(
                f"approval request {approval}: its MAC does not match (the stored bytes "
                "were changed, or the daemon that saved it has another scope.key)"
            )
        if version != STATE_VERSION:
            raise PausedRejected(f"approval request {approval}: state version {version!r}")
        try:
            state: Any = json.loads(body)
        except ValueError:
            raise PausedRejected(f"approval request {approval}: its body is not JSON") from None
        if not isinstance(state, dict):
            raise PausedRejected(f"approval request {approval}: its body is not an object")
        return state

    async def drop(self, channel: str, thread: str, approval: str) -> None:
        """Forget one paused run's document (none stored: nothing to do)."""
        try:
            await self._store.delete(_name(channel, thread, approval))
        except (nats.js.errors.ObjectNotFoundError, nats.js.errors.ObjectDeletedError):
            return
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot drop approval request {approval}: {exc}") from exc


def _approval_json(new: NewApproval) -> dict[str, Any]:
    data = asdict(new)
    snapshot = data.pop("snapshot")
    data["snapshot"] = None if snapshot is None else base64.b64encode(snapshot).decode()
    return data


def _approval(data: Any) -> NewApproval:
    try:
        snapshot = data["snapshot"]
        return NewApproval(
            id=str(data["id"]),
            run_id=str(data["run_id"]),
            channel=str(data["channel"]),
            thread_id=str(data["thread_id"]),
            requested_by=str(data["requested_by"]),
            expires=str(data["expires"]),
            calls=list(data["calls"]),
            conversation=dict(data["conversation"]),
            snapshot=None if snapshot is None else base64.b64decode(snapshot, validate=True),
            requested=str(data["requested"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PausedRejected(f"a paused state's request is malformed: {exc!r}") from exc


class ClusterApprovals:
    """The desk's mirror in a cluster, and the adoption of moved requests."""

    def __init__(
        self, states: PausedStates, leases: Leases, store: Store, rules: ClusterRules | None = None
    ):
        self.states = states
        self._leases = leases
        self._store = store
        self.rules = rules  # None: no rules across the daemons ("always" stays local)
        self._desk: ApprovalDesk | None = None
        self._wrapped: ClusterRuntimeStore | None = None

    def bind(self, desk: ApprovalDesk, wrapped: ClusterRuntimeStore | None) -> None:
        """The desk moved requests are adopted into (built with this mirror, see
        :func:`daemon.cluster.wiring.mirror`); ``wrapped`` learns the threads of
        resumed runs."""
        self._desk, self._wrapped = desk, wrapped

    async def shared(self, request: NewApproval, prompt_ids: list[str]) -> None:
        """The state in the object store, then the thread's entry pointing at it."""
        channel, thread = request.channel, request.thread_id
        try:
            state = {
                "approval": _approval_json(request),
                "run": await self._store.replica.run_rows(request.run_id),
            }
            await self.states.put(channel, thread, request.id, state)
            pointed = await self._leases.mark_paused(
                channel, thread, PausedEntry(request.id, request.run_id, tuple(prompt_ids))
            )
        except (ClusterError, StoreError) as exc:
            # the request stands here; a daemon taking the thread over asks again
            log.error("cluster.approval_not_shared", request=request.id, error=str(exc))
            return
        if not pointed:
            log.error("cluster.approval_not_shared", request=request.id, error="not held here")

    async def decide(self, request: StoredApproval, outcome: Outcome) -> Shared:
        """The decision in the thread's entry first (once, by its holder only)."""
        try:
            shared = await self._leases.decide_paused(
                request.channel, request.thread_id, request.id, outcome
            )
        except ClusterError as exc:
            log.warning("cluster.decision_not_recorded", request=request.id, error=str(exc))
            return "retry"
        if shared != "ok":
            return "moved"
        if self._wrapped is not None:
            prompts = [p.id for p in await self._store.approvals.run_prompts(request.run_id)]
            self._wrapped.resuming(request.run_id, (request.channel, request.thread_id), prompts)
        try:
            await self.states.drop(request.channel, request.thread_id, request.id)
        except ClusterError as exc:  # the bucket's ttl prunes it; the entry says decided
            log.info("cluster.approval_state_kept", request=request.id, error=str(exc))
        return "ok"

    async def share_rules(self, rules: Sequence[NewRule]) -> bool:
        """``!approve ID always``'s rules on the broker before the decision."""
        return True if self.rules is None else await self.rules.share(rules)

    async def withdraw_rules(self, rules: Sequence[NewRule]) -> None:
        """The rules of a decision not taken here, off the broker again."""
        if self.rules is not None:
            await self.rules.withdraw(rules)

    async def rules_in_force(self) -> Sequence[StoredRule]:
        """The broker's rules (this daemon's copy brought in line)."""
        if self.rules is None:
            return await self._store.rules.rules()
        return await self.rules.in_force()

    async def adopt(self, moved: MovedApproval) -> bool:
        """Load a moved request into this daemon's SQLite and desk; False when its state
        cannot be loaded (the caller runs the prompts again)."""
        assert self._desk is not None, "bind() first"
        approval = moved.paused.approval
        try:
            known = await self._store.approvals.get_approval(approval)
            if known is None:
                state = await self.states.get(moved.channel, moved.thread, approval)
                new = _approval(state.get("approval"))
                if (new.id, new.channel, new.thread_id) != (approval, moved.channel, moved.thread):
                    raise PausedRejected(f"approval request {approval}: for another thread")
                await self._store.replica.apply_run_rows(state.get("run") or {})
                await self._store.approvals.add_approval(new)
            adopted = await self._desk.adopt(approval)
        except (ClusterError, StoreError) as exc:
            log.error(
                "cluster.approval_not_adopted",
                request=approval,
                thread=moved.thread,
                error=str(exc),
                action="running its prompts again",
            )
            return False
        if adopted and self._wrapped is not None:
            self._wrapped.note((moved.channel, moved.thread), moved.paused.prompts)
        return adopted
