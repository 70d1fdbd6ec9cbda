"""Section 4.7 of draft-schwartz-apex-pubsub-02, sans I/O: who a publication goes to
and the data element that carries it there.

A publication to ``apex=pubsub/TOPIC@DOMAIN`` is answered 550 (no such topic), 537 (no
``core:data``, section 6.1) or forwarded to every active subscriber (step 2) as one data
element per chunk of recipients, from the topic's endpoint, content untouched, with a
``dataHopping`` option whose budget shrinks at every re-origination, so data circling a
misconfigured tree of redistributing servers dies (RFC 3342 section 4). Never back to
the redistributing server it came from (split horizon).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import Option
from apexmesh.apex.party import DATA_HOPPING, MAX_HOPS, data_hopping_of, data_hopping_option
from apexmesh.pubsub.changes import Subscription
from apexmesh.pubsub.elements import service_endpoint, topic_endpoint, topic_of

if TYPE_CHECKING:
    from apexmesh.apex.memo import ParseMemo

#: Hop budget of data the service originates for a topic (RFC 3342 section 4): a tree of
#: redistributing servers deeper than this is refused by the relays (550).
DEFAULT_HOPS: Final = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishPlan:
    """Section 4.7.1: the answer to the delivering relay and where the data goes."""

    #: 250 (``ok``), 550 (no such topic) or 537 (no ``core:data`` on the topic).
    code: int
    step: str
    recipients: tuple[Endpoint, ...] = ()


def publish(
    originator: Endpoint,
    *,
    exists: bool,
    allowed: bool,
    subscriptions: Iterable[Subscription],
    now_ms: int,
) -> PublishPlan:
    """Step 1 (550), the ``core:data`` check of section 6.1 (537), step 2 (every active
    subscriber, never the redistributing server the data came from)."""
    if not exists:
        return PublishPlan(code=ApexReplyCode.ACTION_NOT_TAKEN, step="4.7.1/1")
    if not allowed:
        return PublishPlan(code=ApexReplyCode.NOT_AUTHORIZED, step="4.7.1/access")
    # Split horizon: data from a redistributing server never goes back to it; an
    # application that publishes to a topic it subscribes to gets its data as anyone.
    horizon = originator if topic_of(originator) is not None else None
    # One copy per subscriber, however many subscriptions it holds (schema v2 keys
    # subscriptions by id as well: docs/pubsub.md).
    recipients = tuple(
        dict.fromkeys(
            sub.subscriber
            for sub in subscriptions
            if sub.active(now_ms) and sub.subscriber != horizon
        )
    )
    return PublishPlan(code=250, step="4.7.1/2", recipients=recipients)


def hops_left(data: Data, default: int = DEFAULT_HOPS) -> int:
    """The hop budget of data the service re-originates: what is left of a received
    dataHopping count (so a loop through several domains keeps shrinking it), else
    ``default``. 0 means the data must not go on (the caller sends nothing)."""
    options: list[Option] = [*data.options, *data.originator.options]
    for recipient in data.recipients:
        options.extend(recipient.options)
    budget: int | None = None
    for option in options:
        if option.internal != DATA_HOPPING:
            continue
        count = data_hopping_of(option).no_more_than
        if count:
            budget = count if budget is None else min(budget, count)
    return min(default, MAX_HOPS) if budget is None else budget


def forward_data(
    data: Data,
    topic: str,
    domain: str,
    recipients: Iterable[Endpoint],
    *,
    hops: int,
    trans_id: int,
    memo: ParseMemo | None = None,
    options: Mapping[Endpoint, tuple[Option, ...]] | None = None,
) -> Data:
    """The data of section 4.7.1 step 2: from ``apex=pubsub/TOPIC@DOMAIN`` to the
    subscribers, with dataHopping (section 3's example), content untouched; ``memo``
    shares each subscriber's recipient element between publications; ``options``: the
    per-recipient options of some recipients (draft-wyman's InRe, 5.10.1)."""
    if options:
        named = tuple(
            Recipient(identity=r, options=own)
            if (own := options.get(r))
            else (Recipient(identity=r) if memo is None else memo.recipient(r))
            for r in recipients
        )
        hopping = data_hopping_option(trans_id, hops, report_errors=True)
    elif memo is None:
        named = tuple(Recipient(identity=r) for r in recipients)
        hopping = data_hopping_option(trans_id, hops, report_errors=True)
    else:
        named = tuple(memo.recipient(r) for r in recipients)
        hopping = memo.option_made(
            (DATA_HOPPING, trans_id, hops),
            lambda: data_hopping_option(trans_id, hops, report_errors=True),
        )
    return Data(
        content=data.content,
        originator=Originator(identity=topic_endpoint(topic, domain)),
        recipients=named,
        options=(hopping,),
        data_content=data.data_content,
    )


def is_upstream_operation(originator: Endpoint) -> bool:
    """Data to ``apex=pubsub/TOPIC`` from another domain's ``apex=pubsub`` itself is a
    forwarded subscribe or cancel (or the cancel of our own upstream subscription), not
    a publication: publications from a server carry the topic subaddress."""
    return originator == service_endpoint(originator.domain)


__all__ = [
    "DEFAULT_HOPS",
    "PublishPlan",
    "forward_data",
    "hops_left",
    "is_upstream_operation",
    "publish",
]
