"""apexctl's commands over the admin APIs: status, servers, topics, subscriptions,
sessions, held data, access, presence, drain and snapshot.

``status`` (alias ``health``) exits like a Nagios plugin: 0 OK (every service ready),
1 WARNING (some pod not ready, every service still has a ready pod), 2 CRITICAL (a
service has no ready pod), 3 UNKNOWN (no context, nothing to check).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from apexmesh.cli.base import app, fail, mesh, options, show, with_admin
from apexmesh.cli.kube import trigger_snapshot
from apexmesh.cli.output import err, rfc3339
from apexmesh.ops.adminclient import AdminClient, AdminError
from apexmesh.ops.localmesh import snapshot_environment
from apexmesh.ops.targets import SERVICES, Context, ContextError, Target

servers_app = typer.Typer(help="The mesh's pods: list, inspect, ping.", no_args_is_help=True)
topics_app = typer.Typer(help="Pubsub topics (draft-schwartz-apex-pubsub).", no_args_is_help=True)
subs_app = typer.Typer(help="Subscriptions with their leases and backlog.", no_args_is_help=True)
sessions_app = typer.Typer(help="BEEP sessions of the relay pods.", no_args_is_help=True)
held_app = typer.Typer(
    help="Data held for endpoints not attached (RFC 3342).", no_args_is_help=True
)
access_app = typer.Typer(help="Access entries (RFC 3341).", no_args_is_help=True)
presence_app = typer.Typer(help="Presence entries (RFC 3343).", no_args_is_help=True)
snapshot_app = typer.Typer(
    help="The Spark snapshot of topics and subscriptions.", no_args_is_help=True
)
for name, sub in (
    ("servers", servers_app),
    ("topics", topics_app),
    ("subscriptions", subs_app),
    ("sessions", sessions_app),
    ("held", held_app),
    ("access", access_app),
    ("presence", presence_app),
    ("snapshot", snapshot_app),
):
    app.add_typer(sub, name=name)

NAGIOS = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}


def _one_per_domain(context: Context, service: str) -> list[Target]:
    chosen: dict[str, Target] = {}
    for target in context.of(service):
        chosen.setdefault(target.domain, target)
    if not chosen:
        raise ContextError(f"the context has no {service} service")
    return list(chosen.values())


def _named(context: Context, name: str, service: str | None = None) -> Target:
    for target in context.services:
        if target.name == name and (service is None or target.service == service):
            return target
    raise ContextError(f"no {service or 'server'} named {name!r} (see 'apexctl servers ls')")


def _rows(results: list[tuple[Target, Any]], **extra: str) -> list[dict[str, Any]]:
    """Flatten per-target lists, failing on a target that did not answer."""
    rows: list[dict[str, Any]] = []
    for _target, result in results:
        if isinstance(result, AdminError):
            raise result
        rows.extend({**item, **extra} for item in result)
    return rows


# ---------------------------------------------------------------- status and servers


@app.command("status")
def status(ctx: typer.Context) -> None:
    """Health of the whole mesh, with Nagios exit codes (0 OK ... 3 UNKNOWN)."""
    try:
        code, summary, rows = with_admin(ctx, _status)
    except typer.Exit as exc:
        code = 3 if exc.exit_code == 2 else exc.exit_code
        typer.echo("APEX-MESH UNKNOWN - no context or cannot reach the cluster")
        raise typer.Exit(code) from None
    if options(ctx).fmt.value == "table":
        show(ctx, rows, title="services", columns=["name", "service", "domain", "ready", "reason"])
        typer.echo(f"APEX-MESH {NAGIOS[code]} - {summary}")
    else:
        show(ctx, {"status": NAGIOS[code], "code": code, "summary": summary, "services": rows})
    raise typer.Exit(code)


app.command("health", help="Alias of status.")(status)


async def _status(context: Context, admin: AdminClient) -> tuple[int, str, list[dict[str, Any]]]:
    """Every pod, reachable or not: a pod Kubernetes cannot run (Pending, an image it
    cannot pull, CrashLoopBackOff) counts as not ready with Kubernetes' reason, so a
    service none of whose pods runs is CRITICAL, never missing from the check."""
    if not context.services and not context.unavailable:
        return 3, "no services in the context", []
    probes = await asyncio.gather(*(admin.probe(t) for t in context.services))
    pods: list[tuple[Target, bool, str]] = [
        (p.target, p.ready, "; ".join(r for r in (p.target.problem, p.reason) if r)) for p in probes
    ]
    pods += [(t, False, t.problem) for t in context.unavailable]
    order = {name: i for i, name in enumerate(SERVICES)}
    pods.sort(key=lambda p: (order.get(p[0].service, 9), p[0].domain, p[0].name))
    rows = [
        {
            "name": t.name,
            "service": t.service,
            "domain": t.domain,
            "ready": ready,
            "reason": reason,
        }
        for t, ready, reason in pods
    ]
    ready_count = sum(ready for _, ready, _ in pods)
    groups: dict[str, bool] = {}
    for target, ready, _ in pods:
        key = f"{target.service}@{target.domain}"
        groups[key] = groups.get(key, False) or ready
    dead = sorted(key for key, any_ready in groups.items() if not any_ready)
    summary = f"{ready_count}/{len(pods)} services ready"
    failing = [f"{t.name} ({t.problem})" for t, ready, _ in pods if not ready and t.problem]
    if failing:
        summary += f"; {', '.join(failing)}"
    if dead:
        return 2, f"{summary}; no ready pod: {', '.join(dead)}", rows
    return (0 if ready_count == len(pods) else 1), summary, rows


@servers_app.command("ls")
def servers_ls(ctx: typer.Context) -> None:
    """Every pod: service, domain, readiness, version, uptime."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        results = await admin.gather(list(context.services), "/info")
        rows = []
        for target, info in results:
            if isinstance(info, AdminError):
                rows.append(
                    {
                        "name": target.name,
                        "service": target.service,
                        "domain": target.domain,
                        "ready": False,
                        "version": "",
                        "uptime_s": "",
                        "detail": str(info),
                    }
                )
                continue
            rows.append(
                {
                    "name": target.name,
                    "service": info["service"],
                    "domain": ",".join(info["domains"]),
                    "ready": info["ready"],
                    "version": info["version"],
                    "uptime_s": round(info["uptime_seconds"]),
                    "detail": info["reason"],
                }
            )
        order = {name: i for i, name in enumerate(SERVICES)}
        return sorted(rows, key=lambda r: (order.get(r["service"], 9), r["name"]))

    show(ctx, with_admin(ctx, work), title="servers")


