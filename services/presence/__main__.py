"""``python -m services.presence``: run the presence service until SIGTERM or SIGINT.

On start it prints one JSON line on stdout, ``{"event": "listening", ...}``, with the
ports actually bound (port 0 settings pick free ports), which is how tests and scripts
find a service they started. Exit codes: 0 after a graceful stop, 2 for bad settings,
1 when a port cannot be bound or Redis cannot be reached at start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys

from redis.exceptions import RedisError

from apexmesh.ops.settings import SettingsError
from services.presence.app import PresenceApp
from services.presence.settings import PresenceSettings

_log = logging.getLogger("services.presence")


async def run(settings: PresenceSettings) -> int:
    app = PresenceApp(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await app.start()
        except (OSError, RedisError) as exc:
            _log.error("cannot start: %s", exc)
            return 1
        if not settings.relay_addresses:
            _log.warning("no relay address configured: not ready, no reply can be sent")
        line = {
            "event": "listening",
            "service": "presence",
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
        settings = PresenceSettings.from_env()
    except SettingsError as exc:
        _log.error("bad settings: %s", exc)
        return 2
    return asyncio.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
