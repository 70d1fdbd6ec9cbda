"""A robust topic's sequencer side (docs/robust.md "Phase 2: the service design"):
publications, permission changes and heartbeats, on the topic's owner pod.

A publication to a robust topic takes the path of any publication (section 4.7.1,
:class:`services.pubsub.publishing.Publisher`) up to the fan-out, and then:

1. its ``publish`` option is read (type, item, permtoken, a contribution's source: 501,
   504, 553 as the elements say), a contribution is checked (537, 450);
2. the topic's owner is found (:class:`services.pubsub.robust_owner.Sequencers`): this
   pod, or the pod it is forwarded to;
3. :meth:`apexmesh.store.robust.RobustStore.commit_publication` makes it durable and
   numbers it for every subscriber its permission table lets see it, in one script;
4. one fan-out (the same bounded Submit path, :meth:`Publisher.fan_out`) with each
   recipient's own ``robust`` option, handed on at once (beside the topic's other
   fan-outs in flight: the stubs order by link seq);
5. the publisher's ``published`` answer (its source seq), when it asked with an option,
   journalled before the relay's 250 (a pod killed after owes it to the leader).

The relay gets 250 once the publication is durable and its fan-out was handed on (or
failed: the publication is then repaired from the stream by the stubs, whose heartbeats
reveal it; the mesh has taken responsibility, so the publisher is not asked to send it
again, which would sequence it twice). A relay's retry of one delivery (same delivery
id) is answered from the first attempt, not sequenced again, while this pod remembers it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from redis.exceptions import RedisError

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart
from apexmesh.apex.data import Data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option
from apexmesh.common.cache import BoundedCache
from apexmesh.pubsub import core
from apexmesh.pubsub.content_core import ContentPublishPlan
from apexmesh.pubsub.elements import service_endpoint, topic_endpoint
from apexmesh.pubsub.inre import inre_option
from apexmesh.pubsub.robust._wire import OPTION_NAME
from apexmesh.pubsub.robust.contribution import CONTRIBUTE_TOKEN
from apexmesh.pubsub.robust.elements import (
    LinkOptions,
    PublishHeader,
    RobustInfo,
    publish_from_option,
)
from apexmesh.pubsub.robust.heartbeat import HeartbeatSchedule
from apexmesh.pubsub.robust.operations import Permissions, Published, parse_permissions
from apexmesh.pubsub.robust.publish_types import Image, PublishType, fields_of_payload, fold
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.robust.stub_events import Publication
from apexmesh.pubsub.wire import element_payload
from apexmesh.rpc.relay import RelaySubmitter, SubmitSource
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_cache import SubscriberCache, TopicState
from apexmesh.store.pubsub_journal import JournalEntry, JournalKind
from apexmesh.store.robust import NotOwner
from services.pubsub.publishing import Publisher, Select, delivery_key
from services.pubsub.robust_content import (
    RobustSettingsReader,
    content_type_of,
    delivery_data,
    is_permissions,
)
from services.pubsub.robust_owner import OwnedTopic, Sequencers
from services.pubsub.robust_upstream import UpstreamLinks

_log = logging.getLogger(__name__)

#: transID of the ``robust`` options the service writes (an option needs one; a fixed
#: one keeps successive deliveries alike but for their numbers).
OPTION_TRANS_ID: Final = 1
#: Deliveries a pod remembers the outcome of, against a relay's retries.
REMEMBERED: Final = 100_000
#: How long Redis remembers a committed delivery key, against a relay's retry reaching
#: another pod (a relay retries within its timeout times its attempts: well under this).
DELIVERY_TTL_MS: Final = 120_000
#: Link key of the heartbeat schedule: (domain, topic, subscriber).
LinkKey = tuple[str, str, str]

#: ``allowed(owner, actor, token, trans_id)``: an access decision (451 when unknown).
AccessCheck = Callable[[Endpoint, Endpoint, str, int | None], Awaitable[bool]]
#: ``reply(domain, recipient, code, trans_id, text)``: a reply through the journal.
ReplySender = Callable[[str, Endpoint, int, int | None, str], Awaitable[None]]


class Sequenced(enum.Enum):
    """What became of a publication or permission change on this pod."""

    #: Committed here (durable, numbered, fanned out).
    COMMITTED = "committed"
    #: A relay's retry of a delivery committed before: answered from the first.
    REPEATED = "repeated"
    #: Handed to the owner pod.
    FORWARDED = "forwarded"


class RobustSequencing:
    """The sequencer side of every robust topic this pod serves."""

    def __init__(
        self,
        *,
        sequencers: Sequencers,
        store: PubsubStore,
        cache: SubscriberCache,
        publisher: Publisher,
        submitter: RelaySubmitter,
        allowed: AccessCheck,
        reply: ReplySender,
        clock: Callable[[], int],
    ) -> None:
        self.sequencers = sequencers
        self._pubsub = store
        self._cache = cache
        self._publisher = publisher
        self._submitter = submitter
        self._allowed = allowed
        self._reply = reply
        self._clock = clock
        self.schedule: HeartbeatSchedule[LinkKey] = HeartbeatSchedule()
        #: delivery key -> the source seq it got (a relay's retry is answered from it).
        self._done: BoundedCache[str, asyncio.Future[int]] = BoundedCache(
            "pubsub.robust_deliveries", REMEMBERED
        )
        #: Wakes the robust task when the schedule got an earlier deadline.
        self.wake = asyncio.Event()
        #: Redistributed topics' upstream links (XEP-0040's server stub).
        self.upstream = UpstreamLinks(
            store=sequencers.store,
            submitter=submitter,
            sequence=self._upstream_publication,
            clock=clock,
            wake=self.wake,
        )

    # ------------------------------------------------------------------ publications

    async def publish(
        self,
        domain: str,
        topic: str,
        originator: Endpoint,
        payload: bytes,
        delivery_id: str,
        *,
        state: TopicState,
        settings: RobustSettings,
        delivered: tuple[Data, bytes, tuple[MimePart, ...]],
        allowed: bool,
        forwarded: bool,
        select: Select | None = None,
    ) -> tuple[int, str]:
        """(code, text) for the delivering relay; raises ApexError with its code.
        ``select``: the topic's content-based selection (draft-wyman 5.9, 5.10), done
        on the owner pod before sequencing: a refusal (561) is answered and nothing
        sequenced; a message already expired is answered 250 and not sequenced; else
        only the selected subscribers' links number it, each with its InRe."""
        data, body, _parts = delivered
        if is_permissions(body):
            return await self._permissions(
                domain, topic, originator, body, payload, delivery_id, settings, forwarded, allowed
            )
        if not allowed:
            return ApexReplyCode.NOT_AUTHORIZED, "action not authorized"
        if self.upstream.carried(domain, topic, originator, data) is not None:
            return await self._from_upstream(
                domain, topic, originator, payload, delivery_id, settings, delivered, forwarded
            )
        header, option = self._header(data, settings)
        source = originator
        contributor: Endpoint | None = None
        if header.source is not None and header.source != originator:
            source, contributor = header.source, originator
        key = delivery_key(delivery_id, payload)
        chosen: ContentPublishPlan | None = None
        for _ in range(2):
            found = await self.sequencers.owned_or_forwarded(
                domain, topic, settings, originator, payload, delivery_id, forwarded
            )
            if not isinstance(found, OwnedTopic):
                return found
            if contributor is not None:  # checked by the owner alone: one bucket each
                await self._contribution(topic, source, contributor, settings)
            if select is not None and chosen is None:
                data, body, parts = delivered
                chosen = await select(data, body, parts)
                select = None
                if chosen is not None and chosen.code != ApexReplyCode.SUCCESS:
                    return chosen.code, chosen.text
                if chosen is not None and chosen.step == "5.2.1/expired":
                    return ApexReplyCode.SUCCESS, chosen.text
            try:
                outcome, source_seq = await self._sequence(
                    found,
                    state,
                    originator,
                    source,
                    contributor,
                    header,
                    delivered,
                    key if delivery_id else "",
                    key,
                    chosen=chosen,
                )
            except NotOwner:
                self.sequencers.lost(domain, topic)
                continue
            if option is not None:
                await self._published(domain, topic, originator, option.trans_id, source_seq, key)
            _log.debug("%s %s seq %d: %s", topic, source, source_seq, outcome.value)
            return ApexReplyCode.SUCCESS, ""
        raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "topic sequencer moved")

    async def _from_upstream(
        self,
        domain: str,
        topic: str,
        originator: Endpoint,
        payload: bytes,
        delivery_id: str,
        settings: RobustSettings,
        delivered: tuple[Data, bytes, tuple[MimePart, ...]],
        forwarded: bool,
    ) -> tuple[int, str]:
        """A delivery of the upstream link of a redistributed topic: into its stub, on
        the topic's owner pod (services/pubsub/robust_upstream.py)."""
        data, body, parts = delivered
        found = await self.sequencers.owned_or_forwarded(
            domain, topic, settings, originator, payload, delivery_id, forwarded
        )
        if not isinstance(found, OwnedTopic):
            return found
        option = self.upstream.carried(domain, topic, originator, data)
        assert option is not None  # noqa: S101 - the caller found it
        await self.upstream.delivery(found, option, body, content_type_of(data, parts))
        return ApexReplyCode.SUCCESS, ""

    async def _upstream_publication(
        self, owned: OwnedTopic, publication: Publication, content_type: str, upstream: str
    ) -> None:
        """What the upstream link's stub delivered, sequenced here as a publication of
        its source, with the link's state written in the same commit."""
        state = await self._cache.topic(owned.domain, owned.topic)
        data, parts = delivery_data(
            topic_endpoint(owned.topic, owned.domain), publication.payload, content_type
        )
        header = PublishHeader(
            type=publication.type, item=publication.item, permtoken=publication.permtoken
        )
        key = f"upstream:{publication.source}:{publication.source_seq}"
        try:
            await self._sequence(
                owned,
                state,
                topic_endpoint(owned.topic, owned.domain),
                publication.source,
                publication.contributor,
                header,
                (data, publication.payload, tuple(parts)),
                "",
                key,
                upstream=upstream,
            )
        except NotOwner:  # the next owner resumes the link from the marks kept
            self.sequencers.lost(owned.domain, owned.topic)
            raise ApexError(
                ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "topic sequencer moved"
            ) from None

    async def _contribution(
        self, topic: str, source: Endpoint, contributor: Endpoint, settings: RobustSettings
    ) -> None:
        """XEP 5.2: the topic takes contributions, the source's access entries let this
        contributor (``pubsub:contribute``), within its rate; 537 or 450 otherwise."""
        permitted = await self._allowed(source, contributor, CONTRIBUTE_TOKEN, None)
        self.sequencers.gate.check(
            topic=topic,
            source=source,
            contributor=contributor,
            rate=settings.contributions,
            allowed=permitted,
            now_ms=self._clock(),
        )

    @staticmethod
    def _header(data: Data, settings: RobustSettings) -> tuple[PublishHeader, Option | None]:
        for option in data.options:
            if option.internal == OPTION_NAME:
                return publish_from_option(option, settings.item_header), option
        return PublishHeader(), None

    async def _sequence(
        self,
        owned: OwnedTopic,
        state: TopicState,
        originator: Endpoint,
        source: Endpoint,
        contributor: Endpoint | None,
        header: PublishHeader,
        delivered: tuple[Data, bytes, tuple[MimePart, ...]],
        delivery: str,
        key: str,
        *,
        upstream: str = "",
        chosen: ContentPublishPlan | None = None,
    ) -> tuple[Sequenced, int]:
        """Commit (under the topic's lock), then fan out after the previous fan-out.
        ``delivery``: the relay's delivery key ("" when it gave no delivery id).
        ``chosen``: the content-based selection's deliveries (None: every subscriber):
        a subscriber it did not select is not numbered for this publication, exactly
        as one the permission table does not let see it, so its link has no gap."""
        data, body, parts = delivered
        earlier = self._done.get(key)
        if earlier is not None:
            try:
                return Sequenced.REPEATED, await asyncio.shield(earlier)
            except asyncio.CancelledError:
                if not earlier.cancelled():
                    raise
                raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "not sequenced") from None
        mine: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._done.put(key, mine)
        domain, topic = owned.domain, owned.topic
        try:
            plan = core.publish(
                originator,
                exists=True,
                allowed=True,
                subscriptions=state.subscriptions.values(),
                now_ms=self._clock(),
            )
            async with owned.lock:
                # Under the lock: a permission change commits under it too, so each
                # publication uses the table of its position in the stream.
                table = owned.table
                selected = None if chosen is None else (chosen.deliveries or {})
                subscribers = [
                    (r, table.allows(r, header.permtoken) and (selected is None or r in selected))
                    for r in plan.recipients
                ]
                image, drop = await self._image(owned, source, header, body)
                committed = await self.sequencers.store.commit_publication(
                    domain,
                    topic,
                    source=str(source),
                    payload=body,
                    now_ms=self._clock(),
                    resolution=owned.settings.resolution,
                    retention=owned.retention,
                    subscribers=[(str(r), ok) for r, ok in subscribers],
                    type_="" if header.type is None else header.type.value,
                    item=header.item or "",
                    permtoken=header.permtoken or "",
                    contributor="" if contributor is None else str(contributor),
                    content_type=content_type_of(data, parts),
                    image=image,
                    drop=drop,
                    delivery=delivery,
                    delivery_ttl_ms=DELIVERY_TTL_MS,
                    upstream=upstream,
                )
        except BaseException as exc:
            self._done.pop(key)  # nothing was committed: a retry sequences it
            mine.cancel()
            if isinstance(exc, (RedisError, OSError)):
                _log.warning("commit to %s@%s: %s", topic, domain, exc)
                raise ApexError(ApexReplyCode.ACTION_ABORTED, "pubsub store unavailable") from None
            raise
        mine.set_result(committed.source_seq)
        if committed.repeated:  # sequenced before, maybe by another pod: its fan-out
            return Sequenced.REPEATED, committed.source_seq  # had the numbers
        options: dict[Endpoint, tuple[Option, ...]] = {}
        now = self._clock()
        interval = owned.settings.heartbeat_ms
        numbered = [
            (recipient, link)
            for (recipient, _ok), link in zip(subscribers, committed.links, strict=True)
            if link is not None
        ]
        if numbered:
            first = numbered[0][1]
            links = LinkOptions(
                RobustInfo(
                    link_seq=first.seq,
                    link_epoch=first.epoch,
                    source_seq=committed.source_seq,
                    source=source,
                    type=header.type,
                    item=header.item,
                    permtoken=header.permtoken,
                    contributor=contributor,
                ),
                OPTION_TRANS_ID,
            )
            ids = {} if chosen is None else (chosen.deliveries or {})
            trans_id = OPTION_TRANS_ID if chosen is None else (chosen.trans_id or OPTION_TRANS_ID)
            for recipient, link in numbered:
                own = ids.get(recipient)
                options[recipient] = (links.for_link(link.seq, link.epoch),) + (
                    (inre_option(own, trans_id),) if own else ()
                )
                self.schedule.touch((domain, topic, str(recipient)), now, interval)
        await self._fan_out(owned, data, parts, tuple(options), key, options)
        return Sequenced.COMMITTED, committed.source_seq

    async def _image(
        self, owned: OwnedTopic, source: Endpoint, header: PublishHeader, body: bytes
    ) -> tuple[Image | None, bool]:
        """The item's image after this publication (the owner folds; it is the only
        writer, so the next source seq is the counter's value plus one)."""
        if header.item is None:
            return None, False
        if header.type is PublishType.DROP:
            return None, True
        store = self.sequencers.store
        current = await store.image(owned.domain, owned.topic, header.item)
        next_seq = await store.source_seq(owned.domain, owned.topic, str(source)) + 1
        image = fold(
            current,
            header.type,
            item=header.item,
            fields=fields_of_payload(body),
            source=str(source),
            source_seq=next_seq,
        )
        if image is not None:
            image = dataclasses.replace(image, permtoken=header.permtoken)
        return image, image is None

    async def _fan_out(
        self,
        owned: OwnedTopic,
        data: Data,
        parts: Sequence[MimePart],
        recipients: tuple[Endpoint, ...],
        key: str,
        options: dict[Endpoint, tuple[Option, ...]],
    ) -> None:
        """Hand a committed publication (or heartbeat) to the relays at once, beside the
        topic's other fan-outs in flight (docs/robust.md "Fan-outs in flight"): the
        stubs order by link seq, so waiting for the previous fan-out would only cap a
        topic at one relay round trip per publication. A failure is logged: the stubs
        repair what it lost (the heartbeats show them it is missing)."""
        if not recipients:
            return
        code, text = await self._publisher.fan_out(
            owned.domain, owned.topic, data, parts, recipients, key, options
        )
        if code != ApexReplyCode.SUCCESS:
            _log.warning(
                "robust fan-out of %s: %d %s (the stubs repair it)", owned.topic, code, text
            )

    async def _published(
        self, domain: str, topic: str, publisher: Endpoint, trans_id: int, seq: int, key: str
    ) -> None:
        """The publisher's source seq, as data from ``apex=pubsub/TOPIC@DOMAIN``,
        journalled as any answer the service owes (services/pubsub/journal.py): the
        entry is written before the relay gets its 250, and removed once a relay took
        the answer. A pod killed before writing it never answered the relay, which
        delivers the publication again (same delivery id): answered from the first
        commit, journalled then. A pod killed after: the domain's leader sends it (its
        submission id is the entry's, so a relay that took it once relays it once)."""
        answer = Published(topic=topic, trans_id=trans_id, source_seq=seq)
        origin = topic_endpoint(topic, domain)
        entry = JournalEntry(
            f"{JournalKind.SEND}:published:{key}",
            JournalKind.SEND,
            {"origin": str(origin), "recipient": str(publisher), "content": answer.to_xml().hex()},
        )
        await self._pubsub.journal(domain, [entry], self._clock())
        outcome = await self._submitter.submit(
            str(origin),
            element_payload(origin, publisher, answer.to_xml()),
            key=str(publisher),
            submission_id=entry.submission_id,
        )
        if outcome.code != ApexReplyCode.SUCCESS:
            _log.info("published to %s: %d %s", publisher, outcome.code, outcome.text)
        if outcome.source is SubmitSource.RELAY:  # a relay took it (or refused it for good)
            await self._pubsub.done(domain, entry.id)

    # ------------------------------------------------------------------ permissions

    async def _permissions(
        self,
        domain: str,
        topic: str,
        originator: Endpoint,
        body: bytes,
        payload: bytes,
        delivery_id: str,
        settings: RobustSettings,
        forwarded: bool,
        publisher: bool,
    ) -> tuple[int, str]:
        """XEP 5.1 in-band: grant/deny/revoke, sequenced in the stream, by the topic's
        creator (any token) or a publisher (``publisher``: ``core:data`` on the topic;
        the tokens it owns, apexmesh/pubsub/robust/permissions.py); ``reply 250``, 537
        anyone else or another's token, 554 a table over its bounds."""
        try:
            change = parse_permissions(body)
        except ApexError as exc:
            await self._reply(domain, originator, int(exc.code), exc.trans_id, str(exc)[:200])
            return ApexReplyCode.SUCCESS, ""
        view = await self._pubsub.read_topic(domain, topic, ())
        creator = view.creator == originator
        if not creator and not publisher:
            await self._reply(
                domain,
                originator,
                ApexReplyCode.NOT_AUTHORIZED,
                change.trans_id,
                "neither the topic's creator nor a publisher",
            )
            return ApexReplyCode.SUCCESS, ""
        found = await self.sequencers.owned_or_forwarded(
            domain, topic, settings, originator, payload, delivery_id, forwarded
        )
        if not isinstance(found, OwnedTopic):
            return found
        try:
            await self._commit_table(found, change, originator, creator=creator)
        except ApexError as exc:
            await self._reply(domain, originator, int(exc.code), change.trans_id, str(exc)[:200])
            return ApexReplyCode.SUCCESS, ""
        except NotOwner:
            self.sequencers.lost(domain, topic)
            raise ApexError(
                ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "topic sequencer moved"
            ) from None
        await self._reply(domain, originator, ApexReplyCode.SUCCESS, change.trans_id, "")
        return ApexReplyCode.SUCCESS, ""

    async def _commit_table(
        self, owned: OwnedTopic, change: Permissions, by: Endpoint, *, creator: bool
    ) -> None:
        async with owned.lock:
            table = owned.table.changed(change.changes, by=str(by), creator=creator)
            await self.sequencers.store.commit_permissions(
                owned.domain, owned.topic, table, now_ms=self._clock(), retention=owned.retention
            )
            owned.table = table

    # ------------------------------------------------------------------ heartbeats

    async def heartbeat(self, owned: OwnedTopic, subscribers: Sequence[str]) -> None:
        """One heartbeat on each of ``subscribers``' links (XEP 2.5, example 5): numbered
        like a delivery, in one fan-out with each recipient's option."""
        if not subscribers:
            return
        domain, topic = owned.domain, owned.topic
        async with owned.lock:
            links = await self.sequencers.store.commit_heartbeats(
                domain,
                topic,
                subscribers,
                resolution=owned.settings.resolution,
                retention=owned.retention,
            )
        service = service_endpoint(domain)
        options: dict[Endpoint, tuple[Option, ...]] = {}
        first = links[0]
        beat = RobustInfo(
            link_seq=first.seq, link_epoch=first.epoch, source=service, heartbeat=True
        )
        numbered = LinkOptions(beat, OPTION_TRANS_ID)
        for name, link in zip(subscribers, links, strict=True):
            options[Endpoint.parse(name)] = (numbered.for_link(link.seq, link.epoch),)
        data, parts = delivery_data(topic_endpoint(topic, domain), b"", "")
        await self._fan_out(owned, data, parts, tuple(options), f"hb:{uuid.uuid4().hex}", options)

    def link_ended(self, domain: str, topic: str, subscriber: str) -> None:
        self.schedule.remove((domain, topic, subscriber))


__all__ = [
    "OPTION_TRANS_ID",
    "RobustSequencing",
    "Sequenced",
    "content_type_of",
    "delivery_data",
    "is_permissions",
    "RobustSettingsReader",
]
