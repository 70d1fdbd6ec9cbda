"""Named contexts of apexctl (``nats context`` style) and how the one in use is chosen.

A context is either a context file (``scripts/run`` writes one; apexmesh/ops/targets.py)
or a Kubernetes context: a kubeconfig context, a namespace and optionally a Helm
release, whose pods apexctl finds and reaches through the API server
(apexmesh/cli/kube.py). Named contexts live in ``$APEXCTL_CONFIG`` (default
``$XDG_CONFIG_HOME/apexctl/config.yaml``, i.e. ``~/.config/apexctl/config.yaml``).

The context used is, first found: ``--context NAME|FILE``, ``$APEXCTL_CONTEXT`` (a name
or a file), the selected named context (``apexctl context use NAME``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from apexmesh.ops.targets import Context, ContextError, context_from, read_context

ENV_CONTEXT = "APEXCTL_CONTEXT"
ENV_CONFIG = "APEXCTL_CONFIG"


def config_path() -> Path:
    explicit = os.environ.get(ENV_CONFIG)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "apexctl" / "config.yaml"


def load_config() -> dict[str, Any]:
    path = config_path()
    if not path.exists():
        return {"current": "", "contexts": {}}
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ContextError(f"cannot read {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ContextError(f"{path} is not an apexctl config")
    loaded.setdefault("current", "")
    loaded.setdefault("contexts", {})
    return loaded


def save_config(config: dict[str, Any]) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        yaml.safe_dump(config, out, sort_keys=True)
    return path


def named(name: str, entry: Any) -> Context:
    """The context a named entry describes."""
    if not isinstance(entry, dict):
        raise ContextError(f"context {name!r} is malformed")
    if entry.get("file"):
        context = read_context(Path(str(entry["file"])))
        return Context(**{**_fields(context), "name": name})
    return context_from({**entry, "name": name, "kind": "kubernetes"}, f"context {name}")


def _fields(context: Context) -> dict[str, Any]:
    return {name: getattr(context, name) for name in Context.__dataclass_fields__}


def resolve(choice: str | None) -> Context:
    """The context to use (see the module docstring); :class:`ContextError` if none."""
    wanted = choice or os.environ.get(ENV_CONTEXT) or ""
    config = load_config()
    if wanted:
        if wanted in config["contexts"]:
            return named(wanted, config["contexts"][wanted])
        path = Path(wanted).expanduser()
        if path.is_file():
            return read_context(path)
        raise ContextError(f"no context named {wanted!r} and no such file")
    current = str(config.get("current") or "")
    if current and current in config["contexts"]:
        return named(current, config["contexts"][current])
    raise ContextError(
        "no context: run scripts/run and use the line it prints "
        f"(export {ENV_CONTEXT}=...), or add one with 'apexctl context add'"
    )


__all__ = ["ENV_CONTEXT", "config_path", "load_config", "named", "resolve", "save_config"]
