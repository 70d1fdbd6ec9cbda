"""``python -m services.relay``: run the relay until SIGTERM or SIGINT.

On start it prints one JSON line on stdout, ``{"event": "listening", ...}``, with the
ports actually bound (port 0 settings pick free ports), which is how tests and scripts
find a service they started. Exit codes: 0 after a graceful stop, 2 for bad settings,
1 when a dependency (Redis, a port) is unavailable at start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys

from redis.exceptions import RedisError

from apexmesh.ops.settings import SettingsError
from services.relay.app import RelayApp
from services.relay.settings import RelaySettings

_log = logging.getLogger("services.relay")


async def run(settings: RelaySettings) -> int:
    app = RelayApp(settings)
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
        except RedisError as exc:
            _log.error("cannot reach redis: %s", exc)
            return 1
        line = {
            "event": "listening",
            "service": "relay",
            "pod_id": settings.pod_id,
            "edge_port": app.edge_port,
            "mesh_port": app.mesh_port,
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
        settings = RelaySettings.from_env()
    except SettingsError as exc:
        _log.error("bad settings: %s", exc)
        return 2
    return asyncio.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
