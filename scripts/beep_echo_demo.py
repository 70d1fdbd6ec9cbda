"""The README's run command: a BEEP echo listener and a client on loopback.

The client tunes the session to TLS (certificates made for this run only), authenticates
with SASL SCRAM-SHA-256 (a password made for this run only), starts an echo channel,
exchanges messages (one of them 1 MiB, sent through 4096-octet windows) and releases the
session, printing each step. Nothing here is a stub: it is the same BEEP core and asyncio
adapter the tests and services use.
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
import sys
import time

import trustme

from apexmesh.aio import (
    AcceptChannel,
    BeepConnection,
    Channel,
    ConnectionClosedError,
    connect,
    listen,
)
from apexmesh.beep import events as ev
from apexmesh.beep.mime import build_entity, split_entity
from apexmesh.beep.sasl import SaslClientExchange, SaslServerExchange, StaticCredentials
from apexmesh.beep.session import SessionConfig

ECHO = "http://apex-mesh.dev/beep/echo"
#: The listener narrates the first messages only; the pipelined burst is summarised.
QUIET_AFTER = 4


def say(who: str, text: str) -> None:
    print(f"{who:>9} | {text}", flush=True)


async def serve_echo(channel: Channel) -> None:
    while True:
        try:
            incoming = await channel.receive()
        except ConnectionClosedError:
            return
        if incoming.msgno < QUIET_AFTER:
            say(
                "listener",
                f"MSG {incoming.msgno} on channel {channel.number}: "
                f"{len(incoming.payload)} octets, echoing",
            )
        incoming.reply(incoming.payload)


async def on_start(conn: BeepConnection, request: ev.ChannelStartRequested) -> AcceptChannel:
    who = conn.session.peer_identity or "anonymous"
    say(
        "listener",
        f"start channel {request.channel} for {who}: {[p.uri for p in request.profiles]}",
    )
    return AcceptChannel(profile=ECHO, content="echo ready", serve=serve_echo)


async def main() -> int:
    password = secrets.token_urlsafe(16)
    credentials = StaticCredentials({"fred": password})
    ca = trustme.CA()
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ssl)
    client_ssl = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(client_ssl)

    def sasl_server(mechanism: str, tls_active: bool) -> SaslServerExchange:
        return SaslServerExchange(
            mechanism, credentials, tls_active=tls_active, realm="localhost", host="localhost"
        )

    def config() -> SessionConfig:
        return SessionConfig(
            profiles=(ECHO,),
            tls_available=True,
            sasl_mechanisms=("SCRAM-SHA-256", "DIGEST-MD5"),
            sasl_server=sasl_server,
        )

    server = await listen("127.0.0.1", 0, config, ssl_context=server_ssl, on_start=on_start)
    port = server.sockets[0].getsockname()[1]
    say("listener", f"BEEP listening on 127.0.0.1:{port}")

    conn = await connect("127.0.0.1", port, ssl_context=client_ssl, server_hostname="localhost")
    say("client", f"greeting offers {list(conn.greeting.result().profiles)}")
    await conn.start_tls()
    if conn.transport is None:
        raise RuntimeError("connection lost during TLS tuning")
    cipher = conn.transport.get_extra_info("cipher")
    say(
        "client",
        f"TLS tuned: {cipher[1]} {cipher[0]}; new greeting offers "
        f"{list(conn.greeting.result().profiles)}",
    )
    exchange = SaslClientExchange(
        "SCRAM-SHA-256", authcid="fred", password=password, host="localhost"
    )
    await conn.authenticate("SCRAM-SHA-256", exchange)
    say("client", "authenticated as fred with SASL SCRAM-SHA-256")
    channel = await conn.open_channel(ECHO)
    say("client", f"channel {channel.number} started, listener said {channel.reply_content!r}")
    for text in ("yabba", "dabba", "doo"):
        reply = await channel.request(build_entity(text.encode(), "text/plain"))
        say("client", f"sent {text!r}, got {reply.kind} {split_entity(reply.payload).body!r}")
    big = build_entity(secrets.token_bytes(1 << 20))
    started = time.perf_counter()
    reply = await channel.request(big)
    elapsed = time.perf_counter() - started
    say(
        "client",
        f"1 MiB echoed intact: {reply.payload == big} in {elapsed * 1000:.1f} ms "
        "(4096-octet windows, SEQ flow control)",
    )
    count = 2000
    started = time.perf_counter()
    replies = await asyncio.gather(*(channel.send(build_entity(b"x" * 256)) for _ in range(count)))
    elapsed = time.perf_counter() - started
    say(
        "client",
        f"{count} pipelined 256-octet MSG/RPY exchanges: "
        f"{count / elapsed:,.0f} per second, all ok: {all(r.ok for r in replies)}",
    )
    await channel.close()
    say("client", f"channel {channel.number} closed")
    await conn.close()
    closed = conn.closed.result()
    say("client", f"session released ({type(closed).__name__}, code {getattr(closed, 'code', '')})")
    server.close()
    await server.wait_closed()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
