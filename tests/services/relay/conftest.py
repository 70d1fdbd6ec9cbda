"""Fixtures of the relay tests: a running mesh (tests/support/mesh.py) per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apexmesh.store.keys import Keys
from tests.support.mesh import Mesh, running_mesh
from tests.support.redis_server import RedisServer


@pytest.fixture
async def mesh(redis_server: RedisServer, keys: Keys, tmp_path: Path) -> AsyncIterator[Mesh]:
    async with running_mesh(redis_server, keys, tmp_path) as running:
        yield running
