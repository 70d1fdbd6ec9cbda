"""Distributed subscription management (draft-schwartz section 2.6), both sides.

As the **redistributing** server, this pod takes the subscribes and cancels the upstream
server (another domain's ``apex=pubsub``) forwards to ``apex=pubsub/TOPIC@domain`` for
its own subscribers (4.5 step 4, 4.6 step 3), its replies, and the cancel of our own
upstream subscription. A forwarded content-based subscribe or cancel (draft-wyman 5.7)
is decided here, with this service's selector classes and subscription ids: the
upstream subscription is a plain one (everything the topic carries), and this server
selects for its subscribers, whatever classes the upstream offers.

The leader of a redistributing domain also keeps each configured upstream subscription
alive (:class:`services.pubsub.settings.Upstream`): it creates the local topic when
missing (announced on its ``WKT=Topics`` with the classes this service applies, 6.2)
and subscribes ``apex=pubsub/TOPIC@domain`` upstream again before the lease runs out.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Reply, reply_from
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub import core
from apexmesh.pubsub._fields import pubsub_tag
from apexmesh.pubsub.core import Outcome, Send
from apexmesh.pubsub.elements import (
    Cancel,
    CreateTopic,
    Subscribe,
    operation_from,
    service_endpoint,
    topic_endpoint,
)
from apexmesh.pubsub.subscription_elements import (
    ContentCancel,
    ContentOperation,
    ContentSubscribe,
    content_operation_from,
    is_content_form,
)
from apexmesh.pubsub.topic_description import TopicDescription
from apexmesh.store.pubsub import JournalKind, PubsubStore, TopicView, new_entry
from services.pubsub.content_ops import ContentOperations
from services.pubsub.journal import JournalWorker
from services.pubsub.settings import Upstream

if TYPE_CHECKING:
    from services.pubsub.well_known import WellKnownTopics

_log = logging.getLogger(__name__)

#: ``run(domain, topic, decide, subscribers=...)``: read, decide, commit (the service's
#: optimistic loop), returning the outcome committed.
RunDecision = Callable[..., Awaitable[Outcome]]
#: ``robust_answer(domain, topic, upstream, body)``: True when ``body`` answered a robust
#: topic's upstream link (services/pubsub/robust_upstream.py), which took it.
RobustAnswer = Callable[[str, str, Endpoint, bytes], Awaitable[bool]]


class Redistribution:
    """Both sides of section 2.6 for the domains this pod serves."""

    def __init__(
        self,
        *,
        store: PubsubStore,
        journal: JournalWorker,
        run: RunDecision,
        clock: Callable[[], int],
        upstreams: Sequence[Upstream],
        duration_seconds: int,
        grant_data: bool,
        content: ContentOperations | None = None,
        well_known: WellKnownTopics | None = None,
    ) -> None:
        #: Content-based subscribes and cancels forwarded by an upstream (5.7).
        self._content_ops = content
        #: Announces the local topic a leader creates for a redistribution (6.2).
        self._well_known = well_known
        self._store = store
        self._journal = journal
        self._run = run
        self._clock = clock
        self._upstreams = tuple(upstreams)
        self._duration = duration_seconds
        self._grant = grant_data
        #: The upstream server's answers to a robust topic's link (set by the app).
        self.robust_answer: RobustAnswer | None = None

    async def from_upstream(
        self, domain: str, topic: str, originator: Endpoint, content: bytes
    ) -> int:
        """Data to ``apex=pubsub/TOPIC@domain`` from another domain's ``apex=pubsub``: a
        subscribe or cancel it forwarded (4.5 step 4, 4.6 step 3), the cancel of our own
        upstream subscription, or its reply to it; or an answer to the link of a robust
        topic redistributed here (gapreply, sourceinfo, a refusal), which the robust
        side takes."""
        if self.robust_answer is not None and await self.robust_answer(
            domain, topic, originator, content
        ):
            return 250
        root = _dtd.parse_root(content)
        if _dtd.tag_of(root) == "reply":
            reply = reply_from(root, require_trans_id=False)
            if reply.code != ApexReplyCode.SUCCESS:
                _log.warning(
                    "upstream %s refused %s: %d %s", originator, topic, reply.code, reply.text
                )
            return 250
        ours = topic_endpoint(topic, domain)
        if not any(
            u.topic == topic and u.domain == domain and u.upstream == originator.domain
            for u in self._upstreams
        ):
            raise ApexError(ApexReplyCode.NOT_AUTHORIZED, f"{originator} does not feed {topic}")
        if pubsub_tag(root) in ("subscribe", "cancel") and is_content_form(root):
            return await self._content(domain, topic, content_operation_from(root))
        op = operation_from(root)
        if isinstance(op, Cancel) and op.subject(originator) == ours:
            await self._store.upstream_lost(domain, topic)
            return 250
        if isinstance(op, Subscribe):
            subscribe = op
            subject = op.subscriber

            def decide(view: TopicView) -> Outcome:
                if not view.exists:
                    refusal = Reply(code=553, trans_id=subscribe.trans_id, text=f"no topic {topic}")
                    return Outcome(code=553, step="4.5/2", sends=(Send(subject, refusal.to_xml()),))
                if subscribe.duration <= 0:
                    refusal = Reply(code=553, trans_id=subscribe.trans_id)
                    return Outcome(code=553, step="4.5/3", sends=(Send(subject, refusal.to_xml()),))
                return core.accept_subscribe(
                    subscribe, subject, view.subscriptions, self._clock(), grant_data=self._grant
                )

            return (await self._run(domain, topic, decide, subscribers=(subject,))).code
        if isinstance(op, Cancel):
            cancel = op
            subject = op.subject(originator)
            return (
                await self._run(
                    domain,
                    topic,
                    lambda v: core.accept_cancel(
                        cancel, subject, v.subscriptions, grant_data=self._grant
                    ),
                    subscribers=(subject,),
                )
            ).code
        raise ApexError(ApexReplyCode.PARAMETER_SYNTAX_ERROR, "not a forwarded operation")

    async def _content(self, domain: str, topic: str, op: ContentOperation) -> int:
        """A content-based subscribe or cancel forwarded by the upstream server (5.7):
        decided here with this service's classes and ids, answered to its subject."""
        if self._content_ops is None:
            raise ApexError(ApexReplyCode.PARAMETER_NOT_IMPLEMENTED, "no content-based pubsub")
        if isinstance(op, ContentSubscribe) and op.topic == topic:
            outcome = await self._content_ops.subscribe(domain, op.subscriber, op, forwarded=True)
            return outcome.code
        if isinstance(op, ContentCancel) and op.topic == topic and op.subscriber is not None:
            outcome = await self._content_ops.cancel(domain, op.subscriber, op, forwarded=True)
            return outcome.code
        raise ApexError(ApexReplyCode.PARAMETER_INVALID, f"not a forwarded operation on {topic}")

    async def renew(self, leading: Collection[str]) -> None:
        """Subscribe upstream again where the lease of ours is due (leader only)."""
        now = self._clock()
        for up in self._upstreams:
            if up.domain not in leading:
                continue
            if not await self._store.upstream_due(up.domain, up.topic):
                continue
            ours = topic_endpoint(up.topic, up.domain)
            view = await self._store.read_topic(up.domain, up.topic)
            if not view.exists:
                create = core.create_topic(
                    CreateTopic(topic=up.topic, trans_id=self._journal.next_id()),
                    service_endpoint(up.domain),
                    allowed=True,
                    exists=False,
                )
                changes = create.changes
                if self._well_known is not None:  # 6.2: announced with its classes
                    changes = (
                        *changes,
                        self._well_known.topic_announcement(
                            up.domain,
                            up.topic,
                            TopicDescription(),
                            version=view.version + 1,
                            cancelled=False,
                        ),
                    )
                created = await self._store.commit(
                    up.domain, up.topic, view.version, changes, [], now
                )
                if created:
                    await self._journal.perform(up.domain, created)
            op = Subscribe(
                subscriber=ours,
                topic=up.topic,
                trans_id=self._journal.next_id(),
                duration=self._duration,
            )
            entry = new_entry(
                JournalKind.SEND,
                origin=str(ours),
                recipient=str(service_endpoint(up.upstream)),
                content=op.to_xml().hex(),
            )
            await self._store.journal(up.domain, [entry], now)
            await self._store.upstream_sent(up.domain, up.topic, self._duration * 500, now)
            await self._journal.perform(up.domain, [entry])


__all__ = ["Redistribution"]
