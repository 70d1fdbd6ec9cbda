"""What a robust topic's publications are read and written as, shared by the sequencer
(:mod:`services.pubsub.robust_serving`), the repairs (:mod:`services.pubsub.robust_ops`)
and the upstream links (:mod:`services.pubsub.robust_upstream`): the topic's robust
settings as cached, whether a body is a permission change, and a publication's content
as it travelled (inline XML or one MIME part)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import MimePart
from apexmesh.apex.data import Data, DataContent, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.common.cache import BoundedCache
from apexmesh.pubsub.elements import CONTENT_NAME
from apexmesh.pubsub.robust._wire import NS
from apexmesh.pubsub.robust.settings import RobustSettings
from apexmesh.pubsub.topic_description import TopicSettings
from apexmesh.store.pubsub_cache import TopicState

_log = logging.getLogger(__name__)


#: Distinct settings texts a pod keeps parsed (one per robust topic's current settings).
SETTINGS_REMEMBERED: Final = 10_000


class RobustSettingsReader:
    """The robust settings of cached topics: each settings text parsed once (the JSON
    of a topic is the same for every publication until the topic changes)."""

    def __init__(self, limit: int = SETTINGS_REMEMBERED) -> None:
        self._parsed: BoundedCache[str, RobustSettings | None] = BoundedCache(
            "pubsub.robust_settings", limit
        )

    def __call__(self, state: TopicState) -> RobustSettings | None:
        """The topic's robust settings (None: best effort)."""
        text = state.settings
        if not state.exists or '"robust"' not in text:
            return None
        return self._parsed.get_or_build(text, lambda: _parse_settings(text))


def _parse_settings(text: str) -> RobustSettings | None:
    try:
        return TopicSettings.from_json(text).robust
    except ValueError as exc:
        # Written by another version? Refused (451), never served best effort.
        _log.warning("unreadable robust settings %.80r: %s", text, exc)
        raise ApexError(ApexReplyCode.ACTION_ABORTED, "topic settings unreadable") from None


def is_permissions(body: bytes) -> bool:
    """Whether a body sent to a robust topic is a ``permissions`` change (XEP 5.1) rather
    than a publication: its root element, in the robust namespace or none."""
    head = body.lstrip()[:256]
    if not head.startswith(b"<permissions"):
        return False
    return NS.encode() in head or b"xmlns" not in head


def content_type_of(data: Data, parts: Sequence[MimePart]) -> str:
    """How a publication's content travelled: "" inline (XML), else its part's type."""
    if not data.content.startswith("cid:"):
        return ""
    cid = data.content[4:]
    for part in parts:
        if part.content_id == cid:
            return part.content_type
    return "application/octet-stream"


def delivery_data(
    origin: Endpoint, content: bytes, content_type: str
) -> tuple[Data, list[MimePart]]:
    """Data (and parts) carrying ``content`` as a publication did: inline when it was
    XML ("" type), else one MIME part of ``content_type``."""
    recipients = (Recipient(identity=origin),)
    if not content_type:
        return Data(
            content="#" + CONTENT_NAME,
            originator=Originator(identity=origin),
            recipients=recipients,
            data_content=DataContent(name=CONTENT_NAME, content=content),
        ), []
    part = MimePart(content_id="robust-content", content_type=content_type, body=content)
    data = Data(
        content="cid:robust-content", originator=Originator(identity=origin), recipients=recipients
    )
    return data, [part]


__all__ = [
    "SETTINGS_REMEMBERED",
    "RobustSettingsReader",
    "content_type_of",
    "delivery_data",
    "is_permissions",
]
