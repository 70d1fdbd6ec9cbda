"""apexctl's operator tasks that change a running mesh: ``held purge``, ``credentials
add/passwd/rm``, ``log-level`` and ``certs check``.

``credentials`` edits the relays' SASL file (``identity:password`` lines,
services/relay/settings.py) and lets the relays take it live (services/relay/reloading.py,
no restart, sessions kept):

* in the local mesh it rewrites the context's credentials file (atomically, mode 0600)
  and asks every relay to reload it now (``POST /admin/v1/reload``);
* in Kubernetes it patches the release's SASL Secret (``FULLNAME-relay-sasl``, or
  ``--secret`` for ``relay.sasl.existingSecret``; the key ``credentials``), which the
  kubelet writes into every relay pod's volume within its sync period (about a minute),
  where the relays see it at their next look (``APEXMESH_RELAY_RELOAD_SECONDS``);
  ``--wait`` waits until every relay says it loaded new credentials.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import secrets
import ssl
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from cryptography import x509

from apexmesh.aio.tasks import within
from apexmesh.apex.endpoint import Endpoint, EndpointError, normalize_domain
from apexmesh.cli.base import app, fail, options, show, with_admin
from apexmesh.cli.commands import held_app
from apexmesh.cli.output import err, rfc3339
from apexmesh.ops.adminclient import AdminClient, AdminError
from apexmesh.ops.targets import Context, ContextError, Target

credentials_app = typer.Typer(
    help="Endpoints' SASL credentials, applied live by the relays.", no_args_is_help=True
)
certs_app = typer.Typer(help="The relays' TLS certificates.", no_args_is_help=True)
app.add_typer(credentials_app, name="credentials")
app.add_typer(certs_app, name="certs")

#: The chart's key of the credentials file in the SASL Secret (relay.sasl.key).
SECRET_KEY = "credentials"  # noqa: S105  (a key name, not a secret)


def _relay_of(context: Context, endpoint: str) -> Target:
    try:
        domain = Endpoint.parse(endpoint).domain
    except (EndpointError, ValueError):
        raise ContextError(f"{endpoint!r} is not an endpoint") from None
    relays = context.of("relay", domain)
    if not relays:
        raise ContextError(f"no relay for {domain}")
    return relays[0]


# ---------------------------------------------------------------- held data


@held_app.command("purge")
def held_purge(
    ctx: typer.Context,
    endpoint: Annotated[str, typer.Argument(help="The endpoint whose held data goes.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Remove every data held for ENDPOINT (RFC 3342 hold4Endpoint), as RabbitMQ's
    purge: no report is sent for it. Asks first unless --yes."""

    async def count(context: Context, admin: AdminClient) -> int:
        relay = _relay_of(context, endpoint)
        held = await admin.get(relay, "/held")
        return sum(int(row["count"]) for row in held if row["endpoint"] == endpoint)

    held = with_admin(ctx, count)
    if held == 0:
        show(ctx, {"endpoint": endpoint, "purged": 0})
        return
    if not yes and not typer.confirm(
        f"purge {held} data held for {endpoint}? They are lost, and no report is sent",
        err=True,
    ):
        raise fail("not purged", 1)

    async def purge(context: Context, admin: AdminClient) -> dict[str, Any]:
        relay = _relay_of(context, endpoint)
        return dict(await admin.call(relay, "DELETE", f"/held/{endpoint}"))

    show(ctx, with_admin(ctx, purge))


# ---------------------------------------------------------------- credentials


def _identity(text: str) -> str:
    """An endpoint (``fred@example.com``) or a peer relay's domain."""
    try:
        if "@" in text:
            return str(Endpoint.parse(text))
        return normalize_domain(text)
    except (EndpointError, ValueError):
        raise fail(f"{text!r} is neither an endpoint nor a domain", 2) from None


