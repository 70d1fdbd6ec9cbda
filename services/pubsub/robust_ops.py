"""The read side of robust topics: ``gap``, ``sourcequery`` and ``snapshot`` sent to
``apex=pubsub@DOMAIN`` (XEP-0040 2.4, 4, 3.1; docs/robust.md "Gap fill").

Any pod answers them (they read Redis only, never number anything). Each is refused
with the codes of docs/robust.md "Codes": 553 for a topic that is not robust (or does not
exist) or a range past the resolution or ``MAX_GAP``; 537 without ``pubsub:subscribe``
on the topic; 550 when the link context is gone or the range left the stream. The
refusal goes back through the service's reply path, once, from the :class:`ApexError`
raised here.

Redeliveries go out as data from ``apex=pubsub/TOPIC@DOMAIN`` through the same bounded
fan-out as live publications (:meth:`services.pubsub.publishing.Publisher.fan_out`), one
after the other in the stream's order, so a large repair slows its requester only; then
the answer (``gapreply``, ``sourceinfo``) goes through the reply path. The stub never
relies on the order of the two (they can take different paths through the relays).
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence

from redis.exceptions import RedisError

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.elements import SUBSCRIBE_TOKEN, service_endpoint, topic_endpoint
from apexmesh.pubsub.robust.elements import RobustInfo, robust_option
from apexmesh.pubsub.robust.operations import (
    GapReply,
    GapRequest,
    Position,
    Request,
    SnapshotRequest,
    SourceInfo,
    SourceQuery,
)
from apexmesh.pubsub.robust.permissions import PermissionTable
from apexmesh.pubsub.robust.publish_types import (
    OPAQUE_FIELD,
    Image,
    PublishType,
    publish_type,
    snapshot,
)
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.store.pubsub_cache import SubscriberCache
from apexmesh.store.robust import BeyondRetention, LinkGone, RobustStore, StreamEntry
from apexmesh.store.robust_topics import RobustTopics
from services.pubsub.publishing import Publisher
from services.pubsub.robust_serving import (
    OPTION_TRANS_ID,
    AccessCheck,
    RobustSettingsReader,
    delivery_data,
)

_log = logging.getLogger(__name__)

#: ``answer(domain, recipient, content)``: an answer through the reply path.
AnswerSender = Callable[[str, Endpoint, bytes], Awaitable[None]]

#: The media type of an image whose item is one opaque field.
OPAQUE_TYPE = "application/octet-stream"


class Served(enum.Enum):
    """Which answer an operation got (for the operations metric)."""

    LINK_REPAIR = "gap-link"
    SOURCE_REPAIR = "gap-source"
    SOURCE_INFO = "sourcequery"
    SNAPSHOT = "snapshot"


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
        settings_of: RobustSettingsReader,
    ) -> None:
        self._store = store
        self._settings_of = settings_of
        self._topics = topics
        self._cache = cache
        self._publisher = publisher
        self._allowed = allowed
        self._answer = answer

    async def handle(self, domain: str, originator: Endpoint, request: Request) -> Served:
        """Serve ``request`` from ``originator``; raises ApexError with the refusal."""
        trans_id = request.trans_id
        state = await self._cache.topic(domain, request.topic)
        settings = self._settings_of(state)
        if settings is None:
            raise _refused(
                ApexReplyCode.PARAMETER_INVALID, f"{request.topic} is not a robust topic", trans_id
            )
        owner = topic_endpoint(request.topic, domain)
        if not await self._allowed(owner, originator, SUBSCRIBE_TOKEN, trans_id):
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

    async def _serve(
        self, domain: str, originator: Endpoint, request: Request, settings: RobustSettings
    ) -> Served:
        if isinstance(request, SourceQuery):
            await self._sourcequery(domain, originator, request, settings)
            return Served.SOURCE_INFO
        if isinstance(request, SnapshotRequest):
            await self._snapshot(domain, originator, request)
            return Served.SNAPSHOT
        if request.by_link:
            await self._by_link(domain, originator, request, settings)
            return Served.LINK_REPAIR
        await self._by_source(domain, originator, request)
        return Served.SOURCE_REPAIR

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
        """XEP example 2: the link seqs again, each with its original number."""
        request.check_span(settings.resolution)
        rows = await self._store.read_link_range(
            domain,
            request.topic,
            str(subscriber),
            first=request.link_from or 0,
            last=request.link_to,
            epoch=request.link_epoch,
            resolution=settings.resolution,
        )
        epoch = request.link_epoch
        for seq, entry in rows:
            if entry is None:
                beat = RobustInfo(
                    link_seq=seq, link_epoch=epoch, source=service_endpoint(domain), heartbeat=True
                )
                await self._redeliver(domain, request.topic, subscriber, beat, b"", "")
            else:
                info = _entry_info(entry, link_seq=seq, link_epoch=epoch)
                await self._redeliver(
                    domain, request.topic, subscriber, info, entry.payload, _ctype(entry)
                )
        reply = GapReply(topic=request.topic, trans_id=request.trans_id, count=len(rows))
        await self._answer(domain, subscriber, reply.to_xml())

    async def _by_source(self, domain: str, subscriber: Endpoint, request: GapRequest) -> None:
        """XEP example 3: everything after the latest named position, in the stream's
        order, but what the subscriber's tokens did not allow at its position."""
        positions = [(str(source), after) for source, after in request.sources]
        entries = await self._store.read_after(domain, request.topic, positions)
        named = {str(source): after for source, after in request.sources}
        table = await self._table_before(domain, request.topic, entries)
        count = 0
        for entry in entries:
            changed = entry.permissions()
            if changed is not None:
                table = changed
                continue
            if entry.kind != "pub" or entry.source_seq <= named.get(entry.source, 0):
                continue
            token = entry.fields.get("permtoken", b"").decode() or None
            if not table.allows(subscriber, token):
                continue
            count += 1
            info = _entry_info(entry, link_seq=None, link_epoch=None, gap=(request.trans_id, count))
            await self._redeliver(
                domain, request.topic, subscriber, info, entry.payload, _ctype(entry)
            )
        reply = GapReply(topic=request.topic, trans_id=request.trans_id, count=count)
        await self._answer(domain, subscriber, reply.to_xml())

    async def _table_before(
        self, domain: str, topic: str, entries: Sequence[StreamEntry]
    ) -> PermissionTable:
        """The permission table in force at the first of ``entries``: the one in force
        now when none of them changes it; otherwise the one before the first change,
        read back from the stream, or the empty table (no token passes) when that was
        trimmed: a repair never hands out what a table may have denied."""
        if not any(entry.kind == "perm" for entry in entries):
            return await self._topics.table(domain, topic)
        if not entries:  # pragma: no cover - any() above was true
            return PermissionTable()
        found = await self._topics.table_before(domain, topic, entries[0].id)
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
            await self._redeliver(
                domain, request.topic, subscriber, info, image.payload(), _image_type(image)
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
