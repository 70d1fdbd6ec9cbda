"""Client of the relays' ``RelayService.Submit`` for services that originate data.

A well-known endpoint (``apex=presence@DOMAIN``, ``apex=pubsub@DOMAIN``, ...) answers,
notifies and forwards by submitting a complete BEEP payload through any relay pod of its
domain. Which failures are retried, and where:

- **UNAVAILABLE** (the call reached no relay, or the connection broke): the next relay
  address, at once; after a whole round of unavailable relays, again after a backoff.
  The same ``submission_id`` goes along; a relay that took the data and then broke the
  connection (rare: UNAVAILABLE normally means the call went nowhere) may therefore
  relay it once more through another pod: at least once, never lost.
- **A call cut off mid-flight** (CANCELLED, DEADLINE_EXCEEDED, UNKNOWN, INTERNAL,
  ABORTED, RESOURCE_EXHAUSTED): its outcome is unknown, the relay may have relayed the
  data. With a ``submission_id`` it is sent again, after a backoff, to the same relay with
  the same id: a relay that has seen the id answers as it did for the first attempt and
  relays nothing twice (``SubmitRequest.submission_id``). Without an id it is not
  retried (it could be relayed twice) and answered 451.

Attempts and waits follow one :class:`~apexmesh.rpc.retry.RetryPolicy` (``policy``:
:data:`~apexmesh.rpc.retry.SUBMIT` unless told, and at least one attempt per relay). The
last failure's code is the answer (421 when no relay could be reached, 451 when the
outcome stayed unknown), every final failure is logged and seen by
``observe(address, "gave-up")``. Upstream error text is logged, never echoed (STYLE.md
3.3, habit 5).

Flow control: with ``limit`` (an :class:`asyncio.Semaphore` shared by the submitters of
one process) at most that many Submits are out at once; a caller waits for room, so a
busy relay slows whoever sends through it instead of piling calls up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import grpc

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.rpc.batched import BatchedCaller
from apexmesh.rpc.observe import observed_channel
from apexmesh.rpc.retry import SUBMIT, Failure, RetryPolicy, failure_of, may_repeat

_log = logging.getLogger(__name__)

#: Builds a grpc.aio channel for a target (tests may pass their own).
ChannelFactory = Callable[[str], grpc.aio.Channel]


#: Sees every relay call: (address, "answered" | "unavailable" | "failed" | "gave-up").
CallObserver = Callable[[str, str], None]


class SubmitSource(StrEnum):
    """Who decided a submission's outcome (the text is the metrics label)."""

    #: A relay answered: its code is the relay's (250, or a refusal it will keep).
    RELAY = "relay"
    #: No relay could be reached: nobody took the data.
    UNAVAILABLE = "unavailable"
    #: A call failed in a way that leaves its outcome unknown.
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class SubmitOutcome:
    """The relay's answer (or 421/451 when none came)."""

    code: int
    text: str
    source: SubmitSource = SubmitSource.RELAY


