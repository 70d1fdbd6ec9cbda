"""The process life of every service: settings, start, the listening line, SIGTERM, stop.

Each ``services/<name>/__main__.py`` hands :func:`run_service` its settings loader, its
composition root and what to announce; the shape is the same for all of them:

* logging is set up (JSON lines on stderr, :mod:`apexmesh.ops.logs`, at
  ``APEXMESH_LOG_LEVEL``); settings are read once; bad settings exit with 2 before
  anything starts;
* the app starts; an unreachable dependency or a port that cannot be bound exits with 1,
  and errors the service declares fatal (a bad seed file) exit with 2;
* one JSON line ``{"event": "listening", "service": NAME, ...ports}`` goes to stdout,
  which is how tests and scripts find a service started with port 0;
* SIGTERM or SIGINT stops the app gracefully (its ``stop``), exit code 0;
* the garbage collector runs with the service's thresholds (:mod:`apexmesh.ops.gc_tuning`)
  and everything the start made is frozen out of its sight.

The event loop is uvloop's (libuv): the raw BEEP echo of bench/relay_throughput.py measured
53k exchanges/s on the default selector loop and 59-64k on uvloop.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

import uvloop
from redis.exceptions import RedisError

from apexmesh.ops import gc_tuning
from apexmesh.ops.logs import setup_logging
from apexmesh.ops.settings import SettingsError, log_level

#: Seconds after which a stop that has not finished gets its tasks' stacks logged.
STALL_REPORT_SECONDS = 5.0

_S = TypeVar("_S")
_A = TypeVar("_A", bound="ServiceApp")


class ServiceApp(Protocol):
    """What a service's composition root offers the runner."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


def run_service(
    name: str,
    load_settings: Callable[[], _S],
    build: Callable[[_S], _A],
    announce: Callable[[_A], Mapping[str, object]],
    *,
    fatal: tuple[type[Exception], ...] = (),
) -> int:
    """Run one service process until SIGTERM or SIGINT; return its exit code."""
    log = logging.getLogger(f"services.{name}")
    try:
        setup_logging(name, log_level(os.environ))
        settings = load_settings()
        collector = gc_tuning.thresholds(name, os.environ)
    except SettingsError as exc:
        setup_logging(name)
        log.error("bad settings: %s", exc)  # noqa: TRY400  (expected: no traceback)
        return 2
    gc.set_threshold(*collector)
    gc_tuning.GC_PAUSES.install()
    return uvloop.run(_run(name, settings, build, announce, fatal, log))


async def _run(
    name: str,
    settings: _S,
    build: Callable[[_S], _A],
    announce: Callable[[_A], Mapping[str, object]],
    fatal: tuple[type[Exception], ...],
    log: logging.Logger,
) -> int:
    # Built inside the running loop: grpc.aio channels and Redis clients bind to it.
    app = build(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await app.start()
        except fatal as exc:
            log.error("cannot start: %s", exc)  # noqa: TRY400  (expected: no traceback)
            return 2
        except (OSError, RedisError) as exc:
            log.error("cannot start: %s", exc)  # noqa: TRY400  (expected: no traceback)
            return 1
        # What the start made lives as long as the process (modules, the app, its
        # clients): out of the collector's sight, a full collection no longer walks it
        # all again (about a tenth of a relay's CPU under load went to the collector).
        gc.freeze()
        line = {"event": "listening", "service": name, **announce(app)}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        await stop.wait()
        log.info("stopping")
        return 0
    finally:
        await _stop(app, log)


async def _stop(app: ServiceApp, log: logging.Logger) -> None:
    """Stop the app; if that stalls, log every task's stack so the stall can be found."""
    stopping = asyncio.ensure_future(app.stop())
    done, _ = await asyncio.wait({stopping}, timeout=STALL_REPORT_SECONDS)
    if not done:
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                log.error(
                    "stop stalled; task %s:\n%s",
                    task.get_name(),
                    "".join(traceback.format_stack(task.get_stack()[-1]))
                    if task.get_stack()
                    else "(no frames)",
                )
    await stopping
