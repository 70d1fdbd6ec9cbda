"""Hypothesis: no peer input makes a SASL exchange raise (RFC 3080 section 2.3.1.5,
habit 5 of STYLE.md: peer errors become protocol output).

Whatever bytes arrive as a MSG body or a channel-start piggyback, the server answers an
RPY ``blob`` or an ERR ``error`` with a three-digit code, and the client answers with a
MSG body or nothing.
"""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apexmesh.beep.sasl import (
    SUPPORTED_MECHANISMS,
    SaslClientExchange,
    SaslServerExchange,
    StaticCredentials,
    parse_element,
)
from apexmesh.beep.sasl.blob import Blob, ErrorElement

CREDENTIALS = StaticCredentials({"alice": "wonderland"}, scram_iterations=4096)
ERROR = re.compile(rb"<error code='\d{3}'")

mechanisms = st.sampled_from(SUPPORTED_MECHANISMS)
blob_payloads = st.binary(max_size=300).map(
    lambda data: b"<blob>" + base64.b64encode(data) + b"</blob>"
)
near_misses = st.sampled_from(
    [b"<blob status='abort'/>", b"<blob status='complete'/>", b"<blob/>", b"<error code='535'/>"]
)
payloads = st.one_of(st.binary(max_size=300), blob_payloads, near_misses)


def make_server(mechanism: str) -> SaslServerExchange:
    return SaslServerExchange(
        mechanism,
        CREDENTIALS,
        tls_active=True,
        realm="example.net",
        host="relay.example.net",
    )


def check_server_answer(ok: bool, body: bytes, server: SaslServerExchange) -> None:
    element = parse_element(body)  # our own output always parses
    if ok:
        assert isinstance(element, Blob)
    else:
        assert ERROR.match(body)
        assert isinstance(element, ErrorElement)
        assert server.done


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(
    mechanism=mechanisms,
    piggyback=st.none() | st.text(max_size=200),
    messages=st.lists(payloads, max_size=4),
)
def test_server_never_raises(mechanism: str, piggyback: str | None, messages: list[bytes]) -> None:
    server = make_server(mechanism)
    start_reply = server.handle_start(piggyback)
    parse_element(start_reply)
    for message in messages:
        ok, body = server.handle_message(message)
        check_server_answer(ok, body, server)
    if server.done and not server.succeeded:
        assert server.failure_code is not None
        assert 400 <= server.failure_code < 600


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(mechanism=mechanisms, replies=st.lists(st.tuples(st.booleans(), payloads), max_size=4))
def test_client_never_raises(mechanism: str, replies: list[tuple[bool, bytes]]) -> None:
    client = SaslClientExchange(
        mechanism, authcid="alice", password="wonderland", host="relay.example.net"
    )
    client.start_piggyback()
    for is_error, payload in replies:
        message = client.handle_reply(is_error, payload)
        if message is not None:
            assert isinstance(parse_element(message), Blob)
    if client.done and not client.succeeded:
        assert client.failure_code is not None


directive_text = st.lists(
    st.sampled_from(
        [
            "username=",
            '"alice"',
            "realm=",
            '"example.net"',
            "nonce=",
            "cnonce=",
            '"abc"',
            "nc=00000001",
            "qop=auth",
            "digest-uri=",
            '"beep/relay.example.net"',
            "response=",
            "0123456789abcdef0123456789abcdef",
            "charset=utf-8",
            "authzid=",
            ",",
            '"',
            "\\",
            "=",
            " ",
            "\xe9",
            "n,,n=alice,r=",
            "c=biws,r=",
            "p=AAAA",
        ]
    ),
    max_size=30,
).map(lambda parts: "".join(parts).encode("utf-8"))


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(mechanism=mechanisms, responses=st.lists(directive_text, min_size=1, max_size=3))
def test_server_never_raises_on_plausible_mechanism_text(
    mechanism: str, responses: list[bytes]
) -> None:
    server = make_server(mechanism)
    server.handle_start(None)
    for response in responses:
        ok, body = server.handle_message(b"<blob>" + base64.b64encode(response) + b"</blob>")
        check_server_answer(ok, body, server)
