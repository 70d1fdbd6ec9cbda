"""Permission tokens: grant and deny lists per token, deny wins (XEP-0040 5.1)."""

from __future__ import annotations

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.robust.permissions import (
    MAX_ACTORS_PER_LIST,
    Actor,
    ChangeKind,
    PermissionChange,
    PermissionTable,
    actor_of,
)

pytestmark = pytest.mark.unit

ALICE = Endpoint.parse("alice@customer.example")
RIVAL = Endpoint.parse("rival@customer.example")
OTHER = Endpoint.parse("bob@elsewhere.example")


def _change(kind: ChangeKind, actor: str, token: str = "6747") -> PermissionChange:  # noqa: S107
    return PermissionChange(kind, token, actor_of(actor))


def test_no_token_goes_to_everyone_and_an_unknown_token_to_no_one() -> None:
    table = PermissionTable()
    assert table.allows(ALICE, None)
    assert not table.allows(ALICE, "6747")


def test_deny_wins_over_a_broad_grant() -> None:
    table = PermissionTable().changed(
        [_change(ChangeKind.GRANT, "*@customer.example"), _change(ChangeKind.DENY, str(RIVAL))]
    )
    assert table.allows(ALICE, "6747")
    assert not table.allows(RIVAL, "6747")
    assert not table.allows(OTHER, "6747")
    everyone = table.changed([_change(ChangeKind.GRANT, "*")])
    assert everyone.allows(OTHER, "6747")
    assert not everyone.allows(RIVAL, "6747")


def test_changes_make_a_new_table_so_earlier_publications_keep_theirs() -> None:
    before = PermissionTable().changed([_change(ChangeKind.GRANT, str(ALICE))])
    after = before.changed([_change(ChangeKind.REVOKE, str(ALICE))])
    assert before.allows(ALICE, "6747")
    assert not after.allows(ALICE, "6747")
    assert after.tokens == {}


def test_json_round_trip() -> None:
    table = PermissionTable().changed(
        [_change(ChangeKind.GRANT, "*"), _change(ChangeKind.DENY, str(RIVAL), "x1")]
    )
    assert PermissionTable.from_json(table.to_json()) == table


def test_actor_forms_and_bounds() -> None:
    assert actor_of("*") == Actor("*")
    assert actor_of("*@Customer.Example") == Actor("*@customer.example")
    with pytest.raises(ApexError) as caught:
        actor_of("no-at-sign")
    assert caught.value.code is ApexReplyCode.PARAMETER_INVALID
    changes = [_change(ChangeKind.GRANT, f"u{n}@x.com") for n in range(MAX_ACTORS_PER_LIST + 1)]
    with pytest.raises(ApexError) as caught:
        PermissionTable().changed(changes)
    assert caught.value.code is ApexReplyCode.TRANSACTION_FAILED


FRED = "fred@example.com"
BARNEY = "barney@example.com"
MIKE = "mike@example.com"


def test_publishers_manage_the_tokens_they_own_and_no_one_elses() -> None:
    """Issue #29 (XEP 5.1 "individual publishers can manage access"): the first to change
    a token owns it; another publisher gets 537; the topic's creator changes any."""
    table = PermissionTable().changed(
        [_change(ChangeKind.GRANT, "*@customer.example", "fred-1")], by=FRED, creator=False
    )
    assert table.owners == {"fred-1": FRED}
    more = table.changed([_change(ChangeKind.DENY, str(RIVAL), "fred-1")], by=FRED, creator=False)
    assert not more.allows(RIVAL, "fred-1")
    with pytest.raises(ApexError) as refused:
        more.changed([_change(ChangeKind.GRANT, str(RIVAL), "fred-1")], by=BARNEY, creator=False)
    assert refused.value.code == ApexReplyCode.NOT_AUTHORIZED
    opened = more.changed([_change(ChangeKind.REVOKE, str(RIVAL), "fred-1")], by=MIKE, creator=True)
    assert opened.allows(RIVAL, "fred-1")
    assert opened.owners == {"fred-1": FRED}
    # Emptied, the token keeps its owner: not free for another publisher to open.
    emptied = opened.changed(
        [_change(ChangeKind.REVOKE, "*@customer.example", "fred-1")], by=FRED, creator=False
    )
    assert "fred-1" not in emptied.tokens
    with pytest.raises(ApexError):
        emptied.changed([_change(ChangeKind.GRANT, "*", "fred-1")], by=BARNEY, creator=False)
    assert PermissionTable.from_json(emptied.to_json()) == emptied


def test_a_creators_token_from_before_owners_is_not_a_publishers() -> None:
    legacy = PermissionTable.from_json({"6747": {"grant": ["*"], "deny": []}})
    with pytest.raises(ApexError):
        legacy.changed([_change(ChangeKind.DENY, str(RIVAL))], by=FRED, creator=False)
    assert not legacy.changed([_change(ChangeKind.DENY, str(RIVAL))], by=MIKE).allows(RIVAL, "6747")
