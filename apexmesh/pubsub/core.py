"""The steps of draft-schwartz-apex-pubsub-02 sections 4.2 to 4.6, sans I/O.

Pubsub pods are stateless (DESIGN.md): topics and subscriptions live in Redis and any pod
may serve any request. The core therefore keeps no state of its own. Each operation is a
pure function of the operation, the facts the caller read (the access decision of step
1, whether the topic exists, its subscriptions) and the time (``now_ms``, milliseconds
since the epoch: the core reads no clock). It returns an :class:`Outcome`
(:mod:`apexmesh.pubsub.changes`): the reply code and the step that decided it, the
:data:`Change` list the store must apply atomically, and the elements to send
(:class:`Send`), in order. The caller applies the changes and journals the sends in
one Redis script before sending anything, so an operation acknowledged is completed
even if the pod dies (section 4, "in persistent storage"). Section 4.7 (publications)
is :mod:`apexmesh.pubsub.publication`.

Decisions the draft leaves open (also in docs/pubsub.md):

- Step 1 of every operation is the access check; its owner is ``apex=pubsub@DOMAIN`` for
  createtopic, deletetopic and listtopics and ``apex=pubsub/TOPIC@DOMAIN`` for subscribe,
  cancel and data (the access-control table of section 6.1). The caller asks the access
  service and passes ``allowed``.
- A deleted topic's subscriptions end with it: each originator is sent ``cancel``
  (section 2.5: "the service ... may cancel a subscription"), so nobody waits for data
  that can no longer come.
- The lease-end ``cancel`` of 4.5 step 5.2 goes "to the originator" of the subscribe,
  names the subject in ``subscriber`` and carries the subscribe's transID (a long-lived
  transaction identifier, section 4), so the subscriber can tell which lease ended.
- A forwarded subscribe or cancel (4.5 step 4, 4.6 step 3) is answered by the
  redistributing server, which knows the outcome; the forwarding server sends no reply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.changes import (
    FORWARDED,
    OWNER_TOKENS,
    Change,
    DataGranted,
    DataRevoked,
    Outcome,
    OwnerGranted,
    OwnerRevoked,
    Reason,
    Send,
    Subscribed,
    Subscription,
    TopicCreated,
    TopicDeleted,
    TupleAdded,
    TupleRemoved,
    Unsubscribed,
)
from apexmesh.pubsub.elements import (
    WELL_KNOWN_TOPICS,
    Cancel,
    CreateTopic,
    DeleteTopic,
    ListTopics,
    Subscribe,
    TopicList,
    topic_endpoint,
    topic_of,
)

# Section 4.7 lives in its own module; its names stay importable from here, as the
# service and the tests have always used them (``core.publish``, ``core.DEFAULT_HOPS``).
from apexmesh.pubsub.publication import (
    DEFAULT_HOPS,
    PublishPlan,
    forward_data,
    hops_left,
    is_upstream_operation,
    publish,
)
from apexmesh.pubsub.subscription_elements import ContentCancel


def _reply(step: str, to: Endpoint, code: int, trans_id: int | None, text: str = "") -> Outcome:
    reply = Reply(code=code, trans_id=trans_id, text=text)
    return Outcome(code=code, step=step, sends=(Send(to, reply.to_xml()),))


def _denied(section: str, to: Endpoint, trans_id: int | None) -> Outcome:
    return _reply(
        f"{section}/1", to, ApexReplyCode.NOT_AUTHORIZED, trans_id, "action not authorized"
    )


def _no_topic(section: str, step: int, to: Endpoint, trans_id: int, topic: str) -> Outcome:
    return _reply(
        f"{section}/{step}", to, ApexReplyCode.PARAMETER_INVALID, trans_id, f"no topic {topic}"
    )


# --------------------------------------------------------------------------- 4.2 - 4.4


def create_topic(
    op: CreateTopic,
    originator: Endpoint,
    *,
    allowed: bool,
    exists: bool,
    schemas_supported: bool = False,
) -> Outcome:
    """Section 4.2; a well-known topic (draft-wyman-apex-pubsub-00 section 6.1) is the
    service's own and cannot be created by anyone else (553). A message or selector schema
    (draft-wyman 6.2.3) is refused with 504 unless the caller stores and enforces them
    (``schemas_supported``): a topic must never be created with a schema it ignores."""
    if not allowed:
        return _denied("4.2", originator, op.trans_id)
    if op.topic in WELL_KNOWN_TOPICS:
        return _reply(
            "4.2/2", originator, ApexReplyCode.PARAMETER_INVALID, op.trans_id, "reserved topic"
        )
    if not schemas_supported and op.description.settings.has_schemas:
        return _reply(
            "4.2/schemas",
            originator,
            ApexReplyCode.PARAMETER_NOT_IMPLEMENTED,
            op.trans_id,
            "message and selector schemas are not supported by this service",
        )
    if exists:
        return _reply(
            "4.2/2", originator, ApexReplyCode.PARAMETER_INVALID, op.trans_id, "topic exists"
        )
    done = _reply("4.2/3", originator, ApexReplyCode.SUCCESS, op.trans_id)
    return Outcome(
        code=done.code,
        step=done.step,
        changes=(
            TopicCreated(op.topic, originator, op.description.settings.to_json()),
            TupleAdded(op.topic),
            OwnerGranted(op.topic, originator, op.access),
        ),
        sends=done.sends,
    )


def delete_topic(
    op: DeleteTopic,
    originator: Endpoint,
    *,
    allowed: bool,
    exists: bool,
    subscriptions: Iterable[Subscription] = (),
    creator: Endpoint | None = None,
) -> Outcome:
    """Section 4.3; the topic's subscriptions end with a cancel to each originator (a
    content-based one's names its subscription id, draft-wyman 5.8.2), and its
    creator's access entry is removed. A well-known topic cannot be deleted (553)."""
    if not allowed:
        return _denied("4.3", originator, op.trans_id)
    if op.topic in WELL_KNOWN_TOPICS:
        return _reply(
            "4.3/2", originator, ApexReplyCode.PARAMETER_INVALID, op.trans_id, "reserved topic"
        )
    if not exists:
        return _no_topic("4.3", 2, originator, op.trans_id, op.topic)
    changes: list[Change] = [TopicDeleted(op.topic, originator), TupleRemoved(op.topic)]
    if creator is not None:
        changes.append(OwnerRevoked(op.topic, creator))
    sends = [Send(originator, Reply(code=250, trans_id=op.trans_id).to_xml())]
    for sub in subscriptions:
        changes.append(
            Unsubscribed(op.topic, sub.subscriber, "topic-deleted", originator, sub.subscription_id)
        )
        cancel: Cancel | ContentCancel = Cancel(
            topic=op.topic, trans_id=sub.trans_id, subscriber=sub.subscriber
        )
        if sub.subscription_id is not None:  # draft-wyman 5.8.2: the service names the id
            cancel = ContentCancel(
                topic=op.topic,
                trans_id=sub.trans_id,
                subscriber=sub.subscriber,
                subscription_id=sub.subscription_id,
            )
        sends.append(Send(sub.originator, cancel.to_xml()))
    return Outcome(code=250, step="4.3/3", changes=tuple(changes), sends=tuple(sends))