class RelaySubmitter:
    """Submit through the configured relays; channels closed by :meth:`aclose`."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        timeout: float,
        channel_factory: ChannelFactory = observed_channel,
        observe: CallObserver | None = None,
        policy: RetryPolicy = SUBMIT,
        limit: asyncio.Semaphore | None = None,
    ) -> None:
        self._observe = observe
        self._channels = [(address, channel_factory(address)) for address in addresses]
        #: Submits to each relay batched over one stream (apexmesh/rpc/batched.py).
        self._stubs = [(address, _caller(address, channel)) for address, channel in self._channels]
        self._timeout = timeout
        #: Every relay is tried at least once.
        self._policy = policy.with_at_least(len(self._stubs))
        self._limit = limit
        self._next = 0

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(address for address, _ in self._stubs)

    async def submit(
        self,
        originator: str,
        payload: bytes,
        *,
        key: str | None = None,
        submission_id: str = "",
    ) -> SubmitOutcome:
        """Submit ``payload`` as ``originator``; never raises for relay trouble.

        With ``key`` (e.g. the recipient) the same relay is tried first for every
        submission with that key, so data to one recipient keeps its order (two pods may
        otherwise deliver a later element first); without, the start is round-robin.
        With ``submission_id`` a call cut off mid-flight is retried (module docstring).
        """
        count = len(self._stubs)
        if count == 0:
            return SubmitOutcome(
                ApexReplyCode.SERVICE_NOT_AVAILABLE,
                "no relay address configured",
                SubmitSource.UNAVAILABLE,
            )
        if key is None:
            start, self._next = self._next, (self._next + 1) % count
        else:
            start = zlib.crc32(key.encode("utf-8", "surrogatepass")) % count
        request = relay_pb2.SubmitRequest(
            originator=originator, payload=payload, submission_id=submission_id
        )
        turn, unavailable = start, 0
        outcome = SubmitOutcome(ApexReplyCode.SERVICE_NOT_AVAILABLE, "no relay reachable")
        attempt = 0
        while True:
            attempt += 1
            address, stub = self._stubs[turn % count]
            async with self._room():
                try:
                    response = await stub.call(request, timeout=self._timeout)
                except grpc.aio.AioRpcError as exc:
                    code = exc.code()
                else:
                    self._seen(address, "answered")
                    return self._answer(address, response)
            failure = failure_of(code)
            if failure is Failure.UNREACHED:
                self._seen(address, "unavailable")
                _log.warning("relay %s unavailable, trying the next one", address)
                outcome = SubmitOutcome(
                    ApexReplyCode.SERVICE_NOT_AVAILABLE,
                    "no relay reachable",
                    SubmitSource.UNAVAILABLE,
                )
                turn, unavailable = turn + 1, unavailable + 1
                if unavailable % count and self._policy.allows_after(attempt):
                    continue  # another relay not tried in this round: at once
            else:
                self._seen(address, "failed")
                _log.warning("relay %s: Submit cut off: %s", address, code)
                outcome = SubmitOutcome(
                    ApexReplyCode.ACTION_ABORTED,
                    "relay call failed; outcome unknown",
                    SubmitSource.ABORTED,
                )
                if not may_repeat(failure, repeatable=bool(submission_id)):
                    break  # a retry could relay it twice (no id), or would fail alike
            delay = self._policy.next_delay(attempt, draw=random.random())
            if delay is None:
                break
            await asyncio.sleep(delay)
        self._seen(self._stubs[turn % count][0], "gave-up")
        _log.warning(
            "Submit as %s (id %r) abandoned after %d attempts: %d %s",
            originator,
            submission_id,
            attempt,
            outcome.code,
            outcome.text,
        )
        return outcome

    @contextlib.asynccontextmanager
    async def _room(self) -> AsyncIterator[None]:
        if self._limit is None:
            yield
            return
        async with self._limit:
            yield

    @staticmethod
    def _answer(address: str, response: relay_pb2.SubmitResponse) -> SubmitOutcome:
        code, text = response.status.code, response.status.text
        if not 200 <= code <= 599:
            _log.warning("relay %s answered no valid reply code (%d)", address, code)
            return SubmitOutcome(
                ApexReplyCode.ACTION_ABORTED,
                "relay answered no valid reply code",
                SubmitSource.ABORTED,
            )
        return SubmitOutcome(code, text)

    def _seen(self, address: str, outcome: str) -> None:
        if self._observe is not None:
            self._observe(address, outcome)

    async def aclose(self) -> None:
        channels, self._channels = self._channels, []
        callers, self._stubs = self._stubs, []
        for _, caller in callers:
            await caller.aclose()
        for _, channel in channels:
            await channel.close()


def _caller(
    address: str, channel: grpc.aio.Channel
) -> BatchedCaller[relay_pb2.SubmitRequest, relay_pb2.SubmitResponse]:
    stub = relay_pb2_grpc.RelayServiceStub(channel)
    return BatchedCaller(
        stub.SubmitStream,
        stub.Submit,
        relay_pb2.SubmitResponse.FromString,
        name=f"relay {address} submit",
    )


__all__ = [
    "SubmitSource",
    "CallObserver",
    "ChannelFactory",
    "RelaySubmitter",
    "SubmitOutcome",
]
