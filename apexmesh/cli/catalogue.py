"""``apexctl catalogue export/import``: a backup of the pubsub catalogue (topics and
subscriptions) and its restore.

``export`` reads the catalogue from the pubsub services' admin APIs (what is live now),
or with ``--from-snapshot DIR`` from a snapshot the Spark job wrote
(``snapshots/<ms>/``, docs/snapshot.md: its ``topics/`` and ``subscriptions/`` Parquet;
for a change layer, the full layer it builds on, named in its ``manifest.json``; a
storage root: its newest complete snapshot). It prints one document
(``kind: catalogue``, RFC 3339 times), YAML with ``-o yaml``.

``import FILE`` creates every topic of such a document that its domain lacks (as
``apex=pubsub@DOMAIN``, with the default settings: the admin API creates topics
without settings), leaves existing ones as they are, and says which is which.
Subscriptions are not recreated: each is its subscriber's lease, renewed by the
subscriber (draft-schwartz-apex-pubsub section 4.4), so they come back when the
subscribers subscribe again; they are in the document for the record.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Annotated, Any, Final

import typer
import yaml

from apexmesh.cli.base import app, fail, show, with_admin
from apexmesh.cli.output import err, rfc3339
from apexmesh.ops.adminclient import AdminClient, AdminError
from apexmesh.ops.targets import Context, ContextError, Target

catalogue_app = typer.Typer(
    help="Back up and restore the pubsub catalogue (topics, subscriptions).",
    no_args_is_help=True,
)
app.add_typer(catalogue_app, name="catalogue")

KIND: Final = "catalogue"
API_VERSION: Final = "apexctl/v1"


def _pubsub_per_domain(context: Context) -> dict[str, Target]:
    chosen: dict[str, Target] = {}
    for target in context.of("pubsub"):
        chosen.setdefault(target.domain, target)
    if not chosen:
        raise ContextError("the context has no pubsub service")
    return chosen


async def _from_admin(context: Context, admin: AdminClient) -> dict[str, Any]:
    targets = list(_pubsub_per_domain(context).values())
    topics: list[dict[str, Any]] = []
    subscriptions: list[dict[str, Any]] = []
    for path, into in (("/topics", topics), ("/subscriptions", subscriptions)):
        for _target, result in await admin.gather(targets, path):
            if isinstance(result, AdminError):
                raise result
            into.extend(result)
    return _document(
        "admin API",
        [
            {
                "domain": t["domain"],
                "topic": t["topic"],
                "creator": t["creator"],
                "created_at": rfc3339(t["created_ms"] / 1000),
            }
            for t in topics
        ],
        [
            {
                "domain": s["domain"],
                "topic": s["topic"],
                "subscriber": s["subscriber"],
                "originator": s.get("originator", ""),
                "expires_in_seconds": s.get("expires_in_seconds"),
            }
            for s in subscriptions
        ],
    )


def snapshot_layer(directory: Path) -> tuple[Path, str]:
    """The full layer to read for ``directory`` and a note ("" when exact)."""
    if (directory / "topics").is_dir():
        return directory, ""
    manifest = directory / "manifest.json"
    if manifest.is_file():
        base = json.loads(manifest.read_text(encoding="utf-8")).get("base") or ""
        if base:
            found = directory.parent / Path(str(base)).name
            if (found / "topics").is_dir():
                note = f"{directory.name} is a change layer: read its full layer {found.name}"
                return found, note
    complete = sorted(
        (d for d in directory.glob("*") if (d / "_SUCCESS").exists() and (d / "topics").is_dir()),
        key=lambda d: d.name,
    )
    if complete:
        return complete[
            -1
        ], f"the newest complete full layer under {directory}: {complete[-1].name}"
    raise ContextError(f"{directory}: no snapshot layer with topics/ (docs/snapshot.md)")


def _from_snapshot(directory: Path) -> dict[str, Any]:
    import pyarrow.dataset as pads

    layer, note = snapshot_layer(directory)
    if note:
        err.print(note)

    def rows(name: str) -> list[dict[str, Any]]:
        path = layer / name
        if not path.is_dir():
            return []
        return list(pads.dataset(str(path), format="parquet").to_table().to_pylist())

    return _document(
        f"snapshot {layer}",
        [
            {
                "domain": r["domain"],
                "topic": r["topic"],
                "creator": r["creator"],
                "created_at": rfc3339(r["created_ms"] / 1000),
                "settings": r.get("settings") or "",
            }
            for r in rows("topics")
        ],
        [
            {
                "domain": r["domain"],
                "topic": r["topic"],
                "subscriber": r["subscriber"],
                "originator": r.get("originator", ""),
                "expires_at": rfc3339(r["expires_ms"] / 1000),
            }
            for r in rows("subscriptions")
        ],
    )


def _document(
    source: str, topics: list[dict[str, Any]], subscriptions: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "exported_at": rfc3339(time.time()),
        "source": source,
        "topics": sorted(topics, key=lambda t: (t["domain"], t["topic"])),
        "subscriptions": sorted(
            subscriptions, key=lambda s: (s["domain"], s["topic"], s["subscriber"])
        ),
    }


@catalogue_app.command("export")
def catalogue_export(
    ctx: typer.Context,
    from_snapshot: Annotated[
        Path | None, typer.Option(help="A snapshot directory (or storage) of the Spark job.")
    ] = None,
    output: Annotated[Path | None, typer.Option(help="Write the document here (YAML).")] = None,
) -> None:
    """The catalogue as one document (see the module docstring)."""
    if from_snapshot is not None:
        try:
            document = _from_snapshot(from_snapshot)
        except (ContextError, OSError, ValueError) as exc:
            raise fail(str(exc), 2) from None
    else:
        document = with_admin(ctx, _from_admin)
    if output is not None:
        output.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        err.print(
            f"{len(document['topics'])} topics, {len(document['subscriptions'])} "
            f"subscriptions written to {output}"
        )
        return
    show(ctx, document)


@catalogue_app.command("import")
def catalogue_import(
    ctx: typer.Context,
    document: Annotated[Path, typer.Argument(help="A document of 'catalogue export'.")],
    dry_run: Annotated[bool, typer.Option(help="Say what would be created.")] = False,
) -> None:
    """Create the document's topics that are missing (see the module docstring)."""
    try:
        loaded = yaml.safe_load(document.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise fail(f"cannot read {document}: {exc}", 2) from None
    if not isinstance(loaded, dict) or loaded.get("kind") != KIND:
        raise fail(f"{document} is not a catalogue document (kind: {KIND})", 2)
    topics = list(loaded.get("topics") or ())

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        pubsub = _pubsub_per_domain(context)

        async def one(entry: dict[str, Any]) -> dict[str, Any]:
            domain, name = str(entry["domain"]), str(entry["topic"])
            row = {"domain": domain, "topic": name}
            target = pubsub.get(domain)
            if target is None:
                return {**row, "result": "skipped: no pubsub service for the domain"}
            try:
                await admin.get(target, f"/topics/{domain}/{name}")
            except AdminError as exc:
                if exc.status != 404:
                    raise
            else:
                return {**row, "result": "exists"}
            if dry_run:
                return {**row, "result": "would be created"}
            body = {"domain": domain, "topic": name}
            answer = await admin.call(target, "POST", "/topics", json=body)
            return {**row, "result": "created" if answer.get("code") == 250 else str(answer)}

        return list(await asyncio.gather(*(one(t) for t in topics)))

    rows = with_admin(ctx, work)
    show(ctx, rows, title="imported topics", columns=["domain", "topic", "result"])
    skipped = len(loaded.get("subscriptions") or ())
    if skipped:
        err.print(f"{skipped} subscriptions not recreated: their subscribers renew them")


__all__ = ["catalogue_app", "snapshot_layer"]
