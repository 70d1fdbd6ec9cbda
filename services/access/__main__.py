"""``python -m services.access``: run the access service until SIGTERM or SIGINT.

Prints ``{"event": "listening", "service": "access", "grpc_port", "http_port"}``; exit
codes as for every service (``apexmesh/ops/runner.py``), and 2 for a bad seed file.
"""

from __future__ import annotations

import sys

from apexmesh.apex.access import AccessError
from apexmesh.ops.runner import run_service
from services.access.app import AccessApp
from services.access.settings import AccessSettings


def _announce(app: AccessApp) -> dict[str, object]:
    return {"grpc_port": app.grpc_port, "http_port": app.http_port}


def main() -> int:
    return run_service(
        "access",
        AccessSettings.from_env,
        AccessApp,
        _announce,
        fatal=(AccessError,),
    )


if __name__ == "__main__":
    sys.exit(main())
