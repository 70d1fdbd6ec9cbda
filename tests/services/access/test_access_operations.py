"""The apex=access operations, handled directly (RFC 3341 sections 2 and 4), with a real
redis-server: every reply code the RFC names, and bad input that changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from apexmesh.apex.access import Domains, TokenRegistry
from apexmesh.apex.endpoint import Endpoint
from apexmesh.beep.xml import parse_xml
from apexmesh.store.access_entries import AccessEntryStore
from apexmesh.store.keys import Keys
from services.access.servicer import AccessOperations

pytestmark = pytest.mark.integration


class Clock:
    """A settable clock: the service's notion of the current time, for lastUpdate."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 23, 2, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def operations(redis: Redis, keys: Keys) -> AccessOperations:
    return AccessOperations(
        AccessEntryStore(redis, keys),
        Domains.of("example.com"),
        TokenRegistry(),
        operators=[Endpoint.parse("apex=admin@example.com")],
        clock=Clock(),
    )


def element(content: bytes) -> tuple[str, dict[str, str]]:
    root = parse_xml(content)
    return str(root.tag), {str(k): str(v) for k, v in root.attrib.items()}


async def run(ops: AccessOperations, originator: str, xml: str) -> tuple[str, dict[str, str]]:
    result = await ops.handle(originator, xml.encode())
    assert result.reply.recipient == originator
    return element(result.reply.content)


SET_FRED = (
    "<set transID='1'><access owner='fred@example.com' actor='*@example.com'"
    " actions='core:data presence:subscribe' /></set>"
)


async def test_rfc3341_section2_flow(operations: AccessOperations) -> None:
    # fred gives wilma all:all over his entries (fred has all:all on himself by default)
    tag, attrs = await run(
        operations,
        "fred@example.com",
        "<set transID='9'><access owner='fred@example.com' actor='wilma@example.com'"
        " actions='all:all' /></set>",
    )
    assert (tag, attrs["code"], attrs["transID"]) == ("reply", "250", "9")

    # 2.3: wilma creates fred's '*@example.com' entry; fred is notified with a set
    result = await operations.handle("wilma@example.com", SET_FRED.encode())
    assert element(result.reply.content) == ("reply", {"code": "250", "transID": "1"})
    [notice] = result.notifications
    assert notice.recipient == "fred@example.com"
    root = parse_xml(notice.content)
    assert root.tag == "set"
    assert root.get("transID") == "1"
    access = root[0]
    assert access.get("actions") == "core:data presence:subscribe"
    assert access.get("lastUpdate")

    # 2.1: fred queries whether barney may send data and subscribe
    tag, attrs = await run(
        operations,
        "fred@example.com",
        "<query owner='fred@example.com' transID='1' actor='barney@example.com'"
        " actions='core:data presence:subscribe' />",
    )
    assert (tag, attrs) == ("allow", {"transID": "1"})
    tag, attrs = await run(
        operations,
        "fred@example.com",
        "<query owner='fred@example.com' transID='2' actor='barney@example.com'"
        " actions='core:data presence:watch' />",
    )
    assert (tag, attrs) == ("deny", {"transID": "2"})

    # 2.2: get returns the entry in a set with its lastUpdate
    result = await operations.handle(
        "fred@example.com",
        b"<get transID='2' owner='fred@example.com' actor='*@example.com' />",
    )
    got = parse_xml(result.reply.content)
    assert got.tag == "set"
    stamp = got[0].get("lastUpdate")
    assert stamp == access.get("lastUpdate")

    # 2.3: delete with the lastUpdate just read; the owner is told, without actions
    result = await operations.handle(
        "wilma@example.com",
        (
            "<set transID='2'><access owner='fred@example.com' actor='*@example.com'"
            f" lastUpdate='{stamp}' /></set>"
        ).encode(),
    )
    assert element(result.reply.content) == ("reply", {"code": "250", "transID": "2"})
    deleted = parse_xml(result.notifications[0].content)[0]
    assert deleted.get("actions") is None
    assert deleted.get("lastUpdate") == stamp


async def test_update_needs_the_current_last_update(operations: AccessOperations) -> None:
    await operations.handle("fred@example.com", SET_FRED.encode())
    result = await operations.handle(
        "fred@example.com",
        b"<get transID='3' owner='fred@example.com' actor='*@example.com' />",
    )
    stamp = parse_xml(result.reply.content)[0].get("lastUpdate")
    update = (
        "<set transID='4'><access owner='fred@example.com' actor='*@example.com'"
        f" actions='core:data' lastUpdate='{stamp}' /></set>"
    )
    first = await operations.handle("fred@example.com", update.encode())
    assert element(first.reply.content)[1]["code"] == "250"
    new_stamp = parse_xml(first.notifications[0].content)[0].get("lastUpdate")
    assert new_stamp != stamp
    # the same update again carries an old lastUpdate: 555, nothing changes
    second = await operations.handle("fred@example.com", update.encode())
    assert element(second.reply.content)[1]["code"] == "555"
    assert second.notifications == ()


