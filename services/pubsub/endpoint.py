"""``WellKnownEndpoint.Deliver`` of the pubsub service: ``apex=pubsub@D`` (operations)
and ``apex=pubsub/TOPIC@D`` (publications, forwarded subscriptions of section 2.6, and a
robust topic's permission changes), handed to :class:`services.pubsub.servicer.
PubsubService`. A call another pubsub pod forwarded to a robust topic's sequencer
carries a mark (:func:`services.pubsub.robust_owner.forwarded`) so it is never forwarded
again. A publication whose forward to the sequencer was cut off on every attempt ends
its ``Deliver`` cut off too (``UNKNOWN``): the relay retries the delivery with the same
id, as it does any call whose outcome is unknown, and the sequencer answers that repeat
from its first commit; no reply code would keep the publisher from sending it again.
"""

from __future__ import annotations

import asyncio

import grpc

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.apex.errors import ApexError
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2
from apexmesh.pubsub import core
from apexmesh.pubsub.elements import is_service, topic_of
from apexmesh.pubsub.wire import delivered_content
from apexmesh.rpc.endpoint import WellKnownEndpointServicer
from services.pubsub.robust_owner import OutcomeUnknownError, forwarded
from services.pubsub.servicer import PubsubService


def _status(code: int, text: str = "") -> common_pb2.ApexStatus:
    return common_pb2.ApexStatus(code=int(code), text=text)


class PubsubEndpointServicer(WellKnownEndpointServicer):
    """``WellKnownEndpoint.Deliver`` for ``apex=pubsub@D`` and ``apex=pubsub/TOPIC@D``.

    An operation is answered 250 once handled (its outcome goes to the originator as a
    ``reply``); data for a topic is answered with section 4.7.1's code (250, 550) or
    537 without ``core:data``; a payload that is not APEX data gets its own code.
    """

    def __init__(self, service: PubsubService) -> None:
        self._service = service

    async def Deliver(  # noqa: N802 - generated servicer method name
        self, request: endpoint_pb2.EndpointDeliverRequest, context: grpc.aio.ServicerContext
    ) -> endpoint_pb2.EndpointDeliverResponse:
        service = self._service
        try:
            recipient = Endpoint.parse(request.recipient)
            originator = Endpoint.parse(request.originator)
        except EndpointError as exc:
            return endpoint_pb2.EndpointDeliverResponse(status=_status(exc.code, str(exc)))
        if recipient.domain not in service.domains:
            return endpoint_pb2.EndpointDeliverResponse(
                status=_status(ApexReplyCode.ACTION_NOT_TAKEN, "unknown endpoint identity")
            )
        domain = recipient.domain
        if is_service(recipient):
            return await self._operation(domain, originator, bytes(request.payload))
        topic = topic_of(recipient)
        if topic is None:
            return endpoint_pb2.EndpointDeliverResponse(
                status=_status(ApexReplyCode.ACTION_NOT_TAKEN, "no such topic")
            )
        try:
            if core.is_upstream_operation(originator):
                _data, body, _parts = delivered_content(bytes(request.payload))
                code = await service.redistribution.from_upstream(domain, topic, originator, body)
                return endpoint_pb2.EndpointDeliverResponse(status=_status(code))
            # Shielded: a relay that gives up waiting (its deadline) must not stop the
            # fan-out between its per-pod submits (some subscribers served, others not).
            code, text = await asyncio.shield(
                service.publish(
                    domain,
                    topic,
                    originator,
                    bytes(request.payload),
                    request.delivery_id,
                    forwarded=forwarded(context),
                )
            )
        except ApexError as exc:
            return endpoint_pb2.EndpointDeliverResponse(status=_status(exc.code, str(exc)[:200]))
        except OutcomeUnknownError:
            # Not 450 ("not sequenced"): the owner may have committed it. A cut-off
            # status makes the relay send this delivery again, same delivery id.
            await context.abort(grpc.StatusCode.UNKNOWN, "topic owner's answer lost")
        return endpoint_pb2.EndpointDeliverResponse(status=_status(code, text))

    async def _operation(
        self, domain: str, originator: Endpoint, payload: bytes
    ) -> endpoint_pb2.EndpointDeliverResponse:
        try:
            _data, body, _parts = delivered_content(payload)
        except ApexError as exc:
            # The operation cannot even be found: tell the originator, who sent it.
            await self._service.refuse(domain, originator, exc)
            return endpoint_pb2.EndpointDeliverResponse(status=_status(250))
        await self._service.handle(domain, originator, body)
        return endpoint_pb2.EndpointDeliverResponse(status=_status(250))


__all__ = ["PubsubEndpointServicer"]
