"""Render and lint the Helm chart with Helm's own engine, no helm binary (``tools/helm.py``).

Helm v4's Go SDK comes inside the ``helm-python-sdk`` wheel (``helm_python``; see
shared/ECOSYSTEM.md section 1), so CI and people type the same commands offline:

    python tools/helm.py template charts/apex-mesh [-f values.yaml] [--set a.b=c] [-o out.yaml]
    python tools/helm.py lint charts/apex-mesh [-f values.yaml] [--strict]
    python tools/helm.py schema charts/apex-mesh -f values.yaml   # values.schema.json only

``template`` prints what ``helm template`` prints: every manifest (the ``helm test`` hooks
too) as one multi-document YAML stream, NOTES.txt left out. ``lint`` prints each finding and
exits 1 on an error, or with ``--strict`` on a warning, as ``helm lint --strict`` does.
"""

from __future__ import annotations

import argparse
import sys
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
        if document.strip() and yaml.safe_load(document) is not None
    )


def documents(rendered: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every rendered manifest as parsed YAML."""
    return [doc for doc in yaml.safe_load_all(manifest(rendered)) if doc]


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