# (originator, operation, code) for every code RFC 3341 names plus bad input.
BAD: list[tuple[str, str, str, str]] = [
    # 553: subject outside this administrative domain (step 1)
    (
        "outside-domain",
        "fred@example.com",
        "<get transID='5' owner='fred@other.org' actor='*@*' />",
        "553",
    ),
    # 550: subject is not a valid address (step 2)
    (
        "invalid-address",
        "fred@example.com",
        "<get transID='5' owner='apex=nosuch@example.com' actor='*@*' />",
        "550",
    ),
    # 537: originator lacks access:query / access:get / access:set (step 3)
    (
        "query-not-authorized",
        "barney@example.com",
        "<query transID='5' owner='fred@example.com' actor='a@b.org' actions='core:data' />",
        "537",
    ),
    (
        "get-not-authorized",
        "barney@example.com",
        "<get transID='5' owner='fred@example.com' actor='*@*' />",
        "537",
    ),
    (
        "set-not-authorized",
        "barney@example.com",
        SET_FRED.replace("transID='1'", "transID='5'"),
        "537",
    ),
    (
        "foreign-actor-changes-entries",
        "fred@bedrock.org",
        SET_FRED.replace("transID='1'", "transID='5'"),
        "537",
    ),
    # 551: get of an entry that does not exist (section 4.3 step 5)
    (
        "get-missing",
        "fred@example.com",
        "<get transID='5' owner='fred@example.com' actor='*@*' />",
        "551",
    ),
    # 555: lastUpdate for an entry that does not exist (section 4.4 step 5)
    (
        "set-missing-with-last-update",
        "fred@example.com",
        (
            "<set transID='5'><access owner='fred@example.com' actor='*@*' actions='core:data'"
            " lastUpdate='2000-05-14T13:02:00-08:00' /></set>"
        ),
        "555",
    ),
    # 500 / 501: poorly-formed and non-valid XML
    ("poorly-formed", "fred@example.com", "<get transID='5'", "500"),
    ("unknown-element", "fred@example.com", "<frobnicate transID='5' />", "501"),
    (
        "malformed-entry",
        "fred@example.com",
        "<set transID='5'><access owner='fred@example.com' /></set>",
        "501",
    ),
    (
        "malformed-token",
        "fred@example.com",
        "<set transID='5'><access owner='fred@example.com' actor='*@*' actions='coredata' /></set>",
        "501",
    ),
    # 553: unknown tokens, invalid owner or actor syntax
    (
        "unknown-token",
        "fred@example.com",
        "<set transID='5'><access owner='fred@example.com' actor='*@*' actions='core:dat' /></set>",
        "553",
    ),
    (
        "owner-syntax",
        "fred@example.com",
        "<set transID='5'><access owner='fred' actor='*@*' actions='core:data' /></set>",
        "553",
    ),
    (
        "actor-syntax",
        "fred@example.com",
        (
            "<set transID='5'><access owner='fred@example.com' actor='fr*ed@example.com'"
            " actions='core:data' /></set>"
        ),
        "553",
    ),
    (
        "query-actor-syntax",
        "fred@example.com",
        "<query transID='5' owner='fred@example.com' actor='@x' actions='core:data' />",
        "553",
    ),
    (
        "originator-syntax",
        "not an endpoint",
        "<get transID='5' owner='fred@example.com' actor='*@*' />",
        "553",
    ),
]


@pytest.mark.parametrize(("name", "originator", "xml", "code"), BAD, ids=[b[0] for b in BAD])
async def test_reply_codes_and_nothing_changes(
    operations: AccessOperations,
    redis: Redis,
    keys: Keys,
    name: str,
    originator: str,
    xml: str,
    code: str,
) -> None:
    before = await AccessEntryStore(redis, keys).version()
    result = await operations.handle(originator, xml.encode())
    tag, attrs = element(result.reply.content)
    assert tag == "reply"
    assert attrs["code"] == code
    assert attrs["transID"] in ("5", "0")
    assert result.notifications == ()
    assert await AccessEntryStore(redis, keys).version() == before


async def test_set_over_existing_entry_without_last_update_is_555(
    operations: AccessOperations,
) -> None:
    await operations.handle("fred@example.com", SET_FRED.encode())
    result = await operations.handle("fred@example.com", SET_FRED.encode())
    assert element(result.reply.content)[1]["code"] == "555"


