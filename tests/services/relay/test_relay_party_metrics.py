"""The relay's /metrics (admin HTTP, services/relay/http.py) after the party pack's work
(RFC 3342 sections 2 and 3): held, refused and drained data, a timing error and a final
hop report show in the counters and gauges named in docs/party.md, with their values.

Everything happens on pod a of tests/support/mesh.py (sender, recipients and drain), so
that pod's counters see every event; the gauges come from Redis through its sweeper.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from apexmesh.aio.tasks import within
from apexmesh.apex.holding import HoldLimits
from apexmesh.apex.timing import DataTiming
from apexmesh.client import ApexRequestError
from tests.support.mesh import Mesh, apex_channel, ask, beep_session, endpoint_client
from tests.support.polling import scaled, wait_until

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(port: int) -> Samples:
    async with httpx.AsyncClient(timeout=scaled(5.0)) as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def scrape_until(port: int, ready: Callable[[Samples], bool], within: float = 5.0) -> Samples:
    """Scrape until ``ready`` (the gauges are refreshed by the sweeper, every 250 ms)."""

    async def fresh() -> Samples | None:
        samples = await scrape(port)
        return samples if ready(samples) else None

    return await wait_until(fresh, within, every=0.05, what="the sweeper's gauges")


HELD = "apexmesh_relay_held_data_total"
REPORTS = "apexmesh_relay_timing_reports_total"
MISSES = "apexmesh_relay_deadline_misses_total"
ENTRIES = "apexmesh_relay_held_entries"
BYTES = "apexmesh_relay_held_bytes"
OLDEST = "apexmesh_relay_held_oldest_age_seconds"
DOMAIN = "example.com"


async def test_party_pack_counters_and_gauges(mesh: Mesh) -> None:
    pod = mesh.a
    assert pod.router.holder is not None
    store = pod.router.holder.store
    pod.router.holder.limits = HoldLimits(max_count_per_endpoint=3)
    port = pod.http_port
    before = await scrape(port)
    for name in (HELD, REPORTS, MISSES):
        assert not [key for key in before if key[0] == name], name  # nothing counted yet

    async with endpoint_client(pod.edge_port) as one, endpoint_client(pod.edge_port) as two:
        fred = await one.attach("fred@example.com")
        # hold: three held, the fourth refused by the quota (450)
        for index in range(3):
            await fred.send("barney@example.com", b"held %d" % index, hold=True)
        with pytest.raises(ApexRequestError) as refused:
            await fred.send("barney@example.com", b"over quota", hold=True)
        assert refused.value.code == 450
        count, octets = await store.usage("barney@example.com")
        assert count == 3
        held = await scrape_until(port, lambda s: value(s, ENTRIES, domain=DOMAIN) == 3)
        assert value(held, BYTES, domain=DOMAIN) == octets
        assert (value(held, OLDEST, domain=DOMAIN) or 0) > 0
        assert value(held, HELD, event="held") == 3
        assert value(held, HELD, event="refused") == 1
        assert value(held, HELD, event="delivered") is None

        # drain on attach (same pod)
        barney = await two.attach("barney@example.com")
        got = [(await within(barney.receive(), scaled(5))).content for _ in range(3)]
        assert got == [b"held 0", b"held 1", b"held 2"]
        drained = await scrape_until(
            port,
            lambda s: (
                value(s, ENTRIES, domain=DOMAIN) == 0 and value(s, HELD, event="delivered") == 3
            ),
        )
        assert value(drained, BYTES, domain=DOMAIN) == 0
        assert value(drained, OLDEST, domain=DOMAIN) == 0

        # final hop report (section 2.1.1): barney answers ok, returnTrip asks for a 250
        result = await fred.send(
            "barney@example.com", b"on time", timing=DataTiming(return_trip=20_000)
        )
        assert (await within(barney.receive(), scaled(5))).content == b"on time"
        (report,) = await result.reports(1, timeout=scaled(5))
        assert report.destinations[0].reply.code == 250

        # timing error (section 2.1.2): wilma is attached over raw BEEP and never answers
        async with beep_session(pod.edge_port) as conn:
            channel = await apex_channel(conn)
            attach = "<attach endpoint='wilma@example.com' transID='1' />"
            assert await ask(channel, attach) == ("RPY", "ok", "")
            result = await fred.send(
                "wilma@example.com",
                b"late",
                timing=DataTiming(no_later_than=300, report_errors=True),
            )
            (report,) = await result.reports(1, timeout=scaled(5))
            assert report.destinations[0].reply.code == 550

    final = await scrape(port)
    assert value(final, REPORTS, kind="final_hop") == 1
    assert value(final, REPORTS, kind="timing_error") == 1
    assert value(final, REPORTS, kind="transient") is None
    assert value(final, MISSES, cause="reached") == 1
    assert value(final, MISSES, cause="predicted") is None
    assert value(final, HELD, event="held") == 3
    assert value(final, HELD, event="refused") == 1
    assert value(final, HELD, event="delivered") == 3
    assert value(final, HELD, event="expired") is None
