"""``python -m services.presence``: run the presence service until SIGTERM or SIGINT.

Prints ``{"event": "listening", "service": "presence", "grpc_port", "http_port"}``; exit
codes as for every service (``apexmesh/ops/runner.py``).
"""

from __future__ import annotations

import logging
import sys

from apexmesh.ops.runner import run_service
from services.presence.app import PresenceApp
from services.presence.settings import PresenceSettings


def _announce(app: PresenceApp) -> dict[str, object]:
    if not app.settings.relay_addresses:
        logging.getLogger("services.presence").warning(
            "no relay address configured: not ready, no reply can be sent"
        )
    return {"grpc_port": app.grpc_port, "http_port": app.http_port}


def main() -> int:
    return run_service("presence", PresenceSettings.from_env, PresenceApp, _announce)


if __name__ == "__main__":
    sys.exit(main())