@servers_app.command("info")
def servers_info(ctx: typer.Context, name: str) -> None:
    """Everything one pod says about itself."""

    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        info = dict(await admin.get(_named(context, name), "/info"))
        info["started_at"] = rfc3339(info.get("started_at"))
        return info

    show(ctx, with_admin(ctx, work))


@servers_app.command("ping")
def servers_ping(
    ctx: typer.Context, name: Annotated[str | None, typer.Argument(help="One pod.")] = None
) -> None:
    """Round-trip time of each pod's /healthz."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        targets = [_named(context, name)] if name else list(context.services)
        probes = await asyncio.gather(*(admin.probe(t) for t in targets))
        return [
            {"name": p.target.name, "alive": p.alive, "rtt_ms": round(p.rtt * 1000, 2)}
            for p in probes
        ]

    rows = with_admin(ctx, work)
    show(ctx, rows, title="ping")
    if not all(r["alive"] for r in rows):
        raise typer.Exit(1)


# ---------------------------------------------------------------- topics and subscriptions


@topics_app.command("ls")
def topics_ls(ctx: typer.Context) -> None:
    """Topics of every domain, with subscriptions and backlog."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        return _rows(await admin.gather(_one_per_domain(context, "pubsub"), "/topics"))

    show(
        ctx,
        with_admin(ctx, work),
        title="topics",
        columns=["domain", "topic", "subscriptions", "backlog", "creator"],
    )