def edit_lines(text: str, identity: str, password: str | None) -> tuple[str, bool]:
    """``text`` with ``identity``'s line set to ``password`` (removed when None), other
    lines and comments kept in order; and whether ``identity`` had a line."""
    out, had = [], False
    for line in text.splitlines():
        who, sep, _ = line.partition(":")
        if sep and not line.lstrip().startswith("#") and who.strip() == identity:
            had = True
            if password is not None:
                out.append(f"{identity}:{password}")
            continue
        out.append(line)
    if password is not None and not had:
        out.append(f"{identity}:{password}")
    return "".join(f"{line}\n" for line in out), had


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` in one rename, readable by its owner only (it holds passwords)."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    temporary = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        temporary.chmod(0o600)
        temporary.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _secret(context: Context, name: str) -> tuple[Any, str]:
    from apexmesh.cli.kube import core_api, fullname

    return core_api(context), name or f"{fullname(context.release)}-relay-sasl"


def _change(
    ctx: typer.Context,
    identity: str,
    password: str | None,
    *,
    must_exist: bool,
    secret: str,
    key: str,
    wait: float,
) -> dict[str, Any]:
    """Apply one change (see the module docstring) and report what each relay did."""

    async def work(context: Context, admin: AdminClient) -> dict[str, Any]:
        relays = context.of("relay")
        before = {t.name: await _sasl_fingerprint(admin, t) for t in relays}
        where = _apply(context, identity, password, must_exist=must_exist, secret=secret, key=key)
        results: dict[str, str] = {}
        if context.kind != "kubernetes":
            for target in relays:
                try:
                    answer = await admin.call(target, "POST", "/reload")
                    results[target.name] = answer["results"].get("sasl", "not watched")
                except AdminError as exc:
                    results[target.name] = f"failed: {exc}"
                    continue
                # The relay's own watcher may have taken the file between the write and
                # this call (every APEXMESH_RELAY_RELOAD_SECONDS): the call then finds
                # nothing new, yet the relay answers with the new credentials.
                if results[target.name] == "unchanged":
                    now = await _sasl_fingerprint(admin, target)
                    if now and now != before[target.name]:
                        results[target.name] = "reloaded"
        elif wait > 0:
            results = await _await_reload(admin, relays, before, wait)
        else:
            results = {t.name: "the kubelet updates the volume; see --wait" for t in relays}
        return {"identity": identity, "changed": where, "relays": results}

    answer = with_admin(ctx, work)
    if any(str(r).startswith("failed") for r in answer["relays"].values()):
        show(ctx, answer)
        raise typer.Exit(1)
    return answer


def _apply(
    context: Context,
    identity: str,
    password: str | None,
    *,
    must_exist: bool,
    secret: str,
    key: str,
) -> str:
    if context.kind == "kubernetes":
        core, name = _secret(context, secret)
        try:
            found = core.read_namespaced_secret(name, context.namespace)
        except Exception as exc:  # noqa: BLE001  (ApiException or transport errors)
            raise ContextError(f"cannot read Secret {context.namespace}/{name}: {exc}") from None
        raw = (found.data or {}).get(key)
        text = "" if raw is None else base64.b64decode(raw).decode("utf-8")
        changed, had = edit_lines(text, identity, password)
        if must_exist and not had:
            raise ContextError(f"{identity} has no credentials in Secret {name}")
        body = {"data": {key: base64.b64encode(changed.encode()).decode()}}
        try:
            core.patch_namespaced_secret(name, context.namespace, body)
        except Exception as exc:  # noqa: BLE001
            raise ContextError(f"cannot patch Secret {context.namespace}/{name}: {exc}") from None
        return f"Secret {context.namespace}/{name}"
    if not context.credentials_file:
        raise ContextError("this context names no credentials file (a development run?)")
    path = Path(context.credentials_file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ContextError(f"credentials file: {exc}") from None
    changed, had = edit_lines(text, identity, password)
    if must_exist and not had:
        raise ContextError(f"{identity} has no credentials in {path}")
    _write_atomically(path, changed)
    return str(path)


async def _sasl_fingerprint(admin: AdminClient, target: Target) -> str:
    try:
        info = await admin.get(target, "/info")
    except AdminError:
        return ""
    return str(info.get("details", {}).get("material", {}).get("sasl", {}).get("fingerprint", ""))


async def _await_reload(
    admin: AdminClient, relays: list[Target], before: dict[str, str], wait: float
) -> dict[str, str]:
    deadline = time.monotonic() + wait
    results = {t.name: "not yet" for t in relays}
    while True:
        for target in relays:
            if results[target.name] == "reloaded":
                continue
            now = await _sasl_fingerprint(admin, target)
            if now and now != before[target.name]:
                results[target.name] = "reloaded"
        if all(r == "reloaded" for r in results.values()) or time.monotonic() > deadline:
            return results
        await asyncio.sleep(1.0)


def _password(password_file: Path | None, generate: bool) -> tuple[str, bool]:
    """The new password and whether apexctl made it (then it is printed once)."""
    if password_file is not None:
        password = password_file.read_text(encoding="utf-8").strip()
    elif generate:
        return secrets.token_urlsafe(18), True
    else:
        password = typer.prompt("password", hide_input=True, confirmation_prompt=True, err=True)
    if not password or "\n" in password:
        raise fail("the password is empty or has a line break", 2)
    return password, False


Identity = Annotated[str, typer.Argument(help="An endpoint (fred@example.com) or a domain.")]
PasswordFileOpt = Annotated[
    Path | None, typer.Option(help="Read the new password from this file (else asked).")
]
Generate = Annotated[bool, typer.Option(help="Make a random password and print it once.")]
SecretOpt = Annotated[
    str, typer.Option(help="Kubernetes: the SASL Secret (relay.sasl.existingSecret).")
]
KeyOpt = Annotated[str, typer.Option(help="Kubernetes: the Secret's key (relay.sasl.key).")]
WaitOpt = Annotated[
    float, typer.Option(help="Kubernetes: seconds to wait for every relay to reload it.")
]


def _set(
    ctx: typer.Context,
    identity: str,
    password_file: Path | None,
    generate: bool,
    *,
    must_exist: bool,
    secret: str,
    key: str,
    wait: float,
) -> None:
    who = _identity(identity)
    password, made = _password(password_file, generate)
    answer = _change(ctx, who, password, must_exist=must_exist, secret=secret, key=key, wait=wait)
    if made:
        answer["password"] = password
    show(ctx, answer)


@credentials_app.command("add")
def credentials_add(
    ctx: typer.Context,
    identity: Identity,
    password_file: PasswordFileOpt = None,
    generate: Generate = False,
    secret: SecretOpt = "",
    key: KeyOpt = SECRET_KEY,
    wait: WaitOpt = 0.0,
) -> None:
    """Give IDENTITY a SASL password (replacing one it had); live, no restart."""
    _set(
        ctx, identity, password_file, generate, must_exist=False, secret=secret, key=key, wait=wait
    )


@credentials_app.command("passwd")
def credentials_passwd(
    ctx: typer.Context,
    identity: Identity,
    password_file: PasswordFileOpt = None,
    generate: Generate = False,
    secret: SecretOpt = "",
    key: KeyOpt = SECRET_KEY,
    wait: WaitOpt = 0.0,
) -> None:
    """Change the password of an IDENTITY that has one. Sessions already
    authenticated stay (close them with 'apexctl sessions kill')."""
    _set(ctx, identity, password_file, generate, must_exist=True, secret=secret, key=key, wait=wait)


@credentials_app.command("rm")
def credentials_rm(
    ctx: typer.Context,
    identity: Identity,
    secret: SecretOpt = "",
    key: KeyOpt = SECRET_KEY,
    wait: WaitOpt = 0.0,
) -> None:
    """Remove IDENTITY's password: its next SASL exchange fails."""
    who = _identity(identity)
    show(ctx, _change(ctx, who, None, must_exist=True, secret=secret, key=key, wait=wait))


# ---------------------------------------------------------------- log level


@app.command("log-level")
def log_level(
    ctx: typer.Context,
    level: Annotated[
        str | None, typer.Argument(help="DEBUG, INFO, WARNING, ERROR; none: show the levels.")
    ] = None,
    logger: Annotated[str, typer.Option(help='A logger (e.g. apexmesh.rpc); "": root.')] = "",
    pod: Annotated[str | None, typer.Option(help="Only this pod.")] = None,
    service: Annotated[str | None, typer.Option(help="Only this service's pods.")] = None,
) -> None:
    """Show or set the log level of running services (until they restart)."""

    async def work(context: Context, admin: AdminClient) -> list[dict[str, Any]]:
        targets = [
            t
            for t in context.services
            if (pod is None or t.name == pod) and (service is None or t.service == service)
        ]
        if not targets:
            raise ContextError("no pod matches")

        async def one(target: Target) -> dict[str, Any]:
            if level is None:
                answer = await admin.get(target, "/log-level", logger=logger)
            else:
                body = {"level": level.upper(), "logger": logger}
                answer = await admin.call(target, "PUT", "/log-level", json=body)
            return {"pod": target.name, "service": target.service, **answer}

        return list(await asyncio.gather(*(one(t) for t in targets)))

    show(
        ctx,
        with_admin(ctx, work),
        title="log levels",
        columns=["pod", "service", "logger", "level"],
    )


# ---------------------------------------------------------------- certificates


async def _served(target: Target, ca_file: str, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109
    """The certificate a relay serves on its apex-edge port after BEEP TLS tuning, and
    whether the context's CA (or the system's roots) verifies it."""
    from apexmesh.aio import connect

    host, _, port = target.edge.rpartition(":")

    async def handshake(context: ssl.SSLContext) -> bytes:
        conn = await within(
            connect(host, int(port), ssl_context=context, server_hostname="localhost"), timeout
        )
        try:
            await within(conn.start_tls(), timeout)
            assert conn.transport is not None  # noqa: S101  (tuned)
            der = conn.transport.get_extra_info("ssl_object").getpeercert(binary_form=True)
            return bytes(der)
        finally:
            await conn.close(timeout=2.0)

    verify = ssl.create_default_context(cafile=ca_file or None)
    verify.check_hostname = False  # names are reported, not judged, here
    problem = ""
    try:
        der = await handshake(verify)
    except Exception as exc:  # noqa: BLE001  (any failure is the finding)
        problem = f"not verified: {exc}"
        lenient = ssl.create_default_context()
        lenient.check_hostname = False
        lenient.verify_mode = ssl.CERT_NONE
        der = await handshake(lenient)
    cert = x509.load_der_x509_certificate(der)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = [*names.get_values_for_type(x509.DNSName)]
        dns += [str(a) for a in names.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        dns = []
    return {
        "pod": target.name,
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "names": dns,
        "not_before": rfc3339(cert.not_valid_before_utc.timestamp()),
        "not_after": rfc3339(cert.not_valid_after_utc.timestamp()),
        "days_left": (cert.not_valid_after_utc - datetime.now(UTC)).days,
        "verified": not problem,
        "problem": problem,
    }


@certs_app.command("check")
def certs_check(
    ctx: typer.Context,
    warn_days: Annotated[int, typer.Option(help="WARNING below this many days left.")] = 30,
    critical_days: Annotated[int, typer.Option(help="CRITICAL below this many days.")] = 7,
) -> None:
    """The certificate each relay serves (after BEEP TLS tuning): names, expiry, trust.
    Exits like a Nagios plugin: 0 OK, 1 WARNING (expires within --warn-days), 2 CRITICAL
    (within --critical-days, expired or not verified)."""
    timeout = options(ctx).timeout

    async def work(context: Context, _admin: AdminClient) -> list[dict[str, Any]]:
        relays = [t for t in context.of("relay") if t.edge]
        if not relays:
            raise ContextError("the context has no relay with an apex-edge port")
        return list(await asyncio.gather(*(_served(t, context.ca_file, timeout) for t in relays)))

    rows = with_admin(ctx, work)
    show(ctx, rows, title="relay certificates", columns=_CERT_COLUMNS)
    worst = max((_severity(r, warn_days, critical_days) for r in rows), default=0)
    if worst:
        err.print("[yellow]WARNING[/yellow]" if worst == 1 else "[red]CRITICAL[/red]")
    raise typer.Exit(worst)


_CERT_COLUMNS = ["pod", "subject", "names", "not_after", "days_left", "verified", "problem"]


def _severity(row: dict[str, Any], warn: int, critical: int) -> int:
    if not row["verified"] or row["days_left"] < critical:
        return 2
    return 1 if row["days_left"] < warn else 0


__all__ = ["edit_lines"]