def list_topics(
    op: ListTopics, originator: Endpoint, *, allowed: bool, topics: Iterable[str]
) -> Outcome:
    """Section 4.4: a topiclist carrying the operation's transID (when it had one)."""
    if not allowed:
        return _denied("4.4", originator, op.trans_id)
    answer = TopicList(topics=tuple(sorted(topics)), trans_id=op.trans_id)
    return Outcome(code=250, step="4.4/2", sends=(Send(originator, answer.to_xml()),))


# --------------------------------------------------------------------------- 4.5 - 4.6


def redistributor(
    topic: str,
    subject: Endpoint,
    domain: str,
    subscriptions: Iterable[Subscription],
    now_ms: int,
) -> Endpoint | None:
    """Step 4 of 4.5 / step 3 of 4.6: the active subscriber ``apex=pubsub/TOPIC@D`` whose
    domain D is the subject's, unless that is the subject itself or this domain."""
    if subject.domain == domain:
        return None
    for sub in subscriptions:
        found = sub.subscriber
        if (
            sub.active(now_ms)
            and topic_of(found) == topic
            and found.domain == subject.domain
            and found != subject
        ):
            return found
    return None


def concerned(topic: str, subject: Endpoint) -> tuple[Endpoint, ...]:
    """The only subscriptions :func:`subscribe` and :func:`cancel` look at for ``subject``:
    its own and that of the server redistributing ``topic`` to its domain, the one
    endpoint :func:`redistributor` can find. A caller may read just these."""
    return (subject, topic_endpoint(topic, subject.domain))


def subscribe(
    op: Subscribe,
    originator: Endpoint,
    *,
    domain: str,
    allowed: bool,
    exists: bool,
    subscriptions: Mapping[Endpoint, Subscription],
    now_ms: int,
    grant_data: bool = False,
) -> Outcome:
    """Section 4.5 for a subscribe received at ``apex=pubsub@domain``."""
    if not allowed:
        return _denied("4.5", originator, op.trans_id)
    if not exists:
        return _no_topic("4.5", 2, originator, op.trans_id, op.topic)
    if op.duration <= 0:
        return _reply(
            "4.5/3",
            originator,
            ApexReplyCode.PARAMETER_INVALID,
            op.trans_id,
            "duration must be positive",
        )
    target = redistributor(op.topic, op.subscriber, domain, subscriptions.values(), now_ms)
    if target is not None:
        return Outcome(code=FORWARDED, step="4.5/4", sends=(Send(target, op.to_xml()),))
    return accept_subscribe(op, originator, subscriptions, now_ms, grant_data=grant_data)


