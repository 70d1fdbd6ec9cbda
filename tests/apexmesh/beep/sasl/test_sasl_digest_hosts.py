"""DIGEST-MD5's digest-uri (RFC 2831 section 2.1.2: ``serv-type/host``) for every name a
relay answers to. A Vortex 1.1 client that dialled ``relay1.example.com`` sends
``digest-uri="beep/relay1.example.com"``; the relay serves ``example.com`` and must
accept its own host names too, not only the domain, and the address a client dialled
(issue #29: ``beep/<IP>`` for the address the session was made to)."""

from __future__ import annotations

import pytest

from apexmesh.beep.sasl import SaslServerExchange, StaticCredentials
from apexmesh.beep.sasl.blob import encode_blob, parse_blob, parse_element
from apexmesh.beep.sasl.digest_md5 import compute_response, parse_directives
from apexmesh.beep.sasl.servers import SaslServers, address_names

pytestmark = pytest.mark.unit

CREDENTIALS = StaticCredentials({"fred@example.com": "flintstone"})
NONCE = "OA6MG9tEQGm2hh"
CNONCE = "OA6MHXh6VqTrRk"


def vortex_response(digest_uri: str, nonce: str = NONCE) -> bytes:
    """A digest-response in the form and order Vortex 1.1 (through GNU SASL) sends."""
    response = compute_response(
        username="fred@example.com",
        realm="example.com",
        password="flintstone",
        nonce=nonce,
        cnonce=CNONCE,
        nc="00000001",
        qop="auth",
        digest_uri=digest_uri,
        authzid=None,
    )
    return (
        f'username="fred@example.com",realm="example.com",nonce="{nonce}",'
        f'cnonce="{CNONCE}",nc=00000001,qop=auth,digest-uri="{digest_uri}",'
        f"response={response},charset=utf-8"
    ).encode()


def exchange(hosts: tuple[str, ...], digest_uri: str) -> tuple[bool, bytes]:
    server = SaslServerExchange(
        "DIGEST-MD5",
        CREDENTIALS,
        tls_active=True,
        realm="example.com",
        host=hosts,
        nonce=NONCE,
    )
    server.handle_start(None)
    return server.handle_message(encode_blob(vortex_response(digest_uri)).encode())


@pytest.mark.parametrize(
    "digest_uri", ["beep/example.com", "beep/relay1.example.com", "beep/RELAY1.example.com"]
)
def test_every_name_of_the_relay_is_accepted(digest_uri: str) -> None:
    ok, body = exchange(("example.com", "relay1.example.com"), digest_uri)
    assert ok, body
    assert b"complete" in body


@pytest.mark.parametrize(
    "digest_uri", ["beep/relay2.example.com", "imap/relay1.example.com", "beep/example.org"]
)
def test_other_names_are_refused(digest_uri: str) -> None:
    ok, body = exchange(("example.com", "relay1.example.com"), digest_uri)
    assert not ok
    element = parse_element(body)
    assert getattr(element, "code", None) == 535


def test_one_host_still_works_as_before() -> None:
    ok, _ = exchange(("example.com",), "beep/example.com")
    assert ok


def test_the_forms_of_an_address_in_a_digest_uri() -> None:
    assert address_names("10.0.0.7") == ("10.0.0.7",)
    assert address_names("::1") == ("::1", "[::1]")
    assert address_names("::ffff:10.0.0.7") == (
        "::ffff:10.0.0.7",
        "::ffff:a00:7",
        "[::ffff:10.0.0.7]",
        "[::ffff:a00:7]",
        "10.0.0.7",
    )
    assert address_names("fe80::1%eth0") == ("fe80::1", "[fe80::1]")
    assert address_names("relay1.example.com") == ()


def test_an_exchange_for_a_connection_also_accepts_its_local_address() -> None:
    servers = SaslServers(
        CREDENTIALS, mechanisms=("DIGEST-MD5",), realm="example.com", hosts=("example.com",)
    )
    for local, digest_host, accepted in (
        ("10.0.0.7", "10.0.0.7", True),
        ("10.0.0.7", "10.0.0.8", False),
        ("::1", "[::1]", True),
        ("::1", "::1", True),
        ("::ffff:10.0.0.7", "10.0.0.7", True),
        (None, "10.0.0.7", False),
    ):
        exchange = servers.exchange("DIGEST-MD5", True, local_host=local)
        assert exchange is not None
        challenge = parse_blob(exchange.handle_start(None)).data
        (nonce,) = parse_directives(challenge.decode())["nonce"]
        response = vortex_response(f"beep/{digest_host}", nonce)
        ok, _ = exchange.handle_message(encode_blob(response).encode())
        assert ok is accepted, (local, digest_host)