def _topic_target(context: Context, domain: str) -> Target:
    targets = context.of("pubsub", domain)
    if not targets:
        raise ContextError(f"no pubsub service for {domain}")
    return targets[0]


def _split(topic: str) -> tuple[str, str]:
    name, at, domain = topic.rpartition("@")
    if not at or not name:
        raise ContextError(f"name the topic as TOPIC@DOMAIN, not {topic!r}")
    return name, domain


async def _resolve(context: Context, admin: AdminClient, topic: str) -> tuple[str, str]:
    """(name, domain) of ``topic``: ``TOPIC@DOMAIN`` as it is; a bare name, as ``pub``
    and ``sub`` take it, in the only domain with pubsub, else in the one domain that has
    a topic of that name."""
    if "@" in topic:
        return _split(topic)
    domains = sorted({t.domain for t in context.of("pubsub")})
    if not domains:
        raise ContextError("the context has no pubsub service")
    if len(domains) == 1:
        return topic, domains[0]
    found = []
    for domain in domains:
        try:
            await admin.get(_topic_target(context, domain), f"/topics/{domain}/{topic}")
        except AdminError as exc:
            if exc.status != 404:
                raise
            continue
        found.append(domain)
    if not found:
        raise ContextError(f"no topic {topic} in {', '.join(domains)}")
    if len(found) > 1:
        raise ContextError(f"{topic} is a topic of {' and '.join(found)}: say {topic}@DOMAIN")
    return topic, found[0]


TopicArg = Annotated[
    str, typer.Argument(help="A topic (demo.news, as pub and sub take it) or TOPIC@DOMAIN.")
]


@topics_app.command("describe")
def topics_describe(ctx: typer.Context, topic: TopicArg) -> None:
    """One topic and its subscriptions."""

    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        name, domain = await _resolve(context, admin, topic)
        return dict(await admin.get(_topic_target(context, domain), f"/topics/{domain}/{name}"))

    show(ctx, with_admin(ctx, work), title=topic)


@topics_app.command("create")
def topics_create(ctx: typer.Context, topic: TopicArg) -> None:
    """Create a topic (as apex=pubsub of its domain)."""

    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        domains = sorted({t.domain for t in context.of("pubsub")})
        if "@" not in topic and len(domains) != 1:
            raise ContextError(f"name the domain of the new topic: {topic}@DOMAIN")
        name, domain = _split(topic) if "@" in topic else (topic, domains[0])
        target = _topic_target(context, domain)
        try:
            answer = await admin.call(
                target, "POST", "/topics", json={"domain": domain, "topic": name}
            )
        except AdminError as exc:
            if exc.status == 409:
                raise fail(f"topic {name}@{domain} exists") from None
            raise
        return {"topic": f"{name}@{domain}", **answer}

    show(ctx, with_admin(ctx, work))


@topics_app.command("delete")
def topics_delete(ctx: typer.Context, topic: TopicArg) -> None:
    """Delete a topic; its subscribers get their cancels."""

    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        name, domain = await _resolve(context, admin, topic)
        try:
            answer = await admin.call(
                _topic_target(context, domain), "DELETE", f"/topics/{domain}/{name}"
            )
        except AdminError as exc:
            if exc.status == 404:
                raise fail(f"no topic {name}@{domain}: nothing deleted") from None
            raise
        return {"topic": f"{name}@{domain}", **answer}

    show(ctx, with_admin(ctx, work))


@topics_app.command("purge")
def topics_purge(ctx: typer.Context, topic: TopicArg) -> None:
    """Drop every pubsub pod's cache of a topic (they re-read it from Redis)."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        name, domain = await _resolve(context, admin, topic)
        pods = context.of("pubsub", domain)
        if not pods:
            raise ContextError(f"no pubsub service for {domain}")
        return list(
            await asyncio.gather(
                *(admin.call(t, "POST", f"/topics/{domain}/{name}/purge") for t in pods)
            )
        )

    show(ctx, with_admin(ctx, work), title="purged")


@subs_app.command("ls")
def subscriptions_ls(ctx: typer.Context) -> None:
    """Every subscription: subscriber, lease left, backlog."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        return _rows(await admin.gather(_one_per_domain(context, "pubsub"), "/subscriptions"))

    show(
        ctx,
        with_admin(ctx, work),
        title="subscriptions",
        columns=["domain", "topic", "subscriber", "originator", "expires_in_seconds", "backlog"],
    )


