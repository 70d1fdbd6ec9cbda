"""Client and server SASL exchanges over the BEEP profile, end to end in memory.

Each test runs the RFC 3080 section 4.1.1 flow: piggybacked initial response in the
channel start, challenges in RPY, failure in an ERR ``error`` element, success in
``<blob status='complete'/>``. Real computations throughout: PBKDF2 for SCRAM, MD5 for
DIGEST-MD5, no mocks.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pytest

from apexmesh.beep.sasl import (
    SUPPORTED_MECHANISMS,
    SaslClientExchange,
    SaslServerExchange,
    StaticCredentials,
    make_scram_keys,
)
from apexmesh.beep.sasl.credentials import ScramKeys

CREDENTIALS = StaticCredentials({"alice": "wonderland", "bob": "builder", "zoë": "pässwörd"})
HOST = "relay.example.net"


@dataclass
class Outcome:
    server: SaslServerExchange
    client: SaslClientExchange
    messages: int


def server_for(mechanism: str, **kwargs: object) -> SaslServerExchange:
    options: dict[str, object] = {"tls_active": True, "realm": "example.net", "host": HOST}
    options.update(kwargs)
    return SaslServerExchange(mechanism, CREDENTIALS, **options)  # type: ignore[arg-type]


def client_for(mechanism: str, **kwargs: object) -> SaslClientExchange:
    options: dict[str, object] = {"authcid": "alice", "password": "wonderland", "host": HOST}
    options.update(kwargs)
    return SaslClientExchange(mechanism, **options)  # type: ignore[arg-type]


def run(
    server: SaslServerExchange, client: SaslClientExchange, *, piggyback: bool = True
) -> Outcome:
    """Drive both sides to the end, the way a session would, bounded in rounds."""
    start = client.start_piggyback() if piggyback else None
    message = client.handle_start_reply(server.handle_start(start))
    messages = 0
    while message is not None and messages < 10:
        messages += 1
        ok, body = server.handle_message(message)
        message = client.handle_reply(not ok, body)
    assert client.done
    assert server.done
    return Outcome(server=server, client=client, messages=messages)


@pytest.mark.unit
@pytest.mark.parametrize("mechanism", ["PLAIN", "DIGEST-MD5", "SCRAM-SHA-256"])
@pytest.mark.parametrize("piggyback", [True, False])
def test_right_password_succeeds(mechanism: str, piggyback: bool) -> None:
    outcome = run(server_for(mechanism), client_for(mechanism), piggyback=piggyback)
    assert outcome.server.succeeded
    assert outcome.client.succeeded
    assert outcome.server.authenticated_identity == "alice"
    assert outcome.server.authorization_identity is None
    assert outcome.server.failure_code is None
    assert outcome.client.failure_code is None


@pytest.mark.unit
@pytest.mark.parametrize("mechanism", ["PLAIN", "DIGEST-MD5", "SCRAM-SHA-256"])
def test_non_ascii_credentials_succeed(mechanism: str) -> None:
    outcome = run(server_for(mechanism), client_for(mechanism, authcid="zoë", password="pässwörd"))
    assert outcome.server.succeeded
    assert outcome.server.authenticated_identity == "zoë"


@pytest.mark.unit
@pytest.mark.parametrize("mechanism", ["PLAIN", "DIGEST-MD5", "SCRAM-SHA-256"])
@pytest.mark.parametrize(
    ("authcid", "password"), [("alice", "wrong"), ("mallory", "wonderland"), ("bob", "wonderland")]
)
def test_wrong_credentials_fail_with_535(mechanism: str, authcid: str, password: str) -> None:
    outcome = run(server_for(mechanism), client_for(mechanism, authcid=authcid, password=password))
    assert not outcome.server.succeeded
    assert not outcome.client.succeeded
    assert outcome.server.failure_code == 535
    assert outcome.client.failure_code == 535
    assert outcome.server.authenticated_identity is None


@pytest.mark.unit
def test_anonymous_succeeds_with_trace() -> None:
    server = server_for("ANONYMOUS", tls_active=False)
    outcome = run(server, client_for("ANONYMOUS", trace="sirhc@example.net"))
    assert outcome.server.succeeded
    assert outcome.client.succeeded
    assert outcome.server.authenticated_identity == "anonymous"
    assert outcome.messages == 0  # all of it in the channel start and its reply


@pytest.mark.unit
def test_anonymous_without_piggyback_uses_one_message() -> None:
    outcome = run(server_for("ANONYMOUS"), client_for("ANONYMOUS"), piggyback=False)
    assert outcome.server.succeeded
    assert outcome.messages == 1


@pytest.mark.unit
def test_anonymous_trace_longer_than_255_chars_is_501() -> None:
    server = server_for("ANONYMOUS")
    blob = base64.b64encode(("x" * 256).encode()).decode()
    reply = server.handle_start(f"<blob>{blob}</blob>")
    assert reply.startswith("<error code='501'")
    assert server.failure_code == 501


@pytest.mark.unit
def test_plain_refused_without_tls_with_538() -> None:
    server = server_for("PLAIN", tls_active=False)
    client = client_for("PLAIN")
    reply = server.handle_start(client.start_piggyback())
    assert reply.startswith("<error code='538'")
    assert client.handle_start_reply(reply) is None
    assert server.done
    assert not server.succeeded
    assert server.failure_code == 538
    assert client.failure_code == 538


@pytest.mark.unit
def test_plain_allowed_without_tls_by_development_switch() -> None:
    server = server_for("PLAIN", tls_active=False, allow_plaintext_without_tls=True)
    assert run(server, client_for("PLAIN")).server.succeeded


@pytest.mark.unit
@pytest.mark.parametrize("mechanism", ["DIGEST-MD5", "SCRAM-SHA-256", "ANONYMOUS"])
def test_only_plain_needs_tls(mechanism: str) -> None:
    assert run(server_for(mechanism, tls_active=False), client_for(mechanism)).server.succeeded


@pytest.mark.unit
@pytest.mark.parametrize("mechanism", ["PLAIN", "DIGEST-MD5"])
def test_authzid_other_than_authcid_needs_consent(mechanism: str) -> None:
    refused = run(server_for(mechanism), client_for(mechanism, authzid="root"))
    assert refused.server.failure_code == 537
    assert refused.client.failure_code == 537
    granted = run(
        server_for(
            mechanism, authorize=lambda authcid, authzid: (authcid, authzid) == ("alice", "root")
        ),
        client_for(mechanism, authzid="root"),
    )
    assert granted.server.succeeded
    assert granted.server.authorization_identity == "root"


@pytest.mark.unit
@pytest.mark.parametrize("mechanism", ["PLAIN", "DIGEST-MD5"])
def test_authzid_equal_to_authcid_is_allowed(mechanism: str) -> None:
    outcome = run(server_for(mechanism), client_for(mechanism, authzid="alice"))
    assert outcome.server.succeeded
    assert outcome.server.authorization_identity == "alice"


@pytest.mark.unit
def test_scram_server_uses_stored_keys_only() -> None:
    keys = make_scram_keys("hunter2", salt=b"0123456789abcdef")
    assert isinstance(keys, ScramKeys)
    assert b"hunter2" not in keys.salt + keys.stored_key + keys.server_key
    store = StaticCredentials(scram_keys={"carol": keys})
    assert store.lookup("carol") is None  # no password anywhere
    server = SaslServerExchange(
        "SCRAM-SHA-256", store, tls_active=True, realm="example.net", host=HOST
    )
    outcome = run(server, client_for("SCRAM-SHA-256", authcid="carol", password="hunter2"))
    assert outcome.server.succeeded
    assert outcome.client.succeeded
    assert outcome.messages == 1  # client-final; server-final rides in the complete blob


@pytest.mark.unit
def test_scram_client_detects_a_server_without_the_keys() -> None:
    # A server holding a verifier for another password cannot sign server-final.
    impostor = StaticCredentials(scram_keys={"alice": make_scram_keys("other")})
    server = SaslServerExchange(
        "SCRAM-SHA-256", impostor, tls_active=True, realm="example.net", host=HOST
    )
    outcome = run(server, client_for("SCRAM-SHA-256"))
    assert outcome.server.failure_code == 535  # and the proof fails at the server first


@pytest.mark.unit
def test_digest_client_rejects_forged_rspauth() -> None:
    server = server_for("DIGEST-MD5")
    client = client_for("DIGEST-MD5")
    assert client.start_piggyback() is None  # server-first mechanism
    message = client.handle_start_reply(server.handle_start(None))
    assert message is not None
    ok, body = server.handle_message(message)
    assert body.startswith(b"<blob status='complete'>")
    assert ok
    assert server.succeeded
    forged = base64.b64encode(b"rspauth=" + b"0" * 32).decode()
    assert client.handle_reply(False, f"<blob status='complete'>{forged}</blob>".encode()) is None
    assert client.done
    assert not client.succeeded
    assert client.failure_code == 535


@pytest.mark.unit
def test_client_abort_is_answered_with_451() -> None:
    server = server_for("DIGEST-MD5")
    challenge = server.handle_start(None)
    assert challenge.startswith("<blob>")
    ok, body = server.handle_message(b"<blob status='abort'/>")
    assert not ok
    assert body.startswith(b"<error code='451'")
    assert server.done
    assert server.failure_code == 451
    assert not server.succeeded


@pytest.mark.unit
def test_abort_in_channel_start_is_451() -> None:
    server = server_for("PLAIN")
    assert server.handle_start("<blob status='abort'/>").startswith("<error code='451'")


@pytest.mark.unit
@pytest.mark.parametrize("succeed", [True, False])
def test_messages_after_completion_get_550_and_change_nothing(succeed: bool) -> None:
    password = "wonderland" if succeed else "nope"
    outcome = run(server_for("SCRAM-SHA-256"), client_for("SCRAM-SHA-256", password=password))
    code_before = outcome.server.failure_code
    ok, body = outcome.server.handle_message(b"<blob>AAAA</blob>")
    assert not ok
    assert body.startswith(b"<error code='550'")
    assert outcome.server.succeeded is succeed
    assert outcome.server.failure_code == code_before


@pytest.mark.unit
def test_client_sending_complete_is_501() -> None:
    server = server_for("DIGEST-MD5")
    server.handle_start(None)
    ok, body = server.handle_message(b"<blob status='complete'/>")
    assert not ok
    assert body.startswith(b"<error code='501'")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"<blob>", 500),
        (b"not xml at all", 500),
        (b"<blob>not base64!</blob>", 501),
        (b"<blob>QUJD=</blob>", 501),
        (b"<blob status='sideways'>QUJD</blob>", 501),
        (b"<blob><x/></blob>", 501),
        (b"<nonsense/>", 501),
        (b"<error code='535'/>", 501),
        (b"<!DOCTYPE blob><blob/>", 501),
        (b"<blob>" + base64.b64encode(b"x" * 4097) + b"</blob>", 501),
        (b"<blob>" + b"A" * 9000 + b"</blob>", 501),
    ],
)
def test_malformed_messages_get_their_code(payload: bytes, code: int) -> None:
    server = server_for("SCRAM-SHA-256")
    server.handle_start(None)
    ok, body = server.handle_message(payload)
    assert not ok
    assert body.startswith(f"<error code='{code}'".encode())
    assert server.failure_code == code
    assert server.done


@pytest.mark.unit
@pytest.mark.parametrize(
    "response",
    [
        b"",
        b"\xff\xfe",
        b"n,,",
        b"n,a=alice,n=alice,r=abc",
        b"p=tls-unique,,n=alice,r=abc",
        b"garbage",
    ],
)
def test_malformed_scram_client_first_is_501(response: bytes) -> None:
    server = server_for("SCRAM-SHA-256")
    server.handle_start(None)
    ok, body = server.handle_message(f"<blob>{base64.b64encode(response).decode()}</blob>".encode())
    assert not ok
    assert body.startswith(b"<error code='501'")


@pytest.mark.unit
@pytest.mark.parametrize(
    "message",
    [
        b"alice\x00wonderland",
        b"\x00\x00wonderland",
        b"\x00alice\x00",
        b"a\x00b\x00c\x00d",
        b"\x00\xff\x00x",
    ],
)
def test_malformed_plain_message_is_501(message: bytes) -> None:
    server = server_for("PLAIN")
    reply = server.handle_start(f"<blob>{base64.b64encode(message).decode()}</blob>")
    assert reply.startswith("<error code='501'")


@pytest.mark.unit
def test_client_aborts_on_a_malformed_challenge() -> None:
    client = client_for("DIGEST-MD5")
    reply = client.handle_start_reply("<blob>" + base64.b64encode(b"nonce=").decode() + "</blob>")
    assert reply == b"<blob status='abort'/>"
    assert client.done
    assert client.failure_code == 501


@pytest.mark.unit
def test_client_reports_server_error_code() -> None:
    client = client_for("SCRAM-SHA-256")
    assert client.handle_start_reply("<error code='534'>too weak</error>") is None
    assert client.failure_code == 534
    assert client.handle_reply(True, b"<error code='535'/>") is None  # already done
    assert client.failure_code == 534


@pytest.mark.unit
def test_unsupported_mechanism_is_a_local_error() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        server_for("OTP")
    with pytest.raises(ValueError, match="unsupported"):
        client_for("OTP")
    assert set(SUPPORTED_MECHANISMS) == {
        "ANONYMOUS",
        "PLAIN",
        "CRAM-MD5",
        "DIGEST-MD5",
        "SCRAM-SHA-256",
    }


@pytest.mark.unit
def test_handle_start_twice_is_a_caller_bug() -> None:
    server = server_for("ANONYMOUS")
    server.handle_start(None)
    with pytest.raises(RuntimeError):
        server.handle_start(None)


def server_first_of(username: str) -> bytes:
    server = server_for("SCRAM-SHA-256")
    client = client_for("SCRAM-SHA-256", authcid=username)
    reply = server.handle_start(client.start_piggyback())
    assert reply.startswith("<blob>")
    return base64.b64decode(reply[len("<blob>") : -len("</blob>")])


@pytest.mark.unit
def test_scram_unknown_user_gets_a_stable_simulated_salt() -> None:
    # RFC 5802 section 9: an unknown user must not be told apart at server-first.
    first, second = server_first_of("mallory"), server_first_of("mallory")
    salt = [part for part in first.split(b",") if part.startswith(b"s=")]
    assert salt
    assert salt == [part for part in second.split(b",") if part.startswith(b"s=")]
    assert b"i=4096" in first


@pytest.mark.unit
def test_message_before_start_is_550() -> None:
    ok, body = server_for("PLAIN").handle_message(b"<blob/>")
    assert not ok
    assert body.startswith(b"<error code='550'")
