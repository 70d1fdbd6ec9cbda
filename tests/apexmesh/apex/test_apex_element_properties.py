"""Properties of the APEX element model: peer bytes only ever raise the typed error, and
every element built from valid parts survives ``parse(to_xml(x)) == x``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.content import parse_payload
from apexmesh.apex.elements import (
    Attach,
    Bind,
    Data,
    DataContent,
    Error,
    Originator,
    Recipient,
    Reply,
    Terminate,
    parse_apex,
)
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option, TargetHop
from apexmesh.apex.report import Destination, StatusResponse

pytestmark = pytest.mark.unit

CODES = {int(code) for code in ApexReplyCode}

SEEDS = [
    b"<attach endpoint='fred@example.com' transID='1' />",
    b"<bind relay='example.com' transID='1' />",
    b"<terminate code='421' xml:lang='en' transID='13'>bye</terminate>",
    b"<error code='537'>access denied</error>",
    b"<ok />",
    (
        b"<data content='cid:1@example.com'><originator identity='fred@example.com' />"
        b"<recipient identity='barney@rubble.com' /><option internal='statusRequest' "
        b"targetHop='final' mustUnderstand='true' transID='86' /></data>"
    ),
    (
        b"<data content='#Content'><originator identity='apex=report@example.com' />"
        b"<recipient identity='fred@example.com' /><data-content Name='Content'>"
        b"<statusResponse transID='86'><destination identity='barney@example.com'>"
        b"<reply code='250' /></destination></statusResponse></data-content></data>"
    ),
]


def _only_typed(call: object, body: bytes) -> None:
    assert callable(call)
    try:
        call(body)
    except ApexError as exc:
        error = exc
    else:
        return
    assert isinstance(error.code, ApexReplyCode)
    assert int(error.code) in CODES


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_only_raise_apex_error(body: bytes) -> None:
    _only_typed(parse_apex, body)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(SEEDS),
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=400), st.binary(min_size=0, max_size=3)),
        max_size=4,
    ),
)
def test_mutated_rfc_elements_only_raise_apex_error(
    seed: bytes, edits: list[tuple[int, bytes]]
) -> None:
    body = bytearray(seed)
    for position, chunk in edits:
        at = position % (len(body) + 1)
        body[at : at + len(chunk)] = chunk
    _only_typed(parse_apex, bytes(body))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="<>/='\" &;#:abcdeiflmnoprst@.1", max_size=120))
def test_xml_like_text_only_raises_apex_error(text: str) -> None:
    _only_typed(parse_apex, text.encode())


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=256),
    st.sampled_from(
        [
            b"",
            b"Content-Type: application/beep+xml\r\n\r\n",
            b'Content-Type: multipart/related; boundary="B"\r\n\r\n--B\r\n',
            b'Content-Type: multipart/related; boundary="B"; start="<c>"\r\n\r\n',
        ]
    ),
)
def test_random_payloads_only_raise_apex_error(tail: bytes, head: bytes) -> None:
    _only_typed(parse_payload, head + tail)


# --------------------------------------------------------------------------- round trips

_token = st.text(
    alphabet=st.characters(
        min_codepoint=0x21,
        max_codepoint=0x2FF,
        exclude_characters="/@",
        exclude_categories=["Cc", "Cs"],
    ),
    min_size=1,
    max_size=8,
)
_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
_domain = st.lists(_label, min_size=1, max_size=3).map(".".join)
_endpoint = st.builds(
    lambda address, sub, domain: Endpoint.parse(
        f"{address}{'' if sub is None else '/' + sub}@{domain}"
    ),
    _token,
    st.none() | _token,
    _domain,
)
_trans_id = st.integers(min_value=1, max_value=2_147_483_647)
_code = st.integers(min_value=200, max_value=599)
_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs", "Cc"], blacklist_characters="\r"),
    max_size=20,
)
_option = st.builds(
    Option,
    internal=st.sampled_from(["statusRequest", "x-opt", "a.b:c"]),
    trans_id=_trans_id,
    target_hop=st.sampled_from(list(TargetHop)),
    must_understand=st.booleans(),
    localize=st.sampled_from([("i-default",), ("en",), ("en-US", "fr")]),
    content=st.sampled_from([b"", b"<x/>", b"text &amp; <y a='1'>z</y>"]),
)
_options = st.lists(_option, max_size=3).map(tuple)
_reply = st.builds(Reply, code=_code, trans_id=st.none() | _trans_id, text=_text)

ELEMENTS = st.one_of(
    st.builds(Attach, endpoint=_endpoint, trans_id=_trans_id, options=_options),
    st.builds(Bind, relay=_domain, trans_id=_trans_id, options=_options),
    st.builds(
        Terminate,
        trans_id=st.integers(min_value=0, max_value=2_147_483_647),
        code=_code,
        text=_text,
        lang=st.none() | st.sampled_from(["en", "fr-CA"]),
    ),
    st.builds(Error, code=_code, text=_text),
    st.builds(Reply, code=_code, trans_id=_trans_id, text=_text),
    st.builds(
        Data,
        content=st.sampled_from(["cid:1@example.com", "#Content", "http://x.example/a?b#c"]),
        originator=st.builds(Originator, identity=_endpoint, options=_options),
        recipients=st.lists(
            st.builds(Recipient, identity=_endpoint, options=_options), min_size=1, max_size=3
        ).map(tuple),
        options=_options,
        data_content=st.none()
        | st.builds(
            DataContent,
            name=st.sampled_from(["Content", "c_1", "\u00e9t\u00e9"]),
            content=st.sampled_from([b"", b" <a b='&lt;'/> ", b"<![CDATA[<x>]]>"]),
        ),
    ),
    st.builds(
        StatusResponse,
        trans_id=_trans_id,
        destinations=st.lists(
            st.builds(Destination, identity=_endpoint, reply=_reply), min_size=1, max_size=3
        ).map(tuple),
    ),
)


@settings(max_examples=300, deadline=None)
@given(ELEMENTS)
def test_round_trip(element: object) -> None:
    to_xml = getattr(element, "to_xml")  # noqa: B009 - every element has one
    assert parse_apex(to_xml()) == element
