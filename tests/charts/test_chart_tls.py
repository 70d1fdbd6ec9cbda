"""The relay's TLS material in the chart (issue #31).

- ``relay.tls.mode=certManager`` with a public ACME issuer (ci/full-values.yaml): the
  Certificate names only what values say (dnsNames, the domains, the in-cluster names
  when ``inClusterNames``), and neither the relays nor the helm test need a ``ca.crt`` the
  Secret does not have (``relay.tls.trust``: system roots, a separate CA Secret, or the
  TLS Secret's).
- The auto-generated certificate is renewed before it expires: ``helm install`` and
  ``helm upgrade`` look up the Secret (``lookup``) and make a new certificate, signed by
  the kept CA, within ``renewBeforeDays`` of its expiry or when its names changed. That
  is tested with the real helm 3 and helm 4 (``helm template --dry-run=server``) against
  an emulated API server holding the Secrets (kube_api.py).
- The relay exports the expiry of the certificate it serves
  (``apexmesh_relay_tls_certificate_expiry_timestamp_seconds``, read from a running
  relay's /metrics), which the PrometheusRule alerts on.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import helm_python as helm
import httpx
import pytest
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from apexmesh.store.keys import Keys
from tests.charts.conftest import (
    CHART,
    CI_VALUES,
    ROOT,
    Doc,
    named,
    of_kind,
    pod_spec,
    render,
    values_of,
)
from tests.charts.kube_api import against_both_helms, kubeconfig
from tests.support.redis_server import RedisServer
from tests.support.secure import secure_relay
from tools import helm as tool
from tools.helm import notes

pytestmark = pytest.mark.chart

Render = Callable[[dict[str, Any] | None], list[Doc]]

FULL: Final = next(path for path in CI_VALUES if path.stem == "full-values")
RELAY: Final = "apex-mesh-relay"
TLS_SECRET: Final = "apex-mesh-relay-tls"
CA_SECRET: Final = "apex-mesh-relay-ca"
NAMESPACE: Final = tool.NAMESPACE
DAY: Final = 86400
SYSTEM_ROOTS: Final = "/etc/ssl/certs/ca-certificates.crt"
IN_CLUSTER: Final = (
    RELAY,
    f"{RELAY}.apex-mesh",
    f"{RELAY}.apex-mesh.svc",
    f"{RELAY}.apex-mesh.svc.cluster.local",
)


def relay_pod(docs: list[Doc]) -> Doc:
    return pod_spec(named(docs, "Deployment", RELAY))


def smoke_pod(docs: list[Doc]) -> Doc:
    (pod,) = of_kind(docs, "Pod")
    return pod["spec"]  # type: ignore[no-any-return]


def secret_keys_read(pod: Doc, secret: str) -> set[str]:
    """The keys of ``secret`` a pod's volumes need (None: the whole Secret, any keys)."""
    keys: set[str] = set()
    for volume in pod.get("volumes", []):
        source = volume.get("secret")
        if source and source["secretName"] == secret:
            keys |= {item["key"] for item in source.get("items", [])}
    return keys


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def certificate_of(secret: Doc) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))


def names_of(certificate: x509.Certificate) -> list[str]:
    alternative = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return list(alternative.value.get_values_for_type(x509.DNSName))


# --------------------------------------------------------------------------- names


@pytest.mark.unit
def test_the_acme_certificate_of_full_values_names_no_in_cluster_name() -> None:
    values = values_of(FULL)
    assert values["relay"]["tls"]["mode"] == "certManager"
    assert values["relay"]["tls"]["certManager"]["issuerRef"]["name"] == "letsencrypt"
    certificate = named(render(values), "Certificate", RELAY)["spec"]
    names = certificate["dnsNames"]
    assert names[: len(values["relay"]["tls"]["dnsNames"])] == values["relay"]["tls"]["dnsNames"]
    assert set(values["domains"]) <= set(names)
    for name in names:
        assert "." in name, f"{name}: not a public name"
        assert not name.endswith((".svc", ".local", ".apex-mesh")), name
    assert not set(IN_CLUSTER) & set(names)
    assert certificate["commonName"] == names[0]


