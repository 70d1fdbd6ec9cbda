"""Publish types and the last-value image per item (XEP-0040 3.1)."""

from __future__ import annotations

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.robust.publish_types import (
    OPAQUE_FIELD,
    Image,
    PublishType,
    check_item,
    fields_of_payload,
    fold,
    publish_type,
    snapshot,
)

pytestmark = pytest.mark.unit


def _fold(
    current: Image | None, kind: PublishType | None, payload: bytes, seq: int
) -> Image | None:
    return fold(
        current,
        kind,
        item="XMPL",
        fields=fields_of_payload(payload),
        source="p@x.com",
        source_seq=seq,
    )


def test_type_names_add_is_image_and_unknown_is_504() -> None:
    assert [publish_type(t) for t in ("update", "correction", "image", "drop", "snapshot")] == list(
        PublishType
    )
    assert publish_type("add") is PublishType.IMAGE
    with pytest.raises(ApexError) as caught:
        publish_type("merge", trans_id=4)
    assert (caught.value.code, caught.value.trans_id) == (
        ApexReplyCode.PARAMETER_NOT_IMPLEMENTED,
        4,
    )


def test_update_and_correction_replace_only_the_fields_they_carry() -> None:
    image = _fold(None, PublishType.IMAGE, b"<q><bid>1</bid><ask>2</ask><vol>9</vol></q>", 1)
    image = _fold(image, PublishType.UPDATE, b"<q><bid>3</bid></q>", 2)
    image = _fold(image, PublishType.CORRECTION, b"<q><ask>4</ask></q>", 3)
    assert image is not None
    assert dict(image.fields) == {
        "bid": b"<bid>3</bid>",
        "ask": b"<ask>4</ask>",
        "vol": b"<vol>9</vol>",
    }
    assert image.source_seq == 3
    assert image.payload() == b"<image><ask>4</ask><bid>3</bid><vol>9</vol></image>"


def test_image_drops_fields_it_does_not_carry_and_drop_removes_the_item() -> None:
    image = _fold(None, PublishType.UPDATE, b"<q><bid>1</bid><ask>2</ask></q>", 1)
    image = _fold(image, PublishType.IMAGE, b"<q><bid>5</bid></q>", 2)
    assert image is not None
    assert dict(image.fields) == {"bid": b"<bid>5</bid>"}
    assert _fold(image, PublishType.DROP, b"", 3) is None


def test_no_type_about_an_item_folds_as_update_and_opaque_payloads_replace() -> None:
    image = _fold(None, None, b"<q><a>1</a></q>", 1)
    image = _fold(image, None, b"<q><b>2</b></q>", 2)
    assert image is not None
    assert set(image.fields) == {"a", "b"}
    opaque = _fold(image, PublishType.UPDATE, b"\x00binary", 3)
    assert opaque is not None
    assert dict(opaque.fields) == {OPAQUE_FIELD: b"\x00binary"}
    assert opaque.payload() == b"\x00binary"


def test_snapshot_is_a_request_never_folded() -> None:
    with pytest.raises(ApexError) as caught:
        _fold(None, PublishType.SNAPSHOT, b"<q/>", 1)
    assert caught.value.code is ApexReplyCode.PARAMETER_INVALID


def test_snapshot_answers_current_images() -> None:
    a = _fold(None, PublishType.IMAGE, b"<q><x>1</x></q>", 1)
    assert a is not None
    b = Image(item="ABC", fields={"y": b"<y>2</y>"}, source="p@x.com", source_seq=2)
    images = {"XMPL": a, "ABC": b}
    assert snapshot(images) == (b, a)
    assert snapshot(images, "XMPL") == (a,)
    assert snapshot(images, "NONE") == ()


def test_item_keys_are_bounded() -> None:
    assert check_item("XMPL") == "XMPL"
    for bad in ("", "a\nb", "x" * 257):
        with pytest.raises(ApexError):
            check_item(bad)
