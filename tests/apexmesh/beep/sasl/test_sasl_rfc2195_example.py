"""CRAM-MD5 (RFC 2195): section 2's example byte for byte, then the checks around it.

User ``tim``, shared secret ``tanstaaftanstaaf``, the server's challenge
``<1896.697170952@postoffice.reston.mci.net>``: the client answers
``tim b913a602c7eda7a495b4e6e7334d3890`` (base64
``dGltIGI5MTNhNjAyYzdlZGE3YTQ5NWI0ZTZlNzMzNGQzODkw``, as IMAP and SMTP carry it; in BEEP
the blob element carries the same base64). Wrong digests and unknown users are 535
alike; responses that are not "user digest" are 501.
"""

from __future__ import annotations

import base64

import pytest

from apexmesh.beep.sasl import (
    SUPPORTED_MECHANISMS,
    SaslClientExchange,
    SaslServerExchange,
    SaslServers,
    StaticCredentials,
)
from apexmesh.beep.sasl.blob import encode_blob, parse_blob, parse_element
from apexmesh.beep.sasl.cram_md5 import CramMd5Client, CramMd5Server, digest, make_challenge
from apexmesh.beep.sasl.mechanism import SaslError

pytestmark = pytest.mark.unit

CHALLENGE = b"<1896.697170952@postoffice.reston.mci.net>"
CHALLENGE_B64 = b"PDE4OTYuNjk3MTcwOTUyQHBvc3RvZmZpY2UucmVzdG9uLm1jaS5uZXQ+"
RESPONSE = b"tim b913a602c7eda7a495b4e6e7334d3890"
RESPONSE_B64 = b"dGltIGI5MTNhNjAyYzdlZGE3YTQ5NWI0ZTZlNzMzNGQzODkw"
CREDENTIALS = StaticCredentials({"tim": "tanstaaftanstaaf"})


def test_the_rfc_example_byte_for_byte() -> None:
    assert base64.b64encode(CHALLENGE) == CHALLENGE_B64
    assert base64.b64encode(RESPONSE) == RESPONSE_B64
    assert digest(b"tanstaaftanstaaf", CHALLENGE) == "b913a602c7eda7a495b4e6e7334d3890"
    client = CramMd5Client("tim", "tanstaaftanstaaf")
    assert client.initial_response() is None  # server first
    assert client.step(CHALLENGE) == RESPONSE
    server = CramMd5Server(CREDENTIALS, host="postoffice.reston.mci.net", challenge=CHALLENGE)
    first = server.step(None)
    assert (first.data, first.complete) == (CHALLENGE, False)
    done = server.step(RESPONSE)
    assert (done.complete, done.authcid, done.authzid, done.data) == (True, "tim", None, None)
    client.verify_success(done.data)


def test_the_rfc_example_over_the_beep_sasl_profile() -> None:
    """The blobs of RFC 3080 section 4.1 carry the RFC's base64 exactly."""
    server = SaslServerExchange(
        "CRAM-MD5",
        CREDENTIALS,
        tls_active=True,
        realm="reston.mci.net",
        host="postoffice.reston.mci.net",
        nonce=CHALLENGE.decode(),
    )
    client = SaslClientExchange(
        "CRAM-MD5", authcid="tim", password="tanstaaftanstaaf", host="postoffice"
    )
    assert client.start_piggyback() is None
    challenge = server.handle_start(None)
    assert challenge == encode_blob(CHALLENGE)
    assert CHALLENGE_B64.decode() in challenge
    answer = client.handle_start_reply(challenge)
    assert answer is not None
    assert parse_blob(answer).data == RESPONSE
    assert RESPONSE_B64 in answer
    ok, final = server.handle_message(answer)
    assert ok
    assert server.succeeded
    assert server.authenticated_identity == "tim"
    assert client.handle_reply(False, final) is None
    assert client.succeeded


def _server() -> CramMd5Server:
    server = CramMd5Server(CREDENTIALS, host="example.com", challenge=CHALLENGE)
    server.step(None)
    return server


