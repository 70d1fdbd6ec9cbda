"""``python -m services.report``: run the report service until SIGTERM or SIGINT.

Prints ``{"event": "listening", "service": "report", "grpc_port", "http_port"}``; exit
codes as for every service (``apexmesh/ops/runner.py``). Relays are not contacted at
start: the service is stateless and reaches them per report, with failover.
"""

from __future__ import annotations

import logging
import sys

from apexmesh.ops.runner import run_service
from services.report.app import ReportApp
from services.report.settings import ReportSettings


def _announce(app: ReportApp) -> dict[str, object]:
    if not app.settings.relay_addresses:
        logging.getLogger("services.report").warning(
            "no relay address configured: not ready, every Report gets 421"
        )
    return {"grpc_port": app.grpc_port, "http_port": app.http_port}


def main() -> int:
    return run_service("report", ReportSettings.from_env, ReportApp, _announce)


if __name__ == "__main__":
    sys.exit(main())
