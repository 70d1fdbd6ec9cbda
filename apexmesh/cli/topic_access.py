"""``apexctl topics access``: who may subscribe to and publish on a topic.

A topic's access entries are those of the owner ``apex=pubsub/TOPIC@DOMAIN`` (RFC 3341,
docs/pubsub.md "Who may use a topic"); these commands name the topic as the other
``topics`` commands do (``TOPIC@DOMAIN``) and the roles in words (``subscribe``,
``publish``) or as tokens, and change the entries through the access service's admin
API, like ``apexctl access``::

    apexctl topics access ls demo.news@example.com
    apexctl topics access grant demo.news@example.com '*@rubble.com' subscribe publish
    apexctl topics access deny demo.news@example.com mr.slate@example.com
    apexctl topics access revoke demo.news@example.com mr.slate@example.com
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from apexmesh.apex.errors import ApexError
from apexmesh.cli.base import fail, show, with_admin
from apexmesh.cli.commands import topics_app
from apexmesh.ops.adminclient import AdminClient
from apexmesh.ops.targets import Context, ContextError, Target
from apexmesh.pubsub.elements import topic_endpoint
from apexmesh.pubsub.topic_access import tokens_of

access_app = typer.Typer(
    help="Who may subscribe to and publish on a topic (its access entries).",
    no_args_is_help=True,
)
topics_app.add_typer(access_app, name="access")

ROLES_HELP = "subscribe, publish, or tokens such as core:data"


def _owner(topic_at_domain: str) -> tuple[str, str]:
    """(owner, domain) of ``TOPIC@DOMAIN``."""
    topic, at, domain = topic_at_domain.rpartition("@")
    if not at or not topic or not domain:
        raise fail(f"name the topic as TOPIC@DOMAIN, not {topic_at_domain!r}")
    try:
        return str(topic_endpoint(topic, domain)), domain
    except ApexError as exc:
        raise fail(f"{topic_at_domain}: {exc}") from None


def _tokens(roles: list[str]) -> list[str]:
    try:
        return sorted(tokens_of(roles))
    except ApexError as exc:
        raise fail(str(exc)) from None


def _access(context: Context, domain: str) -> Target:
    targets = context.of("access", domain)
    if not targets:
        raise ContextError(f"no access service for {domain}")
    return targets[0]


@access_app.command("ls")
def topic_access_ls(ctx: typer.Context, topic: str) -> None:
    """The access entries of TOPIC@DOMAIN (RFC 3341's defaults are not listed)."""
    owner, domain = _owner(topic)

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        return list(await admin.get(_access(context, domain), "/entries", owner=owner))

    show(ctx, with_admin(ctx, work), title=f"who may use {topic}")


def _change(ctx: typer.Context, action: str, topic: str, actor: str, roles: list[str]) -> None:
    owner, domain = _owner(topic)
    body = {"owner": owner, "actor": actor, "actions": _tokens(roles)}

    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        target = _access(context, domain)
        return dict(await admin.call(target, "POST", f"/entries/{action}", json=body))

    show(ctx, with_admin(ctx, work))


@access_app.command("grant")
def topic_access_grant(
    ctx: typer.Context,
    topic: str,
    actor: str,
    roles: Annotated[list[str], typer.Argument(help=ROLES_HELP)],
) -> None:
    """Let ACTOR (an endpoint, *@domain, *@*) subscribe and/or publish on TOPIC@DOMAIN."""
    _change(ctx, "grant", topic, actor, roles)


@access_app.command("deny")
def topic_access_deny(
    ctx: typer.Context,
    topic: str,
    actor: str,
    roles: Annotated[
        list[str] | None, typer.Argument(help=ROLES_HELP + "; none: deny everything")
    ] = None,
) -> None:
    """Take ROLES away from ACTOR on TOPIC@DOMAIN (everything when none is named)."""
    _change(ctx, "deny", topic, actor, roles or [])


@access_app.command("revoke")
def topic_access_revoke(ctx: typer.Context, topic: str, actor: str) -> None:
    """Remove ACTOR's entry on TOPIC@DOMAIN (broader entries apply again)."""
    owner, domain = _owner(topic)

    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        target = _access(context, domain)
        await admin.call(target, "DELETE", "/entries", params={"owner": owner, "actor": actor})
        return {"owner": owner, "actor": actor, "removed": True}

    show(ctx, with_admin(ctx, work))


__all__ = ["access_app"]
