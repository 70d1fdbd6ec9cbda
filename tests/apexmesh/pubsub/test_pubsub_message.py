"""The message-content envelope (apexmesh/pubsub/message.py): headers of 5.2.1 in the
8.2 schema's order, RFC 3339 dates (section 4), expiration '0' and '*', revision range,
the size limit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.message import Expiry, MessageContent, millis, parse_message

pytestmark = pytest.mark.unit

PS = "xmlns:ps='http://www.firstrain.com/pubsub'"
HEAD = (
    "<ps:topic>t</ps:topic><ps:publisher>p@example.com</ps:publisher>"
    "<ps:publication-date>2002-03-15T12:15:00Z</ps:publication-date>"
)
BODY = "<ps:content Name='C'><x>1</x></ps:content>"


def _envelope(inner: str, attrs: str = "transID='1' content='#C'") -> bytes:
    return f"<ps:message-content {attrs} {PS}>{inner}</ps:message-content>".encode()


def test_expiration_forms() -> None:
    now = millis(datetime(2002, 3, 15, 12, 15, tzinfo=UTC))
    for text, expiry, expires, cacheable in (
        ("0", Expiry.ONCE, now, False),
        ("*", Expiry.NEVER, None, True),
        ("2002-03-15T13:15:00+01:00", Expiry.AT, now, False),
        ("2002-03-16T12:15:00.5Z", Expiry.AT, now + 86_400_500, True),
    ):
        inner = HEAD + f"<ps:expiration-date>{text}</ps:expiration-date>" + BODY
        envelope = parse_message(_envelope(inner), max_octets=4096).envelope
        assert envelope.expiry is expiry, text
        assert envelope.expires_ms(default_ms=7) == expires, text
        assert envelope.cacheable(now) is cacheable, text
        assert parse_message(envelope.to_xml(), max_octets=4096).envelope == envelope
    plain = parse_message(_envelope(HEAD + BODY), max_octets=4096).envelope
    assert plain.expiry is Expiry.UNSPECIFIED
    assert plain.expires_ms(default_ms=7) == 7
    assert plain.revision == 0


@pytest.mark.parametrize(
    ("inner", "attrs", "code"),
    [
        (HEAD, "transID='1' content='#C'", 501),  # no content
        (BODY, "transID='1' content='#C'", 501),  # no headers
        (HEAD + BODY, "content='#C'", 501),  # no transID
        (HEAD + BODY, "transID='1' content='#D'", 501),  # content names another
        (HEAD + BODY, "transID='1'", 501),  # content attribute required (8.2)
        (
            HEAD
            + "<ps:message-id>1</ps:message-id><ps:expiration-date>*</ps:expiration-date>"
            + BODY,
            "transID='2' content='#C'",
            501,
        ),
        (
            HEAD + "<ps:expiration-date>tomorrow</ps:expiration-date>" + BODY,
            "transID='3' content='#C'",
            501,
        ),
        (
            HEAD + "<ps:revision-id>2147483648</ps:revision-id>" + BODY,
            "transID='4' content='#C'",
            501,
        ),
        (HEAD + "<ps:revision-id>-1</ps:revision-id>" + BODY, "transID='5' content='#C'", 501),
        (HEAD + "<ps:message-id>one</ps:message-id>" + BODY, "transID='6' content='#C'", 501),
        (HEAD.replace(">t<", ">Bad Topic<") + BODY, "transID='7' content='#C'", 553),
        (
            HEAD.replace("2002-03-15T12:15:00Z", "2002-03-15 12:15") + BODY,
            "transID='8' content='#C'",
            501,
        ),
        (HEAD + "<ps:topic>u</ps:topic>" + BODY, "transID='9' content='#C'", 501),
    ],
)
def test_bad_envelopes(inner: str, attrs: str, code: int) -> None:
    with pytest.raises(ApexError) as caught:
        parse_message(_envelope(inner, attrs), max_octets=4096)
    assert caught.value.code == code


def test_a_message_one_octet_over_the_limit_is_554() -> None:
    text = _envelope(HEAD + BODY)
    assert parse_message(text, max_octets=len(text)).envelope.topic == "t"
    with pytest.raises(ApexError) as caught:
        parse_message(text, max_octets=len(text) - 1)
    assert caught.value.code == 554


def test_entity_expansion_is_refused_before_parsing() -> None:
    bomb = b"<!DOCTYPE m [<!ENTITY a 'aaaa'><!ENTITY b '&a;&a;&a;&a;'>]>" + _envelope(
        HEAD + "<ps:content Name='C'><x>&b;</x></ps:content>"
    )
    with pytest.raises(ApexError) as caught:
        parse_message(bomb, max_octets=4096)
    assert caught.value.code == 501


def test_built_envelopes_are_checked() -> None:
    when = datetime(2002, 3, 15, tzinfo=UTC)
    with pytest.raises(ApexError):
        MessageContent(
            trans_id=1, topic="t", publisher="p", publication_date=when, expiry=Expiry.AT
        )
    with pytest.raises(ApexError):
        MessageContent(trans_id=1, topic="t", publisher="p", publication_date=when, revision_id=-1)
