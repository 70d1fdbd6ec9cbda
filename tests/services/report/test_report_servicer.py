"""The report service over real gRPC: a grpc.aio ReportService on loopback port 0 that
submits through real grpc.aio RelayService test servers recording every Submit.

Covers the statusResponse of RFC 3340 section 5.1's examples byte for byte, several
destinations with options, the relay's status passed back, failover from a dead relay
address to a live one, 421 when none answers, 451 when a relay call fails, every
validation code, and WellKnownEndpoint.Deliver refused with 550 (section 6.2); with a
retry policy (the service's default), an owed report tried again after transient
failures (issue #34): a new submission id after a refusal, the same after a cut-off,
undeliverable when the bound runs out, a permanent refusal answered at once.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

import grpc
import pytest
from prometheus_client import CollectorRegistry

from apexmesh.apex.data import Data
from apexmesh.apex.elements import Reply, parse_data
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.options import STATUS_REQUEST
from apexmesh.apex.report import Destination, StatusResponse, parse_status_response
from apexmesh.beep.mime import BEEP_XML, split_entity
from apexmesh.contracts.common.v1 import common_pb2
from apexmesh.contracts.endpoint.v1 import endpoint_pb2, endpoint_pb2_grpc
from apexmesh.contracts.relay.v1 import relay_pb2, relay_pb2_grpc
from apexmesh.contracts.report.v1 import report_pb2, report_pb2_grpc
from apexmesh.rpc.batched import serve_batched
from apexmesh.rpc.retry import RetryPolicy
from apexmesh.rpc.server import create_server, graceful_stop
from services.report.servicer import (
    INBOUND_REFUSAL,
    OWED_REPORT,
    RelayPool,
    ReportEndpointServicer,
    ReportMetrics,
    ReportServicer,
    SubmitOutcome,
    next_report_delay,
)
from tests.support.grpc_channels import ready_channel
from tests.support.polling import scaled
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration

#: RFC 3340 section 5.1, the first report example, verbatim.
RFC_250 = """
     C: <data content='#Content'>
            <originator identity='apex=report@example.com' />
            <recipient identity='fred@example.com' />
            <data-content Name='Content'>
                <statusResponse transID='86'>
                    <destination identity='barney@example.com'>
                        <reply code='250' />
                    </destination>
                </statusResponse>
            </data-content>
        </data>
"""

#: RFC 3340 section 5.1, the second report example, verbatim.
RFC_550 = """
     C: <data content='#Content'>
            <originator identity='apex=report@example.com' />
            <recipient identity='fred@example.com' />
            <data-content Name='Content'>
                <statusResponse transID='86'>
                    <destination identity='barney@example.com'>
                        <reply code='550'>unknown endpoint
                                          identity</reply>
                    </destination>
                </statusResponse>
            </data-content>
        </data>
