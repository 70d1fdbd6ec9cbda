"""``python -m services.pubsub``: run the pubsub service until SIGTERM or SIGINT.

Prints ``{"event": "listening", "service": "pubsub", "grpc_port", "http_port"}``; exit
codes as for every service (``apexmesh/ops/runner.py``).
"""

from __future__ import annotations

import logging
import sys

from apexmesh.ops.runner import run_service
from services.pubsub.app import PubsubApp
from services.pubsub.settings import PubsubSettings


def _announce(app: PubsubApp) -> dict[str, object]:
    if not app.settings.relay_addresses:
        logging.getLogger("services.pubsub").warning(
            "no relay address configured: not ready, nothing can be sent"
        )
    return {"grpc_port": app.grpc_port, "http_port": app.http_port, "pod_id": app.settings.pod_id}


def main() -> int:
    return run_service("pubsub", PubsubSettings.from_env, PubsubApp, _announce)


if __name__ == "__main__":
    sys.exit(main())
