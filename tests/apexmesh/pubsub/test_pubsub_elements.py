"""draft-schwartz-apex-pubsub-02 section 6.1 elements and section 2 topic names: the
draft's examples parse, every element round-trips, every DTD rule has its code."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.elements import (
    Cancel,
    CreateTopic,
    DeleteTopic,
    ListTopics,
    Subscribe,
    TopicList,
    is_topic,
    parse_operation,
    parse_service_message,
    topic_endpoint,
    topic_of,
)

pytestmark = pytest.mark.unit

MIKE = Endpoint.parse("mike@example.com")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The draft's examples (sections 2.1-2.6).
        (
            "<createtopic topic='music.jazz.milesdavis' transID='1' />",
            CreateTopic(topic="music.jazz.milesdavis", trans_id=1),
        ),
        (
            "<deletetopic topic='music.jazz.milesdavis' transID='2' />",
            DeleteTopic(topic="music.jazz.milesdavis", trans_id=2),
        ),
        ("<listtopics />", ListTopics()),
        ("<listtopics transID='7' />", ListTopics(trans_id=7)),
        (
            (
                "<subscribe subscriber='mike@example.com' topic='music.jazz.milesdavis'"
                " duration='9999999' transID='3' />"
            ),
            Subscribe(subscriber=MIKE, topic="music.jazz.milesdavis", trans_id=3, duration=9999999),
        ),
        (
            (
                "<subscribe subscriber='apex=pubsub/music.jazz.milesdavis@redistr.com'"
                " topic='music.jazz.milesdavis' duration='9999999' transID='5' />"
            ),
            Subscribe(
                subscriber=Endpoint.parse("apex=pubsub/music.jazz.milesdavis@redistr.com"),
                topic="music.jazz.milesdavis",
                trans_id=5,
                duration=9999999,
            ),
        ),
        (
            "<cancel topic='music.jazz.milesdavis' transID='4' />",
            Cancel(topic="music.jazz.milesdavis", trans_id=4),
        ),
        (
            "<cancel subscriber='mike@example.com' topic='a.b' transID='4' />",
            Cancel(topic="a.b", trans_id=4, subscriber=MIKE),
        ),
        # Step 3 of 4.5 refuses these with 553: they must parse.
        (
            "<subscribe subscriber='mike@example.com' topic='t' duration='0' transID='1' />",
            Subscribe(subscriber=MIKE, topic="t", trans_id=1, duration=0),
        ),
        (
            "<subscribe subscriber='mike@example.com' topic='t' duration='-5' transID='1' />",
            Subscribe(subscriber=MIKE, topic="t", trans_id=1, duration=-5),
        ),
    ],
)
def test_operations_parse_and_round_trip(text: str, expected: object) -> None:
    parsed = parse_operation(text)
    assert parsed == expected
    assert parse_operation(parsed.to_xml()) == parsed


def test_topiclist_of_the_draft() -> None:
    text = """<topiclist>
        <topic name="music.jazz.milesdavis" />
        <topic name="music.classicrock.zeppelin" />
    </topiclist>"""
    parsed = parse_service_message(text)
    assert parsed == TopicList(topics=("music.jazz.milesdavis", "music.classicrock.zeppelin"))
    assert parse_service_message(parsed.to_xml()) == parsed
    assert parse_service_message("<reply code='250' transID='1' />") == Reply(code=250, trans_id=1)
    assert parse_service_message(TopicList(trans_id=3).to_xml()) == TopicList(trans_id=3)


@pytest.mark.parametrize(
    ("text", "code", "trans_id"),
    [
        ("<createtopic topic='a' transID='1'", 500, None),
        ("<unknown />", 501, None),
        ("<createtopic topic='a' />", 501, None),
        ("<createtopic transID='1' />", 501, None),
        ("<createtopic topic='a' transID='1' extra='x' />", 501, None),
        ("<createtopic topic='a' transID='0' />", 501, None),
        ("<createtopic topic='a' transID='x' />", 501, None),
        ("<createtopic topic='a' transID='1'>text</createtopic>", 501, 1),
        ("<createtopic topic='a' transID='1'><x /></createtopic>", 501, 1),
        ("<createtopic topic='Music' transID='1' />", 553, 1),
        ("<deletetopic topic='a..b' transID='2' />", 553, 2),
        ("<deletetopic topic='a.' transID='2' />", 553, 2),
        ("<deletetopic topic='1abc' transID='2' />", 553, 2),
        ("<deletetopic topic='a/b' transID='2' />", 553, 2),
        ("<deletetopic topic='' transID='2' />", 553, 2),
        ("<listtopics transID='a' />", 501, None),
        ("<listtopics topic='a' />", 501, None),
        ("<listtopics><topic name='a' /></listtopics>", 501, None),
        ("<subscribe topic='a' duration='1' transID='3' />", 501, None),
        ("<subscribe subscriber='m@e.com' topic='a' duration='soon' transID='3' />", 501, 3),
        ("<subscribe subscriber='m@e.com' topic='a' duration='99999999999' transID='3' />", 501, 3),
        ("<subscribe subscriber='no-at-sign' topic='a' duration='1' transID='3' />", 553, 3),
        ("<subscribe subscriber='m@e.com' topic='A' duration='1' transID='3' />", 553, 3),
        ("<cancel topic='a' />", 501, None),
        ("<cancel subscriber='@' topic='a' transID='4' />", 553, 4),
        ("<cancel topic='a b' transID='4' />", 553, 4),
    ],
)
def test_every_dtd_rule_has_its_code(text: str, code: int, trans_id: int | None) -> None:
    with pytest.raises(ApexError) as caught:
        parse_operation(text)
    assert caught.value.code == code
    assert caught.value.trans_id == trans_id


@pytest.mark.parametrize(
    "text",
    [
        "<topiclist><topic /></topiclist>",
        "<topiclist><topic name='a'>x</topic></topiclist>",
        "<topiclist><other name='a' /></topiclist>",
        "<subscribe subscriber='m@e.com' topic='a' duration='1' transID='3' />",
    ],
)
def test_malformed_service_messages(text: str) -> None:
    with pytest.raises(ApexError):
        parse_service_message(text)


def test_entities_are_not_expanded() -> None:
    text = "<!DOCTYPE x [<!ENTITY e 'music'>]><createtopic topic='&e;' transID='1' />"
    with pytest.raises(ApexError):
        parse_operation(text)


@pytest.mark.parametrize(
    ("topic", "ok"),
    [
        ("music.jazz.milesdavis", True),
        ("finance.vc.findandflip", True),
        ("a", True),
        ("a-b_c.d9", True),
        ("a.1", True),
        ("a" * 255, True),
        ("a" * 256, False),
        ("Music", False),
        ("_a", False),
        (".a", False),
        ("a..b", False),
        ("a.", False),
        ("a@b", False),
        ("a/b", False),
        ("a:b", False),
        ("", False),
    ],
)
def test_topic_syntax(topic: str, ok: bool) -> None:
    assert is_topic(topic) is ok


@given(st.from_regex(r"[a-z][a-z0-9_-]{0,10}(\.[a-z0-9_-]{1,10}){0,4}", fullmatch=True))
def test_every_topic_is_a_subaddress(topic: str) -> None:
    endpoint = topic_endpoint(topic, "example.com")
    assert str(endpoint) == f"apex=pubsub/{topic}@example.com"
    assert Endpoint.parse(str(endpoint)) == endpoint
    assert topic_of(endpoint) == topic


def test_topic_of_other_endpoints() -> None:
    assert topic_of(Endpoint.parse("apex=pubsub@example.com")) is None
    assert topic_of(Endpoint.parse("apex=presence/a@example.com")) is None
    assert topic_of(Endpoint.parse("apex=pubsub/Bad@example.com")) is None


def test_elements_built_in_code_are_checked() -> None:
    with pytest.raises(ApexError):
        CreateTopic(topic="Bad", trans_id=1)
    with pytest.raises(ApexError):
        Subscribe(subscriber=MIKE, topic="a", trans_id=0, duration=1)
    with pytest.raises(ApexError):
        TopicList(topics=("ok", "Not ok"))
