"""Bad input to content-based pubsub over real TCP: each answered with its code, and the
service unharmed (a normal subscription and publication work afterwards).

Selector of 1 MB, 10,000 nested parentheses, a catastrophic LIKE pattern, a schema that
imports a network URI, a schema with entity expansion, a message one octet over the
limit (and one at the limit, accepted); schemas by URI only when the operator
configured them."""

from __future__ import annotations

import time

import pytest

from apexmesh.apex.elements import Reply
from apexmesh.client.errors import PubsubError
from apexmesh.client.outgoing import XmlContent
from tests.services.pubsub.conftest import (
    LOCAL_SCHEMA_URI,
    MAX_MESSAGE_OCTETS,
    QUOTES,
    Attach,
    Party,
    PubsubMesh,
)
from tests.support.polling import scaled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SERVICE = "apex=pubsub@example.com"
PS = "xmlns:ps='http://www.example.com/pubsub'"
XS = "xmlns:xs='http://www.w3.org/2001/XMLSchema'"


async def create(owner: Party, trans_id: int, children: str) -> Reply:
    op = f"<createtopic topic='{QUOTES}' transID='{trans_id}'>{children}</createtopic>"
    await owner.attachment.send(SERVICE, XmlContent(op.encode()))
    answer = await owner.message()
    assert isinstance(answer, Reply)
    return answer


def body(symbol: str, pad: int = 0) -> bytes:
    return (
        f"<equity-quote symbol='{symbol}'><issue-name>{'x' * pad}</issue-name>"
        "<last-trade>11.0</last-trade><net-change-pct>10.0</net-change-pct></equity-quote>"
    ).encode()


async def test_selectors_answered_with_their_codes(mesh: PubsubMesh, attach: Attach) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    jade = await attach("jade@example.com", pod="a")
    assert (await create(quotes, 1, "")).code == 250
    # 1 MB of selector: 567 before any parsing.
    huge = "symbol = 'XMPL' OR " * 50_000 + "symbol = 'TEST'"
    assert len(huge) > 900_000
    with pytest.raises(PubsubError) as refused:
        await jade.pubsub.select(QUOTES, duration=60, selector=huge)
    assert refused.value.code == 567
    # 10,000 nested parentheses, both classes: 567, no recursion.
    nested = "(" * 10_000 + "symbol = 'XMPL'" + ")" * 10_000
    with pytest.raises(PubsubError) as deep:
        await jade.pubsub.select(QUOTES, duration=60, selector=nested)
    assert deep.value.code == 567
    with pytest.raises(PubsubError) as deep_ldap:
        await jade.pubsub.select(
            QUOTES,
            duration=60,
            selector="(&" * 10_000 + "(symbol=XMPL)" + ")" * 10_000,
            selector_class="RFC-2254",
        )
    assert deep_ldap.value.code == 567
    # A catastrophic LIKE pattern is accepted and matched in linear time: a 4,000
    # character symbol against 2,000 '%a' parts.
    pattern = "%a" * 2_000 + "%b"
    sid = await jade.pubsub.select(QUOTES, duration=60, selector=f"symbol LIKE '{pattern}'")
    other = await jade.pubsub.select(QUOTES, duration=60, selector="symbol LIKE 'a%'")
    started = time.perf_counter()
    await quotes.pubsub.publish(QUOTES, XmlContent(body("a" * 4_000)))
    took = time.perf_counter() - started
    _, ids, _ = await jade.pubsub.next_match()
    assert ids == (other,)  # no 'b': the catastrophic one does not match
    assert sid != other
    assert took < scaled(5.0), took
    # Unharmed: the service answers and delivers as before; a symbol that has the
    # 2,000 a's and the b matches both.
    await quotes.pubsub.publish(QUOTES, XmlContent(body("a" * 2_000 + "b")))
    _, ids, _ = await jade.pubsub.next_match()
    assert ids == tuple(sorted((sid, other)))


async def test_schemas_answered_with_their_codes(mesh: PubsubMesh, attach: Attach) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    network = (
        f"<message-schema><xs:schema {XS}><xs:import namespace='urn:x' "
        "schemaLocation='http://attacker.example/evil.xsd'/>"
        "<xs:element name='q' type='xs:string'/></xs:schema></message-schema>"
    )
    assert (await create(quotes, 1, network)).code == 553
    unknown = "<message-schema uri='http://elsewhere.example/schema.xsd' />"
    assert (await create(quotes, 2, unknown)).code == 553
    # An entity-expansion schema: the hardened parser refuses any DOCTYPE (501).
    bomb = (
        "<!DOCTYPE createtopic [<!ENTITY a 'aaaaaaaaaa'><!ENTITY b '&a;&a;&a;&a;&a;&a;'>]>"
        f"<createtopic topic='{QUOTES}' transID='3'><message-schema><xs:schema {XS}>"
        "<xs:element name='q' type='xs:string' default='&b;'/></xs:schema>"
        "</message-schema></createtopic>"
    )
    # (sent as a MIME part: the SDK refuses to write a DOCTYPE inline)
    await quotes.attachment.send(SERVICE, bomb.encode(), content_type="application/beep+xml")
    answer = await quotes.message()
    assert isinstance(answer, Reply)
    assert answer.code == 501, answer
    # The configured schema, by its URI: accepted, and publications validated by it.
    assert (await create(quotes, 4, f"<message-schema uri='{LOCAL_SCHEMA_URI}' />")).code == 250
    jade = await attach("jade@example.com", pod="a")
    await jade.pubsub.select(QUOTES, duration=60, selector="symbol = 'XMPL'")
    with pytest.raises(PubsubError) as invalid:
        await quotes.pubsub.publish(QUOTES, XmlContent(b"<equity-quote symbol='XMPL' />"))
    assert invalid.value.code == 561
    await quotes.pubsub.publish(QUOTES, XmlContent(body("XMPL")))
    _, ids, received = await jade.pubsub.next_match()
    assert len(ids) == 1
    assert received.content == body("XMPL")


async def test_a_message_one_octet_over_the_limit_is_554(mesh: PubsubMesh, attach: Attach) -> None:
    quotes = await attach("quote-service@example.com", pod="b")
    assert (await create(quotes, 1, "")).code == 250
    jade = await attach("jade@example.com", pod="a")
    await jade.pubsub.select(QUOTES, duration=60, selector="symbol = 'XMPL'")
    fits = body("XMPL", MAX_MESSAGE_OCTETS - len(body("XMPL")))
    assert len(fits) == MAX_MESSAGE_OCTETS
    over = body("XMPL", MAX_MESSAGE_OCTETS + 1 - len(body("XMPL")))
    with pytest.raises(PubsubError) as refused:
        await quotes.pubsub.publish(QUOTES, XmlContent(over))
    assert refused.value.code == 554
    await quotes.pubsub.publish(QUOTES, XmlContent(fits))
    _, ids, received = await jade.pubsub.next_match()
    assert len(ids) == 1
    assert len(received.content) == MAX_MESSAGE_OCTETS
