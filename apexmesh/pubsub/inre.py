"""The "InRe" APEX option (draft-wyman-apex-pubsub-00 sections 5.10.1 and 7.7).

When one message satisfies several subscriptions of one endpoint, the service sends it
once, and the recipient's ``InRe`` option lists every subscription it satisfies
(5.10.1.1): ``<option internal='InRe' targetHop='final' mustUnderstand='false'
transID='105'><subscription-id>100</subscription-id>...</option>``. Several endpoints go
in one data element to the relay, each recipient with its own InRe ("anonymity among
individual subscribers", since the relay delivers each recipient's envelope to it alone).

A subscription made without an identifier (draft-schwartz's plain topic subscription)
contributes no id: an endpoint only it selects gets the message without InRe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.data import Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import Option, TargetHop
from apexmesh.pubsub._fields import pubsub_tag, text_of
from apexmesh.pubsub.subscription_elements import subscription_id_of

INRE: Final = "InRe"


def inre_option(subscription_ids: Iterable[int], trans_id: int) -> Option:
    """The InRe option naming ``subscription_ids`` (in ascending order)."""
    content = "".join(
        f"<subscription-id>{identifier}</subscription-id>"
        for identifier in sorted(set(subscription_ids))
    )
    return Option(
        internal=INRE,
        trans_id=trans_id,
        target_hop=TargetHop.FINAL,
        must_understand=False,
        content=content.encode(),
    )


def subscription_ids_of(option: Option) -> tuple[int, ...]:
    """The subscription ids an InRe option lists (501 for other content)."""
    if option.internal != INRE:
        _dtd.fail(f"option {option.name[:32]!r} is not InRe")
    root = _dtd.parse_root(b"<InRe>" + option.content + b"</InRe>")
    found: list[int] = []
    for child in _dtd.element_children(root):
        if pubsub_tag(child) != "subscription-id":
            _dtd.fail("InRe: only subscription-id elements are understood")
        found.append(subscription_id_of(text_of(child, option.trans_id), option.trans_id))
    return tuple(found)


def delivery_ids(
    matched: Iterable[tuple[Endpoint, int | None]],
) -> dict[Endpoint, tuple[int, ...]]:
    """One entry per recipient endpoint with every subscription id it matched (empty for
    an endpoint matched only by subscriptions without an id)."""
    grouped: dict[Endpoint, set[int]] = {}
    for endpoint, identifier in matched:
        ids = grouped.setdefault(endpoint, set())
        if identifier is not None:
            ids.add(identifier)
    return {endpoint: tuple(sorted(ids)) for endpoint, ids in grouped.items()}


def recipients(
    deliveries: Mapping[Endpoint, tuple[int, ...]], trans_id: int
) -> tuple[Recipient, ...]:
    """The recipient elements of one data element: each with its InRe, if it has ids."""
    return tuple(
        Recipient(identity=endpoint, options=(inre_option(ids, trans_id),))
        if ids
        else Recipient(identity=endpoint)
        for endpoint, ids in deliveries.items()
    )


__all__ = ["INRE", "delivery_ids", "inre_option", "recipients", "subscription_ids_of"]
