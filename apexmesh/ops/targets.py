"""Where a mesh's services are and how to reach their admin APIs: the context file.

``scripts/run`` writes one into its workdir (``apexctl.yaml``); ``apexctl`` reads it
(``APEXCTL_CONTEXT=/path/apexctl.yaml``, or a named context that points at it) and so
does the dashboard of the local mesh. It holds secrets (the admin token, the Redis
password, the path of the endpoints' SASL passwords) and is written with mode 0600::

    apiVersion: apexctl/v1
    kind: local
    name: local
    ca_file: /tmp/apex-mesh-x/ca.pem
    redis_url: redis://:PASSWORD@127.0.0.1:40001/0
    admin_token: ...
    read_token: ...
    credentials_file: /tmp/apex-mesh-x/sasl-credentials
    dashboard_url: http://127.0.0.1:40100/
    services:
      - {name: relay-example.com-1, service: relay, domain: example.com,
         admin_url: "http://127.0.0.1:40002", edge: "127.0.0.1:40003"}

A Kubernetes context names a kubeconfig context and a namespace instead of services;
``apexctl`` finds the pods there (apexmesh/cli/kube.py) and builds the same
:class:`Target` list, so every command works the same way on both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

API_VERSION: Final = "apexctl/v1"
#: The services of a mesh, in the order commands list them.
SERVICES: Final = ("relay", "access", "pubsub", "report", "presence")


class ContextError(ValueError):
    """A context file is missing, unreadable or malformed."""


@dataclass(frozen=True, slots=True)
class Target:
    """One service process (pod) and its admin API."""

    name: str
    service: str
    domain: str
    admin_url: str
    #: ``host:port`` of a relay's apex-edge BEEP listener ("" for other services).
    edge: str = ""
    #: Why Kubernetes says the pod cannot serve ("Pending: ImagePullBackOff ...",
    #: "CrashLoopBackOff ..."); "" when it has nothing to say (apexmesh/cli/kube.py).
    problem: str = ""


@dataclass(frozen=True, slots=True)
class Context:
    """A mesh to operate (see the module docstring)."""

    name: str
    kind: str = "local"
    services: tuple[Target, ...] = ()
    admin_token: str = ""
    read_token: str = ""
    ca_file: str = ""
    redis_url: str = ""
    credentials_file: str = ""
    dashboard_url: str = ""
    #: Kubernetes contexts: the kubeconfig context ("" = current) and namespace.
    kube_context: str = ""
    namespace: str = ""
    #: Kubernetes contexts: the Helm release whose pods are the mesh ("" = any).
    release: str = ""
    #: Kubernetes contexts: ``portforward`` (through the API server, the default) or
    #: ``direct`` (pod IPs, for apexctl run inside the cluster).
    reach: str = ""
    #: Kubernetes contexts: pods of the mesh that are not running (Pending, Failed ...),
    #: with their :attr:`Target.problem`; no admin API to reach (``apexctl status``).
    unavailable: tuple[Target, ...] = ()
    #: Where the context was read from ("" when built in memory).
    source: str = field(default="", compare=False)

    def token(self, *, write: bool) -> str:
        """The token for a call: the admin token for changes; for reads the read token
        when there is one."""
        if write or not self.read_token:
            return self.admin_token
        return self.read_token

    def of(self, service: str, domain: str | None = None) -> list[Target]:
        """The targets of one service (of one domain when given)."""
        return [
            t
            for t in self.services
            if t.service == service and (domain is None or t.domain == domain)
        ]

    def passwords(self) -> dict[str, str]:
        """Endpoint SASL passwords of the local mesh (``identity:password`` lines)."""
        if not self.credentials_file:
            return {}
        out: dict[str, str] = {}
        try:
            text = Path(self.credentials_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ContextError(f"credentials file: {exc}") from None
        for line in text.splitlines():
            who, sep, password = line.partition(":")
            if sep and "@" in who:
                out[who.strip()] = password
        return out

    def to_mapping(self) -> dict[str, Any]:
        body = asdict(self)
        body.pop("source")
        body.pop("unavailable")
        body["services"] = [asdict(t) for t in self.services]
        return {"apiVersion": API_VERSION, **{k: v for k, v in body.items() if v not in ("", ())}}


def context_from(mapping: Mapping[str, Any], source: str = "") -> Context:
    """Build a :class:`Context` from parsed YAML; :class:`ContextError` if malformed."""
    if mapping.get("apiVersion", API_VERSION) != API_VERSION:
        raise ContextError(f"{source}: apiVersion is not {API_VERSION}")
    try:
        services = tuple(
            Target(
                name=str(item["name"]),
                service=str(item["service"]),
                domain=str(item.get("domain", "")),
                admin_url=str(item["admin_url"]).rstrip("/"),
                edge=str(item.get("edge", "")),
            )
            for item in mapping.get("services") or ()
        )
        kind = str(mapping.get("kind", "local"))
        if kind not in ("local", "kubernetes"):
            raise ContextError(f"{source}: kind must be local or kubernetes")
        return Context(
            name=str(mapping.get("name", "")),
            kind=kind,
            services=services,
            admin_token=str(mapping.get("admin_token", "")),
            read_token=str(mapping.get("read_token", "")),
            ca_file=str(mapping.get("ca_file", "")),
            redis_url=str(mapping.get("redis_url", "")),
            credentials_file=str(mapping.get("credentials_file", "")),
            dashboard_url=str(mapping.get("dashboard_url", "")),
            kube_context=str(mapping.get("kube_context", "")),
            namespace=str(mapping.get("namespace", "")),
            release=str(mapping.get("release", "")),
            reach=str(mapping.get("reach", "")),
            source=source,
        )
    except (KeyError, TypeError) as exc:
        raise ContextError(f"{source}: malformed service entry ({exc})") from None


def read_context(path: Path) -> Context:
    """Read a context file."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ContextError(f"cannot read context {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ContextError(f"{path} is not a context file")
    return context_from(loaded, str(path))


def write_context(path: Path, context: Context) -> None:
    """Write ``context`` to ``path``, readable by its owner only (it holds secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("# apex-mesh context for apexctl (holds secrets: keep it private)\n")
        yaml.safe_dump(context.to_mapping(), out, sort_keys=False)


def targets_by_service(targets: Sequence[Target]) -> dict[str, list[Target]]:
    """Targets grouped by service, in :data:`SERVICES` order."""
    grouped: dict[str, list[Target]] = {name: [] for name in SERVICES}
    for target in targets:
        grouped.setdefault(target.service, []).append(target)
    return {name: items for name, items in grouped.items() if items}


__all__ = [
    "API_VERSION",
    "SERVICES",
    "Context",
    "ContextError",
    "Target",
    "context_from",
    "read_context",
    "targets_by_service",
    "write_context",
]
