"""The asyncio adapter over real loopback TCP: TLS tuning with per-run certificates, SASL,
MSG/RPY/ERR/ANS exchanges, large messages both ways, and malformed peers."""

from __future__ import annotations

import asyncio
import gc
import ssl
from collections.abc import AsyncIterator, Callable

import pytest
import trustme

from apexmesh.aio import (
    AcceptChannel,
    AuthenticationError,
    BeepConnection,
    Channel,
    ConnectionClosedError,
    RejectChannel,
    Reply,
    connect,
    listen,
)
from apexmesh.aio import connection as connection_module
from apexmesh.aio.tasks import within
from apexmesh.beep import events as ev
from apexmesh.beep.mime import build_entity, split_entity
from apexmesh.beep.sasl import SaslClientExchange, SaslServerExchange, StaticCredentials
from apexmesh.beep.session import Role, SessionConfig
from tests.support.polling import scaled, wait_until

pytestmark = pytest.mark.integration

ECHO = "http://example.com/beep/echo"
CREDENTIALS = StaticCredentials({"fred": "flintstone"})


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_ssl(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    return context


@pytest.fixture(scope="module")
def client_ssl(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(context)
    return context


async def serve_echo(channel: Channel) -> None:
    """Echo every MSG; a body of b'ans' is answered with three ANS and a NUL."""
    while True:
        try:
            incoming = await channel.receive()
        except ConnectionClosedError:
            return
        body = split_entity(incoming.payload).body
        if body == b"fail":
            incoming.error(build_entity(b"<error code='550'>no</error>", "application/beep+xml"))
        elif body == b"ans":
            for i in range(3):
                incoming.answer(build_entity(str(i).encode()))
            incoming.finish()
        else:
            incoming.reply(incoming.payload)


async def accept_echo(
    conn: BeepConnection, request: ev.ChannelStartRequested
) -> AcceptChannel | RejectChannel:
    if any(p.uri == ECHO for p in request.profiles):
        return AcceptChannel(profile=ECHO, content="welcome", serve=serve_echo)
    return RejectChannel(code=550, text="unsupported")


def server_config(tls: bool) -> Callable[[], SessionConfig]:
    def factory(mechanism: str, tls_active: bool) -> SaslServerExchange:
        return SaslServerExchange(
            mechanism, CREDENTIALS, tls_active=tls_active, realm="example.com", host="localhost"
        )

    return lambda: SessionConfig(
        profiles=(ECHO,),
        tls_available=tls,
        sasl_mechanisms=("SCRAM-SHA-256", "DIGEST-MD5", "PLAIN"),
        sasl_server=factory,
    )


@pytest.fixture
async def server(server_ssl: ssl.SSLContext) -> AsyncIterator[tuple[int, list[BeepConnection]]]:
    conns: list[BeepConnection] = []
    srv = await listen(
        "127.0.0.1",
        0,
        server_config(True),
        ssl_context=server_ssl,
        on_start=accept_echo,
        on_connection=conns.append,
    )
    port = srv.sockets[0].getsockname()[1]
    yield port, conns
    for conn in conns:
        conn.abort()
    srv.close()
    await srv.wait_closed()


async def test_echo_over_tls_and_scram(
    server: tuple[int, list[BeepConnection]], client_ssl: ssl.SSLContext
) -> None:
    port, conns = server
    conn = await connect("127.0.0.1", port, ssl_context=client_ssl, server_hostname="localhost")
    assert "http://iana.org/beep/TLS" in conn.greeting.result().profiles
    await conn.start_tls()
    assert conn.session.tls_active
    assert "http://iana.org/beep/TLS" not in conn.greeting.result().profiles
    exchange = SaslClientExchange(
        "SCRAM-SHA-256", authcid="fred", password="flintstone", host="localhost"
    )
    await conn.authenticate("SCRAM-SHA-256", exchange)
    assert conns[0].session.peer_identity == "fred"
    assert conns[0].session.tls_active
    channel = await conn.open_channel(ECHO)
    assert channel.reply_content == "welcome"
    reply = await channel.request(build_entity(b"hello"))
    assert reply.kind == "RPY"
    assert split_entity(reply.payload).body == b"hello"
    failed = await channel.request(build_entity(b"fail"))
    assert failed.kind == "ERR"
    answers = await channel.request(build_entity(b"ans"))
    assert answers.kind == "ANS"
    assert [split_entity(a).body for a in answers.answers] == [
        b"0",
        b"1",
        b"2",
    ]
    await conn.close()
    assert isinstance(conn.closed.result(), ev.SessionClosed)


@pytest.mark.parametrize("mechanism", ["DIGEST-MD5", "SCRAM-SHA-256"])
async def test_right_password_authenticates(
    server: tuple[int, list[BeepConnection]], mechanism: str
) -> None:
    port, conns = server
    conn = await connect("127.0.0.1", port)
    exchange = SaslClientExchange(
        mechanism, authcid="fred", password="flintstone", host="localhost"
    )
    event = await conn.authenticate(mechanism, exchange)
    assert event.mechanism == mechanism
    assert conns[-1].session.peer_identity == "fred"
    channel = await conn.open_channel(ECHO)
    assert (await channel.request(build_entity(b"after auth"))).kind == "RPY"
    await conn.close()


@pytest.mark.parametrize("mechanism", ["DIGEST-MD5", "SCRAM-SHA-256"])
async def test_wrong_password_fails_with_535(
    server: tuple[int, list[BeepConnection]], mechanism: str
) -> None:
    port, conns = server
    conn = await connect("127.0.0.1", port)
    exchange = SaslClientExchange(mechanism, authcid="fred", password="wrong", host="localhost")
    with pytest.raises(AuthenticationError) as info:
        await conn.authenticate(mechanism, exchange)
    assert info.value.code == 535
    assert conns[-1].session.peer_identity is None
    await conn.close()


async def test_plain_refused_without_tls(server: tuple[int, list[BeepConnection]]) -> None:
    port, _ = server
    conn = await connect("127.0.0.1", port)
    exchange = SaslClientExchange("PLAIN", authcid="fred", password="flintstone", host="localhost")
    with pytest.raises(AuthenticationError) as info:
        await conn.authenticate("PLAIN", exchange)
    assert info.value.code == 538
    await conn.close()


async def test_large_messages_both_ways_and_pipelining(
    server: tuple[int, list[BeepConnection]],
) -> None:
    port, _ = server
    conn = await connect("127.0.0.1", port)
    channel = await conn.open_channel(ECHO)
    big = build_entity(bytes(range(256)) * 4096)  # 1 MiB through 4096-octet windows
    futures = [channel.send(big) for _ in range(3)]
    futures += [channel.send(build_entity(str(i).encode())) for i in range(200)]
    replies = await asyncio.gather(*futures)
    assert all(r.payload == big for r in replies[:3])
    assert [split_entity(r.payload).body for r in replies[3:]] == [
        str(i).encode() for i in range(200)
    ]
    await conn.close()


async def test_send_then_calls_back_with_each_reply_in_order(
    server: tuple[int, list[BeepConnection]],
) -> None:
    port, _ = server
    conn = await connect("127.0.0.1", port)
    channel = await conn.open_channel(ECHO)
    got: list[Reply | ConnectionClosedError] = []
    for i in range(50):
        channel.send_then(build_entity(str(i).encode()), got.append)
    channel.send_then(build_entity(b"fail"), got.append)
    await channel.request(build_entity(b"last"))  # replies come in order
    assert [r.kind for r in got if isinstance(r, Reply)] == ["RPY"] * 50 + ["ERR"]
    assert [split_entity(r.payload).body for r in got[:50] if isinstance(r, Reply)] == [
        str(i).encode() for i in range(50)
    ]
    await conn.close()


async def test_send_then_gets_the_error_when_the_session_ends_and_survives_a_bad_callback(
    server: tuple[int, list[BeepConnection]], caplog: pytest.LogCaptureFixture
) -> None:
    port, connections = server
    conn = await connect("127.0.0.1", port)
    channel = await conn.open_channel(ECHO)

    def broken(_: object) -> None:
        raise RuntimeError("callback bug")

    channel.send_then(build_entity(b"one"), broken)
    assert (await channel.request(build_entity(b"two"))).ok  # the connection carries on
    assert "reply callback failed" in caplog.text
    got: list[Reply | ConnectionClosedError] = []
    for peer in connections:  # the server stops reading: our MSG stays unanswered
        assert peer.transport is not None
        peer.transport.pause_reading()
    channel.send_then(build_entity(b"never answered"), got.append)
    conn.abort()
    await conn.closed
    assert len(got) == 1
    assert isinstance(got[0], ConnectionClosedError)


async def test_unknown_profile_is_refused_with_550(
    server: tuple[int, list[BeepConnection]],
) -> None:
    port, _ = server
    conn = await connect("127.0.0.1", port)
    from apexmesh.aio import ChannelStartError

    with pytest.raises(ChannelStartError) as info:
        await conn.open_channel("http://example.com/unknown")
    assert info.value.code == 550
    await conn.close()


async def test_garbage_closes_that_session_and_listener_serves_others(
    server: tuple[int, list[BeepConnection]],
) -> None:
    port, _ = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    greeting = await reader.readuntil(b"END\r\n")
    assert greeting.startswith(b"RPY 0 0 . 0 ")
    writer.write(b"HELO this is not BEEP\r\n")
    await writer.drain()
    assert await within(reader.read(), scaled(5)) == b""  # closed without a response
    writer.close()
    await writer.wait_closed()
    conn = await connect("127.0.0.1", port)
    channel = await conn.open_channel(ECHO)
    assert (await channel.request(build_entity(b"still here"))).kind == "RPY"
    await conn.close()


@pytest.fixture
async def silent_peer() -> AsyncIterator[tuple[int, list[asyncio.StreamWriter]]]:
    """A TCP peer that accepts and never reads or writes: its port, and the server
    side of each connection (closed at teardown)."""
    writers: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)

    srv = await asyncio.start_server(silent, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1], writers
    finally:
        for writer in writers:
            writer.close()
            await writer.wait_closed()
        srv.close()
        await srv.wait_closed()


async def test_idle_timer_counts_from_the_connection(
    silent_peer: tuple[int, list[asyncio.StreamWriter]],
) -> None:
    """A session with an idle limit must not be released at once: the timer starts when
    the connection opens (the event loop's clock is far from zero), before any octet."""
    port, writers = silent_peer
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(
        lambda: BeepConnection(Role.INITIATOR, SessionConfig(idle_seconds=30.0)), "127.0.0.1", port
    )
    timer = conn.session.get_timer()
    assert timer is not None
    assert timer > loop.time() + 20
    conn.abort()
    for _ in range(1000):  # let the server's handler see the connection (no sleeping)
        if writers:
            break
        await asyncio.sleep(0)


async def test_close_cuts_off_a_transport_still_flushing_to_a_peer_that_never_reads(
    silent_peer: tuple[int, list[asyncio.StreamWriter]],
) -> None:
    """asyncio's close() keeps a socket open until its write buffer drains: toward a peer
    that never reads, that is forever (an fd leaked, "unclosed transport" once it is
    collected). close() waits for the flush within its timeout, then drops it."""
    port, _ = silent_peer
    loop = asyncio.get_running_loop()
    transport, conn = await loop.create_connection(
        lambda: BeepConnection(Role.INITIATOR, SessionConfig()), "127.0.0.1", port
    )
    transport.write(b"x" * (64 * 1024 * 1024))  # more than both kernels' buffers
    assert transport.get_write_buffer_size() > 0
    await within(conn.close(timeout=0.2), scaled(10))
    assert conn.transport is None  # connection_lost came: the socket is closed
    assert transport.get_extra_info("socket").fileno() == -1


async def test_abort_cuts_off_what_a_peer_that_never_reads_leaves_buffered(
    silent_peer: tuple[int, list[asyncio.StreamWriter]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """abort() (and a session that ends on its own) lets the buffer go out for
    FLUSH_GRACE_SECONDS, then closes the socket: no await is needed for it to end."""
    monkeypatch.setattr(connection_module, "FLUSH_GRACE_SECONDS", 0.05)
    port, _ = silent_peer
    loop = asyncio.get_running_loop()
    transport, conn = await loop.create_connection(
        lambda: BeepConnection(Role.INITIATOR, SessionConfig()), "127.0.0.1", port
    )
    transport.write(b"x" * (64 * 1024 * 1024))  # more than both kernels' buffers
    conn.abort()
    assert conn.transport is transport  # still flushing, within its grace
    await wait_until(lambda: conn.transport is None, what="the socket cut off after its grace")
    assert transport.get_extra_info("socket").fileno() == -1


async def test_receive_ends_when_the_peer_closes_the_channel(
    server: tuple[int, list[BeepConnection]],
) -> None:
    port, conns = server
    conn = await connect("127.0.0.1", port)
    channel = await conn.open_channel(ECHO)
    assert (await channel.request(build_entity(b"before"))).kind == "RPY"
    served = conns[-1]._channels[channel.number]  # the listener's side of the channel
    await channel.close()
    with pytest.raises(ConnectionClosedError):
        await within(served.receive(), scaled(5))
    await conn.close()


async def test_idle_timeout_counts_from_the_last_activity() -> None:
    """The adapter keeps one idle timer across messages (it is not rescheduled per
    message): activity still pushes the release back, and silence still ends the
    session once the idle limit has passed since the last message."""
    idle = 0.6
    conns: list[BeepConnection] = []
    srv = await listen(
        "127.0.0.1",
        0,
        lambda: SessionConfig(profiles=(ECHO,), idle_seconds=idle),
        on_start=accept_echo,
        on_connection=conns.append,
    )
    port = srv.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    try:
        conn = await connect("127.0.0.1", port)
        channel = await conn.open_channel(ECHO)
        started = last = loop.time()
        while last - started < 2 * idle:  # busy past the idle limit: no release
            await asyncio.sleep(idle / 6)  # pacing of the traffic, not a readiness guess
            assert (await channel.request(build_entity(b"ping"))).kind == "RPY"
            last = loop.time()
        with pytest.raises(ConnectionClosedError):
            await within(channel.receive(), scaled(10))
        assert loop.time() - last >= idle * 0.9  # released by silence, not early
    finally:
        for served in conns:
            served.abort()
        srv.close()
        await srv.wait_closed()


async def test_authentication_error_carries_code_and_the_servers_reason(
    server: tuple[int, list[BeepConnection]],
) -> None:
    port, _ = server
    conn = await connect("127.0.0.1", port)
    exchange = SaslClientExchange(
        "SCRAM-SHA-256", authcid="fred", password="wrong", host="localhost"
    )
    with pytest.raises(AuthenticationError) as info:
        await conn.authenticate("SCRAM-SHA-256", exchange)
    assert info.value.code == 535
    assert "535" in str(info.value)
    assert "authentication failure" in str(info.value)
    await conn.close()


async def test_a_tls_failure_is_logged_once_with_its_reason_on_both_sides(
    server: tuple[int, list[BeepConnection]], caplog: pytest.LogCaptureFixture
) -> None:
    port, conns = server
    stranger = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    trustme.CA().configure_trust(stranger)  # does not trust the listener's CA
    conn = await connect("127.0.0.1", port, ssl_context=stranger, server_hostname="localhost")
    with caplog.at_level("WARNING", logger="apexmesh.aio.connection"):
        with pytest.raises(ConnectionClosedError, match=r"TLS negotiation failed: .+"):
            await conn.start_tls()
        async with asyncio.timeout(scaled(5)):
            await conns[-1].closed
        await asyncio.sleep(0)  # the listener's handshake task finishes its logging
        gc.collect()  # a future whose exception nobody retrieved would be reported now
    failures = [r for r in caplog.records if "TLS negotiation failed" in r.getMessage()]
    assert len(failures) == 2, [r.getMessage() for r in caplog.records]
    for record in failures:
        reason = record.getMessage().partition("TLS negotiation failed")[2]
        assert reason.strip(" :-"), record.getMessage()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_a_hold_during_the_failure_holds_its_answer(
    server: tuple[int, list[BeepConnection]],
) -> None:
    """RFC 4422 section 6.2, issue #34: held while the failure is dispatched, the hold
    delays the 535 itself, not only what the session reads next."""
    port, conns = server
    conn = await connect("127.0.0.1", port)
    listener = conns[-1]
    identities: list[str | None] = []

    def failed(peer: BeepConnection, event: ev.AuthenticationFailed) -> None:
        identities.append(event.identity)
        peer.hold(0.3)

    listener.on_auth_failed = failed
    exchange = SaslClientExchange("SCRAM-SHA-256", authcid="wilma", password="x", host="localhost")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(AuthenticationError) as failure:
        await conn.authenticate("SCRAM-SHA-256", exchange)
    assert loop.time() - started >= 0.29
    assert failure.value.code == 535
    assert identities == ["wilma"]  # claimed, though unknown to the listener
    # once the hold is over the session serves again
    channel = await conn.open_channel(ECHO)
    assert (await channel.request(build_entity(b"after the hold"))).kind == "RPY"
    await conn.close()


async def test_closing_a_held_session_sends_the_held_answer_first(
    server: tuple[int, list[BeepConnection]],
) -> None:
    port, conns = server
    conn = await connect("127.0.0.1", port)
    listener = conns[-1]
    closing: list[asyncio.Task[None]] = []

    def failed(peer: BeepConnection, event: ev.AuthenticationFailed) -> None:
        peer.hold(30.0)
        closing.append(asyncio.get_running_loop().create_task(peer.close(421, timeout=scaled(2.0))))

    listener.on_auth_failed = failed
    exchange = SaslClientExchange("SCRAM-SHA-256", authcid="fred", password="x", host="localhost")
    async with asyncio.timeout(scaled(5)):  # not the 30 s hold
        with pytest.raises(AuthenticationError) as failure:
            await conn.authenticate("SCRAM-SHA-256", exchange)
        assert failure.value.code == 535
        ended = await conn.closed
        await asyncio.gather(*closing)
    assert getattr(ended, "code", None) == 421


async def test_a_per_connection_sasl_factory_sees_the_connection(
    server: tuple[int, list[BeepConnection]],
) -> None:
    port, conns = server
    conn = await connect("127.0.0.1", port, local_host="127.0.0.3")
    listener = conns[-1]
    seen: list[tuple[object, object, str]] = []

    def exchange_for(peer: BeepConnection, mechanism: str, tls_active: bool) -> SaslServerExchange:
        assert isinstance(peer.peer_address, tuple)
        assert isinstance(peer.local_address, tuple)
        seen.append((peer.peer_address[0], peer.local_address[0], mechanism))
        return SaslServerExchange(
            mechanism, CREDENTIALS, tls_active=tls_active, realm="example.com", host="localhost"
        )

    listener.sasl_servers = exchange_for
    exchange = SaslClientExchange(
        "SCRAM-SHA-256", authcid="fred", password="flintstone", host="localhost"
    )
    await conn.authenticate("SCRAM-SHA-256", exchange)
    assert seen == [("127.0.0.3", "127.0.0.1", "SCRAM-SHA-256")]
    await conn.close()


async def test_the_auth_failure_hook_sees_server_side_failures_and_can_hold_the_session(
    server: tuple[int, list[BeepConnection]],
) -> None:
    port, conns = server
    seen: list[tuple[str, int, str]] = []
    conn = await connect("127.0.0.1", port)
    listener = conns[-1]

    def failed(peer: BeepConnection, event: ev.AuthenticationFailed) -> None:
        seen.append((event.mechanism, event.code, event.text))
        peer.hold_reading(0.3)

    listener.on_auth_failed = failed
    exchange = SaslClientExchange(
        "SCRAM-SHA-256", authcid="fred", password="wrong", host="localhost"
    )
    with pytest.raises(AuthenticationError):
        await conn.authenticate("SCRAM-SHA-256", exchange)
    assert [(m, c) for m, c, _ in seen] == [("SCRAM-SHA-256", 535)]
    assert seen[0][2]  # the real reason, for the listener's log
    # The listener reads nothing more from this session until the hold is over.
    started = asyncio.get_running_loop().time()
    channel = await conn.open_channel(ECHO)
    assert asyncio.get_running_loop().time() - started >= 0.25
    assert (await channel.request(build_entity(b"after the hold"))).kind == "RPY"
    await conn.close()


async def test_receive_batch_takes_every_queued_msg_in_order_then_raises_at_the_close() -> None:
    batches: list[list[bytes]] = []
    ended: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    async def serve(channel: Channel) -> None:
        try:
            while True:
                batch = await channel.receive_batch()
                batches.append([split_entity(item.payload).body for item in batch])
                for item in batch:
                    item.reply(item.payload)
        except ConnectionClosedError as exc:
            ended.set_result(exc)

    async def accept(
        conn: BeepConnection, request: ev.ChannelStartRequested
    ) -> AcceptChannel | RejectChannel:
        return AcceptChannel(profile=ECHO, serve=serve)

    srv = await listen("127.0.0.1", 0, lambda: SessionConfig(profiles=(ECHO,)), on_start=accept)
    conn = await connect("127.0.0.1", srv.sockets[0].getsockname()[1])
    try:
        channel = await conn.open_channel(ECHO)
        got: list[Reply | ConnectionClosedError] = []
        for i in range(100):  # written at once: they arrive together, not one per read
            channel.send_then(build_entity(str(i).encode()), got.append)
        await channel.request(build_entity(b"last"))
        sent = [str(i).encode() for i in range(100)] + [b"last"]
        assert [body for batch in batches for body in batch] == sent
        assert max(len(batch) for batch in batches) > 1
        assert len(got) == 100
        assert all(isinstance(r, Reply) and r.ok for r in got)
        await channel.close()
        assert isinstance(await within(ended, scaled(5)), ConnectionClosedError)
    finally:
        await conn.close()
        srv.close()
        await srv.wait_closed()
