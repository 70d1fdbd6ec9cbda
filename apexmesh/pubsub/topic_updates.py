"""Topic modification (draft-wyman-apex-pubsub-00 6.2.2, 6.2.3), sans I/O.

"When a topic is modified ... the pub-sub service must publish a message to the Topics
topic" with "the same message identification number and a higher revision number", and
createtopic is "an adjunct to the process described above for creating topics (via
messages published to the Topics topic)": so a createtopic, or a ``publish``
description on ``WKT=Topics``, naming a topic that exists is its modification when it
comes from the topic's creator (its owner, the one who may delete it). Anyone else
still gets draft-schwartz 4.2 step 2's 553 ("topic exists").

What a modification changes is what a createtopic sets: the publishers and description
(announced), the message and selector schemas (stored and enforced from the next
publication on; existing subscriptions stay, each selector compiled again against the
new selector schema when the topic's index is rebuilt), and an access statement when
the createtopic has one (written as at creation; without one the entries stay).
Robust delivery is not something a modification turns on, off or retunes (its
sequence, epochs and stubs belong to the settings it was created with): a different
``robust`` is 553.
"""

from __future__ import annotations

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import Reply
from apexmesh.apex.endpoint import Endpoint
from apexmesh.pubsub.changes import Change, Outcome, OwnerGranted, Send, TopicModified
from apexmesh.pubsub.elements import WELL_KNOWN_TOPICS, CreateTopic
from apexmesh.pubsub.topic_description import TopicSettings


def is_modification(
    op: CreateTopic, originator: Endpoint, *, exists: bool, creator: Endpoint | None
) -> bool:
    """Whether ``op`` modifies an existing topic rather than creating one: the topic
    exists and ``originator`` created it (well-known topics are never modified)."""
    return (
        exists
        and creator is not None
        and creator == originator
        and (op.topic not in WELL_KNOWN_TOPICS)
    )


def modify_topic(
    op: CreateTopic,
    originator: Endpoint,
    *,
    allowed: bool,
    creator: Endpoint,
    created_ms: int,
    current: str,
) -> Outcome:
    """6.2.2 for a createtopic of an existing topic by its creator (``current``: the
    topic's settings as stored, ``TopicSettings.to_json`` text): 537 without
    ``pubsub:createtopic``, 553 for a change of robust settings, else 250 with the
    :class:`TopicModified` change (the caller adds the Topics announcement)."""

    def reply(code: int, step: str, text: str = "") -> Outcome:
        answer = Reply(code=code, trans_id=op.trans_id, text=text)
        return Outcome(code=code, step=step, sends=(Send(originator, answer.to_xml()),))

    if not allowed:
        return reply(ApexReplyCode.NOT_AUTHORIZED, "6.2.2/access", "action not authorized")
    settings = op.description.settings
    try:
        before = TopicSettings.from_json(current).robust if current else None
    except ValueError:
        before = None
    if before != settings.robust:
        text = "a topic's robust settings cannot be modified (delete and create it again)"
        return reply(ApexReplyCode.PARAMETER_INVALID, "6.2.2/robust", text)
    done = reply(ApexReplyCode.SUCCESS, "6.2.2")
    changes: list[Change] = [
        TopicModified(op.topic, originator, settings.to_json(), creator, created_ms)
    ]
    if op.access is not None:  # a new access statement is written as at creation
        changes.append(OwnerGranted(op.topic, creator, op.access))
    return Outcome(code=done.code, step=done.step, changes=tuple(changes), sends=done.sends)


__all__ = ["is_modification", "modify_topic"]
