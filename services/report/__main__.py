"""``python -m services.report``: run the report service until SIGTERM or SIGINT.

On start it prints one JSON line on stdout, ``{"event": "listening", ...}``, with the
ports actually bound (port 0 settings pick free ports), which is how tests and scripts
find a service they started. Exit codes: 0 after a graceful stop, 2 for bad settings,
1 when a port cannot be bound. Relays are not contacted at start: the service is
stateless and reaches them per report, with failover.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys

from apexmesh.ops.settings import SettingsError
from services.report.app import ReportApp
from services.report.settings import ReportSettings

_log = logging.getLogger("services.report")


async def run(settings: ReportSettings) -> int:
    app = ReportApp(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await app.start()
        except OSError as exc:
            _log.error("cannot start: %s", exc)
            return 1
        if not settings.relay_addresses:
            _log.warning("no relay address configured: not ready, every Report gets 421")
        line = {
            "event": "listening",
            "service": "report",
            "grpc_port": app.grpc_port,
            "http_port": app.http_port,
        }
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        await stop.wait()
        _log.info("stopping")
        return 0
    finally:
        await app.stop()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = ReportSettings.from_env()
    except SettingsError as exc:
        _log.error("bad settings: %s", exc)
        return 2
    return asyncio.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
