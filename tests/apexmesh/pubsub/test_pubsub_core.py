"""Every step and reply code of draft-schwartz-apex-pubsub-02 sections 4.2 to 4.7, one
table row each, against the sans-I/O core (time passed in as milliseconds)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.elements import parse_reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.party import data_hopping_of, data_hopping_option
from apexmesh.pubsub import core
from apexmesh.pubsub.core import (
    DataGranted,
    DataRevoked,
    Outcome,
    OwnerGranted,
    OwnerRevoked,
    Subscribed,
    Subscription,
    TopicCreated,
    TopicDeleted,
    TupleAdded,
    TupleRemoved,
    Unsubscribed,
)
from apexmesh.pubsub.elements import (
    Cancel,
    CreateTopic,
    DeleteTopic,
    ListTopics,
    Subscribe,
    TopicList,
    parse_operation,
    parse_service_message,
)
from apexmesh.pubsub.subscription_elements import ContentCancel

pytestmark = pytest.mark.unit

DOMAIN = "example.com"
TOPIC = "music.jazz.milesdavis"
MIKE = Endpoint.parse("mike@example.com")
BOB = Endpoint.parse("bob@redistr.com")
REDIST = Endpoint.parse(f"apex=pubsub/{TOPIC}@redistr.com")
NOW = 1_000_000


def sub(who: Endpoint, *, expires: int = NOW + 5000, trans_id: int = 3) -> Subscription:
    return Subscription(
        topic=TOPIC, subscriber=who, originator=who, trans_id=trans_id, expires_ms=expires
    )


@dataclass
class Row:
    """One step: the operation, the facts the caller read, what must come out."""

    name: str
    run: object
    code: int
    step: str
    changes: tuple[type, ...] = ()
    sent_to: tuple[Endpoint, ...] = (MIKE,)
    extra: dict[str, object] = field(default_factory=dict)


def _subs(*items: Subscription) -> dict[Endpoint, Subscription]:
    return {item.subscriber: item for item in items}


CREATE = CreateTopic(topic=TOPIC, trans_id=1)
DELETE = DeleteTopic(topic=TOPIC, trans_id=2)
SUBSCRIBE = Subscribe(subscriber=MIKE, topic=TOPIC, trans_id=3, duration=60)
SUBSCRIBE_BOB = Subscribe(subscriber=BOB, topic=TOPIC, trans_id=3, duration=60)
CANCEL = Cancel(topic=TOPIC, trans_id=4)

ROWS = [
    Row(
        "4.2/1 no token",
        lambda: core.create_topic(CREATE, MIKE, allowed=False, exists=False),
        537,
        "4.2/1",
    ),
    Row(
        "4.2/2 exists",
        lambda: core.create_topic(CREATE, MIKE, allowed=True, exists=True),
        553,
        "4.2/2",
    ),
    Row(
        "4.2/3 created",
        lambda: core.create_topic(CREATE, MIKE, allowed=True, exists=False),
        250,
        "4.2/3",
        (TopicCreated, TupleAdded, OwnerGranted),
    ),
    Row(
        "4.3/1 no token",
        lambda: core.delete_topic(DELETE, MIKE, allowed=False, exists=True),
        537,
        "4.3/1",
    ),
    Row(
        "4.3/2 no topic",
        lambda: core.delete_topic(DELETE, MIKE, allowed=True, exists=False),
        553,
        "4.3/2",
    ),
    Row(
        "4.3/3 deleted",
        lambda: core.delete_topic(
            DELETE, MIKE, allowed=True, exists=True, subscriptions=[sub(BOB)], creator=MIKE
        ),
        250,
        "4.3/3",
        (TopicDeleted, TupleRemoved, OwnerRevoked, Unsubscribed),
        (MIKE, BOB),
    ),
    Row(
        "4.4/1 no token",
        lambda: core.list_topics(ListTopics(trans_id=9), MIKE, allowed=False, topics=["a"]),
        537,
        "4.4/1",
    ),
    Row(
        "4.4/2 topiclist",
        lambda: core.list_topics(ListTopics(trans_id=9), MIKE, allowed=True, topics=["b", "a"]),
        250,
        "4.4/2",
    ),
    Row(
        "4.5/1 no token",
        lambda: core.subscribe(
            SUBSCRIBE, MIKE, domain=DOMAIN, allowed=False, exists=True, subscriptions={}, now_ms=NOW
        ),
        537,
        "4.5/1",
    ),
    Row(
        "4.5/2 no topic",
        lambda: core.subscribe(
            SUBSCRIBE, MIKE, domain=DOMAIN, allowed=True, exists=False, subscriptions={}, now_ms=NOW
        ),
        553,
        "4.5/2",
    ),
    Row(
        "4.5/3 zero duration",
        lambda: core.subscribe(
            Subscribe(subscriber=MIKE, topic=TOPIC, trans_id=3, duration=0),
            MIKE,
            domain=DOMAIN,
            allowed=True,
            exists=True,
            subscriptions={},
            now_ms=NOW,
        ),
        553,
        "4.5/3",
    ),
    Row(
        "4.5/3 negative duration",
        lambda: core.subscribe(
            Subscribe(subscriber=MIKE, topic=TOPIC, trans_id=3, duration=-1),
            MIKE,
            domain=DOMAIN,
            allowed=True,
            exists=True,
            subscriptions={},
            now_ms=NOW,
        ),
        553,
        "4.5/3",
    ),
    Row(
        "4.5/4 forwarded",
        lambda: core.subscribe(
            SUBSCRIBE_BOB,
            BOB,
            domain=DOMAIN,
            allowed=True,
            exists=True,
            subscriptions=_subs(sub(REDIST)),
            now_ms=NOW,
        ),
        core.FORWARDED,
        "4.5/4",
        (),
        (REDIST,),
    ),
    Row(
        "4.5/5 subscribed",
        lambda: core.subscribe(
            SUBSCRIBE, MIKE, domain=DOMAIN, allowed=True, exists=True, subscriptions={}, now_ms=NOW
        ),
        250,
        "4.5/5",
        (Subscribed,),
    ),
    Row(
        "4.5/5 with grant",
        lambda: core.subscribe(
            SUBSCRIBE,
            MIKE,
            domain=DOMAIN,
            allowed=True,
            exists=True,
            subscriptions={},
            now_ms=NOW,
            grant_data=True,
        ),
        250,
        "4.5/5",
        (Subscribed, DataGranted),
    ),
    Row(
        "4.5/5.2 lease ends",
        lambda: core.expire([sub(MIKE, expires=NOW)], NOW),
        250,
        "4.5/5.2",
        (Unsubscribed,),
    ),
    Row(
        "4.6/1 no token",
        lambda: core.cancel(
            CANCEL, MIKE, domain=DOMAIN, allowed=False, exists=True, subscriptions={}, now_ms=NOW
        ),
        537,
        "4.6/1",
    ),
    Row(
        "4.6/2 no topic",
        lambda: core.cancel(
            CANCEL, MIKE, domain=DOMAIN, allowed=True, exists=False, subscriptions={}, now_ms=NOW
        ),
        553,
        "4.6/2",
    ),
    Row(
        "4.6/3 forwarded",
        lambda: core.cancel(
            CANCEL,
            BOB,
            domain=DOMAIN,
            allowed=True,
            exists=True,
            subscriptions=_subs(sub(REDIST)),
            now_ms=NOW,
        ),
        core.FORWARDED,
        "4.6/3",
        (),
        (REDIST,),
    ),
    Row(
        "4.6/4 cancelled",
        lambda: core.cancel(
            CANCEL,
            MIKE,
            domain=DOMAIN,
            allowed=True,
            exists=True,
            subscriptions=_subs(sub(MIKE)),
            now_ms=NOW,
            grant_data=True,
        ),
        250,
        "4.6/4",
        (Unsubscribed, DataRevoked),
    ),
    Row(
        "4.6/4 not subscribed",
        lambda: core.cancel(
            CANCEL, MIKE, domain=DOMAIN, allowed=True, exists=True, subscriptions={}, now_ms=NOW
        ),
        250,
        "4.6/4",
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_every_step(row: Row) -> None:
    assert callable(row.run)
    outcome = row.run()
    assert isinstance(outcome, Outcome)
    assert outcome.code == row.code
    assert outcome.step == row.step
    assert tuple(type(change) for change in outcome.changes) == row.changes
    assert tuple(send.recipient for send in outcome.sends) == row.sent_to
    if row.code == core.FORWARDED:
        assert isinstance(parse_operation(outcome.sends[0].content), (Subscribe, Cancel))
        return
    first = parse_service_message(outcome.sends[0].content)
    if row.step == "4.4/2":
        assert first == TopicList(topics=("a", "b"), trans_id=9)
    elif row.step == "4.5/5.2":
        assert first == Cancel(topic=TOPIC, trans_id=3, subscriber=MIKE)
    else:
        reply = parse_reply(outcome.sends[0].content)
        assert reply.code == row.code
        # "the transID attribute is identical to the value found in the ... element"
        assert reply.trans_id in (1, 2, 3, 4, 9)


def test_repeated_subscribe_replaces_the_lease() -> None:
    first = core.subscribe(
        SUBSCRIBE, MIKE, domain=DOMAIN, allowed=True, exists=True, subscriptions={}, now_ms=NOW
    )
    change = first.changes[0]
    assert isinstance(change, Subscribed)
    assert not change.renewed
    shorter = Subscribe(subscriber=MIKE, topic=TOPIC, trans_id=8, duration=1)
    again = core.subscribe(
        shorter,
        MIKE,
        domain=DOMAIN,
        allowed=True,
        exists=True,
        subscriptions=_subs(change.subscription),
        now_ms=NOW + 10,
    )
    renewed = again.changes[0]
    assert isinstance(renewed, Subscribed)
    assert renewed.renewed
    assert renewed.subscription.expires_ms == NOW + 10 + 1000
    assert renewed.subscription.trans_id == 8


def test_forwarded_cancel_names_the_subject() -> None:
    outcome = core.cancel(
        CANCEL,
        BOB,
        domain=DOMAIN,
        allowed=True,
        exists=True,
        subscriptions=_subs(sub(REDIST)),
        now_ms=NOW,
    )
    assert parse_operation(outcome.sends[0].content) == Cancel(
        topic=TOPIC, trans_id=4, subscriber=BOB
    )


@pytest.mark.parametrize(
    ("subject", "subs", "expected"),
    [
        (BOB, [sub(REDIST)], REDIST),
        (BOB, [sub(REDIST, expires=NOW)], None),  # lapsed lease: not a redistributor
        (REDIST, [sub(REDIST)], None),  # the redistributor renews itself
        (MIKE, [sub(Endpoint.parse(f"apex=pubsub/{TOPIC}@example.com"))], None),
        (BOB, [sub(Endpoint.parse("apex=pubsub/other.topic@redistr.com"))], None),
        (BOB, [sub(Endpoint.parse(f"apex=pubsub/{TOPIC}@elsewhere.com"))], None),
    ],
)
def test_redistributor(
    subject: Endpoint, subs: list[Subscription], expected: Endpoint | None
) -> None:
    assert core.redistributor(TOPIC, subject, DOMAIN, subs, NOW) == expected


@pytest.mark.parametrize("subject", [MIKE, BOB, REDIST])
@pytest.mark.parametrize("operation", ["subscribe", "cancel"])
def test_concerned_subscriptions_decide_as_all_of_them(subject: Endpoint, operation: str) -> None:
    """What the service reads of a topic for a subscribe or cancel (core.concerned) is
    enough: the decision is the one taken on every subscription of the topic."""
    others = [Endpoint.parse(f"user{i}@{d}") for i in range(3) for d in ("example.com", "x.org")]
    every = _subs(
        sub(subject, trans_id=9),
        sub(REDIST),
        sub(Endpoint.parse(f"apex=pubsub/{TOPIC}@x.org")),
        sub(Endpoint.parse("apex=pubsub/other.topic@redistr.com")),
        *(sub(who) for who in others),
    )
    wanted = core.concerned(TOPIC, subject)
    some = {who: every[who] for who in wanted if who in every}
    assert len(some) < len(every)

    def decide(subscriptions: dict[Endpoint, Subscription]) -> core.Outcome:
        if operation == "subscribe":
            op = Subscribe(subscriber=subject, topic=TOPIC, trans_id=4, duration=60)
            return core.subscribe(
                op,
                subject,
                domain=DOMAIN,
                allowed=True,
                exists=True,
                subscriptions=subscriptions,
                now_ms=NOW,
            )
        return core.cancel(
            Cancel(topic=TOPIC, trans_id=4, subscriber=subject),
            subject,
            domain=DOMAIN,
            allowed=True,
            exists=True,
            subscriptions=subscriptions,
            now_ms=NOW,
        )

    assert decide(some) == decide(every)


def test_expire_skips_renewed_leases() -> None:
    outcome = core.expire([sub(MIKE, expires=NOW + 1)], NOW)
    assert outcome.changes == ()
    assert outcome.sends == ()


def test_accept_from_upstream_replies_to_the_subject() -> None:
    upstream = Endpoint.parse("apex=pubsub@example.com")
    outcome = core.accept_subscribe(SUBSCRIBE_BOB, upstream, {}, NOW, reply_to=BOB)
    assert [send.recipient for send in outcome.sends] == [BOB]
    assert core.is_upstream_operation(upstream)
    assert not core.is_upstream_operation(REDIST)
    assert not core.is_upstream_operation(MIKE)


PUBLISHER = Endpoint.parse("fred@example.com")


@pytest.mark.parametrize(
    ("exists", "allowed", "code", "step", "recipients"),
    [
        (False, True, 550, "4.7.1/1", ()),
        (True, False, 537, "4.7.1/access", ()),
        (True, True, 250, "4.7.1/2", (MIKE, REDIST)),
    ],
)
def test_publish_steps(
    exists: bool, allowed: bool, code: int, step: str, recipients: tuple[Endpoint, ...]
) -> None:
    subs = [sub(MIKE), sub(REDIST), sub(BOB, expires=NOW)]
    plan = core.publish(PUBLISHER, exists=exists, allowed=allowed, subscriptions=subs, now_ms=NOW)
    assert (plan.code, plan.step, plan.recipients) == (code, step, recipients)


def test_a_subscribed_publisher_gets_its_own_data() -> None:
    plan = core.publish(MIKE, exists=True, allowed=True, subscriptions=[sub(MIKE)], now_ms=NOW)
    assert plan.recipients == (MIKE,)


def test_publish_never_returns_data_to_its_redistributor() -> None:
    plan = core.publish(
        REDIST, exists=True, allowed=True, subscriptions=[sub(MIKE), sub(REDIST)], now_ms=NOW
    )
    assert plan.recipients == (MIKE,)


def _data(options: tuple[object, ...] = ()) -> Data:
    return Data(
        content="#Content",
        originator=Originator(identity=PUBLISHER),
        recipients=(Recipient(identity=Endpoint.parse(f"apex=pubsub/{TOPIC}@example.com")),),
        options=options,  # type: ignore[arg-type]
        data_content=DataContent(name="Content", content=b"<FavoriteAlbum title='Kind of Blue'/>"),
    )


def test_forward_data_keeps_content_and_carries_data_hopping() -> None:
    data = _data()
    out = core.forward_data(
        data, TOPIC, DOMAIN, [MIKE, BOB], hops=core.hops_left(data), trans_id=86
    )
    assert str(out.originator.identity) == f"apex=pubsub/{TOPIC}@example.com"
    assert [r.identity for r in out.recipients] == [MIKE, BOB]
    assert out.data_content == data.data_content
    assert out.content == data.content
    (option,) = out.options
    assert option.must_understand
    assert data_hopping_of(option).no_more_than == core.DEFAULT_HOPS
    assert data_hopping_of(option).report_errors


def test_hop_budget_shrinks_across_servers() -> None:
    received = _data((data_hopping_option(5, 3),))
    assert core.hops_left(received) == 3
    assert core.hops_left(_data((data_hopping_option(5, 0),))) == core.DEFAULT_HOPS
    assert core.hops_left(_data(), default=2) == 2


def test_a_subscriber_with_two_subscriptions_gets_one_copy() -> None:
    """Schema v2 keys subscriptions by id as well: still one data per subscriber."""
    plan = core.publish(
        PUBLISHER, exists=True, allowed=True, subscriptions=[sub(MIKE), sub(MIKE)], now_ms=NOW
    )
    assert plan.recipients == (MIKE,)


def test_a_deleted_topics_content_subscriptions_end_with_a_cancel_naming_their_id() -> None:
    """Draft-wyman 5.8.2: "When the pub-sub service wishes to terminate a subscription,
    it sends a 'cancel' operation to the subscriber, including the subscription
    identifier"; a plain subscription's cancel stays draft-schwartz's."""
    jade = Endpoint.parse("jade@example.com")
    fred = Endpoint.parse("fred@example.com")
    plain = Subscription(topic="news", subscriber=fred, originator=fred, trans_id=3, expires_ms=1)
    tagged = Subscription(
        topic="news",
        subscriber=jade,
        originator=jade,
        trans_id=700,
        expires_ms=1,
        subscription_id=100,
        selector_class="JMS",
        selector="x > 1",
    )
    outcome = core.delete_topic(
        DeleteTopic(topic="news", trans_id=9),
        fred,
        allowed=True,
        exists=True,
        subscriptions=(plain, tagged),
    )
    assert outcome.code == 250
    _reply, to_fred, to_jade = outcome.sends
    assert to_fred.content == Cancel(topic="news", trans_id=3, subscriber=fred).to_xml()
    assert to_jade.recipient == jade
    assert (
        to_jade.content
        == ContentCancel(topic="news", trans_id=700, subscriber=jade, subscription_id=100).to_xml()
    )