@pytest.mark.unit
def test_in_cluster_names_are_kept_by_default_and_optional(rendered: Render) -> None:
    issuer = {"mode": "certManager", "certManager": {"issuerRef": {"name": "in-cluster-ca"}}}
    names = named(rendered({"relay": {"tls": issuer}}), "Certificate", RELAY)["spec"]["dnsNames"]
    assert names == ["example.com", *IN_CLUSTER]
    names = named(
        rendered(
            {
                "relay": {
                    "tls": {**issuer, "dnsNames": ["relay.example.com"], "inClusterNames": False}
                }
            }
        ),
        "Certificate",
        RELAY,
    )["spec"]["dnsNames"]
    assert names == ["relay.example.com", "example.com"]
    only = {**issuer, "dnsNames": ["edge.example.net"], "inClusterNames": False}
    only["includeDomains"] = False
    spec = named(rendered({"relay": {"tls": only}}), "Certificate", RELAY)["spec"]
    assert spec["dnsNames"] == ["edge.example.net"]
    generated = {"tls": {"dnsNames": ["relay.example.com"], "inClusterNames": False}}
    secret = named(rendered({"relay": generated}), "Secret", TLS_SECRET)
    assert names_of(certificate_of(secret)) == ["relay.example.com", "example.com"]


@pytest.mark.unit
def test_a_certificate_without_any_name_is_refused() -> None:
    tls = {"dnsNames": [], "includeDomains": False, "inClusterNames": False}
    with pytest.raises(helm.HelmError, match="would have no name"):
        render({"relay": {"tls": tls}})


# --------------------------------------------------------------------------- trust


@pytest.mark.unit
def test_with_full_values_no_pod_needs_a_ca_key_the_acme_secret_lacks() -> None:
    docs = render(values_of(FULL))
    relay, smoke = relay_pod(docs), smoke_pod(docs)
    for pod in (relay, smoke):
        assert "ca.crt" not in secret_keys_read(pod, TLS_SECRET)
    env = {e["name"]: e.get("value") for e in relay["containers"][0]["env"]}
    assert env["APEXMESH_RELAY_TLS_CA"] == SYSTEM_ROOTS
    command = smoke["containers"][0]["command"]
    assert option(command, "--ca") == SYSTEM_ROOTS
    # the helm test checks a name the certificate carries
    names = named(docs, "Certificate", RELAY)["spec"]["dnsNames"]
    assert option(command, "--server-name") in names


@pytest.mark.unit
def test_notes_tell_endpoints_what_to_trust() -> None:
    acme = notes(CHART, values_of(FULL))
    assert "base64 -d > ca.pem" not in acme
    assert f"--ca {SYSTEM_ROOTS} --server-name relay.example.com" in acme
    generated = notes(CHART)
    assert "get secret apex-mesh-relay-tls -o jsonpath='{.data.ca\\.crt}'" in generated
    assert "--ca ca.pem --server-name apex-mesh-relay" in generated
    assert "renews the certificate on helm upgrade within 90 days" in generated


@pytest.mark.unit
def test_the_system_roots_are_the_images() -> None:
    dockerfile = (ROOT / "docker" / "base.Dockerfile").read_text(encoding="utf-8")
    assert "ca-certificates" in dockerfile  # Debian's package writes SYSTEM_ROOTS
    assert values_of(CHART / "values.yaml")["relay"]["tls"]["systemCABundle"] == SYSTEM_ROOTS


@pytest.mark.unit
@pytest.mark.parametrize(
    ("tls", "ca_file", "secret"),
    [
        ({}, "/etc/apex-mesh/peer-ca/ca.crt", TLS_SECRET),
        ({"trust": "system"}, SYSTEM_ROOTS, None),
        ({"peerCASecret": "peers"}, "/etc/apex-mesh/peer-ca/ca.crt", "peers"),
        (
            {"trust": "peerCASecret", "peerCASecret": "peers"},
            "/etc/apex-mesh/peer-ca/ca.crt",
            "peers",
        ),
        ({"mode": "secret", "existingSecret": "mine"}, SYSTEM_ROOTS, None),
        (
            {"mode": "secret", "existingSecret": "mine", "trust": "tlsSecret"},
            "/etc/apex-mesh/peer-ca/ca.crt",
            "mine",
        ),
        (
            {"mode": "certManager", "certManager": {"issuerRef": {"name": "ca"}}},
            "/etc/apex-mesh/peer-ca/ca.crt",
            TLS_SECRET,
        ),
    ],
    ids=[
        "generated",
        "generated-system",
        "peer-secret",
        "peer-secret-explicit",
        "own-secret",
        "own-secret-its-ca",
        "ca-issuer",
    ],
)
def test_relays_and_the_helm_test_trust_what_values_say(
    rendered: Render, tls: dict[str, Any], ca_file: str, secret: str | None
) -> None:
    docs = rendered({"relay": {"tls": tls}})
    relay, smoke = relay_pod(docs), smoke_pod(docs)
    env = {e["name"]: e.get("value") for e in relay["containers"][0]["env"]}
    assert env["APEXMESH_RELAY_TLS_CA"] == ca_file
    assert option(smoke["containers"][0]["command"], "--ca") == ca_file
    for pod in (relay, smoke):
        readers = [
            v["secret"]["secretName"]
            for v in pod["volumes"]
            if "secret" in v and "ca.crt" in {i["key"] for i in v["secret"].get("items", [])}
        ]
        assert readers == ([] if secret is None else [secret])


