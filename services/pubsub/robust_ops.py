"""The read side of robust topics: ``gap``, ``sourcequery`` and ``snapshot`` sent to
``apex=pubsub@DOMAIN`` (XEP-0040 2.4, 4, 3.1; docs/robust.md "Gap fill").

Any pod answers them (they read Redis only, never number anything). Each is refused
with the codes of docs/robust.md "Codes": 553 for a topic that is not robust (or does not
exist) or a range past the resolution or ``MAX_GAP``; 537 without ``pubsub:subscribe``
on the topic; 550 when the link context is gone or the range left the stream. The
refusal goes back through the service's reply path, once, from the :class:`ApexError`
raised here.

A ``gap`` or ``snapshot`` is checked here (the codes above, raised at once) and then
served in the background (:mod:`services.pubsub.robust_repairs`): the redeliveries go
out as data from ``apex=pubsub/TOPIC@DOMAIN`` through the same bounded fan-out as live
publications (:meth:`services.pubsub.publishing.Publisher.fan_out`), a window of them at
a time in the stream's order, read a page at a time (:mod:`apexmesh.store.robust_reads`),
so a large repair slows its requester only and a pod holds one page of it; then the
answer (``gapreply``) goes through the reply path. A refusal found on the way (link
context gone, a position trimmed) is replied from there. The stub never relies on the
order of redeliveries and answer (they can take different paths through the relays).
"""

from __future__ import annotations

import enum
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

from redis.exceptions import RedisError

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.elements import DATA_TOKEN, SUBSCRIBE_TOKEN, service_endpoint, topic_endpoint
from apexmesh.pubsub.robust.elements import RobustInfo, robust_option
from apexmesh.pubsub.robust.operations import (
    GapReply,
    GapRequest,
    PermissionsQuery,
    PermissionTableAnswer,
    Position,
    Request,
    SnapshotRequest,
    SourceInfo,
    SourceQuery,
)
from apexmesh.pubsub.robust.permissions import PermissionTable
from apexmesh.pubsub.robust.position import Resume
from apexmesh.pubsub.robust.publish_types import (
    OPAQUE_FIELD,
    Image,
    PublishType,
    publish_type,
    snapshot,
)
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.store.pubsub import PubsubStore
from apexmesh.store.pubsub_cache import SubscriberCache
from apexmesh.store.robust import RobustStore
from apexmesh.store.robust_reads import BeyondRetention, LinkGone, StreamEntry, StreamSpan
from apexmesh.store.robust_topics import RobustTopics
from services.pubsub.publishing import Publisher
from services.pubsub.robust_repairs import Redeliveries, Repairs
from services.pubsub.robust_serving import (
    OPTION_TRANS_ID,
    AccessCheck,
    ReplySender,
    RobustSettingsReader,
    delivery_data,
)

_log = logging.getLogger(__name__)

#: ``answer(domain, recipient, content)``: an answer through the reply path.
AnswerSender = Callable[[str, Endpoint, bytes], Awaitable[None]]

#: The media type of an image whose item is one opaque field.
OPAQUE_TYPE = "application/octet-stream"
#: Redeliveries of a source repair between two checks that it is still the
#: subscriber's latest (a stub that asked again wants only the new one).
SUPERSEDED_CHECK: Final = 128
#: How long the marker of a subscriber's latest source repair lives (ms).
REPAIR_MARK_MS: Final = 3_600_000


class Served(enum.Enum):
    """Which answer an operation got (for the operations metric)."""

    LINK_REPAIR = "gap-link"
    SOURCE_REPAIR = "gap-source"
    SOURCE_INFO = "sourcequery"
    SNAPSHOT = "snapshot"
    RESUME = "resume"
    PERMISSIONS = "permissions"


def _refused(code: ApexReplyCode, text: str, trans_id: int) -> ApexError:
    return ApexError(code, text, trans_id=trans_id)


def _entry_info(
    entry: StreamEntry,
    *,
    link_seq: int | None,
    link_epoch: int | None,
    gap: tuple[int, int] | None = None,
) -> RobustInfo:
    """The ``robust`` option content of a redelivered stream entry."""
    fields = entry.fields
    kind = fields.get("type", b"").decode()
    contributor = fields.get("contributor", b"").decode()
    return RobustInfo(
        link_seq=link_seq,
        link_epoch=link_epoch,
        source_seq=entry.source_seq,
        source=Endpoint.parse(entry.source),
        type=publish_type(kind) if kind else None,
        item=fields.get("item", b"").decode() or None,
        permtoken=fields.get("permtoken", b"").decode() or None,
        contributor=Endpoint.parse(contributor) if contributor else None,
        gap=None if gap is None else gap[0],
        gap_seq=None if gap is None else gap[1],
    )


