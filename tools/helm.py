"""Render and lint the Helm chart with Helm's own engine, no helm binary (``tools/helm.py``).

Helm v4's Go SDK comes inside the ``helm-python-sdk`` wheel (``helm_python``; see
shared/ECOSYSTEM.md section 1), so CI and people type the same commands offline:

    python tools/helm.py template charts/apex-mesh [-f values.yaml] [--set a.b=c] [-o out.yaml]
    python tools/helm.py lint charts/apex-mesh [-f values.yaml] [--strict]
    python tools/helm.py schema charts/apex-mesh -f values.yaml   # values.schema.json only

``template`` prints what ``helm template`` prints: every manifest (the ``helm test`` hooks
too) as one multi-document YAML stream, NOTES.txt left out. ``lint`` prints each finding and
exits 1 on an error, or with ``--strict`` on a warning, as ``helm lint --strict`` does.

The real helm binaries are here too (issue #31): scripts/install-helm puts helm v3 and v4
beside the virtualenv's python as ``helm3`` and ``helm4``; :func:`binary` finds them and
:func:`run_binary` runs one with its own, empty, configuration and cache (never the
user's ~/.config/helm or ~/.kube/config), so the chart tests run ``helm lint``,
``helm template`` and ``helm install --dry-run`` of both majors as an operator would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import helm_python as helm
import yaml

#: Release name and namespace of renders that do not say otherwise.
RELEASE: Final = "apex-mesh"
NAMESPACE: Final = "apex-mesh"

#: Kubernetes version lint checks the chart's kubeVersion against.
KUBE_VERSION: Final = "1.32.0"

#: libyaml's loader when PyYAML has it (a chart's render is thousands of lines).
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: helm lint severities (helm_python.lint's numbers).
SEVERITY: Final = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}


def merged(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` deep-merged over ``base`` (the way helm merges -f files and --set)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def load_values(files: Sequence[Path] = (), sets: Sequence[str] = ()) -> dict[str, Any]:
    """Values from ``-f`` files then ``--set`` expressions, later ones winning."""
    values: dict[str, Any] = {}
    for path in files:
        values = merged(values, yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    for expression in sets:
        values = merged(values, helm.parse_set_string(expression))
    return values


def render(
    chart: Path,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """Template path -> rendered text of every manifest (hooks included, NOTES.txt not).

    Raises helm_python's HelmValuesError when the values break values.schema.json and
    HelmRenderError when a template fails (``fail`` in templates/_validate.tpl)."""
    loaded = helm.Chart.load(chart)
    try:
        rendered = loaded.render(
            dict(values or {}), name=release, namespace=namespace, is_install=True
        )
    finally:
        loaded.close()
    return {
        path: text
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt") and text.strip()
    }


def notes(chart: Path, values: Mapping[str, Any] | None = None) -> str:
    """The rendered NOTES.txt."""
    loaded = helm.Chart.load(chart)
    try:
        rendered = loaded.render(dict(values or {}), name=RELEASE, namespace=NAMESPACE)
    finally:
        loaded.close()
    return next((text for path, text in rendered.items() if path.endswith("NOTES.txt")), "")


def manifest(rendered: Mapping[str, str]) -> str:
    """One multi-document YAML stream, each document headed by its template's path."""
    return "".join(
        f"---\n# Source: {path}\n{document.strip()}\n"
        for path, text in rendered.items()
        for document in text.split("\n---")
        if document.strip() and yaml.load(document, Loader=_LOADER) is not None  # noqa: S506
    )


def documents(rendered: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every rendered manifest as parsed YAML."""
    return parse(manifest(rendered))


def parse(stream: str) -> list[dict[str, Any]]:
    """The documents of a multi-document YAML stream (``helm template``'s output), empty
    ones left out."""
    return [doc for doc in yaml.load_all(stream, Loader=_LOADER) if doc]


def lint(
    chart: Path,
    values: Mapping[str, Any] | None = None,
    *,
    strict: bool = True,
    kube_version: str = KUBE_VERSION,
) -> list[tuple[str, str, str]]:
    """``helm lint`` findings as (severity, path, message); ``strict`` as ``--strict``."""
    report = helm.lint(
        chart,
        dict(values or {}),
        strict=strict,
        namespace=NAMESPACE,
        with_subcharts=True,
        kube_version=kube_version,
    )
    findings = [
        (SEVERITY.get(m.get("severity", 0), "UNKNOWN"), m.get("path", ""), m.get("error", ""))
        for m in report.get("messages") or []
    ]
    findings += [("ERROR", str(chart), str(error)) for error in report.get("errors") or []]
    return findings


def failing(findings: Sequence[tuple[str, str, str]], *, strict: bool) -> bool:
    """Whether ``helm lint`` would exit non-zero: errors, or warnings too when strict."""
    bad = {"ERROR", "WARNING"} if strict else {"ERROR"}
    return any(severity in bad for severity, _, _ in findings)


#: The helm releases scripts/install-helm installs, by major version.
HELM_VERSIONS: Final = {3: "v3.17.2", 4: "v4.1.4"}


def binary(major: int) -> Path | None:
    """The real helm of ``major`` (3 or 4): ``helmN`` beside this Python (the virtualenv's
    bin, where scripts/install-helm puts it), else ``helmN`` on PATH; None when neither."""
    name = f"helm{major}"
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    return None if found is None else Path(found)


def run_binary(
    helm: Path,
    args: Sequence[str],
    *,
    kubeconfig: Path | None = None,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run a real helm with ``args``: its config, cache and data in a fresh temporary
    directory, the cluster ``kubeconfig`` (none: an empty one, so nothing of the user's
    is read or written). The caller checks the return code."""
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        empty = Path(home) / "kubeconfig"
        empty.write_text("apiVersion: v1\nkind: Config\n", encoding="utf-8")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_DATA_HOME": f"{home}/data",
            "KUBECONFIG": str(kubeconfig or empty),
        }
        return subprocess.run(  # noqa: S603  (a fixed binary, arguments as a list)
            [str(helm), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("template", "lint", "schema"):
        command = sub.add_parser(name)
        command.add_argument("chart", type=Path)
        command.add_argument("-f", "--values", type=Path, action="append", default=[])
        command.add_argument("--set", action="append", default=[])
        if name == "template":
            command.add_argument("--name", default=RELEASE)
            command.add_argument("--namespace", default=NAMESPACE)
            command.add_argument("-o", "--output", type=Path)
        if name == "lint":
            command.add_argument("--strict", action="store_true")
            command.add_argument("--kube-version", default=KUBE_VERSION)
    args = parser.parse_args(argv)
    values = load_values(args.values, args.set)
    try:
        if args.command == "template":
            text = manifest(render(args.chart, values, release=args.name, namespace=args.namespace))
            if args.output is None:
                sys.stdout.write(text)
            else:
                args.output.write_text(text, encoding="utf-8")
            return 0
        if args.command == "schema":
            loaded = helm.Chart.load(args.chart)
            try:
                loaded.validate_schema(values)
            finally:
                loaded.close()
            sys.stdout.write(f"{args.chart}: values valid\n")
            return 0
    except helm.HelmError as exc:
        sys.stderr.write(f"{args.chart}: {exc}\n")
        return 1
    findings = lint(args.chart, values, strict=args.strict, kube_version=args.kube_version)
    for severity, path, message in findings:
        sys.stdout.write(f"[{severity}] {path}: {message}\n")
    bad = failing(findings, strict=args.strict)
    sys.stdout.write(f"{args.chart}: {'FAILED' if bad else 'linted'}, {len(findings)} findings\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
