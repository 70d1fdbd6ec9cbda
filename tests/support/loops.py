"""Which event loop a test module runs on (pytest-asyncio's loop factories hook)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

import pytest
import uvloop

LoopFactories = dict[str, Callable[[], asyncio.AbstractEventLoop]]


def loop_factories(item: pytest.Item, uvloop_modules: Collection[str]) -> LoopFactories:
    """uvloop for the tests of ``uvloop_modules`` (file names), as every service runs in
    production (apexmesh/ops/runner.py); asyncio's own loop for the others."""
    if item.path.name in uvloop_modules:
        return {"uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
