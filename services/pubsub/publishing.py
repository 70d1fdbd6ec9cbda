"""Section 4.7.1: a publication, from the relay's ``Deliver`` to the fan-out's ``Submit``.

The path, and what it costs per publication in the common case:

1. the topic and its subscriptions from the pod's cache (:mod:`apexmesh.store.pubsub_cache`,
   kept current by the event log): no Redis round trip once the topic is loaded;
2. ``core:data`` from the access decision cache: no round trip once decided;
3. :func:`apexmesh.pubsub.core.publish`: the active subscribers (leases filtered by time);
4. where each subscriber is attached (placement, cached per endpoint and read again in
   the background), and :func:`apexmesh.pubsub.fanout.plan_fanout`: one data element per
   relay pod and chunk of at most 1,000 recipients, each with a submission id derived
   from the publication's ``delivery_id`` (:func:`delivery_key`);
5. one ``Submit`` per chunk to the relay pod that holds its recipients (any relay for
   the others), at most ``APEXMESH_PUBSUB_MAX_SUBMITS`` out at once per pod: a
   publication waits for room, so the relay's call waits and its sender's BEEP window
   closes (flow control). Calls cut off mid-flight are retried with the same id
   (:class:`apexmesh.rpc.relay.RelaySubmitter`).

The publication is answered 250 only once every chunk was answered 250 (each recipient's
copy is in a relay's custody); otherwise with the first failing code, and every chunk no
relay took is counted (``apexmesh_pubsub_fanout_failures``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from redis.exceptions import RedisError

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart
from apexmesh.apex.data import Data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.apex.options import Option
from apexmesh.ops.logs import failure
from apexmesh.pubsub import core
from apexmesh.pubsub.content_core import ContentPublishPlan
from apexmesh.pubsub.elements import service_endpoint, topic_endpoint, topic_of
from apexmesh.pubsub.fanout import FanoutChunk, plan_fanout
from apexmesh.pubsub.inre import inre_option
from apexmesh.pubsub.wire import delivered_content, element_payload, forward_payload
from apexmesh.rpc.relay import RelaySubmitter, SubmitSource
from apexmesh.store.pubsub_cache import SubscriberCache, TopicState
from services.pubsub.content import ContentSelection
from services.pubsub.metrics import PubsubMetrics

_log = logging.getLogger(__name__)

#: ``allowed(owner, actor)``: whether ``actor`` holds ``core:data`` on ``owner``.
DataCheck = Callable[[Endpoint, Endpoint], Awaitable[bool]]


#: Content-based selection of one publication as delivered (data, body octets, parts):
#: the plan (561, the deliveries with their subscription ids), or None when the topic
#: needs none. The robust path asks it once it knows the body is a publication.
Select = Callable[[Data, bytes, Sequence[MimePart]], Awaitable[ContentPublishPlan | None]]


class RobustHook(Protocol):
    """A publication to a robust topic (:meth:`services.pubsub.robust_service.
    RobustService.publication`): its (code, text), or None for a topic that is not.
    ``select``: draft-wyman's selection of the topic (selectors, schemas, the cache)."""

    async def __call__(
        self,
        domain: str,
        topic: str,
        originator: Endpoint,
        payload: bytes,
        delivery_id: str,
        *,
        state: TopicState,
        allowed: bool,
        forwarded: bool,
        select: Select | None = None,
    ) -> tuple[int, str] | None: ...


#: ``refused(domain, publisher, trans_id, code, text)``: a reply element sent to the
#: publisher from ``apex=pubsub@domain`` (draft-wyman 5.9.1's 561, through the journal).
RefusalReply = Callable[[str, Endpoint, int, int, str], Awaitable[None]]


#: Why a chunk was not taken, by the submitter's outcome source.
_REASONS = {
    SubmitSource.UNAVAILABLE: "unavailable",
    SubmitSource.ABORTED: "aborted",
    SubmitSource.RELAY: "refused",
}