async def test_operator_manages_every_owner(operations: AccessOperations) -> None:
    result = await operations.handle(
        "apex=admin@example.com",
        b"<set transID='6'><access owner='apex=pubsub/music.jazz.milesdavis@example.com'"
        b" actor='mr.slate@example.com' actions='' /></set>",
    )
    assert element(result.reply.content)[1]["code"] == "250"
    tag, _ = await run(
        operations,
        "apex=admin@example.com",
        "<query transID='7' owner='apex=pubsub/music.jazz.milesdavis@example.com'"
        " actor='mr.slate@example.com' actions='core:data' />",
    )
    assert tag == "deny"


async def test_store_unavailable_is_421() -> None:
    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)  # nothing listens
    try:
        ops = AccessOperations(
            AccessEntryStore(dead, Keys("x")),
            Domains.of("example.com"),
            TokenRegistry(),
            clock=Clock(),
        )
        result = await ops.handle(
            "fred@example.com", b"<get transID='8' owner='fred@example.com' actor='*@*' />"
        )
        assert element(result.reply.content) == (
            "reply",
            {"code": "421", "transID": "8"},
        )
    finally:
        await dead.aclose()


@pytest.fixture
def directory_operations(redis: Redis, keys: Keys) -> AccessOperations:
    """A domain that knows its endpoints (APEXMESH_ACCESS_ENDPOINTS_FILE)."""
    known = [Endpoint.parse("fred@example.com"), Endpoint.parse("barney@example.com")]
    return AccessOperations(
        AccessEntryStore(redis, keys),
        Domains.of("example.com", known=known),
        TokenRegistry(),
        operators=[Endpoint.parse("apex=admin@example.com")],
        clock=Clock(),
    )


@pytest.mark.parametrize(
    ("owner", "valid"),
    [
        ("fred@example.com", True),
        ("fred/appl=wb@example.com", True),  # a subaddress of a known endpoint
        ("nobody@example.com", False),  # RFC 3341 4.2-4.4 step 2, a non-service endpoint
        ("nobody/appl=wb@example.com", False),
        ("apex=pubsub/music.jazz@example.com", True),  # a registered service's subaddress
        ("apex=bogus@example.com", False),
    ],
)
@pytest.mark.parametrize(
    "operation",
    [
        "<query transID='3' owner='{owner}' actor='barney@example.com' actions='core:data' />",
        "<get transID='3' owner='{owner}' actor='*@*' />",
        "<set transID='3'><access owner='{owner}' actor='*@*' actions='core:data' /></set>",
    ],
)
async def test_step_2_valid_address_for_every_kind_of_owner(
    directory_operations: AccessOperations, owner: str, valid: bool, operation: str
) -> None:
    tag, attrs = await run(
        directory_operations, "apex=admin@example.com", operation.format(owner=owner)
    )
    if valid:
        assert (tag, attrs.get("code")) != ("reply", "550"), attrs
    else:
        assert (tag, attrs) == ("reply", {"code": "550", "transID": "3"})


async def test_list_reads_every_explicit_entry_back(operations: AccessOperations) -> None:
    """apex-mesh's ``list`` (beside RFC 3341 4.3's get): every explicit entry with its
    lastUpdate, read as the endpoint SDK reads it; ``access:get`` needed (537), and
    the owner checked as for every operation (553)."""
    from apexmesh.apex.access import Entries, Reply
    from apexmesh.apex.access_answers import list_xml, parse_answer
    from apexmesh.apex.codes import ApexReplyCode

    await operations.handle("fred@example.com", SET_FRED.encode())
    await operations.handle(
        "fred@example.com",
        b"<set transID='2'><access owner='fred@example.com' actor='mr.slate@example.com'"
        b" actions='' /></set>",
    )
    result = await operations.handle("fred@example.com", list_xml(5, "fred@example.com"))
    answer = parse_answer(result.reply.content)
    assert isinstance(answer, Entries)
    assert answer.trans_id == 5
    listed = {str(e.actor): e.actions.tokens if e.actions else None for e in answer.entries}
    assert listed == {
        "*@example.com": frozenset({"core:data", "presence:subscribe"}),
        "mr.slate@example.com": frozenset(),
    }
    assert all(entry.last_update is not None for entry in answer.entries)
    denied = await operations.handle("barney@example.com", list_xml(6, "fred@example.com"))
    assert parse_answer(denied.reply.content) == Reply(
        ApexReplyCode.NOT_AUTHORIZED, 6, "barney@example.com lacks access:get for fred@example.com"
    )
    outside = parse_answer(
        (await operations.handle("fred@example.com", list_xml(7, "fred@rubble.com"))).reply.content
    )
    assert isinstance(outside, Reply)
    assert (outside.code, outside.trans_id) == (553, 7)
    bad = await operations.handle("fred@example.com", b"<list transID='8' />")
    assert element(bad.reply.content)[1]["code"] == "501"
