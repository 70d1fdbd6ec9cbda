"""The asyncio APEX endpoint SDK (RFC 3340, endpoint-relay mode).

Applications, tests, the demo and the benchmarks attach to a relay through this package;
it composes :mod:`apexmesh.aio` (the BEEP session) with :mod:`apexmesh.apex` (the APEX
element model) and re-implements neither::

    async with await connect_endpoint("relay.example.com", 10288) as client:
        fred = await client.attach("fred@example.com")
        result = await fred.send("barney@example.com", b"hello", status_request=True)
        reports = await result.reports(1, timeout=5)
        incoming = await fred.receive()

The party pack (RFC 3342) rides on the same calls: ``attach(..., options=[...])`` for
attachOverride, ``send(..., timing=DataTiming(no_later_than=10_000, return_trip=20_000))``
for dataTiming (its reports come back through ``result.reports``), ``send(..., hold=True)``
for hold4Endpoint.
"""

from __future__ import annotations

from apexmesh.apex.timing import DataTiming
from apexmesh.client.access import AccessClient, AccessRequestError
from apexmesh.client.attachment import DEFAULT_QUEUE_LIMIT, Attachment, AttachmentState
from apexmesh.client.client import APEX_PROFILE, ApexClient, connect_endpoint
from apexmesh.client.discovery import connect_domain, locate_relays
from apexmesh.client.errors import (
    ApexClientError,
    ApexRequestError,
    AttachmentTerminatedError,
    PubsubError,
    SessionClosedError,
)
from apexmesh.client.outgoing import CONTENT_NAME, Content, RecipientLike, XmlContent, encode_data
from apexmesh.client.pubsub import PubsubClient  # pubsub helpers (issue #7)
from apexmesh.client.received import ReceivedData, decode_data
from apexmesh.client.reports import SendResult
from apexmesh.pubsub.topic_access import Audience

__all__ = [
    "APEX_PROFILE",
    "AccessClient",
    "AccessRequestError",
    "Audience",
    "CONTENT_NAME",
    "DEFAULT_QUEUE_LIMIT",
    "ApexClient",
    "ApexClientError",
    "ApexRequestError",
    "Attachment",
    "AttachmentState",
    "AttachmentTerminatedError",
    "Content",
    "DataTiming",
    "PubsubClient",
    "PubsubError",
    "ReceivedData",
    "RecipientLike",
    "SendResult",
    "SessionClosedError",
    "XmlContent",
    "connect_domain",
    "connect_endpoint",
    "decode_data",
    "encode_data",
    "locate_relays",
]