def delivery_key(delivery_id: str, payload: bytes) -> str:
    """What a publication's fan-out ids derive from: the relay's ``delivery_id`` with a
    digest of the payload, the same on every retry of the delivery (the relay sends the
    same request again). The digest keeps a delivery id the relay reuses for other data
    (its counter restarted with the process) from reusing the ids of an earlier
    publication, which the relay pods would answer without relaying. Without a
    delivery id (a relay that sets none) a fresh one: nothing to be idempotent with."""
    if not delivery_id:
        return uuid.uuid4().hex
    return f"{delivery_id}:{hashlib.blake2b(payload, digest_size=16).hexdigest()}"


#: Largest transID (RFC 3340's uniqID, 1..2,147,483,647).
_MAX_TRANS_ID = 2_147_483_647


class TransIds:
    """transIDs for InRe options of publications sent without an envelope (no transID
    of their own to carry): one per publication, counting up from a random start so
    that pods (and restarts) do not hand out the same run."""

    def __init__(self) -> None:
        self._next = 1 + int.from_bytes(uuid.uuid4().bytes[:4], "big") % _MAX_TRANS_ID

    def __call__(self) -> int:
        value = self._next
        self._next = 1 if value >= _MAX_TRANS_ID else value + 1
        return value


def inre(
    deliveries: Mapping[Endpoint, tuple[int, ...]], trans_id: int
) -> dict[Endpoint, tuple[Option, ...]]:
    """The InRe option of each recipient with subscription ids (5.10.1), carrying
    ``trans_id``: the message's own (5.10.1.1's example: the envelope's 105)."""
    return {endpoint: (inre_option(ids, trans_id),) for endpoint, ids in deliveries.items() if ids}