# ---------------------------------------------------------------- sessions and held data


@sessions_app.command("ls")
def sessions_ls(ctx: typer.Context) -> None:
    """BEEP sessions of every relay pod (ids are POD/N)."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        rows = []
        for target, result in await admin.gather(context.of("relay"), "/sessions"):
            if isinstance(result, AdminError):
                raise result
            rows += [
                {
                    **s,
                    "id": f"{target.name}/{s['id']}",
                    "pod": target.name,
                    "opened_at": rfc3339(s["opened_at"]),
                }
                for s in result
            ]
        return rows

    show(
        ctx,
        with_admin(ctx, work),
        title="sessions",
        columns=["id", "mode", "peer", "tls", "identity", "channels", "attachments", "age_seconds"],
    )


@sessions_app.command("kill")
def sessions_kill(
    ctx: typer.Context, session: Annotated[str, typer.Argument(help="POD/N from 'sessions ls'")]
) -> None:
    """Close one BEEP session (its attachments end)."""

    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        pod, _, number = session.rpartition("/")
        if not pod or not number.isdigit():
            raise ContextError(f"a session id is POD/N, not {session!r}")
        answer = await admin.call(_named(context, pod, "relay"), "DELETE", f"/sessions/{number}")
        return {"session": session, **answer}

    show(ctx, with_admin(ctx, work))


@held_app.command("ls")
def held_ls(
    ctx: typer.Context,
    endpoint: Annotated[str | None, typer.Argument(help="Only this endpoint's entries.")] = None,
) -> None:
    """Held data per endpoint (count, bytes, oldest), or one endpoint's entries."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        if endpoint is None:
            return _rows(await admin.gather(_one_per_domain(context, "relay"), "/held"))
        domain = endpoint.rpartition("@")[2]
        relays = context.of("relay", domain)
        if not relays:
            raise ContextError(f"no relay for {domain}")
        return list(await admin.get(relays[0], f"/held/{endpoint}"))

    show(ctx, with_admin(ctx, work), title="held data")


# ---------------------------------------------------------------- access and presence


@access_app.command("ls")
def access_ls(
    ctx: typer.Context,
    owner: Annotated[str | None, typer.Option(help="Only this owner's entries.")] = None,
) -> None:
    """Explicit access entries of every domain."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        targets = _one_per_domain(context, "access")
        if owner is not None:
            domain = owner.rpartition("@")[2]
            targets = [t for t in targets if t.domain == domain] or targets[:1]
        return _rows(await admin.gather(targets, "/entries", owner=owner))

    show(ctx, with_admin(ctx, work), title="access entries")


def _access_change(
    ctx: typer.Context, action: str, owner: str, actor: str, actions: list[str]
) -> None:
    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        domain = owner.rpartition("@")[2]
        targets = context.of("access", domain)
        if not targets:
            raise ContextError(f"no access service for {domain}")
        body = {"owner": owner, "actor": actor, "actions": actions}
        return dict(await admin.call(targets[0], "POST", f"/entries/{action}", json=body))

    show(ctx, with_admin(ctx, work))


@access_app.command("grant")
def access_grant(
    ctx: typer.Context,
    owner: str,
    actor: str,
    actions: Annotated[list[str], typer.Argument(help="e.g. core:data presence:subscribe")],
) -> None:
    """Grant ACTIONS on OWNER to ACTOR (an endpoint, *@domain or *@*)."""
    _access_change(ctx, "grant", owner, actor, actions)


@access_app.command("deny")
def access_deny(
    ctx: typer.Context,
    owner: str,
    actor: str,
    actions: Annotated[
        list[str] | None, typer.Argument(help="Actions to take away; none: deny everything.")
    ] = None,
) -> None:
    """Take ACTIONS away from ACTOR on OWNER (all of them when none is named)."""
    _access_change(ctx, "deny", owner, actor, actions or [])


@presence_app.command("ls")
def presence_ls(ctx: typer.Context) -> None:
    """Presence entries of every domain, and their tuples."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        rows = _rows(await admin.gather(_one_per_domain(context, "presence"), "/entries"))
        for row in rows:
            row["tuples"] = [
                f"{t['destination']} ({'available' if t['available'] else 'away'})"
                for t in row["tuples"]
            ]
        return rows

    show(ctx, with_admin(ctx, work), title="presence")


