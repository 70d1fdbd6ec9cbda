"""``published`` is journalled (issue #29, docs/robust.md "published"): the answer a
publisher is owed survives the death of the pod that owes it, as the service's other
answers do (services/pubsub/journal.py).

The running mesh (two relay pods, two pubsub pods in the test's process, a real
redis-server). The sequencing pod's sends of ``published`` reach no relay (its
submitter refuses, as when every relay is unreachable from it); the pod then dies
without a goodbye (its gRPC server, lease loop and robust task stop, its pod lease
lapses). The other pod, leading the domain, redoes the dead pod's journal entries, and
Fred's ``publish`` returns the source seq after all. Before, ``published`` was four
Submit attempts and nothing else: Fred timed out although his publication was durable.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from apexmesh.aio.tasks import stop_tasks, within
from apexmesh.rpc.relay import SubmitOutcome, SubmitSource
from apexmesh.store.keys import Keys
from tests.services.pubsub.conftest import until
from tests.services.pubsub.robust_support import subscribed
from tests.services.pubsub.test_pubsub_robust import (
    DOMAIN,
    NEWS,
    SETTINGS,
    WILMA,
    _robust_topic,
    robust_mesh,
)
from tests.support.polling import eventually, scaled
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class Unreachable:
    """A relay submitter that reaches no relay (what four failed attempts come to)."""

    def __init__(self) -> None:
        self.refused = 0

    async def submit(self, *_args: object, **_kwargs: object) -> SubmitOutcome:
        self.refused += 1
        return SubmitOutcome(421, "no relay reachable (test)", SubmitSource.UNAVAILABLE)


async def test_published_reaches_its_publisher_after_the_pod_that_owed_it_died(
    redis_server: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with robust_mesh(redis_server, keys, tmp_path) as mesh:
        await _robust_topic(mesh, NEWS)
        wilma = await mesh.robust("wilma", "b")
        await wilma.follow(NEWS, resolution=SETTINGS.resolution, heartbeat_ms=SETTINGS.heartbeat_ms)
        await wilma.subscribe(NEWS, duration=60)
        await subscribed(mesh.mesh.pubsub.values(), DOMAIN, NEWS, WILMA)
        unreachable = Unreachable()
        for app in mesh.mesh.pubsub.values():
            assert app.service is not None
            app.service.robust.sequencing._submitter = unreachable  # type: ignore[assignment]
        fred = await mesh.robust("fred", "a")
        publishing = asyncio.create_task(fred.publish(NEWS, b"owed", timeout=scaled(60)))
        # The publication is sequenced and delivered; its published is journalled only.
        assert (await within(wilma.next(), timeout=scaled(20))).payload == b"owed"
        await eventually(lambda: unreachable.refused > 0, within=20)
        (owner,) = (
            name
            for name, app in mesh.mesh.pubsub.items()
            if app.service is not None and (DOMAIN, NEWS) in app.service.robust.sequencers.owned
        )
        dead = mesh.mesh.pubsub[owner]
        journal = await dead.store.pending(DOMAIN)
        assert any(":published:" in entry.id for entry in journal)
        assert not publishing.done()
        # The owner dies: no goodbye, its pod lease and leader lock just lapse.
        await stop_tasks((dead._loop, dead._alive, dead._robust))
        assert dead._grpc is not None
        await dead._grpc.stop(0)
        assert await within(publishing, timeout=scaled(60)) == 1
        store = mesh.mesh.pubsub[owner].store

        async def forgotten() -> bool:  # the redo's entry goes once a relay took it
            return not any(":published:" in e.id for e in await store.pending(DOMAIN))

        await until(forgotten, within=10)