class Publisher:
    """Publications of one pod; see the module docstring."""

    def __init__(
        self,
        *,
        cache: SubscriberCache,
        allowed: DataCheck,
        fanout: RelaySubmitter,
        direct: Mapping[str, RelaySubmitter],
        metrics: PubsubMetrics,
        clock: Callable[[], int],
        hops: int,
        selection: ContentSelection | None = None,
    ) -> None:
        self._cache = cache
        self._allowed = allowed
        self._fanout = fanout
        #: One submitter per relay address, to reach the pod holding a recipient.
        self._direct = direct
        self._metrics = metrics
        self._clock = clock
        self._hops = hops
        #: Content-based selection (draft-wyman); None: topic pubsub only.
        self._selection = selection
        #: What this pod's parses of publications and fan-outs share (bounded caches).
        self._memo = ParseMemo()
        #: Robust topics (docs/robust.md), set by the service once built.
        self.robust: RobustHook | None = None
        #: InRe transIDs of publications without an envelope.
        self.trans_ids = TransIds()
        #: Where 5.9.1's reply goes (set by the service; None: the code alone).
        self.refused: RefusalReply | None = None

    async def publish(
        self,
        domain: str,
        topic: str,
        originator: Endpoint,
        payload: bytes,
        delivery_id: str = "",
        *,
        trusted: bool = False,
        forwarded: bool = False,
    ) -> tuple[int, str]:
        """(code, text) for the delivering relay. ``delivery_id``: the relay's id of this
        delivery, the same on every retry of it (one is made up when there is none).
        ``trusted``: the service's own announcement (well-known topics), no access check.
        ``forwarded``: another pod forwarded it here as the robust topic's sequencer."""
        try:
            state = await self._cache.topic(domain, topic)
        except (RedisError, OSError) as exc:
            _log.warning("publication to %s@%s: store unavailable: %s", topic, domain, failure(exc))
            raise ApexError(ApexReplyCode.ACTION_ABORTED, "pubsub store unavailable") from None
        owner = topic_endpoint(topic, domain)
        allowed = state.exists and (trusted or await self._allowed(owner, originator))
        selection = self._selection
        if self.robust is not None:  # None back for a topic that is not robust
            select: Select | None = None
            if selection is not None and allowed:
                select = functools.partial(
                    self._robust_selection, selection, domain, topic, originator, state
                )

            served = await self.robust(
                domain,
                topic,
                originator,
                payload,
                delivery_id,
                state=state,
                allowed=allowed,
                forwarded=forwarded,
                select=select,
            )
            if served is not None:
                return served
        delivered = None
        if selection is not None and allowed:
            delivered = delivered_content(payload, self._memo)
            if selection.applies(state, delivered[1]):
                return await self._selected(
                    selection, domain, topic, originator, state, delivered, payload, delivery_id
                )
        plan = core.publish(
            originator,
            exists=state.exists,
            allowed=allowed,
            subscriptions=state.subscriptions.values(),
            now_ms=self._clock(),
        )
        if plan.code != ApexReplyCode.SUCCESS or not plan.recipients:
            self._metrics.publications.labels(str(plan.code)).inc()
            text = {550: "no such topic", 537: "action not authorized"}.get(plan.code, "")
            return plan.code, text
        data, _body, parts = delivered or delivered_content(payload, self._memo)
        return await self.fan_out(
            domain, topic, data, parts, plan.recipients, delivery_key(delivery_id, payload)
        )

    async def _selected(
        self,
        selection: ContentSelection,
        domain: str,
        topic: str,
        originator: Endpoint,
        state: TopicState,
        delivered: tuple[Data, bytes, tuple[MimePart, ...]],
        payload: bytes,
        delivery_id: str,
    ) -> tuple[int, str]:
        """A publication to a topic with content-based selection (draft-wyman 5.9,
        5.10): one delivery per matched endpoint, with its InRe."""
        data, body, parts = delivered
        try:
            selected = await selection.select(domain, topic, originator, state, data, body, parts)
        except (RedisError, OSError) as exc:
            _log.warning("publication to %s@%s: store unavailable: %s", topic, domain, failure(exc))
            raise ApexError(ApexReplyCode.ACTION_ABORTED, "pubsub store unavailable") from None
        if selected.code != ApexReplyCode.SUCCESS:
            self._metrics.publications.labels(str(selected.code)).inc()
            if selected.code == ApexReplyCode.INVALID_MESSAGE:
                await self.refuse(domain, originator, selected.trans_id, selected.text)
            return selected.code, selected.text
        deliveries = selected.deliveries or {}
        trans_id = selected.trans_id if selected.trans_id is not None else self.trans_ids()
        return await self.fan_out(
            domain,
            topic,
            data,
            parts,
            tuple(deliveries),
            delivery_key(delivery_id, payload),
            inre(deliveries, trans_id),
        )

    async def _robust_selection(
        self,
        selection: ContentSelection,
        domain: str,
        topic: str,
        originator: Endpoint,
        state: TopicState,
        data: Data,
        body: bytes,
        parts: Sequence[MimePart],
    ) -> ContentPublishPlan | None:
        """A robust topic's publication through the same selection as any (docs/robust.md
        "Robust and content-based"): 561 answered as for any topic, the deliveries with
        their ids for the sequencer to number, the envelope cached."""
        if not selection.applies(state, body):
            return None
        try:
            plan = await selection.select(domain, topic, originator, state, data, body, parts)
        except (RedisError, OSError) as exc:
            _log.warning("publication to %s@%s: store unavailable: %s", topic, domain, failure(exc))
            raise ApexError(ApexReplyCode.ACTION_ABORTED, "pubsub store unavailable") from None
        if plan.code == ApexReplyCode.INVALID_MESSAGE:
            await self.refuse(domain, originator, plan.trans_id, plan.text)
        if plan.code != ApexReplyCode.SUCCESS:
            self._metrics.publications.labels(str(plan.code)).inc()
        elif plan.trans_id is None:
            plan = dataclasses.replace(plan, trans_id=self.trans_ids())
        return plan

    async def refuse(
        self, domain: str, originator: Endpoint, trans_id: int | None, text: str
    ) -> None:
        """Draft-wyman 5.9.1: a message that does not conform "a "reply" element having
        code 561 will be sent to the originator", echoing the envelope's transID;
        besides the code answered to the delivering relay (a statusResponse when the
        publisher asked for one). A body sent without the envelope (5.2 requires one)
        has no transID to echo and gets the code alone (a reply's transID is
        #REQUIRED). Never to a topic endpoint (a redistributing server: data to it is
        a publication) nor to the service."""
        if self.refused is None or trans_id is None or topic_of(originator) is not None:
            return
        if originator == service_endpoint(domain):
            return
        try:
            await self.refused(domain, originator, trans_id, ApexReplyCode.INVALID_MESSAGE, text)
        except (RedisError, OSError) as exc:  # the code still reaches the relay
            _log.warning("561 reply to %s not journalled: %s", originator, exc)

    async def fan_out(
        self,
        domain: str,
        topic: str,
        data: Data,
        parts: Sequence[MimePart],
        recipients: Sequence[Endpoint],
        key: str,
        options: Mapping[Endpoint, tuple[Option, ...]] | None = None,
        *,
        counted: bool = True,
    ) -> tuple[int, str]:
        """Forward ``data`` to ``recipients`` (steps 4 and 5 of the module docstring),
        each with its own ``options`` (InRe, robust) when given: (code, text), 250 once
        every chunk is in a relay's custody. ``counted``: a publication (not a robust
        repair or heartbeat), counted in ``apexmesh_pubsub_publications``."""
        if not recipients:
            if counted:
                self._metrics.publications.labels("250").inc()
            return 250, ""
        owner = topic_endpoint(topic, domain)
        hops = core.hops_left(data, self._hops)
        chunks = plan_fanout(
            recipients, await self._placement(recipients), key, topic=f"{topic}@{domain}"
        )
        codes = await asyncio.gather(
            *(
                self._forward(
                    owner,
                    chunk,
                    forward_payload(
                        core.forward_data(
                            data,
                            topic,
                            domain,
                            chunk.recipients,
                            hops=hops,
                            trans_id=chunk.trans_id,
                            memo=self._memo,
                            options=options,
                        ),
                        parts,
                    ),
                )
                for chunk in chunks
            )
        )
        failed = [code for code in codes if code != ApexReplyCode.SUCCESS]
        if failed:
            if counted:
                self._metrics.publications.labels(str(failed[0])).inc()
            return failed[0], "forwarding failed"
        self._metrics.forwarded.inc(len(recipients))
        if counted:
            self._metrics.publications.labels("250").inc()
        return 250, ""

    async def replay(
        self,
        domain: str,
        topic: str,
        subscriber: Endpoint,
        subscription_id: int,
        envelopes: Sequence[tuple[int, bytes]],
    ) -> None:
        """Draft-wyman 5.8 ``cached``: the cached messages a new subscription selected
        (each with its envelope's transID), each forwarded to its subscriber through the
        fan-out like a publication, with the subscription's InRe."""
        owner = topic_endpoint(topic, domain)
        for trans_id, envelope in envelopes:
            data, _body, parts = delivered_content(element_payload(owner, subscriber, envelope))
            key = f"replay:{subscriber}:{subscription_id}:{delivery_key('', envelope)}"
            code, text = await self.fan_out(
                domain,
                topic,
                data,
                parts,
                (subscriber,),
                key,
                inre({subscriber: (subscription_id,)}, trans_id),
            )
            if code != ApexReplyCode.SUCCESS:
                _log.warning("replay to %s of %s: %d %s", subscriber, topic, code, text)

    async def _placement(self, recipients: Sequence[Endpoint]) -> dict[Endpoint, str]:
        """The relay pod of each recipient this pod can submit to directly ("" for the
        others: other domains, not attached, a pod not configured). Only an optimization:
        without it every chunk goes to any relay, which forwards."""
        try:
            placed = await self._cache.placement(recipients)
        except (RedisError, OSError) as exc:
            _log.warning("placement unavailable (%s): submitting through any relay", exc)
            return {}
        return {r: a for r, a in placed.items() if a in self._direct}

    async def _forward(self, owner: Endpoint, chunk: FanoutChunk, payload: bytes) -> int:
        submitter = self._direct.get(chunk.address, self._fanout)
        outcome = await submitter.submit(
            str(owner), payload, key=str(owner), submission_id=chunk.submission_id
        )
        if outcome.source is SubmitSource.UNAVAILABLE and submitter is not self._fanout:
            outcome = await self._fanout.submit(
                str(owner), payload, key=str(owner), submission_id=chunk.submission_id
            )
        if outcome.code != ApexReplyCode.SUCCESS:
            self._metrics.fanout_failures.labels(_REASONS[outcome.source]).inc()
            _log.warning(
                "fan-out of %s to %d recipients (%s): %d %s",
                owner,
                len(chunk.recipients),
                chunk.address or "any relay",
                outcome.code,
                outcome.text,
            )
        return outcome.code


__all__ = [
    "DataCheck",
    "Publisher",
    "RefusalReply",
    "RobustHook",
    "Select",
    "TransIds",
    "inre",
]
