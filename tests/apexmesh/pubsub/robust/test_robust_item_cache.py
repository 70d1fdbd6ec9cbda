"""The SDK's last value per item, as publish types define (XEP-0040 3.1, issue #29)."""

from __future__ import annotations

import pytest

from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.robust.item_cache import ItemCache
from apexmesh.pubsub.robust.operations import PermissionTableAnswer, parse_answer
from apexmesh.pubsub.robust.permissions import (
    ChangeKind,
    PermissionChange,
    PermissionTable,
    actor_of,
)
from apexmesh.pubsub.robust.publish_types import PublishType
from apexmesh.pubsub.robust.stub import Publication

pytestmark = pytest.mark.unit

A = Endpoint.parse("publisher@fromaplace.net")


def pub(seq: int, kind: PublishType | None, item: str | None, payload: bytes) -> Publication:
    return Publication(
        topic="quotes",
        source=A,
        source_seq=seq,
        type=kind,
        item=item,
        permtoken=None,
        contributor=None,
        payload=payload,
    )


def test_updates_corrections_images_and_drops_fold_per_item() -> None:
    cache = ItemCache()
    cache.apply(pub(1, PublishType.IMAGE, "XMPL", b"<q><bid>1</bid><ask>2</ask></q>"))
    cache.apply(pub(2, PublishType.UPDATE, "XMPL", b"<q><bid>3</bid></q>"))
    assert cache["XMPL"].payload() == b"<image><ask>2</ask><bid>3</bid></image>"
    cache.apply(pub(3, PublishType.CORRECTION, "XMPL", b"<q><ask>4</ask></q>"))
    assert cache["XMPL"].fields["ask"] == b"<ask>4</ask>"
    cache.apply(pub(4, PublishType.IMAGE, "XMPL", b"<q><last>5</last></q>"))
    assert set(cache["XMPL"].fields) == {"last"}  # an image drops what it does not carry
    cache.apply(pub(5, None, "OTHER", b"opaque"))
    assert list(cache) == ["OTHER", "XMPL"]
    assert cache.apply(pub(6, PublishType.DROP, "XMPL", b"")) is None
    assert list(cache) == ["OTHER"]
    assert cache.apply(pub(7, None, None, b"<q/>")) is None  # the datastream's, no item
    assert len(cache) == 1


def test_a_snapshot_loads_but_does_not_undo_what_the_live_flow_brought_since() -> None:
    cache = ItemCache()
    cache.apply(pub(9, PublishType.IMAGE, "XMPL", b"<q><bid>9</bid></q>"))
    cache.load(
        [
            pub(8, PublishType.IMAGE, "XMPL", b"<image><bid>8</bid></image>"),
            pub(7, PublishType.IMAGE, "OLD", b"<image><bid>7</bid></image>"),
        ]
    )
    assert cache["XMPL"].source_seq == 9
    assert cache["OLD"].fields == {"bid": b"<bid>7</bid>"}


def test_the_permission_table_answer_reads_back_tokens_lists_and_owners() -> None:
    table = PermissionTable().changed(
        [
            PermissionChange(ChangeKind.GRANT, "6747", actor_of("*@customer.example")),
            PermissionChange(ChangeKind.DENY, "6747", actor_of("rival@customer.example")),
        ],
        by="fred@example.com",
        creator=False,
    )
    answer = PermissionTableAnswer(topic="quotes", trans_id=3, table=table)
    assert parse_answer(answer.to_xml()) == answer