# ---------------------------------------------------------------- drain and snapshot


@app.command("drain")
def drain(
    ctx: typer.Context,
    pod: Annotated[str, typer.Argument(help="A relay pod (see 'apexctl servers ls').")],
    wait: Annotated[
        float, typer.Option(help="Seconds to wait for its sessions to end (0: do not wait).")
    ] = 0.0,
    undo: Annotated[
        bool, typer.Option("--undo", help="Undo a drain: accept sessions again, ready.")
    ] = False,
) -> None:
    """Stop a relay pod accepting sessions (readiness goes false); optionally wait
    until its sessions are gone. ``--undo`` makes it listen and report ready again."""

    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        target = _named(context, pod, "relay")
        if undo:
            return dict(await admin.call(target, "POST", "/undrain"))
        state = dict(await admin.call(target, "POST", "/drain"))
        if wait <= 0:
            return state
        deadline = time.monotonic() + wait
        with Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err
        ) as progress:
            task = progress.add_task(f"draining {pod}", total=None)
            while state["sessions"] and time.monotonic() < deadline:
                progress.update(task, description=f"draining {pod}: {state['sessions']} open")
                await asyncio.sleep(0.5)
                state = dict(await admin.get(target, "/drain"))
        return state

    state = with_admin(ctx, work)
    show(ctx, {**state, "since": rfc3339(state.get("since"))})
    if wait > 0 and state["sessions"]:
        raise typer.Exit(1)


@snapshot_app.command("trigger")
def snapshot_trigger(ctx: typer.Context) -> None:
    """Rebuild the topic and subscription snapshot now.

    In Kubernetes: a Job from the release's snapshot CronJob. Locally: the Spark job
    (``python -m spark.snapshot``) against the local mesh's Redis, with a progress
    spinner while it runs."""
    with mesh(ctx) as context:
        if context.kind == "kubernetes":
            name = f"apexctl-snapshot-{int(time.time())}"
            try:
                created = trigger_snapshot(context, name)
            except ContextError as exc:
                raise fail(str(exc), 2) from None
            show(ctx, {"job": created, "started": True})
            return
        if (
            importlib.util.find_spec("spark") is None
            or importlib.util.find_spec("spark.snapshot") is None
        ):
            raise fail("this checkout has no Spark snapshot job (spark/snapshot)", 2)
        # Once per domain, as scripts/run --snapshot does: each domain's services keep
        # their own keys; the storage is the mesh's workdir (where its context file is).
        workdir = Path(context.source).parent if context.source else Path.cwd()
        outputs: dict[str, str] = {}
        for domain in sorted({t.domain for t in context.of("pubsub")}):
            env = {**os.environ, **snapshot_environment(context.redis_url, domain, workdir)}
            with Progress(
                SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err
            ) as progress:
                progress.add_task(f"running python -m spark.snapshot for {domain}", total=None)
                done = subprocess.run(
                    [sys.executable, "-m", "spark.snapshot"],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
            if done.returncode != 0:
                err.print(done.stderr[-2000:])
                raise fail(f"the snapshot job for {domain} exited {done.returncode}")
            outputs[domain] = done.stdout[-2000:]
        show(ctx, {"job": "spark.snapshot", "started": True, "output": outputs})


__all__ = ["NAGIOS"]
