"""RFC 2831 section 4's IMAP example, reproduced byte for byte.

User ``chris``, password ``secret``, realm and host ``elwood.innosoft.com``, service
``imap``; the nonces are injected so the challenge, the digest-response and rspauth must
equal the base64 the RFC prints. Further DIGEST-MD5 directive checks (RFC 2831 sections
2.1.2 and 2.1.3) follow: syntax errors are 501, mismatches 535.
"""

from __future__ import annotations

import base64

import pytest

from apexmesh.beep.sasl import SaslServerExchange, StaticCredentials
from apexmesh.beep.sasl.digest_md5 import (
    DigestMd5Client,
    DigestMd5Server,
    compute_response,
    parse_directives,
)
from apexmesh.beep.sasl.mechanism import SaslError

CHALLENGE_B64 = (
    b"cmVhbG09ImVsd29vZC5pbm5vc29mdC5jb20iLG5vbmNlPSJPQTZNRzl0"
    b"RVFHbTJoaCIscW9wPSJhdXRoIixhbGdvcml0aG09bWQ1LXNlc3MsY2hh"
    b"cnNldD11dGYtOA=="
)
RESPONSE_B64 = (
    b"Y2hhcnNldD11dGYtOCx1c2VybmFtZT0iY2hyaXMiLHJlYWxtPSJlbHdvb2"
    b"QuaW5ub3NvZnQuY29tIixub25jZT0iT0E2TUc5dEVRR20yaGgiLG5jPTAw"
    b"MDAwMDAxLGNub25jZT0iT0E2TUhYaDZWcVRyUmsiLGRpZ2VzdC11cmk9Im"
    b"ltYXAvZWx3b29kLmlubm9zb2Z0LmNvbSIscmVzcG9uc2U9ZDM4OGRhZDkw"
    b"ZDRiYmQ3NjBhMTUyMzIxZjIxNDNhZjcscW9wPWF1dGg="
)
RSPAUTH_B64 = b"cnNwYXV0aD1lYTQwZjYwMzM1YzQyN2I1NTI3Yjg0ZGJhYmNkZmZmZA=="

HOST = "elwood.innosoft.com"
CREDENTIALS = StaticCredentials({"chris": "secret"})


def rfc_server() -> DigestMd5Server:
    return DigestMd5Server(
        CREDENTIALS, realm=HOST, host=HOST, service="imap", nonce="OA6MG9tEQGm2hh"
    )


def rfc_client() -> DigestMd5Client:
    return DigestMd5Client(
        authcid="chris", password="secret", host=HOST, service="imap", cnonce="OA6MHXh6VqTrRk"
    )


@pytest.mark.unit
def test_rfc2831_section4_imap_example_byte_for_byte() -> None:
    server, client = rfc_server(), rfc_client()
    assert client.initial_response() is None
    challenge = server.step(None)
    assert not challenge.complete
    assert challenge.data == base64.b64decode(CHALLENGE_B64)
    assert base64.b64encode(challenge.data) == CHALLENGE_B64

    response = client.step(challenge.data)
    assert base64.b64encode(response) == RESPONSE_B64

    success = server.step(response)
    assert success.complete
    assert success.authcid == "chris"
    assert success.authzid is None
    assert success.data is not None
    assert base64.b64encode(success.data) == RSPAUTH_B64
    client.verify_success(success.data)  # raises if rspauth were wrong


@pytest.mark.unit
def test_rfc2831_response_value_computation() -> None:
    values = {
        "username": "chris",
        "realm": HOST,
        "password": "secret",
        "nonce": "OA6MG9tEQGm2hh",
        "cnonce": "OA6MHXh6VqTrRk",
        "nc": "00000001",
        "qop": "auth",
        "digest_uri": "imap/elwood.innosoft.com",
        "authzid": None,
    }
    assert compute_response(**values) == "d388dad90d4bbd760a152321f2143af7"  # type: ignore[arg-type]
    assert (
        compute_response(**values, for_rspauth=True)  # type: ignore[arg-type]
        == "ea40f60335c427b5527b84dbabcdfffd"
    )


