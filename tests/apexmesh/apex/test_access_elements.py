"""The RFC 3341 element model: parsing, serialization, patterns, tokens, timestamps."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apexmesh.apex.access import (
    AccessEntry,
    AccessError,
    ActionSet,
    ActorPattern,
    Allow,
    Deny,
    DomainKind,
    Domains,
    Get,
    LocalKind,
    OwnerRules,
    Query,
    Reply,
    Set,
    SetNotice,
    TokenRegistry,
    answer_get,
    answer_query,
    authorize,
    check_subject,
    format_timestamp,
    next_timestamp,
    parse_entries,
    parse_operation,
    parse_timestamp,
)
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint
from apexmesh.beep.xml import parse_xml

pytestmark = pytest.mark.unit

REG = TokenRegistry()
TWO_ACCESS = (
    b"<set transID='7'><access owner='a@b.c' actor='*@*' /><access owner='a@b.c' actor='*@*' />"
    b"</set>"
)


def test_rfc_query_example() -> None:
    op = parse_operation(
        b"<query owner='fred@example.com' transID='1'\n"
        b"       actor='barney@example.com'\n"
        b"       actions='core:data presence:subscribe' />",
        REG,
    )
    assert op == Query(
        1,
        "fred@example.com",
        Endpoint.parse("barney@example.com"),
        frozenset({"core:data", "presence:subscribe"}),
    )


def test_rfc_get_example() -> None:
    op = parse_operation(b"<get transID='2' owner='fred@example.com' actor='*@example.com' />", REG)
    assert op == Get(2, "fred@example.com", ActorPattern.parse("*@example.com"))


def test_rfc_set_examples() -> None:
    op = parse_operation(
        b"<set transID='1'>\n  <access owner='fred@example.com' actor='*@example.com'"
        b" actions='core:data presence:subscribe' lastUpdate='2000-05-14T13:02:00-08:00' />\n"
        b"</set>",
        REG,
    )
    assert isinstance(op, Set)
    assert op.actions == ActionSet.of("core:data", "presence:subscribe")
    assert op.last_update == datetime(2000, 5, 14, 21, 2, tzinfo=UTC)
    delete = parse_operation(
        b"<set transID='2'><access owner='fred@example.com' actor='*@example.com'"
        b" lastUpdate='2000-05-14T13:02:00-08:00' /></set>",
        REG,
    )
    assert isinstance(delete, Set)
    assert delete.actions is None
    empty = parse_operation(
        b"<set transID='3'><access owner='x@example.com' actor='mr.slate@example.com'"
        b" actions='' /></set>",
        REG,
    )
    assert isinstance(empty, Set)
    assert empty.actions == ActionSet(frozenset())


@pytest.mark.parametrize(
    ("content", "code", "trans_id"),
    [
        (b"<query", 500, None),
        (b"<!DOCTYPE x [<!ENTITY a 'b'>]><query/>", 501, None),
        (b"<bogus transID='1' />", 501, None),
        (b"<get owner='a@b.c' actor='a@b.c' />", 501, None),
        (b"<get owner='a@b.c' actor='a@b.c' transID='0' />", 501, None),
        (b"<get owner='a@b.c' actor='a@b.c' transID='2147483648' />", 501, None),
        (b"<get owner='a@b.c' actor='a@b.c' transID='x1' />", 501, None),
        (b"<get owner='a@b.c' transID='4' />", 501, 4),
        (b"<get owner='a@b.c' actor='a@b.c' extra='1' transID='4' />", 501, 4),
        (b"<query owner='a@b.c' actor='a@b.c' actions='' transID='5' />", 501, 5),
        (b"<query owner='a@b.c' actor='a@b.c' actions='coredata' transID='5' />", 501, 5),
        (b"<query owner='a@b.c' actor='a@b.c' actions='core:dta' transID='5' />", 553, 5),
        (b"<query owner='a@b.c' actor='a@b.c' actions='foo:bar' transID='5' />", 553, 5),
        (b"<query owner='a@b.c' actor='a' actions='core:data' transID='5' />", 553, 5),
        (b"<get owner='a@b.c' actor='a*b@c.d' transID='6' />", 553, 6),
        (b"<get owner='a@b.c' actor='a@*b.c' transID='6' />", 553, 6),
        (b"<get owner='a@b.c' actor='a\\x@b.c' transID='6' />", 553, 6),
        (b"<get owner='a@b.c' actor='*@*.[10.0.0.1]' transID='6' />", 553, 6),
        (b"<set transID='7' />", 501, 7),
        (b"<set transID='7'>text<access owner='a@b.c' actor='*@*' /></set>", 501, 7),
        (b"<set transID='7'><other owner='a@b.c' actor='*@*' /></set>", 501, 7),
        (
            TWO_ACCESS,
            501,
            7,
        ),
        (
            b"<set transID='7'><access owner='a@b.c' actor='*@*' lastUpdate='yesterday' /></set>",
            501,
            7,
        ),
        (b"<set transID='7'><access owner='a@b.c' actions='core:data' /></set>", 501, 7),
    ],
)
def test_bad_operations_carry_their_codes(content: bytes, code: int, trans_id: int | None) -> None:
    with pytest.raises(AccessError) as info:
        parse_operation(content, REG)
    assert info.value.code == code
    assert info.value.trans_id == trans_id


@pytest.mark.parametrize(
    ("text", "local_kind", "local", "domain_kind", "domain"),
    [
        ("fred@example.com", LocalKind.EXACT, "fred", DomainKind.EXACT, "example.com"),
        ("fred/*@example.com", LocalKind.SUBADDRESS, "fred", DomainKind.EXACT, "example.com"),
        ("apex=pubsub/*@*", LocalKind.SUBADDRESS, "apex=pubsub", DomainKind.ANY, ""),
        ("apex=*@example.com", LocalKind.SERVICES, "", DomainKind.EXACT, "example.com"),
        ("*@*.example.com", LocalKind.ANY, "", DomainKind.SUFFIX, "example.com"),
        ("*@*", LocalKind.ANY, "", DomainKind.ANY, ""),
        ("a\\\\b\\*c@example.com", LocalKind.EXACT, "a\\b*c", DomainKind.EXACT, "example.com"),
        ("\\*@example.com", LocalKind.EXACT, "*", DomainKind.EXACT, "example.com"),
    ],
)
def test_actor_patterns(
    text: str, local_kind: LocalKind, local: str, domain_kind: DomainKind, domain: str
) -> None:
    pattern = ActorPattern.parse(text)
    assert pattern == ActorPattern(local_kind, local, domain_kind, domain)
    assert ActorPattern.parse(str(pattern)) == pattern


def test_escaped_actor_matches_the_literal_name() -> None:
    # RFC 3341 section 3: "a\\b\*c@example.com" in get/access, "a\b*c@..." in query.
    pattern = ActorPattern.parse("a\\\\b\\*c@example.com")
    assert pattern.matches(Endpoint.parse("a\\b*c@example.com"))
    assert not pattern.matches(Endpoint.parse("a\\bxc@example.com"))
    star = ActorPattern.parse("\\*@example.com")
    assert not star.matches(Endpoint.parse("fred@example.com"))


def test_wildcards_need_a_nonempty_match() -> None:
    sub = ActorPattern.parse("fred/*@example.com")
    assert sub.matches(Endpoint.parse("fred/x@example.com"))
    assert not sub.matches(Endpoint.parse("fred@example.com"))
    services = ActorPattern.parse("apex=*@example.com")
    assert services.matches(Endpoint.parse("apex=access@example.com"))
    assert not services.matches(Endpoint.parse("fred@example.com"))
    anyone = ActorPattern.parse("*@example.com")
    assert not anyone.matches(Endpoint.parse("apex=access@example.com"))


def test_subaddress_wildcard_beats_service_wildcard() -> None:
    owner = Endpoint.parse("fred@example.com")
    entries = [
        AccessEntry(owner, ActorPattern.parse("apex=*@*"), ActionSet.of("presence:watch")),
        AccessEntry(owner, ActorPattern.parse("apex=pubsub/*@*"), ActionSet.of("pubsub:all")),
    ]
    rules = OwnerRules.build(owner, entries)
    actor = Endpoint.parse("apex=pubsub/topic@other.org")
    assert rules.allows(actor, ["pubsub:subscribe"])
    assert not rules.allows(actor, ["presence:watch"])


def test_action_set_reserved_values() -> None:
    assert ActionSet.of("all:all").grants("pubsub:subscribe")
    assert ActionSet.of("pubsub:all").grants("pubsub:cancel")
    assert not ActionSet.of("pubsub:all").grants("core:data")
    assert ActionSet.of("all:data").grants("core:data")
    assert not ActionSet.of("all:none").grants("core:data")
    assert not ActionSet(frozenset()).grants("core:data")


def test_token_registry_extension() -> None:
    with pytest.raises(AccessError):
        REG.validate("chat:send")
    assert REG.with_tokens(["chat:send"]).validate("chat:send") == "chat:send"
    assert REG.validate("all:subscribe") == "all:subscribe"
    with pytest.raises(AccessError):
        REG.validate("all:frobnicate")


def test_serialization_round_trips_through_the_parser() -> None:
    owner = Endpoint.parse("fred@example.com")
    entry = AccessEntry(
        owner,
        ActorPattern.parse("a\\\\b\\*c@example.com"),
        ActionSet.of("core:data", "presence:subscribe"),
        datetime(2000, 5, 14, 21, 2, tzinfo=UTC),
    )
    notice = SetNotice(2, entry)
    parsed = parse_operation(notice.to_xml(), REG)
    assert isinstance(parsed, Set)
    assert parsed.entry(owner, parsed.last_update) == entry
    assert parse_xml(Allow(1).to_xml()).attrib == {"transID": "1"}
    assert parse_xml(Deny(1).to_xml()).tag == "deny"
    reply = parse_xml(Reply(ApexReplyCode.NO_SUCH_ENTRY, 9, "no <entry> & none").to_xml())
    assert reply.get("code") == "551"
    assert reply.text == "no <entry> & none"


def test_timestamps() -> None:
    assert parse_timestamp("2000-05-14T13:02:00-08:00") == parse_timestamp("2000-05-14T21:02:00Z")
    assert parse_timestamp("2000-05-14T21:02:00-00:00") == parse_timestamp("2000-05-14T21:02:00Z")
    stamp = parse_timestamp("2000-05-14T21:02:00.1234567Z")
    assert stamp.microsecond == 123456
    assert parse_timestamp(format_timestamp(stamp)) == stamp
    for bad in ("2000-05-14", "2000-13-14T21:02:00Z", "2000-05-14T21:02:60Z", "x"):
        with pytest.raises(AccessError) as info:
            parse_timestamp(bad)
        assert info.value.code == 501
    now = datetime(2020, 1, 1, tzinfo=UTC)
    assert next_timestamp(now, now) > now
    assert next_timestamp(now, None) == now


def test_operation_steps() -> None:
    domains = Domains.of("example.com")
    owner = check_subject("fred@example.com", domains)
    for text, code in [
        ("fred@other.org", 553),
        ("not an endpoint", 553),
        ("apex=nosuch@example.com", 550),
    ]:
        with pytest.raises(AccessError) as info:
            check_subject(text, domains)
        assert info.value.code == code
    rules = OwnerRules.build(owner, [])
    authorize(rules, owner, "access:set")
    with pytest.raises(AccessError) as info:
        authorize(rules, Endpoint.parse("barney@example.com"), "access:get")
    assert info.value.code == 537
    query = Query(3, "fred@example.com", owner, frozenset({"core:data"}))
    assert answer_query(query, rules) == Allow(3)
    query = Query(4, "fred@example.com", Endpoint.parse("x@y.org"), frozenset({"core:data"}))
    assert answer_query(query, rules) == Deny(4)
    with pytest.raises(AccessError) as info:
        answer_get(Get(5, "fred@example.com", ActorPattern.parse("*@*")), rules)
    assert (info.value.code, info.value.trans_id) == (551, 5)


def test_seed_documents() -> None:
    entries = parse_entries(
        "<access-entries>"
        "<access owner='apex=pubsub@example.com' actor='*@example.com'"
        " actions='pubsub:createtopic pubsub:deletetopic' />"
        "</access-entries>",
        REG,
    )
    assert len(entries) == 1
    for bad, code in [
        ("<other/>", 501),
        ("<access-entries><access owner='a@b.c' actor='*@*' /></access-entries>", 501),
        ("<access-entries><x/></access-entries>", 501),
        ("<access-entries><access owner='a' actor='*@*' actions='' /></access-entries>", 553),
        (
            "<access-entries><access owner='a@b.c' actor='*@*' actions='x:y' /></access-entries>",
            553,
        ),
        ("<access-entries>", 500),
    ]:
        with pytest.raises(AccessError) as info:
            parse_entries(bad, REG)
        assert info.value.code == code
