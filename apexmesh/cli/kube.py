"""The Kubernetes side of apexctl: find a release's pods, read its admin token, and reach
each pod's ports through the API server's port-forward (as ``kubectl port-forward``).

What the chart gives its pods (charts/apex-mesh, issue #20) and this module relies on:

* labels ``app.kubernetes.io/part-of: apex-mesh``, ``app.kubernetes.io/instance:
  RELEASE`` and ``app.kubernetes.io/component: relay|access|pubsub|report|presence``;
* the domains a pod serves in its container's ``APEXMESH_*DOMAINS`` variable (or the
  annotation ``apex-mesh.io/domains: example.com[,other]``);
* container ports named ``http`` (probes, metrics, admin API) and, on relays,
  ``beep-edge`` (apex-edge BEEP);
* a Secret ``FULLNAME-admin`` (the chart's fullname: ``RELEASE-apex-mesh``, or the
  release when it contains ``apex-mesh``) with the keys ``admin-token`` and
  ``read-token`` (charts/apex-mesh/templates/admin-secret.yaml).

RBAC the operator needs (the chart's ``apexctl`` Role): ``get, list`` on ``pods``,
``create`` on ``pods/portforward``, ``get`` on the Secret, and ``create`` on ``jobs``
plus ``get`` on ``cronjobs`` for ``snapshot trigger``.

Each forwarded port is a loopback listener of this process; every connection to it opens
its own port-forward stream to the pod (threads pump the bytes, since the kubernetes
client is synchronous). ``reach: direct`` in a context connects to pod IPs instead (for
apexctl run inside the cluster), which is also how the tests drive it against an
emulated API server.
"""

from __future__ import annotations

import base64
import contextlib
import select
import socketserver
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Final

from apexmesh.ops.targets import SERVICES, Context, ContextError, Target

PART_OF: Final = "app.kubernetes.io/part-of=apex-mesh"
COMPONENT: Final = "app.kubernetes.io/component"
DOMAINS_ANNOTATION: Final = "apex-mesh.io/domains"
#: The chart's name of the relay's apex-edge container port.
EDGE_PORT: Final = "beep-edge"


def _api(context: Context) -> Any:
    """A CoreV1Api for the context's kubeconfig context."""
    from kubernetes import client, config

    try:
        api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
            context=context.kube_context or None
        )
    except Exception as exc:  # noqa: BLE001  (kubeconfig errors come in many types)
        raise ContextError(f"kubeconfig: {exc}") from None
    return client.CoreV1Api(api_client), client.BatchV1Api(api_client)


def core_api(context: Context) -> Any:
    """The CoreV1Api of the context's cluster (Secrets, for ``apexctl credentials``)."""
    return _api(context)[0]


def _port(pod: Any, name: str) -> int | None:
    for container in pod.spec.containers or ():
        for port in container.ports or ():
            if port.name == name:
                return int(port.container_port)
    return None


def _domains(pod: Any) -> str:
    """The domains a pod serves: its annotation, else its ``APEXMESH_*DOMAINS`` value."""
    annotated = (pod.metadata.annotations or {}).get(DOMAINS_ANNOTATION, "")
    if annotated:
        return str(annotated)
    for container in pod.spec.containers or ():
        for variable in container.env or ():
            if variable.name.startswith("APEXMESH_") and variable.name.endswith("DOMAINS"):
                return str(variable.value or "")
    return ""


def problem(pod: Any) -> str:
    """What keeps a pod from serving, as ``kubectl get pods`` would say it: its phase
    when not Running, each waiting or failed container's reason (ErrImagePull,
    ImagePullBackOff, CrashLoopBackOff with its restarts and last exit code,
    CreateContainerConfigError ...) and message, an unschedulable pod's condition;
    "" for a Running pod whose containers all run."""
    status = pod.status
    if status is None:
        return "Unknown: no status"
    phase = status.phase or "Unknown"
    found: list[str] = []
    containers = [*(status.init_container_statuses or ()), *(status.container_statuses or ())]
    for container in containers:
        state = container.state
        if state is None:
            continue
        restarts = int(container.restart_count or 0)
        if state.waiting is not None and state.waiting.reason:
            text = f"{container.name}: {state.waiting.reason}"
            if restarts:
                text += f" (restarts {restarts}"
                last = container.last_state
                if last is not None and last.terminated is not None:
                    text += f", last exit code {last.terminated.exit_code}"
                text += ")"
            if state.waiting.message:
                text += f" - {state.waiting.message}"
            found.append(text)
        elif state.terminated is not None and phase != "Succeeded":
            reason = state.terminated.reason or "Terminated"
            found.append(f"{container.name}: {reason} (exit code {state.terminated.exit_code})")
    if phase == "Running" and not found:
        return ""
    if not found:
        found.extend(
            f"{condition.reason or 'Unschedulable'} - {condition.message or ''}"
            for condition in status.conditions or ()
            if condition.type == "PodScheduled" and condition.status == "False"
        )
        if status.reason:
            found.append(f"{status.reason} - {status.message or ''}".rstrip(" -"))
    return f"{phase}: {'; '.join(found) or 'not running'}"


def _selected(labels: dict[str, str], release: str) -> bool:
    """The selector checked here too: an API server (or a proxy, or an emulator) that
    ignores ``labelSelector`` must not mix another release's pods in."""
    part_of, _, mesh = PART_OF.partition("=")
    if labels.get(part_of) != mesh:
        return False
    return not release or labels.get("app.kubernetes.io/instance") == release


