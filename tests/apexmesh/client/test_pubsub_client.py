"""The SDK's pubsub helpers: message sorting (unit) and the helpers against the running
mesh (create, list, subscribe with renewal, publish, cancel) over real TCP; the
content-based ones (draft-wyman: select with a selector and ``cached``, the id in the
result, next_match with the matched ids, unselect by id, a typed error with the code of
every refusal)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from apexmesh.aio.tasks import within
from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.client import PubsubClient
from apexmesh.client.errors import PubsubError
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.pubsub import publication_topic, pubsub_message, subscription_ids
from apexmesh.client.received import ReceivedData
from apexmesh.pubsub.elements import TopicList
from apexmesh.pubsub.inre import inre_option
from apexmesh.pubsub.subscription_elements import ContentCancel, SubscriptionReply
from apexmesh.store.keys import Keys
from tests.services.pubsub.conftest import started_mesh
from tests.support.mesh import endpoint_client
from tests.support.polling import scaled
from tests.support.redis_server import RedisServer


def _received(originator: str, content: bytes) -> ReceivedData:
    data = Data(
        content="#Content",
        originator=Originator(identity=Endpoint.parse(originator)),
        recipients=(Recipient(identity=Endpoint.parse("mike@example.com")),),
        data_content=DataContent(name="Content", content=content),
    )
    return ReceivedData(
        originator=data.originator.identity,
        recipients=(Endpoint.parse("mike@example.com"),),
        content=content,
        content_type="application/beep+xml",
        options=(),
        data=data,
    )


@pytest.mark.unit
def test_messages_are_sorted_by_originator() -> None:
    reply = _received("apex=pubsub@example.com", b"<reply code='250' transID='1' />")
    assert pubsub_message(reply) == Reply(code=250, trans_id=1)
    assert publication_topic(reply) is None
    listing = _received("apex=pubsub@example.com", b"<topiclist><topic name='a' /></topiclist>")
    assert pubsub_message(listing) == TopicList(topics=("a",))
    data = _received("apex=pubsub/a.b@example.com", b"<reply code='250' transID='1' />")
    assert pubsub_message(data) is None  # publications are never service messages
    assert publication_topic(data) == "a.b"
    other = _received("fred@example.com", b"<cancel topic='a' transID='1' />")
    assert pubsub_message(other) is None
    assert publication_topic(other) is None


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_helpers_against_the_mesh(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        endpoint_client(mesh.a.edge_port) as client_a,
        endpoint_client(mesh.b.edge_port) as client_b,
    ):
        mike = PubsubClient(await client_a.attach("mike@example.com"))
        fred = PubsubClient(await client_b.attach("fred@example.com"))
        try:
            assert await mike.create_topic("sports") == Reply(code=250, trans_id=1)
            assert await fred.list_topics() == ("sports",)
            # keep_subscribed renews at half-life: the lease of 1 s is still there later.
            lease = mike.keep_subscribed("sports", duration=1)
            first = await within(mike.next_message(), timeout=scaled(5))
            assert isinstance(first, Reply)
            assert first.code == 250
            await asyncio.sleep(1.6)  # past the 1 s lease: the time passing is under test
            await fred.publish("sports", b"goal")
            topic, received = await within(mike.next_publication(), timeout=scaled(5))
            assert (topic, received.content) == ("sports", b"goal")
            lease.cancel()
            answer = await mike.cancel("sports")
            assert isinstance(answer, Reply)
            assert answer.code == 250
            await fred.publish("sports", b"late")
            with pytest.raises(TimeoutError):
                await within(mike.next_publication(), timeout=scaled(0.5))
            deleted = await fred.delete_topic("sports")
            assert isinstance(deleted, Reply)
            assert deleted.code == 250
            assert await fred.list_topics() == ()
        finally:
            await mike.aclose()
            await fred.aclose()


@pytest.mark.unit
def test_content_based_messages_and_the_inre_ids() -> None:
    """Draft-wyman's reply with a subscription id (5.8) and cancel naming one (5.8.2)
    are service messages; a publication's InRe gives the ids of the endpoint's own
    subscriptions it matched (5.10.1), none for another recipient or without InRe."""
    answer = _received(
        "apex=pubsub@example.com",
        b"<reply code='250' transID='700'><subscription-id>100</subscription-id></reply>",
    )
    assert pubsub_message(answer) == SubscriptionReply(code=250, trans_id=700, subscription_id=100)
    cancel = _received(
        "apex=pubsub@example.com",
        b"<ps:cancel transID='105' xmlns:ps='http://www.example.com/pubsub'>"
        b"<ps:topic>q</ps:topic><ps:subscription-id>100</ps:subscription-id></ps:cancel>",
    )
    assert pubsub_message(cancel) == ContentCancel(trans_id=105, topic="q", subscription_id=100)
    mike = Endpoint.parse("mike@example.com")
    data = _received("apex=pubsub/q@example.com", b"<m/>")
    assert subscription_ids(data, mike) == ()
    tagged = Recipient(identity=mike, options=(inre_option((100, 101), 1),))
    with_inre = data._replace(data=dataclasses.replace(data.data, recipients=(tagged,)))
    assert subscription_ids(with_inre, mike) == (100, 101)
    assert subscription_ids(with_inre, Endpoint.parse("fred@example.com")) == ()


#: A message of 5.2's envelope with a message-id and no expiry: cached (5.8).
CACHED = (
    b"<ps:message-content transID='1' content='#C' xmlns:ps='http://www.example.com/pubsub'>"
    b"<ps:topic>news</ps:topic><ps:publisher>fred@example.com</ps:publisher>"
    b"<ps:publication-date>2026-11-25T12:00:00Z</ps:publication-date>"
    b"<ps:expiration-date>*</ps:expiration-date><ps:message-id>1</ps:message-id>"
    b"<ps:content Name='C'><m x='2'/></ps:content></ps:message-content>"
)


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_content_helpers_return_ids_and_raise_the_code_of_every_refusal(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    """select returns the subscription id, next_match the ids a publication matched,
    unselect cancels by id; every refusal is a PubsubError carrying the service's code
    (553, 566, 567, 568, 537), never a reply returned as a value."""
    async with (
        started_mesh(redis_server, keys, tmp_path, pubsub_in_process=("p1", "p2")) as mesh,
        endpoint_client(mesh.a.edge_port) as client_a,
        endpoint_client(mesh.b.edge_port) as client_b,
    ):
        mike = PubsubClient(await client_a.attach("mike@example.com"))
        fred = PubsubClient(await client_b.attach("fred@example.com"))
        try:
            await fred.create_topic("news")
            await fred.publish("news", XmlContent(CACHED))
            one = await mike.select("news", duration=60, selector="x > 1", cached=True)
            topic, ids, received = await within(mike.next_match(), timeout=scaled(5))
            assert (topic, ids) == ("news", (one,))  # the cached message, replayed
            assert b"<m x='2'/>" in received.content
            two = await mike.select(
                "news", duration=60, selector="(x=3)", selector_class="RFC-2254"
            )
            assert two != one
            await fred.publish("news", XmlContent(b"<m x='3'/>"))
            _, ids, _ = await within(mike.next_match(), timeout=scaled(5))
            assert ids == (one, two)
            assert (await mike.unselect(subscription_id=one)).code == 250
            refusals: dict[int, Callable[[], Awaitable[object]]] = {
                553: lambda: mike.select("sports", duration=60),  # allowed, not created
                566: lambda: mike.select(
                    "news", duration=60, selector="/m", selector_class="XPath"
                ),
                567: lambda: mike.select("news", duration=60, selector="x >"),
                568: lambda: mike.unselect(subscription_id=one),
                537: lambda: mike.select(
                    "WKT=Subscriptions", duration=60, subscriber="fred@example.com"
                ),
            }
            for code, attempt in refusals.items():
                with pytest.raises(PubsubError) as refused:
                    await attempt()
                assert refused.value.code == code
            await mike.unselect()
            with pytest.raises(PubsubError) as none_left:
                await mike.unselect(topic="news")
            assert (none_left.value.code, none_left.value.topic) == (568, "news")
        finally:
            await mike.aclose()
            await fred.aclose()
