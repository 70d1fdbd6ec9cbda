"""The blob/error codec and profile URIs of the BEEP SASL family (RFC 3080 4.1.1-4.1.3, 7.3)."""

from __future__ import annotations

import base64

import pytest

from apexmesh.beep.sasl import (
    MAX_BLOB_OCTETS,
    Blob,
    BlobStatus,
    ErrorElement,
    SaslError,
    encode_blob,
    encode_error,
    mechanism_from_uri,
    parse_blob,
    parse_element,
    profile_uri,
)


@pytest.mark.unit
def test_rfc3080_examples_parse() -> None:
    # Section 4.1.1's examples, including the CRAM-MD5 challenge the RFC prints on two
    # lines "as an artifact of the presentation".
    assert parse_blob("<blob>AGJsb2NrbWFzdGVy</blob>") == Blob(data=b"\x00blockmaster")
    assert parse_blob("<blob status='complete' />") == Blob(data=b"", status=BlobStatus.COMPLETE)
    assert parse_blob("<blob status='abort' />").status is BlobStatus.ABORT
    wrapped = "<blob>PDE4OTYuNjk3MTcwOTUyQHBvc3RvZmZpY2UucmVzdG9uLm1\n  jaS5uZXQ+</blob>"
    assert parse_blob(wrapped).data == b"<1896.697170952@postoffice.reston.mci.net>"
    assert parse_element("<error code='534'>authentication mechanism is\ntoo weak</error>") == (
        ErrorElement(code=534, text="authentication mechanism is\ntoo weak")
    )
    assert parse_element("<error code='535' />") == ErrorElement(code=535, text="")


@pytest.mark.unit
@pytest.mark.parametrize(
    "data", [b"", b"\x00", b"\xff" * 3, bytes(range(256)), b"x" * MAX_BLOB_OCTETS]
)
@pytest.mark.parametrize("status", list(BlobStatus))
def test_blob_round_trip(data: bytes, status: BlobStatus) -> None:
    assert parse_blob(encode_blob(data, status)) == Blob(data=data, status=status)


@pytest.mark.unit
def test_encodings() -> None:
    assert encode_blob(b"hi") == "<blob>aGk=</blob>"
    assert encode_blob(None, BlobStatus.ABORT) == "<blob status='abort'/>"
    assert encode_blob(b"hi", BlobStatus.COMPLETE) == "<blob status='complete'>aGk=</blob>"
    assert encode_error(535) == "<error code='535'/>"
    assert encode_error(501, "a < b & c") == "<error code='501'>a &lt; b &amp; c</error>"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("<blob>", 500),
        ("", 500),
        ("<blob>QQ</blob>", 501),  # missing padding
        ("<blob>QQ==QQ==</blob>", 501),
        ("<blob>Q\u00e9==</blob>", 501),
        ("<blob>" + base64.b64encode(b"x" * (MAX_BLOB_OCTETS + 1)).decode() + "</blob>", 501),
        ("<blob>" + "A" * 10_000 + "</blob>", 501),
        ("<blob status='done'/>", 501),
        ("<b:blob xmlns:b='urn:x'/>", 501),
        ("<error code='5350'/>", 501),
        ("<error code='abc'/>", 501),
        ("<error/>", 501),
        ("<?xml version='1.0'?><blob/>", 501),
        ("<blob>&amp;</blob>", 501),
    ],
)
def test_bad_elements_carry_their_code(text: str, code: int) -> None:
    with pytest.raises(SaslError) as excinfo:
        parse_element(text)
    assert excinfo.value.code == code


@pytest.mark.unit
def test_parse_blob_refuses_error_element() -> None:
    with pytest.raises(SaslError) as excinfo:
        parse_blob("<error code='535'/>")
    assert excinfo.value.code == 501


@pytest.mark.unit
def test_profile_uris() -> None:
    assert profile_uri("DIGEST-MD5") == "http://iana.org/beep/SASL/DIGEST-MD5"
    assert mechanism_from_uri("http://iana.org/beep/SASL/OTP") == "OTP"
    assert mechanism_from_uri("http://iana.org/beep/SASL/SCRAM-SHA-256") == "SCRAM-SHA-256"
    assert mechanism_from_uri("http://iana.org/beep/TLS") is None
    assert mechanism_from_uri("http://iana.org/beep/SASL/") is None
    assert mechanism_from_uri("http://iana.org/beep/SASL/lower") is None
    assert mechanism_from_uri("http://iana.org/beep/SASL/A/B") is None
    with pytest.raises(ValueError, match="SASL mechanism name"):
        profile_uri("not a name")
    with pytest.raises(ValueError, match="SASL mechanism name"):
        profile_uri("X" * 21)
