"""``python -m apexmesh.client.smoke``: attach one endpoint to a relay and exchange data.

The Helm chart's ``helm test`` runs this in a pod against the release's relay Service:
tune TLS (certificate checked against the CA and server name given), authenticate with
SASL SCRAM-SHA-256, attach ``--identity``, send one data to itself with statusRequest,
and require both the data back and the final statusResponse (250). Each step prints one
line; exit 0 when all passed, 1 (with the reason) otherwise.

The password is read from ``--password-file`` (a mounted Secret), never from the command
line.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from apexmesh.aio.tasks import within
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.beep.errors import BeepError
from apexmesh.client.client import connect_endpoint
from apexmesh.client.errors import ApexClientError

#: The SASL mechanism the smoke test authenticates with (RFC 7677).
MECHANISM = "SCRAM-SHA-256"


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class SmokeError(RuntimeError):
    """A step of the exchange did not give what it must."""


async def exchange(
    host: str,
    port: int,
    *,
    identity: str,
    password: str,
    sasl_name: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    timeout: float = 15.0,  # noqa: ASYNC109  (bounds each step)
    say: Callable[[str], None] | None = None,
) -> None:
    """Attach ``identity`` at ``host:port`` and exchange one data with itself."""
    say = say or _say
    started = time.monotonic()
    client = await connect_endpoint(
        host,
        port,
        ssl_context=ssl_context,
        server_hostname=server_hostname,
        sasl=(MECHANISM, sasl_name or identity, password),
        timeout=timeout,
    )
    try:
        say(f"connected to {host}:{port} ({'TLS' if ssl_context else 'plaintext'}, {MECHANISM})")
        attachment = await within(client.attach(identity), timeout)
        say(f"attached {identity}")
        token = uuid.uuid4().hex.encode()
        result = await within(
            attachment.send(
                identity,
                b"apex-mesh smoke " + token,
                content_type="text/plain",
                status_request=True,
            ),
            timeout,
        )
        say("sent one data to itself with statusRequest: relay said ok")
        data = await within(attachment.receive(), timeout)
        if not data.content.endswith(token):
            raise SmokeError(f"received other data than sent: {data.content!r}")
        say(f"received it back from {data.originator}")
        reports = await result.reports(1, timeout=timeout)
        codes = [int(d.reply.code) for report in reports for d in report.destinations]
        if codes != [int(ApexReplyCode.SUCCESS)]:
            raise SmokeError(f"statusResponse codes {codes}, expected [250]")
        say(f"statusResponse 250 in {time.monotonic() - started:.2f}s")
        await within(attachment.terminate(), timeout)
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Attach an endpoint and exchange data.")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=10288)
    parser.add_argument("--identity", required=True, help="endpoint to attach (NAME@DOMAIN)")
    parser.add_argument("--password-file", type=Path, required=True)
    parser.add_argument("--sasl-name", help="SASL authentication identity (default: identity)")
    parser.add_argument("--ca", type=Path, help="CA bundle; without it the session is plaintext")
    parser.add_argument("--server-name", help="name the relay's certificate must carry")
    parser.add_argument("--timeout", type=float, default=15.0)
    args = parser.parse_args(argv)
    context = None if args.ca is None else ssl.create_default_context(cafile=str(args.ca))
    password = args.password_file.read_text(encoding="utf-8").strip()
    try:
        asyncio.run(
            exchange(
                args.host,
                args.port,
                identity=args.identity,
                password=password,
                sasl_name=args.sasl_name,
                ssl_context=context,
                server_hostname=args.server_name,
                timeout=args.timeout,
                say=_say,
            )
        )
    except (OSError, TimeoutError, SmokeError, BeepError, ApexClientError) as exc:
        _say(f"FAILED: {type(exc).__name__}: {exc}")
        return 1
    _say("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