def accept_subscribe(
    op: Subscribe,
    originator: Endpoint,
    subscriptions: Mapping[Endpoint, Subscription],
    now_ms: int,
    *,
    grant_data: bool = False,
    reply_to: Endpoint | None = None,
) -> Outcome:
    """Step 5 of 4.5 (also for a subscribe forwarded by an upstream server, whose reply
    goes to the subject: ``reply_to``)."""
    previous = subscriptions.get(op.subscriber)
    subscription = Subscription(
        topic=op.topic,
        subscriber=op.subscriber,
        originator=originator,
        trans_id=op.trans_id,
        expires_ms=now_ms + op.duration * 1000,
        since_ms=previous.since_ms if previous is not None and previous.since_ms else now_ms,
    )
    changes: list[Change] = [Subscribed(subscription, renewed=previous is not None)]
    if grant_data and previous is None:
        changes.append(DataGranted(op.topic, op.subscriber))
    reply = Reply(code=250, trans_id=op.trans_id).to_xml()
    return Outcome(
        code=250,
        step="4.5/5",
        changes=tuple(changes),
        sends=(Send(reply_to or originator, reply),),
    )


def cancel(
    op: Cancel,
    originator: Endpoint,
    *,
    domain: str,
    allowed: bool,
    exists: bool,
    subscriptions: Mapping[Endpoint, Subscription],
    now_ms: int,
    grant_data: bool = False,
) -> Outcome:
    """Section 4.6 for a cancel received at ``apex=pubsub@domain``."""
    if not allowed:
        return _denied("4.6", originator, op.trans_id)
    if not exists:
        return _no_topic("4.6", 2, originator, op.trans_id, op.topic)
    subject = op.subject(originator)
    target = redistributor(op.topic, subject, domain, subscriptions.values(), now_ms)
    if target is not None:
        forwarded = Cancel(topic=op.topic, trans_id=op.trans_id, subscriber=subject)
        return Outcome(code=FORWARDED, step="4.6/3", sends=(Send(target, forwarded.to_xml()),))
    return accept_cancel(op, originator, subscriptions, grant_data=grant_data)


def accept_cancel(
    op: Cancel,
    originator: Endpoint,
    subscriptions: Mapping[Endpoint, Subscription],
    *,
    grant_data: bool = False,
    reply_to: Endpoint | None = None,
) -> Outcome:
    """Step 4 of 4.6: 250, and the subject no longer receives data (if it did)."""
    subject = op.subject(originator)
    changes: list[Change] = []
    if subject in subscriptions:
        changes.append(Unsubscribed(op.topic, subject, "cancel", originator))
        if grant_data:
            changes.append(DataRevoked(op.topic, subject))
    reply = Reply(code=250, trans_id=op.trans_id).to_xml()
    return Outcome(
        code=250, step="4.6/4", changes=tuple(changes), sends=(Send(reply_to or originator, reply),)
    )


def expire(due: Iterable[Subscription], now_ms: int, *, grant_data: bool = False) -> Outcome:
    """Section 4.5 step 5.2: leases that ran out end with a cancel to their originator."""
    changes: list[Change] = []
    sends: list[Send] = []
    for sub in due:
        if sub.active(now_ms):
            continue
        changes.append(Unsubscribed(sub.topic, sub.subscriber, "expired", sub.originator))
        if grant_data:
            changes.append(DataRevoked(sub.topic, sub.subscriber))
        cancel_op = Cancel(topic=sub.topic, trans_id=sub.trans_id, subscriber=sub.subscriber)
        sends.append(Send(sub.originator, cancel_op.to_xml()))
    return Outcome(code=250, step="4.5/5.2", changes=tuple(changes), sends=tuple(sends))


__all__ = [
    "concerned",
    "DEFAULT_HOPS",
    "FORWARDED",
    "Change",
    "DataGranted",
    "OWNER_TOKENS",
    "OwnerGranted",
    "OwnerRevoked",
    "DataRevoked",
    "Outcome",
    "PublishPlan",
    "Reason",
    "Send",
    "Subscribed",
    "Subscription",
    "TopicCreated",
    "TopicDeleted",
    "TupleAdded",
    "TupleRemoved",
    "Unsubscribed",
    "accept_cancel",
    "accept_subscribe",
    "cancel",
    "create_topic",
    "delete_topic",
    "expire",
    "forward_data",
    "hops_left",
    "is_upstream_operation",
    "list_topics",
    "publish",
    "redistributor",
    "subscribe",
]
