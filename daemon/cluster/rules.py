"""The ``!approve ID always`` rules of a cluster, on the broker, so every daemon applies them.

One key-value bucket ``asyncai_rules_<nick>`` with one entry, ``rules``: the
rules in force, as JSON (``{"rules": [{id, channel, tool, granted_by, granted,
request_id}, ...]}``). One entry rather than a key per rule: a daemon's
refresh (every second, :data:`daemon.runtime.desk.RULES_REFRESH`) is one read,
and one revision-checked write (:func:`.leases.compare_and_set`) decides two
daemons granting a rule for the same tool at once (the first stands).

The broker is where a rule is in force; each daemon keeps a copy in its
SQLite (``approval_rules``, ``shared`` set) so ``asyncai approvals --rules``
lists them there and ``--revoke`` works on any daemon's database:

- a rule granted here goes on the broker first (:meth:`ClusterRules.share`),
  then into SQLite with its decision (:mod:`daemon.runtime.desk`);
- :meth:`ClusterRules.in_force` brings the copy in line at each refresh: a
  rule revoked in this SQLite (the CLI) is taken off the broker; a rule gone
  from the broker that was shared is revoked here (it was revoked on another
  daemon); a rule never shared (granted before this daemon joined, or while
  the broker was away) is put on the broker; the broker's rules this copy
  lacks are copied in. A daemon whose database is down keeps its revocation
  until it starts again: revoke on a running daemon's database.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from daemon.cluster.errors import ClusterError
from daemon.cluster.leases import Write, bucket_name, compare_and_set
from sessions.errors import StoreError
from sessions.rules import ApprovalRules, NewRule, StoredRule

__all__ = ["ClusterRules", "rules_bucket"]

log = structlog.get_logger("asyncai.cluster")

_KEY = "rules"
_FIELDS = ("id", "channel", "tool", "granted_by", "granted", "request_id")
REVOKED_ELSEWHERE = "cluster (revoked on another daemon)"


def rules_bucket(nick: str) -> str:
    """The bucket of the "always" rules of the daemons sharing ``nick``."""
    return bucket_name("rules", nick)


def _decode(value: bytes | None) -> dict[str, NewRule]:
    try:
        data: Any = json.loads(value or b"{}")
        rules = [NewRule(*(str(r[f]) for f in _FIELDS)) for r in data.get("rules", [])]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ClusterError(f"the rules entry is not what this daemon writes: {exc}") from exc
    return {r.id: r for r in rules}


def _encode(rules: dict[str, NewRule]) -> bytes:
    listed = [{f: getattr(r, f) for f in _FIELDS} for r in rules.values()]
    return json.dumps({"rules": listed}).encode()


def _stored(rule: NewRule) -> StoredRule:
    return StoredRule(
        rule.id, rule.channel, rule.tool, rule.granted_by, rule.granted, rule.request_id
    )


class ClusterRules:
    """The rules entry on the broker, and this daemon's copy of it."""

    def __init__(self, js: JetStreamContext, nick: str, local: ApprovalRules):
        self._js = js
        self._name = rules_bucket(nick)
        self._local = local
        self._bucket: KeyValue | None = None

    async def open(self) -> ClusterRules:
        """Create (or bind to) the bucket."""
        try:
            self._bucket = await self._js.create_key_value(
                KeyValueConfig(bucket=self._name, history=1)
            )
        except nats.js.errors.BadRequestError:
            self._bucket = await self._js.key_value(self._name)
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot open the rules bucket: {exc}") from exc
        return self

    @property
    def _kv(self) -> KeyValue:
        if self._bucket is None:
            raise ClusterError("the rules bucket is not open")
        return self._bucket

    async def _read(self) -> tuple[dict[str, NewRule], int | None]:
        try:
            entry = await self._kv.get(_KEY)
        except nats.js.errors.KeyNotFoundError:
            return {}, None
        except nats.errors.Error as exc:
            raise ClusterError(f"cannot read the approval rules: {exc}") from exc
        return _decode(entry.value), entry.revision

    async def _change(
        self, add: Sequence[NewRule] = (), remove: Sequence[str] = ()
    ) -> dict[str, NewRule]:
        """Add ``add`` (a rule whose channel and tool have one already is left out) and
        remove ``remove``, revision-checked; the rules in force after."""

        def step(current: dict[str, NewRule]) -> Write[dict[str, NewRule]] | dict[str, NewRule]:
            after = {i: r for i, r in current.items() if i not in remove}
            taken = {(r.channel, r.tool) for r in after.values()}
            for rule in add:
                if (rule.channel, rule.tool) not in taken and rule.id not in after:
                    after[rule.id] = rule
                    taken.add((rule.channel, rule.tool))
            if after == current:
                return current
            return Write(_encode(after), after)

        return await compare_and_set(
            self._kv,
            _KEY,
            self._read,
            step,
            failing="cannot write the approval rules",
            kept_changing="the approval rules kept changing",
        )

    async def share(self, rules: Sequence[NewRule]) -> bool:
        """Put ``rules`` on the broker before their decision; whether the broker has them
        (or a rule for the same channel and tool, granted first elsewhere)."""
        try:
            await self._change(add=rules)
        except ClusterError as exc:
            log.warning("cluster.rules_not_shared", rules=[r.id for r in rules], error=str(exc))
            return False
        return True

    async def withdraw(self, rules: Sequence[NewRule]) -> None:
        """Take rules off the broker whose decision was not taken (logged on failure)."""
        try:
            await self._change(remove=[r.id for r in rules])
        except ClusterError as exc:
            log.error("cluster.rules_not_withdrawn", rules=[r.id for r in rules], error=str(exc))

    async def in_force(self) -> list[StoredRule]:
        """The broker's rules, this daemon's copy brought in line (see the module docstring).

        Raises :class:`ClusterError` when the broker cannot be read, StoreError when
        this daemon's database cannot (the desk keeps the rules it had)."""
        on_broker, _ = await self._read()
        mine = await self._local.rules(revoked=True)
        revoked_here = [r.id for r in mine if r.revoked is not None and r.id in on_broker]
        unshared = [
            r.new for r in mine if r.revoked is None and r.shared is None and r.id not in on_broker
        ]
        if revoked_here or unshared:
            on_broker = await self._change(add=unshared, remove=revoked_here)
            if revoked_here:
                log.warning("cluster.rules_revoked", rules=revoked_here)
        known = {r.id for r in mine}
        in_force_here = {(r.channel, r.tool): r for r in mine if r.revoked is None}
        taken = {(r.channel, r.tool) for r in on_broker.values()}
        shared_now = []
        for rule in mine:
            if rule.revoked is not None:
                continue
            if rule.id in on_broker:
                if rule.shared is None:
                    shared_now.append(rule.id)
            elif rule.shared is not None or (rule.channel, rule.tool) in taken:
                # revoked on another daemon, or another daemon's rule for the tool stands
                await self._local.revoke_rule(rule.id, by=REVOKED_ELSEWHERE)
                in_force_here.pop((rule.channel, rule.tool), None)
        await self._local.mark_shared(shared_now)
        missing = [
            r
            for r in on_broker.values()
            if r.id not in known and (r.channel, r.tool) not in in_force_here
        ]
        if missing:
            try:
                await self._local.copy_in(missing)
            except StoreError as exc:  # the broker's rules still apply; the copy waits
                log.warning("cluster.rules_not_copied", error=str(exc))
        return [_stored(r) for r in on_broker.values()]
