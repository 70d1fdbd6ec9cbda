"""Test traffic as an endpoint (``apexctl pub/sub/request/trace``), with the endpoint SDK.

apexctl attaches as the endpoint named with ``--as`` (or the first argument of
``trace``) to a relay of that endpoint's domain, with TLS against the context's CA and
SASL SCRAM-SHA-256 with the endpoint's password: from the local mesh's credentials file,
or ``$APEXCTL_PASSWORD`` / ``--password-file``.

``trace FROM TO`` sends one data with a statusRequest (RFC 3340 section 5.1), waits for
the statusResponse, and reads the relays' traced hops of that (originator, transID)
(apexmesh/store/hops.py): the path the data took, pod by pod and domain by domain, with
each hop's outcome. When the context knows TO's password and TO is not attached,
apexctl attaches it too, on another relay pod than FROM when the domain has several, so
the trace shows the data cross pods and arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from apexmesh.aio.tasks import within
from apexmesh.apex.endpoint import Endpoint
from apexmesh.cli.output import rfc3339
from apexmesh.client import ApexClient, connect_endpoint
from apexmesh.client.attachment import Attachment
from apexmesh.client.pubsub import PubsubClient
from apexmesh.ops.adminclient import AdminClient, AdminError
from apexmesh.ops.targets import Context, ContextError, Target

ENV_PASSWORD: Final = "APEXCTL_PASSWORD"  # noqa: S105  (a variable name, not a secret)


@dataclass
class Credentials:
    """How apexctl authenticates as endpoints."""

    context: Context
    password: str | None = None

    def of(self, endpoint: str) -> str | None:
        if self.password is not None:
            return self.password
        env = os.environ.get(ENV_PASSWORD)
        if env:
            return env
        return self.context.passwords().get(endpoint)


def relays_of(context: Context, domain: str) -> list[Target]:
    relays = [t for t in context.of("relay", domain) if t.edge]
    if not relays:
        raise ContextError(f"the context has no relay for {domain}")
    return relays


def _ssl(context: Context) -> ssl.SSLContext | None:
    if not context.ca_file:
        return None
    return ssl.create_default_context(cafile=context.ca_file)


@contextlib.asynccontextmanager
async def attached(
    context: Context, credentials: Credentials, endpoint: str, relay: Target | None = None
) -> AsyncIterator[tuple[Attachment, Target]]:
    """Attach as ``endpoint`` (to ``relay``, or the first of its domain)."""
    who = Endpoint.parse(endpoint)
    relay = relay or relays_of(context, who.domain)[0]
    host, _, port = relay.edge.rpartition(":")
    password = credentials.of(str(who))
    tls = _ssl(context)
    client: ApexClient = await connect_endpoint(
        host,
        int(port),
        ssl_context=tls,
        server_hostname="localhost" if tls is not None and host == "127.0.0.1" else None,
        sasl=None if password is None else ("SCRAM-SHA-256", str(who), password),
    )
    try:
        attachment = await client.attach(str(who))
        yield attachment, relay
    finally:
        await client.close(timeout=5.0)


async def publish(
    context: Context, credentials: Credentials, sender: str, target: str, message: bytes
) -> dict[str, Any]:
    """Send ``message`` to an endpoint (``target`` has an ``@``) or publish it to the
    topic ``target`` of the sender's domain."""
    async with attached(context, credentials, sender) as (attachment, relay):
        if "@" in target:
            result = await attachment.send(target, message, content_type="text/plain")
            return {"from": sender, "to": target, "relay": relay.name, "accepted": bool(result)}
        domain = Endpoint.parse(sender).domain
        pubsub = PubsubClient(attachment, domain=domain)
        try:
            await pubsub.publish(target, message, content_type="text/plain")
        finally:
            await pubsub.aclose()
        return {
            "from": sender,
            "topic": f"{target}@{domain}",
            "relay": relay.name,
            "accepted": True,
        }


