"""The per-recipient payloads of a fan-out (one data, many recipients, as a pubsub
publication): built from one template per job, each must parse to exactly the data the
recipient's plan forwards, with the content part untouched."""

from __future__ import annotations

import pytest

from apexmesh.apex.content import parse_payload
from apexmesh.apex.data import Recipient
from apexmesh.apex.elements import parse_message
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.hops import plan_data
from apexmesh.apex.options import OptionRegistry
from apexmesh.apex.party import DATA_HOPPING, data_hopping_option
from apexmesh.apex.timing import DATA_TIMING, DataTiming, data_timing_option
from apexmesh.client.outgoing import encode_data
from services.relay.jobs import Job
from services.relay.payloads import job_payload

pytestmark = pytest.mark.unit

REGISTRY = OptionRegistry(internal=frozenset({DATA_HOPPING, DATA_TIMING}))
CONTENT = bytes(range(256))


def fan_out(count: int, *, per_recipient_timing: bool) -> None:
    recipients = tuple(
        Recipient(
            identity=Endpoint.parse(f"sub{i}@example.com"),
            options=(data_timing_option(100 + i, DataTiming(no_later_than=1000 + i)),)
            if per_recipient_timing and i % 2
            else (),
        )
        for i in range(count)
    )
    raw = encode_data(
        originator=Endpoint.parse("apex=pubsub@example.com"),
        recipients=recipients,
        content=CONTENT,
        options=(data_hopping_option(7, 4),),
    )
    payload = parse_payload(raw)
    data = parse_message(payload.control)
    plan = plan_data(data, REGISTRY, is_final=lambda _: True)
    job = Job(data, plan, tuple(payload.parts.values()), raw)
    for recipient_plan in plan.recipients:
        assert recipient_plan.forward is not None
        built = parse_payload(job_payload(job, recipient_plan.forward))
        assert parse_message(built.control) == recipient_plan.forward
        assert [p.body for p in built.parts.values()] == [CONTENT]


def test_fan_out_payloads_are_the_planned_data() -> None:
    fan_out(50, per_recipient_timing=False)


def test_fan_out_with_recipient_options() -> None:
    fan_out(20, per_recipient_timing=True)


def test_few_recipients_are_built_directly() -> None:
    fan_out(2, per_recipient_timing=True)
