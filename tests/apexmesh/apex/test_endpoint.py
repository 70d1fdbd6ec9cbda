"""Endpoint identities (RFC 3340 section 2.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint, EndpointError, is_token, well_known

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "address", "subaddress", "domain"),
    [
        ("fred@example.com", "fred", None, "example.com"),
        ("fred/appl=wb@example.com", "fred", "appl=wb", "example.com"),
        ("apex=access@example.com", "apex=access", None, "example.com"),
        ("apex=pubsub/music.jazz@Example.COM", "apex=pubsub", "music.jazz", "example.com"),
        ("fred@[10.0.0.1]", "fred", None, "[10.0.0.1]"),
        ("fred@[IPv6:2001:DB8::1]", "fred", None, "[IPv6:2001:db8::1]"),
        ("a b*c\\d@example.com.", "a b*c\\d", None, "example.com"),
        ("f\u00e9d@example.com", "f\u00e9d", None, "example.com"),
    ],
)
def test_parse(text: str, address: str, subaddress: str | None, domain: str) -> None:
    endpoint = Endpoint.parse(text)
    assert (endpoint.address, endpoint.subaddress, endpoint.domain) == (
        address,
        subaddress,
        domain,
    )
    assert Endpoint.parse(str(endpoint)) == endpoint


@pytest.mark.parametrize(
    "text",
    [
        "",
        "fred",
        "@example.com",
        "fred@",
        "fred/@example.com",
        "/x@example.com",
        "a/b/c@example.com",
        "fr@ed@example.com",
        "fr\x00ed@example.com",
        "fred\x7f@example.com",
        "fred@-example.com",
        "fred@exa_mple.com",
        "fred@example..com",
        "fred@[10.0.0]",
        "fred@[10.0.0.1",
        "fred@[IPv6:zz::1]",
        "fred@" + "a" * 64 + ".com",
        "x" * 2000 + "@example.com",
    ],
)
def test_invalid_endpoints_carry_553(text: str) -> None:
    with pytest.raises(EndpointError) as info:
        Endpoint.parse(text)
    assert info.value.code == ApexReplyCode.PARAMETER_INVALID == 553


def test_comparison_is_case_sensitive_for_local_parts_only() -> None:
    assert Endpoint.parse("fred@example.com") != Endpoint.parse("Fred@example.com")
    assert Endpoint.parse("fred@example.com") == Endpoint.parse("fred@EXAMPLE.com")


def test_conventions() -> None:
    sub = Endpoint.parse("fred/appl=wb@example.com")
    assert sub.is_application
    assert not sub.is_service
    assert sub.base == Endpoint.parse("fred@example.com")
    assert sub.local == "fred/appl=wb"
    assert well_known("access", "example.com").is_service
    assert str(well_known("access", "example.com")) == "apex=access@example.com"


@given(st.text(min_size=1, max_size=20))
def test_token_rule_matches_abnf(text: str) -> None:
    expected = all((0x20 <= ord(c) <= 0x7E and c not in "/@") or ord(c) >= 0xA0 for c in text)
    assert is_token(text) is expected


@pytest.mark.parametrize(
    ("uri", "text"),
    [
        ("apex:fred@example.com", "fred@example.com"),
        ("apex:f%72ed@example.com", "fred@example.com"),
        ("apex:fred%2Fappl=wb@EXAMPLE.com", "fred/appl=wb@example.com"),
        ("APEX:apex%3Dpubsub/news@example.com", "apex=pubsub/news@example.com"),
        ("apex:%C3%A9mile@example.com", "\u00e9mile@example.com"),
    ],
)
def test_apex_uris_are_compared_with_their_encoding_reversed(uri: str, text: str) -> None:
    # RFC 3340 section 2.2.1: "apex:fred@example.com" is identical to
    # "apex:f%72ed@example.com".
    assert Endpoint.from_uri(uri) == Endpoint.parse(text)
    endpoint = Endpoint.parse(text)
    assert Endpoint.from_uri(endpoint.to_uri()) == endpoint
    assert endpoint.to_uri().startswith("apex:")


@pytest.mark.parametrize("uri", ["mailto:fred@example.com", "apex:", "apex:%ZZ@x.com", "apex:a@"])
def test_other_uris_are_not_endpoints(uri: str) -> None:
    with pytest.raises(EndpointError):
        Endpoint.from_uri(uri)
