"""``apexctl``: operate an apex-mesh, local or in Kubernetes (``kubectl apex`` too).

Every command reads the services' admin APIs (apexmesh/ops/admin.py) of the context in
use (apexmesh/cli/contexts.py) and prints a table, or JSON / YAML with ``--json`` /
``-o json|yaml``. ``apexctl cheat`` lists examples; ``apexctl --install-completion``
installs shell completion.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from apexmesh.cli import (  # noqa: F401  (they add commands)
    bench,
    catalogue,
    commands,
    contexts,
    messages,
    operate,
    topic_access,
)
from apexmesh.cli.base import app, context_app, fail, mesh, show
from apexmesh.cli.output import err

# ---------------------------------------------------------------- contexts


@context_app.command("ls")
def context_ls(ctx: typer.Context) -> None:
    """List named contexts."""
    config = contexts.load_config()
    rows = [
        {
            "name": name,
            "current": name == config.get("current"),
            "kind": "file" if entry.get("file") else "kubernetes",
            "where": entry.get("file")
            or f"{entry.get('kube_context') or '(current)'}/{entry.get('namespace', '')}",
        }
        for name, entry in sorted(config["contexts"].items())
    ]
    show(ctx, rows, title="contexts")


@context_app.command("add")
def context_add(
    name: str,
    file: Annotated[
        Path | None, typer.Option(help="A context file (scripts/run writes apexctl.yaml).")
    ] = None,
    kube_context: Annotated[
        str | None, typer.Option(help="A kubeconfig context ('' = the current one).")
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="The mesh's namespace.")] = None,
    release: Annotated[str, typer.Option(help="The Helm release (default: any).")] = "",
    direct: Annotated[
        bool, typer.Option(help="Reach pod IPs directly (inside the cluster).")
    ] = False,
    select: Annotated[bool, typer.Option(help="Make it the current context.")] = True,
) -> None:
    """Add (or replace) a named context: a context file, or a Kubernetes namespace."""
    if (file is None) == (namespace is None):
        raise fail("give --file, or --namespace (with --kube-context)", 2)
    entry: dict[str, Any]
    if file is not None:
        entry = {"file": str(file.resolve())}
    else:
        entry = {"kube_context": kube_context or "", "namespace": namespace, "release": release}
        if direct:
            entry["reach"] = "direct"
    config = contexts.load_config()
    config["contexts"][name] = entry
    if select:
        config["current"] = name
    path = contexts.save_config(config)
    err.print(f"context {name} saved in {path}")


@context_app.command("use")
def context_use(name: str) -> None:
    """Select the named context."""
    config = contexts.load_config()
    if name not in config["contexts"]:
        raise fail(f"no context named {name!r}", 2)
    config["current"] = name
    contexts.save_config(config)
    err.print(f"using context {name}")


@context_app.command("rm")
def context_rm(name: str) -> None:
    """Forget a named context."""
    config = contexts.load_config()
    if config["contexts"].pop(name, None) is None:
        raise fail(f"no context named {name!r}", 2)
    if config.get("current") == name:
        config["current"] = ""
    contexts.save_config(config)


@context_app.command("show")
def context_show(ctx: typer.Context) -> None:
    """The context in use and its services (tokens are not shown)."""
    with mesh(ctx) as context:
        show(
            ctx,
            {
                "name": context.name,
                "kind": context.kind,
                "source": context.source,
                "namespace": context.namespace,
                "dashboard": context.dashboard_url,
                "services": [f"{t.name} {t.admin_url}" for t in context.services],
            },
        )


def entry() -> None:
    """The console script (``apexctl`` and ``kubectl-apex``)."""
    app(prog_name="kubectl apex" if Path(sys.argv[0]).name == "kubectl-apex" else "apexctl")


__all__ = ["app", "entry"]
