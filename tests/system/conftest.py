"""System tests whose endpoints (thousands of SDK sessions in the test's process) run on
uvloop, as every service does in production (apexmesh/ops/runner.py): on the default
loop the test's own process would be what the load measures."""

from __future__ import annotations

from typing import Final

import pytest

from tests.support.loops import LoopFactories, loop_factories

UVLOOP_MODULES: Final = frozenset({"test_relay_load.py", "test_pubsub_kill.py"})


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> LoopFactories:
    return loop_factories(item, UVLOOP_MODULES)