@pytest.mark.unit
def test_rfc2831_example_through_the_beep_profile() -> None:
    server = SaslServerExchange(
        "DIGEST-MD5",
        CREDENTIALS,
        tls_active=True,
        realm=HOST,
        host=HOST,
        service="imap",
        nonce="OA6MG9tEQGm2hh",
    )
    assert server.handle_start(None) == f"<blob>{CHALLENGE_B64.decode()}</blob>"
    ok, body = server.handle_message(b"<blob>" + RESPONSE_B64 + b"</blob>")
    assert ok
    assert body == b"<blob status='complete'>" + RSPAUTH_B64 + b"</blob>"
    assert server.succeeded
    assert server.authenticated_identity == "chris"


def rfc_response(**changes: str) -> bytes:
    directives = {
        "charset": "utf-8",
        "username": '"chris"',
        "realm": '"elwood.innosoft.com"',
        "nonce": '"OA6MG9tEQGm2hh"',
        "nc": "00000001",
        "cnonce": '"OA6MHXh6VqTrRk"',
        "digest-uri": '"imap/elwood.innosoft.com"',
        "response": "d388dad90d4bbd760a152321f2143af7",
        "qop": "auth",
    }
    directives.update(changes)
    return ",".join(f"{k}={v}" for k, v in directives.items() if v != "<drop>").encode()


def server_answer(response: bytes) -> int | None:
    server = rfc_server()
    server.step(None)
    try:
        server.step(response)
    except SaslError as exc:
        return int(exc.code)
    return None


@pytest.mark.unit
def test_unchanged_response_passes() -> None:
    assert server_answer(rfc_response()) is None


@pytest.mark.unit
@pytest.mark.parametrize(
    "changes",
    [
        {"response": "d388dad90d4bbd760a152321f2143af8"},
        {"nonce": '"OA6MG9tEQGm2hX"'},
        {"realm": '"elsewhere"'},
        {"nc": "00000002"},
        {"qop": "auth-conf"},
        {"digest-uri": '"imap/other.host"'},
        {"username": '"chris2"'},
    ],
)
def test_mismatching_directive_is_535(changes: dict[str, str]) -> None:
    assert server_answer(rfc_response(**changes)) == 535


@pytest.mark.unit
@pytest.mark.parametrize(
    "response",
    [
        rfc_response(response="D388DAD90D4BBD760A152321F2143AF7"),
        rfc_response(response="xyz"),
        rfc_response(username="<drop>"),
        rfc_response(cnonce="<drop>"),
        rfc_response(nonce='"unterminated'),
        rfc_response(charset="iso-8859-5"),
        rfc_response() + b',username="chris"',
        rfc_response() + b",=value",
        rfc_response() + b",name",
        rfc_response() + b' "stray"',
        rfc_response().replace(b'"chris"', b'"\xff"'),  # not UTF-8 despite charset
        b"",
        b"x" * 4097,
    ],
)
def test_malformed_digest_response_is_501(response: bytes) -> None:
    assert server_answer(response) == 501


@pytest.mark.unit
def test_directive_parser_handles_quotes_escapes_and_empty_elements() -> None:
    parsed = parse_directives(' a = "x\\"y" ,, b=tok ,\tqop="auth,auth-int", realm="r1",realm="r2"')
    assert parsed == {"a": ['x"y'], "b": ["tok"], "qop": ["auth,auth-int"], "realm": ["r1", "r2"]}


@pytest.mark.unit
def test_client_rejects_challenge_without_auth_qop() -> None:
    client = rfc_client()
    with pytest.raises(SaslError) as excinfo:
        client.step(b'nonce="n",qop="auth-conf",algorithm=md5-sess,charset=utf-8')
    assert excinfo.value.code == 534


@pytest.mark.unit
def test_initial_response_is_ignored_and_a_challenge_sent() -> None:
    # RFC 2831 section 2.2: a server without subsequent authentication answers an
    # initial response with a fresh digest-challenge.
    step = rfc_server().step(b"anything")
    assert not step.complete
    assert step.data == base64.b64decode(CHALLENGE_B64)
