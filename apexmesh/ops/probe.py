"""``python -m apexmesh.ops.probe SERVICE [PATH]``: ask a service's admin HTTP app.

The container images' ``HEALTHCHECK`` and docker-compose's healthchecks run this inside
the container: it finds the admin address the way the service does (the service's
``APEXMESH_<NAME>_HTTP_HOST`` / ``_HTTP_PORT``, same defaults), asks ``PATH``
(``/readyz`` unless told otherwise; ``/healthz`` for liveness) and exits 0 on 200, 1
otherwise, printing the answer. Kubernetes probes the same paths with ``httpGet``.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Final

from apexmesh.ops.settings import WILDCARD_HOSTS

#: Each service's admin HTTP port when its ``_HTTP_PORT`` variable is not set.
DEFAULT_HTTP_PORTS: Final = {
    "relay": 8401,
    "access": 8411,
    "report": 8412,
    "presence": 8413,
    "pubsub": 8414,
    "dashboard": 8420,
}

#: Seconds the probe waits for an answer (the image's HEALTHCHECK timeout is longer).
TIMEOUT_SECONDS: Final = 2.0


def probe_url(service: str, path: str, env: Mapping[str, str]) -> str:
    """The URL of ``path`` on ``service``'s admin app, from the service's own settings."""
    if service not in DEFAULT_HTTP_PORTS:
        raise ValueError(f"unknown service {service!r}; one of {sorted(DEFAULT_HTTP_PORTS)}")
    prefix = f"APEXMESH_{service.upper()}_HTTP"
    host = env.get(f"{prefix}_HOST", "127.0.0.1").strip()
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    port = env.get(f"{prefix}_PORT") or str(DEFAULT_HTTP_PORTS[service])
    return f"http://{host}:{port}/{path.lstrip('/')}"


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    import os

    args = list(sys.argv[1:] if argv is None else argv)
    if not 1 <= len(args) <= 2:
        sys.stderr.write("usage: python -m apexmesh.ops.probe SERVICE [/readyz|/healthz]\n")
        return 2
    try:
        url = probe_url(args[0], args[1] if len(args) == 2 else "/readyz", env or os.environ)
    except ValueError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as answer:  # noqa: S310
            sys.stdout.write(answer.read().decode(errors="replace") + "\n")
            return 0
    except urllib.error.HTTPError as exc:
        sys.stdout.write(f"{exc.code} {exc.read().decode(errors='replace')}\n")
    except OSError as exc:
        sys.stdout.write(f"{url}: {exc}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