async def subscribe(
    context: Context,
    credentials: Credentials,
    endpoint: str,
    topic: str | None,
    count: int,
    timeout: float,  # noqa: ASYNC109  (the command's own bound)
) -> AsyncIterator[dict[str, Any]]:
    """Attach as ``endpoint`` (subscribed to ``topic`` when given) and yield what
    arrives, ``count`` data at most, until ``timeout`` seconds pass without any."""
    async with attached(context, credentials, endpoint) as (attachment, _relay):
        pubsub = None
        if topic:
            pubsub = PubsubClient(attachment, domain=Endpoint.parse(endpoint).domain)
            await pubsub.subscribe(topic, duration=max(60, int(timeout) + 10))
        try:
            for _ in range(count):
                try:
                    if pubsub is not None:
                        name, data = await within(pubsub.next_publication(), timeout)
                    else:
                        data = await within(attachment.receive(), timeout)
                        name = ""
                except TimeoutError:
                    return
                yield {
                    "topic": name,
                    "from": str(data.originator),
                    "content_type": data.content_type,
                    "content": data.content.decode("utf-8", "replace"),
                }
        finally:
            if pubsub is not None:
                await pubsub.aclose()


async def ready_relays(admin: AdminClient, context: Context, domain: str) -> list[Target]:
    """The relays of ``domain`` that are ready (a draining pod refuses new sessions and
    attaches: trace and bench never pick one); ContextError when none is."""
    relays = relays_of(context, domain)
    probes = await asyncio.gather(*(admin.probe(t) for t in relays))
    ready = [p.target for p in probes if p.ready]
    if not ready:
        raise ContextError(f"no relay of {domain} is ready")
    return ready


async def _maybe_receiver(
    context: Context,
    credentials: Credentials,
    admin: AdminClient,
    recipient: str,
    avoid: Target,
) -> tuple[contextlib.AsyncExitStack, Attachment | None, Target | None, str]:
    """Attach ``recipient`` on another ready pod when apexctl can (module docstring);
    the attachment, its relay, and why there is none."""
    stack = contextlib.AsyncExitStack()
    who = Endpoint.parse(recipient)
    if credentials.of(str(who)) is None:
        return stack, None, None, "apexctl has no password for it"
    try:
        relays = await ready_relays(admin, context, who.domain)
    except ContextError as exc:
        return stack, None, None, str(exc)
    relay = next((r for r in relays if r.name != avoid.name), relays[0])
    try:
        attachment, _ = await stack.enter_async_context(
            attached(context, credentials, recipient, relay)
        )
    except Exception as exc:  # noqa: BLE001  (attached elsewhere, refused: said in the result)
        await stack.aclose()
        return contextlib.AsyncExitStack(), None, None, f"not attached at {relay.name}: {exc}"
    return stack, attachment, relay, ""


async def trace(
    context: Context,
    credentials: Credentials,
    admin: AdminClient,
    sender: str,
    recipient: str,
    message: bytes,
    timeout: float,  # noqa: ASYNC109  (the command's own bound)
    *,
    receive: bool = True,
) -> dict[str, Any]:
    """Send with a statusRequest and gather the report and every hop (see the module
    docstring); ``receive`` false never attaches the recipient (``apexctl request``:
    the recipient is someone else's application)."""
    sender_domain = Endpoint.parse(sender).domain
    first = (await ready_relays(admin, context, sender_domain))[0]
    receiver_relay: Target | None = None
    why_not = "not asked to receive"
    if receive:
        stack, receiver, receiver_relay, why_not = await _maybe_receiver(
            context, credentials, admin, recipient, first
        )
    else:
        stack, receiver = contextlib.AsyncExitStack(), None
    async with stack, attached(context, credentials, sender, first) as (attachment, relay):
        result = await attachment.send(
            recipient, message, content_type="text/plain", status_request=True
        )
        trans_id = result.status_trans_id
        received = None
        if receiver is not None:
            with contextlib.suppress(TimeoutError):
                data = await within(receiver.receive(), timeout)
                received = {"by": recipient, "from": str(data.originator)}
        reports: list[dict[str, Any]] = []
        with contextlib.suppress(Exception):
            for report in await result.reports(1, timeout=timeout):
                reports.extend(
                    {
                        "destination": str(d.identity),
                        "code": int(d.reply.code),
                        "text": d.reply.text,
                    }
                    for d in report.destinations
                )
    hops = await _hops(context, admin, sender, trans_id, expected=_domains(sender, recipient))
    if received is not None and receiver_relay is not None:
        received["at"] = receiver_relay.name
    return {
        "originator": sender,
        "recipient": recipient,
        "trans_id": trans_id,
        "sent_via": relay.name,
        "received": received,
        "receiver": "" if receiver is not None else why_not,
        "report": reports,
        "hops": hops,
        "path": path_of(relay.name, hops, received),
    }


