"""The content-based subscribe and cancel of draft-wyman-apex-pubsub-00 (5.8, 5.8.2), as
the service runs them: read what :mod:`apexmesh.pubsub.content_core` decides on, decide,
commit with the journal of the reply (the same store script as every operation), send,
then replay the cached messages a ``cached`` subscribe selected.

- **subscribe**: the access check of 4.5 step 1 (``pubsub:subscribe`` on the topic; on
  ``WKT=Subscriptions`` for another subscriber only with that one's own grant of
  ``pubsub:subscribe``, 6.3.1 and 7.6), the topic
  and its schemas, the subject's subscriptions to the topic (a repeated selector renews
  its subscription under its id), a new id from Redis (unique per service and
  subscriber endpoint, 5.8) when it is a new one; 566/567 from the topic's selector
  classes and schemas. The reply carries the id.
- **distribution of selection** (5.7, draft-schwartz 2.6): a subscribe, or a cancel
  naming a topic, whose subject is in the domain of a server redistributing the topic
  goes to that server (4.5 step 4, 4.6 step 3) before any class or selector check: it
  selects for its own subscribers with its own classes, so a class this service does
  not offer for the topic is applied there. On that server, what the upstream server
  forwarded (:mod:`services.pubsub.upstream`) is decided with ``forwarded``.
- **cancel**: the four forms of 5.8.2 over the subject's subscriptions in the domain
  (the per-subscriber index of the store), plain ones included for the forms without
  an id; 568 when none matches. A subscriber may cancel its own subscriptions;
  cancelling another's needs ``pubsub:cancel`` on each topic concerned.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub import content_core, core
from apexmesh.pubsub.changes import (
    Announced,
    Change,
    Outcome,
    Send,
    Subscribed,
    Subscription,
)
from apexmesh.pubsub.content_core import CachedMessage, same_selection
from apexmesh.pubsub.elements import CANCEL_TOKEN, SUBSCRIBE_TOKEN, topic_endpoint
from apexmesh.pubsub.schema import DEFAULTS
from apexmesh.pubsub.selection.types import MessageView
from apexmesh.pubsub.subscription_elements import ContentCancel, ContentSubscribe
from apexmesh.pubsub.wkt import SUBSCRIPTIONS, own_subscriptions
from apexmesh.store.pubsub import PubsubStore
from services.pubsub.content import ContentSelection

if TYPE_CHECKING:
    from services.pubsub.publishing import Publisher

_log = logging.getLogger(__name__)

#: ``allowed(owner, actor, token, trans_id)``: step 1 of an operation.
AccessCheck = Callable[[Endpoint, Endpoint, str, int | None], Awaitable[bool]]
#: ``decided(domain, outcome, topic, version, subscription=...)``: commit and send.
Decided = Callable[..., Awaitable[bool]]

#: ``announce(domain, subscription, status, duration)``: its record on the Subscriptions
#: topic (6.3), committed with the change it announces (None: nothing to announce).
Announce = Callable[[str, Subscription, str, int], Announced | None]

#: Attempts at a subscribe whose topic went away under it.
ATTEMPTS = 16


class ContentOperations:
    """Content-based subscribe and cancel of one pod."""

    def __init__(
        self,
        *,
        store: PubsubStore,
        selection: ContentSelection,
        publisher: Publisher,
        allowed: AccessCheck,
        decided: Decided,
        clock: Callable[[], int],
        announce: Announce | None = None,
        grant_data: bool = False,
    ) -> None:
        self._announce = announce
        #: Section 7's "only subscribers publish": a plain subscription's cancel revokes.
        self._grant = grant_data
        self._store = store
        self._selection = selection
        self._publisher = publisher
        self._allowed = allowed
        self._decided = decided
        self._clock = clock

    async def subscribe(
        self, domain: str, originator: Endpoint, op: ContentSubscribe, *, forwarded: bool = False
    ) -> Outcome:
        """5.8 for ``op`` from ``originator``. ``forwarded``: a subscribe the upstream
        server of a redistributed topic forwarded here (draft-schwartz 4.5 step 4, 5.7):
        its access was checked there, and ``originator`` is its subject, who gets the
        reply (the forwarding server sends none)."""
        allowed = forwarded or await self._allowed(
            topic_endpoint(op.topic, domain), originator, SUBSCRIBE_TOKEN, op.trans_id
        )
        if allowed and op.topic == SUBSCRIPTIONS and op.subscriber != originator:
            # 7.6: a subscribe naming another subscriber overrides the default; 6.3.1
            # "limit their access to other endpoints' subscription information": the
            # subject must have granted the originator pubsub:subscribe in its own
            # access entry (owner: the subject). The records still go to the subject
            # (the subscriber is where data goes, draft-schwartz 4.5) and are its own.
            allowed = await self._allowed(op.subscriber, originator, SUBSCRIBE_TOKEN, op.trans_id)
        store = self._store
        for _ in range(ATTEMPTS):
            view = await store.read_topic(domain, op.topic, core.concerned(op.topic, op.subscriber))
            target = core.redistributor(
                op.topic, op.subscriber, domain, view.subscriptions.values(), self._clock()
            )
            if target is not None:  # 5.7: the subject's domain selects for itself
                return await self._forward(domain, op, originator, allowed, view.exists, target)
            existing = await store.subject_subscriptions(domain, op.subscriber, op.topic)
            try:
                schemas = (
                    self._selection.compiler.topic_schemas(domain, op.topic, view.settings)
                    if view.exists
                    else DEFAULTS
                )
            except ApexError as exc:
                _log.warning("topic %s: schemas unusable (%s)", op.topic, exc)
                schemas = DEFAULTS
            renews = any(same_selection(sub, op) for sub in existing)
            new_id = 0
            if allowed and view.exists and not renews:
                new_id = await store.new_subscription_id(domain, op.subscriber)
            cached: list[tuple[CachedMessage, bytes]] = []
            if allowed and view.exists and op.cached:
                cached = await self._selection.cached(domain, op.topic)
            published = {id(entry.message): octets for entry, octets in cached}
            decision = content_core.subscribe(
                op,
                originator,
                allowed=allowed,
                exists=view.exists,
                schemas=schemas,
                classes=self._selection.compiler.classes,
                existing=existing,
                new_id=new_id,
                now_ms=self._clock(),
                cached=[entry for entry, _ in cached],
            )
            changes: tuple[Change, ...] = ()
            if decision.change is not None:
                changes = (decision.change, *self._announced(domain, decision.change, op.duration))
            outcome = Outcome(
                code=decision.code, step=decision.step, changes=changes, sends=decision.sends
            )
            if not await self._decided(domain, outcome, op.topic, view.version, subscription=True):
                continue
            change = decision.change
            if change is None:
                return outcome
            sub = change.subscription
            replay = decision.replay
            if op.topic == SUBSCRIPTIONS:  # 6.3.1: only the subscriber's own records
                own = own_subscriptions(sub.subscriber, None, self._selection.compiler.classes)
                replay = tuple(e for e in replay if own.matches(MessageView.of(e.message.root)))
            if replay:
                await self._publisher.replay(
                    domain,
                    op.topic,
                    sub.subscriber,
                    sub.subscription_id or 0,
                    [
                        (entry.message.envelope.trans_id, published[id(entry.message)])
                        for entry in replay
                    ],
                )
            return outcome
        raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, f"topic {op.topic} is busy")

    async def _forward(
        self,
        domain: str,
        op: ContentSubscribe,
        originator: Endpoint,
        allowed: bool,
        exists: bool,
        target: Endpoint,
    ) -> Outcome:
        """4.5 step 4: the subscribe goes to ``target`` as it is (after steps 1-3)."""
        decision = content_core.subscribe(
            op,
            originator,
            allowed=allowed,
            exists=exists,
            schemas=DEFAULTS,
            classes=self._selection.compiler.classes,
            existing=(),
            new_id=0,
            now_ms=self._clock(),
            forward_to=target,
        )
        outcome = Outcome(code=decision.code, step=decision.step, sends=decision.sends)
        await self._decided(domain, outcome, None, None)
        return outcome

    async def cancel(
        self, domain: str, originator: Endpoint, op: ContentCancel, *, forwarded: bool = False
    ) -> Outcome:
        """5.8.2 for ``op`` from ``originator`` (``forwarded``: by the upstream server
        of a redistributed topic, 4.6 step 3, naming its subject)."""
        subject = op.subject(originator)
        store = self._store
        if op.topic is not None and not forwarded:
            view = await store.read_topic(domain, op.topic, core.concerned(op.topic, subject))
            target = core.redistributor(
                op.topic, subject, domain, view.subscriptions.values(), self._clock()
            )
            if target is not None:
                allowed = subject == originator or await self._allowed(
                    topic_endpoint(op.topic, domain), originator, CANCEL_TOKEN, op.trans_id
                )
                decision = content_core.cancel(
                    op, originator, allowed=allowed, subscriptions=(), forward_to=target
                )
                outcome = Outcome(code=decision.code, step=decision.step, sends=decision.sends)
                await self._decided(domain, outcome, None, None)
                return outcome
        # 5.8.2: a form without an id covers the subject's plain subscriptions too (the
        # subscriber's index lists them; a topic's own HASH too, for one made before).
        found = await store.subject_subscriptions(
            domain, subject, op.topic, plain=op.subscription_id is None
        )
        if op.topic is not None and op.subscription_id is None:
            plain = await store.read_topic(domain, op.topic, (subject,))
            found += list(plain.subscriptions.values())
        subscriptions = list({(sub.topic, sub.key): sub for sub in found}.values())
        allowed = True
        if subject != originator:
            topics = sorted({sub.topic for sub in subscriptions} | {op.topic or ""} - {""})
            for topic in topics:
                owner = topic_endpoint(topic, domain)
                if not await self._allowed(owner, originator, CANCEL_TOKEN, op.trans_id):
                    allowed = False
        decision = content_core.cancel(op, originator, allowed=allowed, subscriptions=subscriptions)
        by_topic = content_core.cancel_changes(decision, originator, grant_data=self._grant)
        outcome = Outcome(code=decision.code, step=decision.step, sends=decision.sends)
        if not by_topic:
            await self._decided(domain, outcome, None, None)
            return outcome
        ended: dict[str, list[Change]] = {}
        for gone in decision.changes:
            ended.setdefault(gone.subscription.topic, []).extend(
                self._announced(domain, gone.subscription, 0, "CANCELLED")
            )
        groups = list(by_topic.items())
        for index, (topic, changes) in enumerate(groups):
            last = index == len(groups) - 1
            part = dataclasses.replace(
                outcome,
                changes=(*changes, *ended.get(topic, ())),
                sends=outcome.sends if last else (),
            )
            # A topic deleted meanwhile ended these subscriptions itself: nothing to do.
            await self._decided(domain, part, topic, None, subscription=False)
        return outcome

    def _announced(
        self,
        domain: str,
        change: Subscribed | Subscription,
        duration: int,
        status: str = "ACTIVE",
    ) -> tuple[Announced, ...]:
        """The 6.3 record of a subscription made, renewed or ended, as a change to commit
        with it (journalled, so it is published even if this pod dies right after)."""
        sub = change.subscription if isinstance(change, Subscribed) else change
        found = None if self._announce is None else self._announce(domain, sub, status, duration)
        return () if found is None else (found,)


def refused(to: Endpoint, trans_id: int, code: int, text: str) -> Outcome:
    """An operation answered with ``code`` and nothing changed."""
    reply = Reply(code=code, trans_id=trans_id, text=text)
    return Outcome(code=code, step="refused", sends=(Send(to, reply.to_xml()),))


__all__ = ["ContentOperations", "refused"]
