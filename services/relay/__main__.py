"""``python -m services.relay``: run one relay pod until SIGTERM or SIGINT.

Prints ``{"event": "listening", "service": "relay", "pod_id", "edge_port", "mesh_port",
"grpc_port", "http_port"}``; SIGHUP reloads changed TLS and SASL files
(services/relay/reloading.py); exit codes as for every service (``apexmesh/ops/runner.py``).
"""

from __future__ import annotations

import asyncio
import signal
import sys

from apexmesh.ops.runner import run_service
from services.relay.app import RelayApp
from services.relay.settings import RelaySettings


def _announce(app: RelayApp) -> dict[str, object]:
    return {
        "pod_id": app.settings.pod_id,
        "edge_port": app.edge_port,
        "mesh_port": app.mesh_port,
        "grpc_port": app.grpc_port,
        "http_port": app.http_port,
    }


def _build(settings: RelaySettings) -> RelayApp:
    """The app, with SIGHUP asking it to reload its TLS and SASL files now
    (services/relay/reloading.py); built in the running loop by the runner."""
    app = RelayApp(settings)
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, app.reloader.trigger)
    return app


def main() -> int:
    return run_service("relay", RelaySettings.from_env, _build, _announce)


if __name__ == "__main__":
    sys.exit(main())
