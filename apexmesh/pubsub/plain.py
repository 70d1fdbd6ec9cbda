"""Which publications are plain: decided by nothing but the topic's subscriber list.

A publication needs the pubsub tier's matching when its topic has schemas (a message
schema, selector schemas, robust delivery: the topic's ``settings``), content-based
subscriptions (they carry subscription ids), a selector index already built, or when its
body is a draft-wyman ``message-content`` envelope (cached per publisher). Anything else
is plain: it goes to every active subscriber, and a relay may fan it out itself
(services/relay/topics.py) with the same decision the pods take
(:func:`apexmesh.pubsub.core.publish`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from apexmesh.store.pubsub_cache import TopicState

#: The draft-wyman envelope's element: a body naming it within its first octets is one.
ENVELOPE: Final = b"message-content"

#: How far into a body the envelope's element is looked for.
ENVELOPE_WITHIN: Final = 512


def is_plain(state: TopicState, body: bytes) -> bool:
    """True when ``body``, published to the topic ``state`` describes, needs no selection,
    schema or robust sequencing (see the module docstring)."""
    return (
        not state.settings
        and state.index is None
        and ENVELOPE not in body[:ENVELOPE_WITHIN]
        and not any(identifier for _, identifier in state.subscriptions)
    )


__all__ = ["ENVELOPE", "ENVELOPE_WITHIN", "is_plain"]