def fullname(release: str) -> str:
    """The chart's resource name prefix for a release (its ``apex-mesh.fullname``)."""
    if not release:
        return "apex-mesh"
    return release if "apex-mesh" in release else f"{release}-apex-mesh"


def _secret_tokens(core: Any, context: Context) -> tuple[str, str]:
    name = f"{fullname(context.release)}-admin"
    try:
        secret = core.read_namespaced_secret(name, context.namespace)
    except Exception as exc:  # noqa: BLE001  (ApiException or transport errors)
        raise ContextError(f"cannot read Secret {context.namespace}/{name}: {exc}") from None
    data = secret.data or {}

    def decoded(key: str) -> str:
        value = data.get(key)
        return "" if value is None else base64.b64decode(value).decode().strip()

    return decoded("admin-token"), decoded("read-token")


class _Pump(socketserver.BaseRequestHandler):
    """One local connection: a fresh port-forward stream, bytes both ways."""

    server: _Forwarder

    def handle(self) -> None:
        remote = self.server.open_remote()
        local = self.request
        try:
            sockets = [local, remote]
            while True:
                readable, _, _ = select.select(sockets, [], [], 60)
                if not readable:
                    continue
                for source in readable:
                    chunk = source.recv(65536)
                    if not chunk:
                        return
                    (remote if source is local else local).sendall(chunk)
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                remote.close()


class _Forwarder(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, open_remote: Callable[[], Any]) -> None:
        self.open_remote = open_remote
        super().__init__(("127.0.0.1", 0), _Pump)


class Reach:
    """Loopback listeners forwarding to pods; stopped on :meth:`close`."""

    def __init__(self, core: Any, namespace: str) -> None:
        self._core = core
        self._namespace = namespace
        self._servers: list[_Forwarder] = []

    def forward(self, pod: str, port: int) -> int:
        """A loopback port whose connections reach ``pod:port``."""
        from kubernetes.stream import portforward

        def open_remote() -> Any:
            stream = portforward(
                self._core.connect_get_namespaced_pod_portforward,
                pod,
                self._namespace,
                ports=str(port),
            )
            return stream.socket(port)

        server = _Forwarder(open_remote)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._servers.append(server)
        return int(server.server_address[1])

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()


@contextlib.contextmanager
def reached(context: Context) -> Iterator[Context]:
    """``context`` with its services filled in from the cluster, reachable from here,
    for the time of the ``with`` block. A local context is returned as it is."""
    if context.kind != "kubernetes":
        yield context
        return
    if not context.namespace:
        raise ContextError(f"context {context.name!r} names no namespace")
    core, _batch = _api(context)
    selector = PART_OF
    if context.release:
        selector += f",app.kubernetes.io/instance={context.release}"
    try:
        pods = core.list_namespaced_pod(context.namespace, label_selector=selector).items
    except Exception as exc:  # noqa: BLE001
        raise ContextError(f"cannot list pods in {context.namespace}: {exc}") from None
    admin, read = context.admin_token, context.read_token
    if not admin and not read:
        admin, read = _secret_tokens(core, context)
    reach = Reach(core, context.namespace)
    direct = context.reach == "direct"
    targets: list[Target] = []
    unavailable: list[Target] = []
    try:
        for pod in sorted(pods, key=lambda p: p.metadata.name):
            labels = pod.metadata.labels or {}
            service = labels.get(COMPONENT, "")
            status = pod.status
            if service not in SERVICES or not _selected(labels, context.release):
                continue
            http, edge = _port(pod, "http"), _port(pod, EDGE_PORT)
            domains = _domains(pod)
            name = pod.metadata.name
            trouble = problem(pod)
            if status is None or status.phase != "Running" or not status.pod_ip or http is None:
                unavailable.append(
                    Target(
                        name=name,
                        service=service,
                        domain=domains.split(",")[0].strip(),
                        admin_url="",
                        problem=trouble or "no http port",
                    )
                )
                continue

            def address(port: int, pod_name: str = name, ip: str = status.pod_ip) -> str:
                if direct:
                    return f"{ip}:{port}"
                return f"127.0.0.1:{reach.forward(pod_name, port)}"

            targets.append(
                Target(
                    name=name,
                    service=service,
                    domain=domains.split(",")[0].strip(),
                    admin_url=f"http://{address(http)}",
                    edge="" if edge is None else address(edge),
                    problem=trouble,
                )
            )
        yield replace(
            context,
            services=tuple(targets),
            unavailable=tuple(unavailable),
            admin_token=admin,
            read_token=read,
        )
    finally:
        reach.close()


def trigger_snapshot(context: Context, job_name: str) -> str:
    """Create a Job from the release's snapshot CronJob (``kubectl create job --from``)."""
    from kubernetes import client

    _core, batch = _api(context)
    cronjob = f"{fullname(context.release)}-snapshot"
    try:
        source = batch.read_namespaced_cron_job(cronjob, context.namespace)
    except Exception as exc:  # noqa: BLE001
        raise ContextError(f"cannot read CronJob {context.namespace}/{cronjob}: {exc}") from None
    job = client.V1Job(
        metadata=client.V1ObjectMeta(
            name=job_name,
            namespace=context.namespace,
            annotations={"cronjob.kubernetes.io/instantiate": "manual"},
            labels=dict(source.spec.job_template.metadata.labels or {})
            if source.spec.job_template.metadata
            else {},
        ),
        spec=source.spec.job_template.spec,
    )
    batch.create_namespaced_job(context.namespace, job)
    return f"{context.namespace}/{job_name}"


__all__ = ["Reach", "core_api", "problem", "reached", "trigger_snapshot"]