@pytest.mark.unit
def test_trusting_a_peer_secret_needs_one() -> None:
    with pytest.raises(helm.HelmError, match=r"relay\.tls\.peerCASecret"):
        render({"relay": {"tls": {"trust": "peerCASecret"}}})


# --------------------------------------------------------------------------- renewal


def _rfc3339(seconds: float) -> str:
    moment = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(rfc3339: str) -> float:
    return dt.datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%S%z").timestamp()


def _now() -> float:
    return dt.datetime.now(tz=dt.UTC).timestamp()


async def _template(api: Any, major: int, tmp_path: Path, *sets: str) -> list[Doc]:
    """The chart as ``helm upgrade`` would render it against ``api`` (lookup answered)."""
    config = kubeconfig(api, tmp_path / f"kubeconfig-{major}", NAMESPACE)
    helm_path = tool.binary(major)
    assert helm_path is not None, f"helm{major} is missing: scripts/install-helm installs it"
    args = ["template", tool.RELEASE, str(CHART), "-n", NAMESPACE, "--is-upgrade"]
    args += ["--dry-run=server", "--disable-openapi-validation"]
    for expression in sets:
        args += ["--set", expression]
    done = await asyncio.to_thread(tool.run_binary, helm_path, args, kubeconfig=config)
    assert done.returncode == 0, done.stderr
    return tool.parse(done.stdout)


def _store(api: Any, secret: Doc, **metadata: Any) -> None:
    """Put a rendered Secret in the emulated namespace, as the API server holds it."""
    stored = {**secret, "metadata": {**secret["metadata"], **metadata}}
    api.objects["v1/secrets", NAMESPACE, secret["metadata"]["name"]] = stored


async def _installed(api: Any, major: int, tmp_path: Path) -> tuple[Doc, Doc]:
    """A first install's TLS and CA Secrets, stored in ``api``."""
    docs = await _template(api, major, tmp_path)
    tls, ca = named(docs, "Secret", TLS_SECRET), named(docs, "Secret", CA_SECRET)
    _store(api, tls)
    _store(api, ca)
    return tls, ca


@against_both_helms
async def test_an_upgrade_keeps_a_certificate_far_from_expiry(
    major: int, kmock: Any, tmp_path: Path
) -> None:
    tls, ca = await _installed(kmock, major, tmp_path)
    expires = certificate_of(tls).not_valid_after_utc.timestamp()
    assert abs(expires - (_now() + 825 * DAY)) < DAY  # validityDays
    # the annotation the next upgrade reads: the certificate's notAfter, to the second it
    # was written at (after the certificate was made, so never earlier)
    annotated = tls["metadata"]["annotations"]["apex-mesh.io/not-after"]
    assert 0 <= _epoch(annotated) - expires < 60
    again = await _template(kmock, major, tmp_path)
    assert named(again, "Secret", TLS_SECRET)["data"] == tls["data"]
    assert named(again, "Secret", CA_SECRET)["data"] == ca["data"]


@against_both_helms
async def test_an_upgrade_renews_a_certificate_near_expiry_with_the_same_ca(
    major: int, kmock: Any, tmp_path: Path
) -> None:
    tls, ca = await _installed(kmock, major, tmp_path)
    soon = _rfc3339(_now() + 30 * DAY)  # within renewBeforeDays (90)
    annotations = {**tls["metadata"]["annotations"], "apex-mesh.io/not-after": soon}
    _store(kmock, tls, annotations=annotations)
    renewed = named(await _template(kmock, major, tmp_path), "Secret", TLS_SECRET)
    assert renewed["data"]["tls.crt"] != tls["data"]["tls.crt"]
    assert renewed["data"]["tls.key"] != tls["data"]["tls.key"]
    assert renewed["data"]["ca.crt"] == tls["data"]["ca.crt"]  # clients keep trusting it
    authority = x509.load_pem_x509_certificate(base64.b64decode(ca["data"]["ca.crt"]))
    fresh = certificate_of(renewed)
    fresh.verify_directly_issued_by(authority)
    assert abs(fresh.not_valid_after_utc.timestamp() - (_now() + 825 * DAY)) < DAY
    assert names_of(fresh) == names_of(certificate_of(tls))


