"""The presence service's settings, its gRPC contract (tuples from other services, as
pubsub publishes topics), its admin HTTP app, and ``python -m services.presence`` with
bad settings."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from apexmesh.apex.presence import Publish, parse_presence
from apexmesh.contracts.presence.v1 import presence_pb2, presence_pb2_grpc
from apexmesh.ops.settings import SettingsError
from services.presence.app import PresenceApp
from services.presence.settings import PresenceSettings
from tests.services.presence.conftest import Attach, PresenceMesh
from tests.support.grpc_channels import ready_channel
from tests.support.polling import scaled
from tests.support.processes import ROOT

BASE = {
    "APEXMESH_PRESENCE_DOMAINS": "Example.COM",
    "APEXMESH_ACCESS_ADDRESS": "127.0.0.1:1",
    "APEXMESH_REDIS_URL": "redis://:secret@127.0.0.1:6379/0",
}


@pytest.mark.unit
def test_settings_defaults_and_normalisation() -> None:
    settings = PresenceSettings.from_env(BASE)
    assert settings.domains == ("example.com",)
    assert (settings.grpc_port, settings.http_port, settings.tick_seconds) == (7413, 8413, 0.25)
    assert settings.relay_addresses == ()


@pytest.mark.unit
@pytest.mark.parametrize(
    "env",
    [
        {},
        {"APEXMESH_PRESENCE_DOMAINS": "example.com", "APEXMESH_DEV": "1"},
        {**BASE, "APEXMESH_ACCESS_ADDRESS": "nowhere"},
        {**BASE, "APEXMESH_RELAY_ADDRESSES": "relay"},
        {**BASE, "APEXMESH_PRESENCE_TICK_SECONDS": "0"},
        {**BASE, "APEXMESH_PRESENCE_GRPC_HOST": "0.0.0.0"},
        {**BASE, "APEXMESH_REDIS_URL": "redis://db:6379/0"},
        {**BASE, "APEXMESH_PRESENCE_DOMAINS": "not a domain"},
    ],
)
def test_bad_settings_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError):
        PresenceSettings.from_env(env)


@pytest.mark.integration
def test_process_exits_2_on_bad_settings() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "services.presence"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "APEXMESH_PRESENCE_DOMAINS": "example.com"},
        capture_output=True,
        timeout=scaled(60),
        check=False,
    )
    assert completed.returncode == 2, completed.stderr


@pytest.mark.integration
async def test_tuples_from_other_services_reach_subscribers(
    pmesh: PresenceMesh, attach: Attach
) -> None:
    barney = await attach("barney@example.com")
    await barney.presence.subscribe("fred@example.com", duration=60, trans_id=10)
    first = await barney.next()  # fred's default entry (RFC 3343 section 3)
    assert isinstance(first, Publish)
    assert first.trans_id == 10
    async with ready_channel(pmesh.presence_port) as channel:
        stub = presence_pb2_grpc.PresenceServiceStub(channel)
        topic = presence_pb2.Tuple(destination="apex:fred/topic=news@example.com")
        answer = await stub.SetTuples(
            presence_pb2.SetTuplesRequest(publisher="fred@example.com", tuples=[topic])
        )
        assert answer.status.code == 250
        seen = await barney.next()
        assert isinstance(seen, Publish)
        assert [t.destination for t in seen.presence.tuples] == [topic.destination]
        got = await stub.GetPresence(presence_pb2.GetPresenceRequest(publisher="fred@example.com"))
        assert parse_presence(got.presence).tuples[0].destination == topic.destination
        answer = await stub.RemoveTuples(
            presence_pb2.RemoveTuplesRequest(
                publisher="fred@example.com", destinations=[topic.destination]
            )
        )
        assert answer.status.code == 250
        got = await stub.GetPresence(presence_pb2.GetPresenceRequest(publisher="fred@example.com"))
        assert got.presence == b""
        # Refusals are answered with their code.
        outside = await stub.SetTuples(
            presence_pb2.SetTuplesRequest(publisher="fred@rubble.com", tuples=[topic])
        )
        assert outside.status.code == 553
        malformed = await stub.SetTuples(
            presence_pb2.SetTuplesRequest(
                publisher="fred@example.com",
                tuples=[presence_pb2.Tuple(destination="not a uri")],
            )
        )
        assert malformed.status.code == 501
        bad = await stub.EndpointAttached(presence_pb2.EndpointEvent(endpoint="nobody"))
        assert bad.status.code == 553


@pytest.mark.integration
async def test_admin_http(pmesh: PresenceMesh) -> None:
    assert pmesh.presence is not None
    base = f"http://127.0.0.1:{pmesh.presence.http_port}"
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
        metrics = (await http.get("/metrics")).text
        assert "apexmesh_presence_operations_in_progress" in metrics


@pytest.mark.integration
async def test_ten_thousand_topic_tuples_are_accepted_and_survive_a_restart(
    pmesh: PresenceMesh,
) -> None:
    # A pubsub service adds one tuple per topic to apex=pubsub@DOMAIN's entry
    # (draft-schwartz-apex-pubsub section 4.2 step 3.2); 10,000 topics are not refused.
    assert pmesh.presence is not None
    publisher = "apex=pubsub@example.com"
    async with ready_channel(pmesh.presence_port) as channel:
        stub = presence_pb2_grpc.PresenceServiceStub(channel)
        refused = []
        for number in range(10_000):
            topic = presence_pb2.Tuple(destination=f"apex:apex=pubsub/topic.{number}@example.com")
            answer = await stub.SetTuples(
                presence_pb2.SetTuplesRequest(publisher=publisher, tuples=[topic])
            )
            if answer.status.code != 250:
                refused.append((number, answer.status.code, answer.status.text))
        assert refused == []
        got = await stub.GetPresence(presence_pb2.GetPresenceRequest(publisher=publisher))
        assert len(parse_presence(got.presence).tuples) == 10_000
    await pmesh.presence.stop()  # (stopped again, harmlessly, with the mesh)
    restarted = PresenceApp(pmesh.presence.settings)
    await restarted.start()
    try:
        async with ready_channel(pmesh.presence_port) as channel:
            stub = presence_pb2_grpc.PresenceServiceStub(channel)
            got = await stub.GetPresence(presence_pb2.GetPresenceRequest(publisher=publisher))
            tuples = parse_presence(got.presence).tuples
            assert {t.destination for t in tuples} == {
                f"apex:apex=pubsub/topic.{number}@example.com" for number in range(10_000)
            }
    finally:
        await restarted.stop()
