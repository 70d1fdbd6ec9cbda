"""The apexctl application object, its global options and what every command shares:
the context in use, an admin client, output, errors and exit codes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from apexmesh.cli import contexts
from apexmesh.cli.kube import reached
from apexmesh.cli.output import Format, emit, err
from apexmesh.client.errors import ApexClientError
from apexmesh.ops.adminclient import AdminClient, AdminError
from apexmesh.ops.targets import Context, ContextError

_T = TypeVar("_T")

app = typer.Typer(
    name="apexctl",
    help="Operate an apex-mesh: servers, topics, sessions, access, presence, traces.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
context_app = typer.Typer(help="Named contexts: which mesh apexctl talks to.", no_args_is_help=True)
app.add_typer(context_app, name="context")


@dataclass
class Options:
    """The global options, handed to every command."""

    context: str | None
    fmt: Format
    timeout: float


@app.callback()
def main(
    ctx: typer.Context,
    context: Annotated[
        str | None,
        typer.Option(
            "--context", "-c", help="A named context or a context file (else $APEXCTL_CONTEXT)."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    output: Annotated[
        Format, typer.Option("--output", "-o", help="table, json or yaml.")
    ] = Format.TABLE,
    timeout: Annotated[float, typer.Option(help="Seconds one call may take.")] = 10.0,
) -> None:
    ctx.obj = Options(context, Format.JSON if json_out else output, timeout)


def options(ctx: typer.Context) -> Options:
    found = ctx.find_root().obj
    assert isinstance(found, Options)  # noqa: S101  (set by the callback)
    return found


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


@contextmanager
def mesh(ctx: typer.Context) -> Iterator[Context]:
    """The context in use, with its services reachable (port-forwards in Kubernetes)."""
    try:
        with reached(contexts.resolve(options(ctx).context)) as context:
            yield context
    except ContextError as exc:
        raise fail(str(exc), 2) from None


def run(coroutine: Awaitable[_T]) -> _T:
    """Run one command's coroutine; admin errors and APEX refusals (their reply code)
    become a message and exit code 1."""

    async def wrapped() -> _T:
        return await coroutine

    try:
        return asyncio.run(wrapped())
    except AdminError as exc:
        raise fail(str(exc)) from None
    except ApexClientError as exc:  # a refused attach, publish ...: the relay's code
        raise fail(f"refused: {exc}") from None
    except ContextError as exc:
        raise fail(str(exc), 2) from None


def with_admin(ctx: typer.Context, work: Callable[[Context, AdminClient], Awaitable[_T]]) -> _T:
    """Run ``work`` with the context and an admin client."""
    with mesh(ctx) as context:

        async def go() -> _T:
            async with AdminClient(context, timeout=options(ctx).timeout) as admin:
                return await work(context, admin)

        return run(go())


def show(ctx: typer.Context, data: Any, **kwargs: Any) -> None:
    emit(data, options(ctx).fmt, **kwargs)


__all__ = ["Options", "app", "context_app", "fail", "mesh", "options", "run", "show", "with_admin"]