@pytest.mark.parametrize(
    "response",
    [
        b"tim b913a602c7eda7a495b4e6e7334d3891",  # wrong digest
        b"tom b913a602c7eda7a495b4e6e7334d3890",  # another user's name
        b"nobody b913a602c7eda7a495b4e6e7334d3890",  # an unknown user: the same 535
    ],
)
def test_wrong_answers_are_535_and_say_nothing_more(response: bytes) -> None:
    server = _server()
    with pytest.raises(SaslError) as failed:
        server.step(response)
    assert failed.value.code == 535
    assert failed.value.message == "authentication failure"
    assert server.claimed_identity == response.rpartition(b" ")[0].decode()


@pytest.mark.parametrize(
    "response",
    [
        b"timb913a602c7eda7a495b4e6e7334d3890",  # no space
        b" b913a602c7eda7a495b4e6e7334d3890",  # no user
        b"tim B913A602C7EDA7A495B4E6E7334D3890",  # the RFC's digits are lower case
        b"tim b913a602c7eda7a495b4e6e7334d389",  # 31 digits
        b"tim b913a602c7eda7a495b4e6e7334d3890ff",
        b"\xff\xfe b913a602c7eda7a495b4e6e7334d3890",  # a user name that is not UTF-8
        b"x" * 300 + b" b913a602c7eda7a495b4e6e7334d3890",  # longer than 288 octets
    ],
)
def test_malformed_responses_are_501(response: bytes) -> None:
    with pytest.raises(SaslError) as failed:
        _server().step(response)
    assert failed.value.code == 501


def test_challenges_are_fresh_msg_ids() -> None:
    first, second = make_challenge("relay1.example.com"), make_challenge("relay1.example.com")
    assert first != second
    for challenge in (first, second):
        assert challenge.startswith(b"<")
        assert challenge.endswith(b"@relay1.example.com>")
        digits, _, _ = challenge[1:].partition(b"@")
        left, dot, right = digits.partition(b".")
        assert dot
        assert left.isdigit()
        assert right.isdigit()


def test_cram_md5_is_refused_without_tls_like_plain() -> None:
    server = SaslServerExchange(
        "CRAM-MD5", CREDENTIALS, tls_active=False, realm="example.com", host="example.com"
    )
    refusal = parse_element(server.handle_start(None))
    assert getattr(refusal, "code", None) == 538
    allowed = SaslServerExchange(
        "CRAM-MD5",
        CREDENTIALS,
        tls_active=False,
        allow_plaintext_without_tls=True,
        realm="example.com",
        host="example.com",
    )
    assert parse_blob(allowed.handle_start(None)).data.endswith(b"@example.com>")


def test_cram_md5_is_implemented_but_offered_only_where_configured() -> None:
    assert "CRAM-MD5" in SUPPORTED_MECHANISMS
    default = SaslServers(
        CREDENTIALS,
        mechanisms=("SCRAM-SHA-256", "DIGEST-MD5", "PLAIN"),
        realm="example.com",
        hosts=("example.com",),
    )
    assert default.exchange("CRAM-MD5", True) is None
    configured = SaslServers(
        CREDENTIALS,
        mechanisms=("SCRAM-SHA-256", "CRAM-MD5"),
        realm="example.com",
        hosts=("example.com",),
    )
    assert configured.exchange("CRAM-MD5", True) is not None
    with pytest.raises(ValueError, match="unsupported"):
        SaslServers(CREDENTIALS, mechanisms=("CRAM-SHA1",), realm="x", hosts=("x",))


def test_the_client_refuses_an_authorization_identity() -> None:
    with pytest.raises(ValueError, match="authorization"):
        SaslClientExchange("CRAM-MD5", authcid="tim", password="p", authzid="bob", host="h")
    client = CramMd5Client("tim", "tanstaaftanstaaf")
    client.step(CHALLENGE)
    with pytest.raises(SaslError):
        client.step(CHALLENGE)  # one challenge only
    with pytest.raises(SaslError):
        client.verify_success(b"unexpected")
