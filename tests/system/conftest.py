"""System tests whose endpoints (thousands of SDK sessions in the test's process) run on
uvloop, as every service does in production (apexmesh/ops/runner.py): on the default
loop the test's own process would be what the load measures."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

import pytest
import uvloop

UVLOOP_MODULES: Final = frozenset({"test_relay_load.py", "test_pubsub_kill.py"})


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.name in UVLOOP_MODULES:
        return {"uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
