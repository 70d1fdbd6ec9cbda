"""Client of the relays' ``RelayService.Submit`` for services that originate data.

A well-known endpoint (``apex=presence@DOMAIN``, ...) answers and notifies by submitting
a complete BEEP payload through any relay pod of its domain: round-robin start, failover
to the next address only on gRPC UNAVAILABLE (the call reached no relay, so another
cannot duplicate the data). Any other failure is 451 and not retried; 421 when no relay
could be reached. Upstream error text is logged, never echoed (STYLE.md 3.3, habit 5).
The report service has its own copy with report metrics (services/report/servicer.py).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc

_log = logging.getLogger(__name__)

#: Builds a grpc.aio channel for a target (tests may pass their own).
ChannelFactory = Callable[[str], grpc.aio.Channel]


@dataclass(frozen=True, slots=True)
class SubmitOutcome:
    """The relay's answer (or 421/451 when none came)."""

    code: int
    text: str


class RelaySubmitter:
    """Submit through the configured relays; channels closed by :meth:`aclose`."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        timeout: float,
        channel_factory: ChannelFactory = grpc.aio.insecure_channel,
    ) -> None:
        self._channels = [(address, channel_factory(address)) for address in addresses]
        self._stubs = [
            (address, relay_pb2_grpc.RelayServiceStub(channel))
            for address, channel in self._channels
        ]
        self._timeout = timeout
        self._next = 0

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(address for address, _ in self._stubs)

    async def submit(
        self, originator: str, payload: bytes, *, key: str | None = None
    ) -> SubmitOutcome:
        """Submit ``payload`` as ``originator``; never raises for relay trouble.

        With ``key`` (e.g. the recipient) the same relay is tried first for every
        submission with that key, so data to one recipient keeps its order (two pods may
        otherwise deliver a later element first); without, the start is round-robin.
        """
        count = len(self._stubs)
        if count == 0:
            return SubmitOutcome(ApexReplyCode.SERVICE_NOT_AVAILABLE, "no relay configured")
        if key is None:
            start, self._next = self._next, (self._next + 1) % count
        else:
            start = zlib.crc32(key.encode("utf-8", "surrogatepass")) % count
        request = relay_pb2.SubmitRequest(originator=originator, payload=payload)
        for step in range(count):
            address, stub = self._stubs[(start + step) % count]
            try:
                response = await stub.Submit(request, timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    _log.warning("relay %s unavailable, trying the next one", address)
                    continue
                _log.warning("relay %s: Submit failed: %s %s", address, exc.code(), exc.details())
                return SubmitOutcome(ApexReplyCode.ACTION_ABORTED, "relay call failed")
            return SubmitOutcome(response.status.code, response.status.text)
        return SubmitOutcome(ApexReplyCode.SERVICE_NOT_AVAILABLE, "no relay reachable")

    async def aclose(self) -> None:
        channels, self._channels, self._stubs = self._channels, [], []
        for _, channel in channels:
            await channel.close()


__all__ = ["ChannelFactory", "RelaySubmitter", "SubmitOutcome"]