class RobustOperations:
    """``gap``, ``sourcequery`` and ``snapshot`` for the domains of one pod."""

    def __init__(
        self,
        *,
        store: RobustStore,
        topics: RobustTopics,
        cache: SubscriberCache,
        publisher: Publisher,
        allowed: AccessCheck,
        answer: AnswerSender,
        reply: ReplySender,
        settings_of: RobustSettingsReader,
        pubsub: PubsubStore,
    ) -> None:
        self._store = store
        self._reads = store.reads
        #: Gap repairs and snapshots running in the background.
        self.repairs = Repairs(reply)
        self._reply = reply
        self._pubsub = pubsub
        self._settings_of = settings_of
        self._topics = topics
        self._cache = cache
        self._publisher = publisher
        self._allowed = allowed
        self._answer = answer

    async def handle(self, domain: str, originator: Endpoint, request: Request) -> Served:
        """Serve ``request`` from ``originator`` (a gap or snapshot: start serving it);
        raises ApexError with the refusal found before."""
        trans_id = request.trans_id
        state = await self._cache.topic(domain, request.topic)
        settings = self._settings_of(state)
        if settings is None:
            raise _refused(
                ApexReplyCode.PARAMETER_INVALID, f"{request.topic} is not a robust topic", trans_id
            )
        if not await self._may_ask(domain, originator, request):
            raise _refused(ApexReplyCode.NOT_AUTHORIZED, "action not authorized", trans_id)
        try:
            served = await self._serve(domain, originator, request, settings)
        except LinkGone:
            raise _refused(ApexReplyCode.ACTION_NOT_TAKEN, "link context gone", trans_id) from None
        except BeyondRetention:
            raise _refused(
                ApexReplyCode.ACTION_NOT_TAKEN, "range beyond retention", trans_id
            ) from None
        except ApexError as exc:
            if exc.trans_id is None:
                exc.trans_id = trans_id
            raise
        except (RedisError, OSError) as exc:
            _log.warning("robust %s on %s: %s", type(request).__name__, request.topic, exc)
            raise _refused(
                ApexReplyCode.ACTION_ABORTED, "pubsub store unavailable", trans_id
            ) from None
        return served

    async def _may_ask(self, domain: str, originator: Endpoint, request: Request) -> bool:
        """Step 1: ``pubsub:subscribe`` on the topic; for the permission table the
        topic's creator or a publisher (``core:data``), whose regime it is."""
        owner = topic_endpoint(request.topic, domain)
        trans_id = request.trans_id
        if not isinstance(request, PermissionsQuery):
            return await self._allowed(owner, originator, SUBSCRIBE_TOKEN, trans_id)
        if await self._allowed(owner, originator, DATA_TOKEN, trans_id):
            return True
        return (await self._pubsub.read_topic(domain, request.topic, ())).creator == originator

    async def _serve(
        self, domain: str, originator: Endpoint, request: Request, settings: RobustSettings
    ) -> Served:
        if isinstance(request, SourceQuery):
            await self._sourcequery(domain, originator, request, settings)
            return Served.SOURCE_INFO
        if isinstance(request, Resume):
            await self._resume(domain, originator, request)
            return Served.RESUME
        if isinstance(request, PermissionsQuery):
            table = await self._topics.table(domain, request.topic)
            answer = PermissionTableAnswer(
                topic=request.topic, trans_id=request.trans_id, table=table
            )
            await self._answer(domain, originator, answer.to_xml())
            return Served.PERMISSIONS
        start = self.repairs.start
        trans_id = request.trans_id
        if isinstance(request, SnapshotRequest):
            start(domain, originator, trans_id, lambda: self._snapshot(domain, originator, request))
            return Served.SNAPSHOT
        if request.by_link:
            request.check_span(settings.resolution)
            start(
                domain,
                originator,
                trans_id,
                lambda: self._by_link(domain, originator, request, settings),
            )
            return Served.LINK_REPAIR
        await self._topics.begin_repair(
            domain, request.topic, str(originator), trans_id, REPAIR_MARK_MS
        )
        start(domain, originator, trans_id, lambda: self._by_source(domain, originator, request))
        return Served.SOURCE_REPAIR

    async def aclose(self) -> None:
        await self.repairs.aclose()

    async def _resume(self, domain: str, subscriber: Endpoint, request: Resume) -> None:
        """XEP 2.4's link position in the initial request (apexmesh/pubsub/robust/
        position.py): the link goes on when it is in the epoch named still, else it
        restarts above it (the stub then repairs by source from its positions). 550 for
        a subscriber without a subscription to the topic (its link would never be
        numbered)."""
        state = await self._cache.topic(domain, request.topic)
        if not any(sub.subscriber == subscriber for sub in state.subscriptions.values()):
            raise _refused(ApexReplyCode.ACTION_NOT_TAKEN, "not subscribed", request.trans_id)
        kept = await self._store.resume_link(
            domain, request.topic, str(subscriber), request.link_epoch
        )
        text = "link goes on" if kept else f"link restarts after epoch {request.link_epoch}"
        await self._reply(domain, subscriber, ApexReplyCode.SUCCESS, request.trans_id, text)

    # ------------------------------------------------------------------ the answers

    async def _redeliver(
        self,
        domain: str,
        topic: str,
        subscriber: Endpoint,
        info: RobustInfo,
        content: bytes,
        content_type: str,
    ) -> None:
        data, parts = delivery_data(topic_endpoint(topic, domain), content, content_type)
        code, text = await self._publisher.fan_out(
            domain,
            topic,
            data,
            parts,
            (subscriber,),
            f"repair:{uuid.uuid4().hex}",
            {subscriber: (robust_option(info, OPTION_TRANS_ID),)},
            counted=False,
        )
        if code != ApexReplyCode.SUCCESS:
            # The stub asks again after its repair timeout: nothing else to do here.
            raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, f"redelivery: {code} {text}")

    async def _by_link(
        self, domain: str, subscriber: Endpoint, request: GapRequest, settings: RobustSettings
    ) -> None:
        """XEP example 2: the link seqs again, each with its original number. The
        ``gapreply`` goes first, saying how many follow: a stub whose open request
        (``linkfrom`` only) is answered learns its extent at once, rather than asking
        again by range for what is already on its way."""
        epoch, topic = request.link_epoch, request.topic
        seqs = await self._reads.link_seqs(
            domain,
            topic,
            str(subscriber),
            first=request.link_from or 0,
            last=request.link_to,
            epoch=epoch,
            resolution=settings.resolution,
        )
        reply = GapReply(topic=topic, trans_id=request.trans_id, count=len(seqs))
        await self._answer(domain, subscriber, reply.to_xml())
        pages = self._reads.link_pages(domain, topic, str(subscriber), seqs, epoch)
        async with Redeliveries() as window:
            async for page in pages:
                for seq, entry in page:
                    if entry is None:
                        beat = RobustInfo(
                            link_seq=seq,
                            link_epoch=epoch,
                            source=service_endpoint(domain),
                            heartbeat=True,
                        )
                        await window.put(self._sender(domain, topic, subscriber, beat, None))
                    else:
                        info = _entry_info(entry, link_seq=seq, link_epoch=epoch)
                        await window.put(self._sender(domain, topic, subscriber, info, entry))

    async def _by_source(self, domain: str, subscriber: Endpoint, request: GapRequest) -> None:
        """XEP example 3: everything after the latest named position, in the stream's
        order, but what the subscriber's tokens did not allow at its position. Stops
        without an answer when the subscriber asked again meanwhile (superseded)."""
        topic, trans_id = request.topic, request.trans_id
        positions = [(str(source), after) for source, after in request.sources]
        span = await self._reads.source_span(domain, topic, positions)
        named = {str(source): after for source, after in request.sources}
        table = await self._table_at(domain, topic, span)
        async with Redeliveries() as window:
            async for page in self._reads.span_pages(domain, topic, span):
                for entry in page:
                    changed = entry.permissions()
                    if changed is not None:
                        table = changed
                        continue
                    if entry.kind != "pub" or entry.source_seq <= named.get(entry.source, 0):
                        continue
                    token = entry.fields.get("permtoken", b"").decode() or None
                    if not table.allows(subscriber, token):
                        continue
                    if not await self._still_current(domain, topic, subscriber, trans_id, window):
                        _log.info("source repair %d for %s superseded", trans_id, subscriber)
                        return
                    info = _entry_info(
                        entry, link_seq=None, link_epoch=None, gap=(trans_id, window.sent + 1)
                    )
                    await window.put(self._sender(domain, topic, subscriber, info, entry))
        reply = GapReply(topic=topic, trans_id=trans_id, count=window.sent)
        await self._answer(domain, subscriber, reply.to_xml())

    async def _still_current(
        self, domain: str, topic: str, subscriber: Endpoint, trans_id: int, window: Redeliveries
    ) -> bool:
        """Whether the source repair ``trans_id`` is still the subscriber's latest:
        asked of Redis every :data:`SUPERSEDED_CHECK` redeliveries."""
        if not window.sent or window.sent % SUPERSEDED_CHECK:
            return True
        return await self._topics.repair_current(domain, topic, str(subscriber), trans_id)

    def _sender(
        self,
        domain: str,
        topic: str,
        subscriber: Endpoint,
        info: RobustInfo,
        entry: StreamEntry | None,
    ) -> Callable[[], Awaitable[None]]:
        """One redelivery of ``entry`` (None: a heartbeat) with ``info``, to be sent."""
        if entry is None:
            return functools.partial(self._redeliver, domain, topic, subscriber, info, b"", "")
        return functools.partial(
            self._redeliver, domain, topic, subscriber, info, entry.payload, _ctype(entry)
        )

    async def _table_at(self, domain: str, topic: str, span: StreamSpan) -> PermissionTable:
        """The permission table in force at the start of ``span``: the one in force now
        when no entry of the span changes it; otherwise the one of the last change
        before the span, read back from the stream, or the empty table (no token
        passes) when that was trimmed: a repair never hands out what a table may have
        denied."""
        if not span.changes_permissions:
            return await self._topics.table(domain, topic)
        if span.after is None:
            return PermissionTable()
        found = await self._topics.table_before(domain, topic, span.after)
        return PermissionTable() if found is None else found

    async def _snapshot(self, domain: str, subscriber: Endpoint, request: SnapshotRequest) -> None:
        """XEP 3.1 snapshot: the current image of each item (or of one), no updates;
        an image whose last publication carried a token only to whom the table in force
        allows it."""
        images = await self._store.images(domain, request.topic)
        table = await self._topics.table(domain, request.topic)
        chosen = tuple(
            image
            for image in snapshot(images, request.item)
            if table.allows(subscriber, image.permtoken)
        )
        async with Redeliveries() as window:
            for number, image in enumerate(chosen, start=1):
                info = RobustInfo(
                    link_seq=None,
                    source_seq=image.source_seq,
                    source=Endpoint.parse(image.source),
                    type=PublishType.IMAGE,
                    item=image.item,
                    gap=request.trans_id,
                    gap_seq=number,
                )
                await window.put(
                    functools.partial(
                        self._redeliver,
                        domain,
                        request.topic,
                        subscriber,
                        info,
                        image.payload(),
                        _image_type(image),
                    )
                )
        reply = GapReply(topic=request.topic, trans_id=request.trans_id, count=len(chosen))
        await self._answer(domain, subscriber, reply.to_xml())

    async def _sourcequery(
        self, domain: str, subscriber: Endpoint, query: SourceQuery, settings: RobustSettings
    ) -> None:
        """XEP 4: the topic's capabilities, and what a position of the link carried."""
        position = None
        if query.link_seq is not None:
            if not settings.resolution.valid(query.link_seq):
                raise _refused(
                    ApexReplyCode.PARAMETER_INVALID, "linkseq beyond the resolution", query.trans_id
                )
            ((seq, entry),) = await self._store.read_link_range(
                domain,
                query.topic,
                str(subscriber),
                first=query.link_seq,
                last=query.link_seq,
                epoch=None,
                resolution=settings.resolution,
            )
            if entry is None:
                position = Position(link_seq=seq, source=service_endpoint(domain))
            else:
                position = Position(
                    link_seq=seq, source=Endpoint.parse(entry.source), source_seq=entry.source_seq
                )
        info = SourceInfo(
            topic=query.topic, trans_id=query.trans_id, settings=settings, position=position
        )
        await self._answer(domain, subscriber, info.to_xml())


def _ctype(entry: StreamEntry) -> str:
    return entry.fields.get("ctype", b"").decode()


def _image_type(image: Image) -> str:
    return OPAQUE_TYPE if set(image.fields) == {OPAQUE_FIELD} else ""


__all__ = ["AnswerSender", "RobustOperations", "Served"]
