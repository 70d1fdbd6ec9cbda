"""The BEEP payloads a relay sends on: the received bytes when unchanged, else built.

Content is never modified (RFC 3340 4.4.4.1): when a recipient's data is the received data
(one recipient, no option removed), the received payload is forwarded as it is. A data with
many recipients (a pubsub publication) becomes one data per recipient, or per group of
recipients, that differ only in their recipient elements: the payload is built once around
a placeholder recipient and each recipient's element spliced in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

from apexmesh.apex.data import Data, Recipient
from apexmesh.apex.endpoint import Endpoint
from services.relay.grouping import Group
from services.relay.holder import payload_for
from services.relay.jobs import Job, TemplateKey

#: Recipients from which a data's per-recipient payloads are built from a template.
TEMPLATE_FROM: Final = 8

#: The recipient a template is built around (never a real endpoint: ``.invalid``).
_PLACEHOLDER: Final = Recipient(identity=Endpoint.parse("apex-template@recipient.invalid"))
_PLACEHOLDER_XML: Final = _PLACEHOLDER.to_xml()


def job_payload(job: Job, forward: Data) -> bytes:
    """The BEEP payload carrying ``forward`` (one of ``job``'s next-hop data)."""
    if len(job.data.recipients) < TEMPLATE_FROM or len(forward.recipients) != 1:
        return payload_for(forward, job.data, job.parts, job.raw)
    template = _template(job, forward)
    if template is None:
        return payload_for(forward, job.data, job.parts, job.raw)
    head, tail = template
    return b"".join((head, forward.recipients[0].to_xml(), tail))


def _template(job: Job, forward: Data) -> tuple[bytes, bytes] | None:
    """The payload carrying ``forward`` split around its recipient elements, built once
    per job and template key; None when it cannot be split (it is then built whole)."""
    key: TemplateKey = (forward.originator, forward.options, forward.data_content)
    template = job.templates.get(key)
    if template is None:
        shaped = dataclasses.replace(forward, recipients=(_PLACEHOLDER,))
        built = payload_for(shaped, job.data, job.parts, job.raw)
        head, marker, tail = built.partition(_PLACEHOLDER_XML)
        if not marker:
            return None
        template = job.templates[key] = (head, tail)
    return template


def group_of(job: Job, forwards: Sequence[Data]) -> Group | None:
    """The recipients of ``forwards`` (next-hop data of ``job`` sharing a template key) as
    one :class:`Group`; None when the payload cannot be split around them."""
    template = _template(job, forwards[0])
    if template is None:
        return None
    return Group(
        recipients=tuple(forward.recipients[0].identity for forward in forwards),
        elements=tuple(forward.recipients[0].to_xml() for forward in forwards),
        head=template[0],
        tail=template[1],
    )


__all__ = ["TEMPLATE_FROM", "group_of", "job_payload"]
