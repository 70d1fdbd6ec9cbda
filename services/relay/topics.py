"""Plain publications fanned out by the relay that took them (issue #28).

A publication to ``apex=pubsub/TOPIC@DOMAIN`` used to be relayed twice: this relay
delivered it to a pubsub pod (one gRPC call, the whole BEEP message in bytes), the pod
parsed it again, decided its subscribers and submitted the fan-out back to the relays
(more calls, parsed again), and only then did the relays deliver. For a **plain** topic
(no schema, no selector, not robust, no content-based subscription, a body that is not a
draft-wyman envelope) the pubsub pod decides nothing the relay cannot: whether the topic
exists, the publisher's ``core:data`` on it (section 6.1) and its active subscribers. So
the relay decides it here, from the same facts the pods use:

- the topic's subscriptions from a :class:`~apexmesh.store.pubsub_cache.SubscriberCache`
  of its own, kept current by the pubsub event log (the pods' code, not a copy);
- the publisher's ``core:data`` on the topic from the relay's access decision cache;
- the publication plan of :func:`apexmesh.pubsub.core.publish` (the pods' decision);

and hands the fan-out to its own relaying as data the topic's endpoint originates
(:meth:`services.relay.router.Router.originate`: already parsed, in order per topic, its
own custody). The publisher's ``ok`` still means custody: it is given once every
subscriber's copy is queued at its channel here or answered by the pod that holds it.

Everything else goes to the pubsub pods as before: operations, ``WKT=`` topics, topics
that do not exist or that the publisher may not publish to (the pod's answer and
diagnostics stay the pod's), topics with schemas, selectors or robust delivery, data
with options (statusRequest, dataTiming, hold4Endpoint, dataHopping: the pod's
re-origination keeps their semantics), data from other domains' servers, and any
publication while the cache cannot be served or Redis cannot answer. The pubsub pods
stay the authority for every change; the relay only reads.

The fan-out is the data the pods would have sent: from the topic's endpoint, content
untouched, with the dataHopping option section 3 rewrites it to carry. A topic with a subscriber in
another domain (a redistributing server) or a service goes to the pods too: the hop
budget that guards against loops through redistributing servers (RFC 3342 section 4)
and redistribution's rules are theirs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from redis.exceptions import RedisError

from apexmesh.apex.access import CORE_DATA
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart, Payload, resolve_content
from apexmesh.apex.data import Data, DataContent
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.pubsub import core
from apexmesh.pubsub.elements import WELL_KNOWN_TOPICS, topic_endpoint, topic_of
from apexmesh.pubsub.plain import is_plain
from apexmesh.pubsub.wire import forward_payload
from apexmesh.relay.outcomes import Outcome

if TYPE_CHECKING:
    from apexmesh.store.access_cache import CachedAccessChecker
    from apexmesh.store.pubsub_cache import SubscriberCache

_log = logging.getLogger(__name__)

#: Hands data a well-known endpoint of this domain originates to the relaying
#: (:meth:`services.relay.router.Router.originate`): a future of its custody.
Originate = Callable[[Data, Payload, bytes], "asyncio.Future[None]"]

#: transID of the fan-out's dataHopping option (an option needs one; the pods' is 1 too).
HOPPING_TRANS_ID: Final = 1

#: The address of ``apex=pubsub/TOPIC@DOMAIN`` (the topic is its subaddress).
_SERVICE_ADDRESS: Final = "apex=pubsub"


class TopicFanout:
    """Decides and starts the fan-out of plain publications; see the module docstring."""

    def __init__(
        self,
        *,
        domains: frozenset[str],
        cache: SubscriberCache,
        access: CachedAccessChecker,
        originate: Originate,
        clock: Callable[[], int],
    ) -> None:
        self._domains = domains
        self._cache = cache
        self._access = access
        self._originate = originate
        self._clock = clock
        #: Recipient elements and options shared between publications (bounded).
        self._memo = ParseMemo()
        #: Publications fanned out here, and those handed to a pubsub pod.
        self.fanned_out = 0
        self.delegated = 0

    def may_serve(self, recipient: Endpoint, data: Data) -> bool:
        """Whether a delivery to ``recipient`` could be a plain publication this relay
        fans out (no I/O): a topic of a domain it serves, one recipient, no option."""
        if recipient.address != _SERVICE_ADDRESS or recipient.domain not in self._domains:
            return False
        if data.options or data.originator.options or len(data.recipients) != 1:
            return False
        if data.recipients[0].options or data.originator.identity.is_service:
            return False
        topic = topic_of(recipient)
        return topic is not None and topic not in WELL_KNOWN_TOPICS

    async def publish(
        self, recipient: Endpoint, data: Data, parts: Sequence[MimePart]
    ) -> Outcome | None:
        """The outcome of the publication once every copy is in custody, or None when
        the pubsub pods must decide it (see the module docstring)."""
        topic = topic_of(recipient)
        assert topic is not None  # noqa: S101  (may_serve said so)
        plan = await self._plan(topic, recipient.domain, data, parts)
        if plan is None:
            self.delegated += 1
            return None
        self.fanned_out += 1
        if not plan.recipients:
            return Outcome(ApexReplyCode.SUCCESS)
        copies = self._copies(data, topic, recipient.domain, plan)
        try:
            await asyncio.gather(*(self._send(copy, parts) for copy in copies))
        except ApexError as exc:
            return Outcome(int(exc.code), str(exc))
        return Outcome(ApexReplyCode.SUCCESS)

    async def _plan(
        self, topic: str, domain: str, data: Data, parts: Sequence[MimePart]
    ) -> core.PublishPlan | None:
        """The publication's plan when this relay may fan it out; None when the pubsub
        pods decide: content it cannot find (the pod gives its own answer), the
        subscriber cache not synced, the topic unreadable, missing or not plain, access
        undecidable or refused (the pods answer with their own diagnostics), or a
        subscriber that redistributes."""
        try:
            body = content_of(data, parts)
        except ApexError:
            return None
        if not self._cache.synced:
            return None
        try:
            state = await self._cache.topic(domain, topic)
        except (RedisError, OSError) as exc:
            _log.debug("topic %s@%s not read (%s): the pubsub pods decide", topic, domain, exc)
            return None
        if not state.exists or not is_plain(state, body):
            return None
        originator = data.originator.identity
        owner = str(topic_endpoint(topic, domain))
        decision = self._access.lookup(owner, str(originator), CORE_DATA)
        if decision is None:
            try:
                decision = await self._access.check(owner, str(originator), CORE_DATA)
            except Exception:  # noqa: BLE001  (the pods answer with their own diagnostics)
                return None
        if not decision.allowed:
            return None
        plan = core.publish(
            originator,
            exists=True,
            allowed=True,
            subscriptions=state.subscriptions.values(),
            now_ms=self._clock(),
        )
        domains = self._domains
        if any(r.domain not in domains or r.is_service for r in plan.recipients):
            # A redistributing server subscribes: the pods re-originate for it, with
            # their hop budget (APEXMESH_PUBSUB_HOPS) and redistribution's rules.
            return None
        return plan

    def _copies(self, data: Data, topic: str, domain: str, plan: core.PublishPlan) -> list[Data]:
        """The forwarded data of section 4.7.1 step 2 (with its dataHopping option, as
        the draft rewrites it), one element for every subscriber: the relaying splits
        it per channel and per pod."""
        return [
            core.forward_data(
                data,
                topic,
                domain,
                plan.recipients,
                hops=core.hops_left(data),
                trans_id=HOPPING_TRANS_ID,
                memo=self._memo,
            )
        ]

    def _send(self, copy: Data, parts: Sequence[MimePart]) -> asyncio.Future[None]:
        """The copy handed to the relaying; its future ends once in custody."""
        payload = Payload(
            control=b"", parts={part.content_id or "": part for part in parts} if parts else {}
        )
        return self._originate(copy, payload, forward_payload(copy, parts))


def content_of(data: Data, parts: Sequence[MimePart]) -> bytes:
    """The octets of a data's content (inline, or its MIME part): what says whether it
    is a draft-wyman envelope."""
    by_id = {part.content_id: part for part in parts if part.content_id is not None}
    resolved = resolve_content(data, by_id)
    return resolved.content if isinstance(resolved, DataContent) else resolved.body


__all__ = ["HOPPING_TRANS_ID", "Originate", "TopicFanout", "content_of"]
