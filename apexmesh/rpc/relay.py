"""Client of the relays' ``RelayService.Submit`` for services that originate data.

A well-known endpoint (``apex=presence@DOMAIN``, ...) answers and notifies by submitting
a complete BEEP payload through any relay pod of its domain: round-robin start, failover
to the next address only on gRPC UNAVAILABLE (the call reached no relay, so another
cannot duplicate the data). Any other failure is 451 and not retried; 421 when no relay
could be reached. Upstream error text is logged, never echoed (STYLE.md 3.3, habit 5).
An ``observe(address, outcome)`` callback lets a service count calls per relay.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.rpc.observe import observed_channel

_log = logging.getLogger(__name__)

#: Builds a grpc.aio channel for a target (tests may pass their own).
ChannelFactory = Callable[[str], grpc.aio.Channel]


#: Sees every relay call: (address, "answered" | "unavailable" | "failed").
CallObserver = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class SubmitOutcome:
    """The relay's answer (or 421/451 when none came)."""

    code: int
    text: str
    #: "relay" when a relay answered, "unavailable" when none could be reached,
    #: "aborted" when a call failed in a way that leaves its outcome unknown.
    source: str = "relay"


class RelaySubmitter:
    """Submit through the configured relays; channels closed by :meth:`aclose`."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        timeout: float,
        channel_factory: ChannelFactory = observed_channel,
        observe: CallObserver | None = None,
    ) -> None:
        self._observe = observe
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
            return SubmitOutcome(
                ApexReplyCode.SERVICE_NOT_AVAILABLE, "no relay address configured", "unavailable"
            )
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
                    self._seen(address, "unavailable")
                    _log.warning("relay %s unavailable, trying the next one", address)
                    continue
                self._seen(address, "failed")
                _log.warning("relay %s: Submit failed: %s %s", address, exc.code(), exc.details())
                return SubmitOutcome(
                    ApexReplyCode.ACTION_ABORTED, "relay call failed; outcome unknown", "aborted"
                )
            self._seen(address, "answered")
            code, text = response.status.code, response.status.text
            if not 200 <= code <= 599:
                _log.warning("relay %s answered no valid reply code (%d)", address, code)
                return SubmitOutcome(
                    ApexReplyCode.ACTION_ABORTED, "relay answered no valid reply code", "aborted"
                )
            return SubmitOutcome(code, text)
        return SubmitOutcome(
            ApexReplyCode.SERVICE_NOT_AVAILABLE, "no relay reachable", "unavailable"
        )

    def _seen(self, address: str, outcome: str) -> None:
        if self._observe is not None:
            self._observe(address, outcome)

    async def aclose(self) -> None:
        channels, self._channels, self._stubs = self._channels, [], []
        for _, channel in channels:
            await channel.close()


__all__ = ["CallObserver", "ChannelFactory", "RelaySubmitter", "SubmitOutcome"]
