"""``python -m services.dashboard``: the web dashboard until SIGTERM or SIGINT.

Prints ``{"event": "listening", "service": "dashboard", "http_port"}``; exit codes as
for every service (``apexmesh/ops/runner.py``).
"""

from __future__ import annotations

import sys

from apexmesh.ops.runner import run_service
from services.dashboard.app import DashboardApp
from services.dashboard.settings import DashboardSettings


def main() -> int:
    return run_service(
        "dashboard",
        DashboardSettings.from_env,
        DashboardApp,
        lambda app: {"http_port": app.http_port},
    )


if __name__ == "__main__":
    sys.exit(main())
