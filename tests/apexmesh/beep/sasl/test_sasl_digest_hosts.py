"""DIGEST-MD5's digest-uri (RFC 2831 section 2.1.2: ``serv-type/host``) for every name a
relay answers to. A Vortex 1.1 client that dialled ``relay1.example.com`` sends
``digest-uri="beep/relay1.example.com"``; the relay serves ``example.com`` and must
accept its own host names too, not only the domain."""

from __future__ import annotations

import pytest

from apexmesh.beep.sasl import SaslServerExchange, StaticCredentials
from apexmesh.beep.sasl.blob import encode_blob, parse_element
from apexmesh.beep.sasl.digest_md5 import compute_response

pytestmark = pytest.mark.unit

CREDENTIALS = StaticCredentials({"fred@example.com": "flintstone"})
NONCE = "OA6MG9tEQGm2hh"
CNONCE = "OA6MHXh6VqTrRk"


def vortex_response(digest_uri: str) -> bytes:
    """A digest-response in the form and order Vortex 1.1 (through GNU SASL) sends."""
    response = compute_response(
        username="fred@example.com",
        realm="example.com",
        password="flintstone",
        nonce=NONCE,
        cnonce=CNONCE,
        nc="00000001",
        qop="auth",
        digest_uri=digest_uri,
        authzid=None,
    )
    return (
        f'username="fred@example.com",realm="example.com",nonce="{NONCE}",'
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