@against_both_helms
async def test_new_names_renew_the_certificate(major: int, kmock: Any, tmp_path: Path) -> None:
    tls, _ = await _installed(kmock, major, tmp_path)
    docs = await _template(kmock, major, tmp_path, "relay.tls.dnsNames={relay.example.com}")
    renewed = certificate_of(named(docs, "Secret", TLS_SECRET))
    assert names_of(renewed)[0] == "relay.example.com"
    assert renewed.serial_number != certificate_of(tls).serial_number


@against_both_helms
async def test_a_certificate_from_before_the_annotations_counts_825_days_from_its_secret(
    major: int, kmock: Any, tmp_path: Path
) -> None:
    """A Secret an older chart made (no annotation, no CA Secret): kept while young,
    renewed, with a new CA (the old one's key was never kept), when old."""
    tls, _ = await _installed(kmock, major, tmp_path)
    kmock.objects["v1/secrets", NAMESPACE, CA_SECRET].delete()
    bare = {key: value for key, value in tls["metadata"].items() if key != "annotations"}
    young = {**tls, "metadata": {**bare, "creationTimestamp": _rfc3339(_now() - 10 * DAY)}}
    kmock.objects["v1/secrets", NAMESPACE, TLS_SECRET] = young
    kept = await _template(kmock, major, tmp_path)
    assert named(kept, "Secret", TLS_SECRET)["data"] == tls["data"]
    assert not [s for s in of_kind(kept, "Secret") if s["metadata"]["name"] == CA_SECRET]
    old = {**tls, "metadata": {**bare, "creationTimestamp": _rfc3339(_now() - 800 * DAY)}}
    kmock.objects["v1/secrets", NAMESPACE, TLS_SECRET] = old
    renewed = await _template(kmock, major, tmp_path)
    secret = named(renewed, "Secret", TLS_SECRET)
    assert secret["data"]["tls.crt"] != tls["data"]["tls.crt"]
    assert secret["data"]["ca.crt"] != tls["data"]["ca.crt"]
    assert named(renewed, "Secret", CA_SECRET)["data"]["ca.crt"] == secret["data"]["ca.crt"]


@pytest.mark.unit
def test_renewal_settings_that_would_renew_every_upgrade_are_refused() -> None:
    with pytest.raises(helm.HelmError, match="renewBeforeDays"):
        render({"relay": {"tls": {"autoGenerated": {"validityDays": 30, "renewBeforeDays": 30}}}})


# --------------------------------------------------------------------------- expiry


@pytest.mark.integration
async def test_the_relay_exports_the_expiry_of_the_certificate_it_serves(
    locked_redis: RedisServer, keys: Keys, tmp_path: Path
) -> None:
    async with secure_relay(locked_redis, keys, tmp_path) as running:
        served = x509.load_pem_x509_certificate((tmp_path / "relay-cert.pem").read_bytes())
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{running.relay.http_port}/metrics")
        answer.raise_for_status()
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }
    exported = samples["apexmesh_relay_tls_certificate_expiry_timestamp_seconds"]
    assert exported == served.not_valid_after_utc.timestamp()


@pytest.mark.unit
def test_the_expiry_alert_watches_that_gauge(rendered: Render) -> None:
    docs = rendered({"metrics": {"prometheusRule": {"enabled": True, "certificateExpiryDays": 20}}})
    rules = {
        rule["alert"]: rule
        for group in named(docs, "PrometheusRule", "apex-mesh")["spec"]["groups"]
        for rule in group["rules"]
    }
    alert = rules["ApexMeshTLSCertificateExpiresSoon"]
    assert "apexmesh_relay_tls_certificate_expiry_timestamp_seconds" in alert["expr"]
    assert alert["expr"].endswith(f"< {20 * DAY}")
    assert "helm upgrade apex-mesh" in alert["annotations"]["description"]
