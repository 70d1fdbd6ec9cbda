"""The per-channel transaction table of attach and bind (RFC 3340 sections 4.4.1-4.4.3,
6.1.1): transIDs in use, terminate by transID or all, and which endpoints are attached
over the channel (asked for every data the channel carries)."""

from __future__ import annotations

import pytest

from apexmesh.apex.associations import Associations, Attachment, Binding
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError

pytestmark = pytest.mark.unit

FRED = Endpoint.parse("fred@example.com")
BARNEY = Endpoint.parse("barney@example.com")


def attached(table: Associations, *attachments: Attachment) -> Associations:
    for attachment in attachments:
        table.begin(attachment.trans_id)
        table.complete(attachment)
    return table


def test_a_transid_in_use_or_in_progress_is_555() -> None:
    table = attached(Associations(), Attachment(1, FRED))
    table.begin(2)
    for trans_id in (1, 2):
        with pytest.raises(ApexError) as info:
            table.begin(trans_id)
        assert info.value.code == 555
    table.abandon(2)
    table.begin(2)


def test_attached_follows_complete_terminate_and_remove() -> None:
    fred, barney = Attachment(1, FRED), Attachment(2, BARNEY)
    table = attached(Associations(), fred, barney)
    assert table.attached(FRED)
    assert table.attached(BARNEY)
    assert table.terminate(1) == (fred,)
    assert not table.attached(FRED)
    assert table.attached(BARNEY)
    table.remove(barney)
    assert not table.attached(BARNEY)
    assert table.endpoints == ()


def test_terminate_zero_ends_everything_and_unknown_is_550() -> None:
    table = attached(Associations(), Attachment(1, FRED), Attachment(2, BARNEY))
    table.begin(3)
    table.complete(Binding(3, "rubble.com"))
    assert table.domains == ("rubble.com",)
    assert len(table.terminate(0)) == 3
    assert not table.attached(FRED)
    assert len(table) == 0
    with pytest.raises(ApexError) as info:
        table.terminate(1)
    assert info.value.code == 550


def test_removing_a_stale_attachment_keeps_the_current_one() -> None:
    table = attached(Associations(), Attachment(1, FRED))
    table.remove(Attachment(7, FRED))  # not in the table: nothing changes
    assert table.attached(FRED)
    assert table.attachment_of(FRED) == Attachment(1, FRED)