"""


def compact(example: str) -> bytes:
    """The example without the "C: " prompt, the indentation and the line wrapping."""
    text = example.strip().removeprefix("C:").strip()
    text = re.sub(r">\s+<", "><", text)
    return re.sub(r"\s{2,}", " ", text).encode()


# --------------------------------------------------------------------------- relays


class RecordingRelay(relay_pb2_grpc.RelayServiceServicer):
    """A relay that records Submit calls and answers a configured status."""

    def __init__(self, code: int = 250, text: str = "", abort: grpc.StatusCode | None = None):
        self.calls: list[relay_pb2.SubmitRequest] = []
        self.code = code
        self.text = text
        self.abort = abort

    async def Submit(  # noqa: N802
        self, request: relay_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.SubmitResponse:
        self.calls.append(request)
        if self.abort is not None:
            await context.abort(self.abort, "relay exploded: secret internals")
        return relay_pb2.SubmitResponse(
            status=common_pb2.ApexStatus(code=self.code, text=self.text)
        )

    async def SubmitStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[common_pb2.CallBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[common_pb2.CallBatch]:
        """Submit over one stream, as every relay serves it (services/relay/servicer.py).

        Without it each submitter's first call raced the stream's UNIMPLEMENTED end: on a
        loaded machine the send could fail first (INTERNAL), the call then counted as
        "reached nobody" and went to the next relay, and the round robin was off by one.
        The fallback to unary calls has its own tests (tests/apexmesh/rpc)."""
        async for batch in serve_batched(
            request_iterator, context, self.Submit, relay_pb2.SubmitRequest.FromString
        ):
            yield batch

    # The report service only submits; the rest of the contract is refused.

    async def Deliver(  # noqa: N802
        self, request: relay_pb2.DeliverRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.DeliverResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "test relay: Submit only")
        raise AssertionError("unreachable")

    async def DeliverStream(  # noqa: N802
        self,
        request_iterator: AsyncIterator[relay_pb2.DeliverRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[relay_pb2.DeliverResponse]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "test relay: Submit only")
        yield relay_pb2.DeliverResponse()  # pragma: no cover - abort raised

    async def TerminateAttachment(  # noqa: N802
        self, request: relay_pb2.TerminateAttachmentRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.TerminateAttachmentResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "test relay: Submit only")
        raise AssertionError("unreachable")


@asynccontextmanager
async def running_relay(relay: RecordingRelay) -> AsyncIterator[str]:
    server, port = await create_server(
        [lambda s: relay_pb2_grpc.add_RelayServiceServicer_to_server(relay, s)]
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await graceful_stop(server, 0.5)


def dead_address() -> str:
    """A loopback address nothing listens on (connections are refused: UNAVAILABLE)."""
    return f"127.0.0.1:{free_port()}"


# --------------------------------------------------------------------------- service


@dataclass
class Service:
    report: report_pb2_grpc.ReportServiceStub
    endpoint: endpoint_pb2_grpc.WellKnownEndpointStub
    registry: CollectorRegistry
    relays: RelayPool
    calls: list[tuple[str, int]] = field(default_factory=list)

    async def call(self, request: report_pb2.ReportRequest) -> tuple[int, str]:
        response = await self.report.Report(request, timeout=scaled(10))
        return response.status.code, response.status.text

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.registry.get_sample_value(name, labels or {}) or 0.0


ServiceFactory = Callable[..., AbstractAsyncContextManager[Service]]


@pytest.fixture
def report_service() -> ServiceFactory:
    """``start(relay_addresses, retry=None)``: a report service over real gRPC."""

    @asynccontextmanager
    async def start(
        relay_addresses: Sequence[str], retry: RetryPolicy | None = None
    ) -> AsyncIterator[Service]:
        registry = CollectorRegistry()
        metrics = ReportMetrics.create(registry)
        relays = RelayPool(relay_addresses, timeout=5.0, metrics=metrics)  # a setting, not a wait
        report = ReportServicer(["example.com"], relays, metrics, retry=retry)
        endpoint = ReportEndpointServicer(metrics)
        server, port = await create_server(
            [
                lambda s: report_pb2_grpc.add_ReportServiceServicer_to_server(report, s),
                lambda s: endpoint_pb2_grpc.add_WellKnownEndpointServicer_to_server(endpoint, s),
            ]
        )
        try:
            async with ready_channel(port) as channel:
                yield Service(
                    report_pb2_grpc.ReportServiceStub(channel),
                    endpoint_pb2_grpc.WellKnownEndpointStub(channel),
                    registry,
                    relays,
                )
        finally:
            await graceful_stop(server, 0.5)
            await relays.aclose()

    return start


def destination(identity: str, code: int, text: str = "") -> report_pb2.Destination:
    return report_pb2.Destination(
        identity=identity, reply=common_pb2.ApexStatus(code=code, text=text)
    )


def request(**changes: object) -> report_pb2.ReportRequest:
    fields: dict[str, object] = {
        "domain": "example.com",
        "recipient": "fred@example.com",
        "trans_id": 86,
        "destinations": [destination("barney@example.com", 250)],
    }
    fields.update(changes)
    return report_pb2.ReportRequest(**fields)  # type: ignore[arg-type]


def submitted(relay: RecordingRelay) -> tuple[bytes, Data]:
    """The one payload the relay received: its body and the data element parsed from it."""
    assert len(relay.calls) == 1
    call = relay.calls[0]
    assert call.originator == "apex=report@example.com"
    entity = split_entity(call.payload)
    assert entity.content_type == BEEP_XML
    assert call.payload.startswith(b"Content-Type: application/beep+xml\r\n\r\n")
    return entity.body, parse_data(entity.body)


# --------------------------------------------------------------------------- RFC examples


@pytest.mark.parametrize(
    ("example", "code", "text"),
    [(RFC_250, 250, ""), (RFC_550, 550, "unknown endpoint identity")],
)
async def test_rfc3340_5_1_report_examples(
    report_service: ServiceFactory, example: str, code: int, text: str
) -> None:
    relay = RecordingRelay()
    async with running_relay(relay) as address, report_service([address]) as service:
        status = await service.call(
            request(destinations=[destination("barney@example.com", code, text)])
        )
        assert status == (250, "")
        body, data = submitted(relay)
        assert body == compact(example)
        assert data == parse_data(compact(example))
        assert data.content == "#Content"
        assert str(data.originator.identity) == "apex=report@example.com"
        assert [str(r.identity) for r in data.recipients] == ["fred@example.com"]
        assert data.data_content is not None
        assert parse_status_response(data.data_content.content) == StatusResponse(
            trans_id=86,
            destinations=(
                Destination(
                    identity=Endpoint.parse("barney@example.com"),
                    reply=Reply(code=code, trans_id=None, text=text),
                ),
            ),
        )
        assert service.sample("apexmesh_report_responses_total", {"result": "submitted"}) == 1


async def test_several_destinations_with_options(report_service: ServiceFactory) -> None:
    relay = RecordingRelay()
    timing = b"<option internal='dataTiming' targetHop='this' transID='7'><x a='1'/></option>"
    async with running_relay(relay) as address, report_service([address]) as service:
        status = await service.call(
            request(
                domain="EXAMPLE.com",
                trans_id=2147483647,
                destinations=[
                    destination("barney@example.com", 250),
                    destination("wilma/appl=wb@example.com", 550, "unknown endpoint identity"),
                    destination("dino@bedrock.org", 421, "service <not> available & 'down'"),
                ],
                options=[timing],
            )
        )
        assert status == (250, "")
        _, data = submitted(relay)
    assert [option.internal for option in data.options] == ["dataTiming"]
    assert data.options[0].content == b'<x a="1"/>'
    assert all(option.internal != STATUS_REQUEST for option in data.options)
    assert data.data_content is not None
    response = parse_status_response(data.data_content.content)
    assert response.trans_id == 2147483647
    assert [(str(d.identity), d.reply.code, d.reply.text) for d in response.destinations] == [
        ("barney@example.com", 250, ""),
        ("wilma/appl=wb@example.com", 550, "unknown endpoint identity"),
        ("dino@bedrock.org", 421, "service <not> available & 'down'"),
    ]
    assert all(d.reply.trans_id is None for d in response.destinations)


async def test_relay_status_is_the_answer(report_service: ServiceFactory) -> None:
    relay = RecordingRelay(code=537, text="action not authorized for user")
    async with running_relay(relay) as address, report_service([address]) as service:
        assert await service.call(request()) == (537, "action not authorized for user")
        assert len(relay.calls) == 1
        assert service.sample("apexmesh_report_responses_total", {"result": "relay_refused"}) == 1


# --------------------------------------------------------------------------- relays


async def test_failover_from_a_dead_relay_to_a_live_one(report_service: ServiceFactory) -> None:
    relay = RecordingRelay()
    dead = dead_address()
    async with running_relay(relay) as live, report_service([dead, live]) as service:
        for trans_id in (1, 2, 3):
            assert await service.call(request(trans_id=trans_id)) == (250, "")
        assert len(relay.calls) == 3
        assert (
            service.sample(
                "apexmesh_report_relay_calls_total", {"relay": dead, "outcome": "unavailable"}
            )
            >= 1
        )
        assert (
            service.sample(
                "apexmesh_report_relay_calls_total", {"relay": live, "outcome": "answered"}
            )
            == 3
        )
        assert service.sample("apexmesh_report_responses_total", {"result": "submitted"}) == 3


async def test_round_robin_over_live_relays(report_service: ServiceFactory) -> None:
    first, second = RecordingRelay(), RecordingRelay()
    async with (
        running_relay(first) as one,
        running_relay(second) as two,
        report_service([one, two]) as service,
    ):
        for trans_id in (1, 2, 3, 4):
            assert await service.call(request(trans_id=trans_id)) == (250, "")
    assert len(first.calls) == 2
    assert len(second.calls) == 2


async def test_421_when_no_relay_is_reachable(report_service: ServiceFactory) -> None:
    async with report_service([dead_address(), dead_address()]) as service:
        assert await service.call(request()) == (421, "no relay reachable")
        assert service.sample("apexmesh_report_responses_total", {"result": "unavailable"}) == 1
    async with report_service([]) as service:
        assert await service.call(request()) == (421, "no relay address configured")


async def test_451_without_failover_when_a_relay_call_fails(
    report_service: ServiceFactory,
) -> None:
    broken, spare = RecordingRelay(abort=grpc.StatusCode.INTERNAL), RecordingRelay()
    async with (
        running_relay(broken) as one,
        running_relay(spare) as two,
        report_service([one, two]) as service,
    ):
        code, text = await service.call(request())
        assert code == 451
        assert "secret" not in text
        assert len(broken.calls) == 1
        assert spare.calls == []  # the report may have been accepted: never sent twice
        assert service.sample("apexmesh_report_responses_total", {"result": "aborted"}) == 1


# --------------------------------------------------------------------------- validation


STATUS_REQUEST_OPTION = b"<option internal='statusRequest' transID='9' />"


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"domain": "example.org"}, 553),
        ({"domain": "bad_domain"}, 553),
        ({"domain": ""}, 553),
        ({"recipient": "fred"}, 553),
        ({"recipient": ""}, 553),
        ({"recipient": "fred@bad_domain"}, 553),
        ({"trans_id": 0}, 501),
        ({"trans_id": 2147483648}, 501),
        ({"destinations": []}, 501),
        ({"destinations": [destination("barney", 250)]}, 553),
        ({"destinations": [destination("barney@example.com", 0)]}, 501),
        ({"destinations": [destination("barney@example.com", 25)]}, 501),
        ({"destinations": [destination("barney@example.com", 2500)]}, 501),
        ({"destinations": [destination("barney@example.com", -250)]}, 501),
        ({"destinations": [destination("barney@example.com", 250, "bad\x01char")]}, 501),
        ({"options": [b"<option internal='x' transID='1'"]}, 500),
        ({"options": [b"<data content='#x' />"]}, 501),
        ({"options": [b"<option internal='x' />"]}, 501),
        ({"options": [STATUS_REQUEST_OPTION]}, 554),
        ({"destinations": [destination(f"r{n}@example.com", 250) for n in range(1001)]}, 554),
    ],
)
async def test_validation_codes(
    report_service: ServiceFactory, changes: dict[str, object], code: int
) -> None:
    relay = RecordingRelay()
    async with running_relay(relay) as address, report_service([address]) as service:
        status = await service.call(request(**changes))
        assert status[0] == code, status
        assert status[1]
        assert relay.calls == []
        assert service.sample("apexmesh_report_responses_total", {"result": "invalid"}) == 1


# --------------------------------------------------------------------------- endpoint


async def test_data_addressed_to_apex_report_is_refused(report_service: ServiceFactory) -> None:
    relay = RecordingRelay()
    payload = b"Content-Type: application/beep+xml\r\n\r\n" + compact(RFC_250).replace(
        b"apex=report@example.com", b"wilma@example.com"
    ).replace(b"fred@example.com", b"apex=report@example.com")
    async with running_relay(relay) as address, report_service([address]) as service:
        for _ in range(2):
            response = await service.endpoint.Deliver(
                endpoint_pb2.EndpointDeliverRequest(
                    recipient="apex=report@example.com",
                    originator="wilma@example.com",
                    payload=payload,
                ),
                timeout=scaled(10),
            )
            assert (response.status.code, response.status.text) == (550, INBOUND_REFUSAL)
        assert relay.calls == []
        assert service.sample("apexmesh_report_inbound_refused_total") == 2


# --------------------------------------------------------------------------- owed reports


class ScriptedRelay(RecordingRelay):
    """A relay answering the given codes in turn (the last one from then on); a code of
    0 aborts that call (INTERNAL: cut off, outcome unknown)."""

    def __init__(self, codes: Sequence[int]) -> None:
        super().__init__()
        self.codes = list(codes)

    async def Submit(  # noqa: N802
        self, request: relay_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> relay_pb2.SubmitResponse:
        self.calls.append(request)
        code = self.codes.pop(0) if len(self.codes) > 1 else self.codes[0]
        if code == 0:
            await context.abort(grpc.StatusCode.INTERNAL, "cut off")
        return relay_pb2.SubmitResponse(status=common_pb2.ApexStatus(code=code, text=f"c{code}"))


QUICK: Final = dataclasses.replace(
    OWED_REPORT,
    bound_seconds=5.0,
    first_backoff_seconds=0.01,
    max_backoff_seconds=0.05,
    attempt_seconds=0.5,
)


async def test_an_owed_report_refused_for_now_is_submitted_again_under_a_new_id(
    report_service: ServiceFactory,
) -> None:
    """Issue #34: a relay that cannot check the sender's access (the access service is
    down) refuses the report with 421; it is submitted again until delivered."""
    relay = ScriptedRelay([421, 421, 250])
    async with running_relay(relay) as address, report_service([address], QUICK) as service:
        assert await service.call(request()) == (250, "c250")
        ids = [call.submission_id for call in relay.calls]
        assert len(ids) == 3
        assert all(ids)
        assert len(set(ids)) == 3
        assert service.sample("apexmesh_report_retries_total") == 2
        assert service.sample("apexmesh_report_responses_total", {"result": "submitted"}) == 1


async def test_a_cut_off_call_is_sent_again_under_the_same_id(
    report_service: ServiceFactory,
) -> None:
    relay = ScriptedRelay([0, 250])
    async with running_relay(relay) as address, report_service([address], QUICK) as service:
        assert await service.call(request()) == (250, "c250")
        ids = [call.submission_id for call in relay.calls]
        assert len(ids) == 2
        assert ids[0]
        assert ids[0] == ids[1]


async def test_an_owed_report_is_reported_undeliverable_when_the_bound_runs_out(
    report_service: ServiceFactory,
) -> None:
    relay = ScriptedRelay([421])
    policy = dataclasses.replace(QUICK, bound_seconds=0.3)
    async with running_relay(relay) as address, report_service([address], policy) as service:
        code, text = await service.call(request())
        assert code == 421
        assert text.startswith(f"statusResponse undeliverable after {len(relay.calls)} attempts")
        assert len(relay.calls) > 2
        assert service.sample("apexmesh_report_responses_total", {"result": "undeliverable"}) == 1


async def test_a_permanent_refusal_is_answered_at_once(report_service: ServiceFactory) -> None:
    relay = ScriptedRelay([537])
    async with running_relay(relay) as address, report_service([address], QUICK) as service:
        assert await service.call(request()) == (537, "c537")
        assert len(relay.calls) == 1
        assert service.sample("apexmesh_report_retries_total") == 0


async def test_no_relay_reachable_is_tried_again_then_reported_undeliverable(
    report_service: ServiceFactory,
) -> None:
    # each submission itself tries the dead relay a few times (about 0.35 s of backoff)
    policy = dataclasses.replace(QUICK, bound_seconds=1.0)
    async with report_service([dead_address()], policy) as service:
        code, text = await service.call(request())
        assert code == 421
        assert "undeliverable" in text
        assert service.sample("apexmesh_report_retries_total") >= 1


@pytest.mark.unit
def test_the_retry_policy_stops_before_the_callers_deadline() -> None:
    transient = SubmitOutcome(421, "access service not available", "relay_refused")
    policy = dataclasses.replace(
        OWED_REPORT,
        bound_seconds=10.0,
        first_backoff_seconds=1.0,
        max_backoff_seconds=4.0,
        attempt_seconds=2.0,
    )

    def delay(
        outcome: SubmitOutcome, attempt: int, *, elapsed: float, remaining: float | None
    ) -> float | None:
        return next_report_delay(policy, outcome, attempt, elapsed=elapsed, remaining=remaining)

    assert delay(transient, 1, elapsed=0.0, remaining=None) == 1.0
    assert delay(transient, 3, elapsed=1.0, remaining=None) == 4.0
    assert delay(transient, 9, elapsed=1.0, remaining=None) == 4.0
    assert delay(transient, 2, elapsed=9.0, remaining=None) is None  # bound
    assert delay(transient, 1, elapsed=0.0, remaining=2.5) is None  # deadline
    assert delay(transient, 1, elapsed=0.0, remaining=3.5) == 1.0
    for final in (
        SubmitOutcome(250, "", "submitted"),
        SubmitOutcome(537, "access denied", "relay_refused"),
        SubmitOutcome(553, "bad", "invalid"),
    ):
        assert delay(final, 1, elapsed=0.0, remaining=None) is None