def path_of(
    sent_via: str, hops: list[dict[str, Any]], received: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Every pod the data crossed, in order: the pod apexctl sent through, each traced
    hop's routes, and the pod that delivered it. A pod that only delivers data handed
    over by another pod of its domain records no hop of its own; its row comes from
    the forwarding pod's route (``pod NAME``) and, when apexctl attached the recipient,
    from what that attachment received."""
    steps: list[dict[str, Any]] = [{"pod": sent_via, "step": "sent by apexctl", "code": ""}]
    for hop in hops:
        for outcome in hop["outcomes"]:
            steps.append(
                {
                    "pod": hop["pod"],
                    "step": f"routed {outcome['recipient']}: {outcome['route']}",
                    "code": outcome["code"],
                }
            )
            kind, _, where = outcome["route"].partition(" ")
            if kind in ("pod", "local") and where and outcome["code"] == 250:
                steps.append(
                    {"pod": where, "step": f"delivered to {outcome['recipient']}", "code": 250}
                )
    if received is not None and received.get("at"):
        steps.append({"pod": received["at"], "step": f"received by {received['by']}", "code": ""})
    return steps


def _domains(*endpoints: str) -> set[str]:
    return {Endpoint.parse(e).domain for e in endpoints}


async def _hops(
    context: Context, admin: AdminClient, originator: str, trans_id: int | None, expected: set[str]
) -> list[dict[str, Any]]:
    """The traced hops of (originator, transID) from one relay per domain, in time
    order; waits a little for each expected domain's hop (they are written just after
    the report is asked for)."""
    if trans_id is None:
        return []
    per_domain: dict[str, Target] = {}
    for target in context.of("relay"):
        per_domain.setdefault(target.domain, target)
    hops: list[dict[str, Any]] = []
    for _ in range(20):
        hops = []
        for target in per_domain.values():
            try:
                hops += await admin.get(target, "/hops", originator=originator, trans_id=trans_id)
            except AdminError:
                continue
        if expected <= {h["domain"] for h in hops}:
            break
        await asyncio.sleep(0.25)
    ordered = sorted(hops, key=lambda h: (h["received_ms"], h["pod"]))
    for hop in ordered:  # one time format in apexctl's output: RFC 3339
        hop["received_at"] = rfc3339_ms(hop["received_ms"])
        hop["concluded_at"] = rfc3339_ms(hop["concluded_ms"])
        hop["took_ms"] = hop.pop("concluded_ms") - hop.pop("received_ms")
    return ordered


def rfc3339_ms(epoch_ms: int) -> str:
    """RFC 3339 UTC to the millisecond (hops of one trace are milliseconds apart)."""
    seconds, millis = divmod(int(epoch_ms), 1000)
    return f"{rfc3339(seconds)[:-1]}.{millis:03d}Z"


__all__ = ["Credentials", "attached", "publish", "subscribe", "trace"]
