"""apexctl's test traffic as an endpoint: ``pub``, ``sub``, ``request``, ``trace``
(apexmesh/cli/traffic.py does the work), and ``cheat``, the examples page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from apexmesh.cli import traffic
from apexmesh.cli.base import app, mesh, options, run, show
from apexmesh.cli.output import Format, emit, err
from apexmesh.ops.adminclient import AdminClient
from apexmesh.ops.targets import Context

As = Annotated[str, typer.Option("--as", help="The endpoint to act as, e.g. fred@example.com.")]
PasswordFile = Annotated[
    Path | None,
    typer.Option(help="A file with the endpoint's SASL password (else $APEXCTL_PASSWORD)."),
]


def _credentials(context: Context, password_file: Path | None) -> traffic.Credentials:
    password = None
    if password_file is not None:
        password = password_file.read_text(encoding="utf-8").strip()
    return traffic.Credentials(context, password)


@app.command("pub")
def pub(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(help="An endpoint (has @) or a topic name.")],
    message: str,
    sender: As,
    password_file: PasswordFile = None,
) -> None:
    """Send MESSAGE to an endpoint, or publish it to a topic of the sender's domain."""
    with mesh(ctx) as context:
        result = run(
            traffic.publish(
                context, _credentials(context, password_file), sender, target, message.encode()
            )
        )
    show(ctx, result)


@app.command("sub")
def sub(
    ctx: typer.Context,
    endpoint: As,
    topic: Annotated[str | None, typer.Argument(help="Subscribe to this topic first.")] = None,
    count: Annotated[int, typer.Option(help="Stop after this many data.")] = 1,
    wait: Annotated[float, typer.Option(help="Stop after this many quiet seconds.")] = 30.0,
    password_file: PasswordFile = None,
) -> None:
    """Attach as an endpoint (subscribed to TOPIC when given) and print what arrives."""
    fmt = options(ctx).fmt

    async def work(context: Context) -> list[dict[str, Any]]:
        got = []
        credentials = _credentials(context, password_file)
        async for item in traffic.subscribe(context, credentials, endpoint, topic, count, wait):
            got.append(item)
            if fmt is Format.TABLE:
                emit([item], fmt, title="received")
        return got

    with mesh(ctx) as context:
        received = run(work(context))
    if fmt is not Format.TABLE:
        show(ctx, received)
    if len(received) < count:
        err.print(f"received {len(received)} of {count} within {wait}s quiet time")
        raise typer.Exit(1)


def _trace(
    ctx: typer.Context,
    sender: str,
    recipient: str,
    message: str,
    password_file: Path | None,
    *,
    receive: bool,
) -> dict[str, Any]:
    timeout = options(ctx).timeout
    with mesh(ctx) as context:

        async def go() -> dict[str, Any]:
            async with AdminClient(context, timeout=timeout) as admin:
                with Progress(
                    SpinnerColumn(),
                    TextColumn("{task.description}"),
                    TimeElapsedColumn(),
                    console=err,
                ) as progress:
                    progress.add_task(
                        f"{sender} -> {recipient}: waiting for the report", total=None
                    )
                    return await traffic.trace(
                        context,
                        _credentials(context, password_file),
                        admin,
                        sender,
                        recipient,
                        message.encode(),
                        timeout,
                        receive=receive,
                    )

        return run(go())


@app.command("request")
def request(
    ctx: typer.Context,
    recipient: str,
    message: str,
    sender: As,
    password_file: PasswordFile = None,
) -> None:
    """Send MESSAGE with a statusRequest and print the statusResponse (APEX's answer to
    'did it arrive')."""
    result = _trace(ctx, sender, recipient, message, password_file, receive=False)
    show(ctx, result["report"], title=f"statusResponse transID {result['trans_id']}")
    if not result["report"] or any(r["code"] != 250 for r in result["report"]):
        raise typer.Exit(1)


@app.command("trace")
def trace(
    ctx: typer.Context,
    sender: Annotated[str, typer.Argument(help="The originator, e.g. fred@example.com.")],
    recipient: Annotated[str, typer.Argument(help="The recipient, e.g. barney@example.com.")],
    message: Annotated[str, typer.Option(help="The content sent.")] = "apexctl trace",
    password_file: PasswordFile = None,
) -> None:
    """Send one data with a statusRequest and show every hop it took and its report."""
    result = _trace(ctx, sender, recipient, message, password_file, receive=True)
    refused = not result["report"] or any(r["code"] != 250 for r in result["report"])
    fmt = options(ctx).fmt
    if fmt is not Format.TABLE:
        show(ctx, result)
    else:
        rows = [
            {
                "pod": hop["pod"],
                "from": hop["origin"],
                "recipient": o["recipient"],
                "route": o["route"],
                "code": o["code"],
                "text": o["text"],
                "at": hop["received_at"],
                "ms": hop["took_ms"],
                "cid": hop["cid"],
            }
            for hop in result["hops"]
            for o in hop["outcomes"]
        ]
        emit(rows, fmt, title=f"{sender} -> {recipient}, transID {result['trans_id']}: hops")
        emit(result["path"], fmt, title="path", columns=["pod", "step", "code"])
        emit(result["report"], fmt, title="statusResponse")
        if result["received"]:
            err.print(f"{recipient} received it at {result['received'].get('at', '?')}")
        elif result["receiver"]:
            err.print(f"{recipient} was not attached by apexctl: {result['receiver']}")
    if refused:
        err.print("[red]refused:[/red] the statusResponse is not 250 for every recipient")
        raise typer.Exit(1)


CHEAT = """\
# point apexctl at the local mesh (scripts/run prints this line)
export APEXCTL_CONTEXT=/tmp/apex-mesh-XXXX/apexctl.yaml
# or at a cluster
apexctl context add prod --kube-context prod --namespace apex --release apex
apexctl status                                  # Nagios exit codes
apexctl servers ls ; apexctl servers ping
apexctl topics ls ; apexctl topics describe demo.news   # or demo.news@example.com
apexctl topics create alerts@example.com ; apexctl topics purge alerts@example.com
apexctl subscriptions ls
apexctl sessions ls ; apexctl sessions kill relay-example.com-1/3
apexctl held ls ; apexctl held ls dino@example.com
apexctl access ls --owner fred@example.com
apexctl access grant fred@example.com '*@rubble.com' core:data
apexctl access deny fred@example.com wilma@rubble.com
apexctl presence ls
apexctl pub --as fred@example.com barney@example.com 'hello'
apexctl sub --as barney@example.com demo.news --count 1
apexctl trace fred@example.com barney@example.com
apexctl drain relay-example.com-2 --wait 60 ; apexctl drain relay-example.com-2 --undo
apexctl held purge dino@example.com             # asks first (--yes: does not)
apexctl credentials add pebbles@example.com --generate   # live, no restart
apexctl credentials passwd fred@example.com ; apexctl credentials rm pebbles@example.com
apexctl certs check --warn-days 30              # Nagios exit codes
apexctl log-level DEBUG --service relay --logger apexmesh.rpc ; apexctl log-level
apexctl catalogue export --output catalogue.yaml ; apexctl catalogue import catalogue.yaml
apexctl bench sub demo.news --as fred@example.com --sub-as barney@example.com --count 10000
apexctl bench request barney@example.com --as fred@example.com --count 2000
apexctl -o yaml topics ls ; apexctl --json servers ls
kubectl apex topics ls                          # the same, as a kubectl plugin
"""


@app.command("cheat")
def cheat() -> None:
    """Examples of every command."""
    typer.echo(CHEAT, nl=False)


__all__ = ["CHEAT"]
