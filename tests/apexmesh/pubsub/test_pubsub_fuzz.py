"""Whatever a peer sends to apex=pubsub, parsing ends in an operation or in the error
carrying the draft's code (500, 501, 553): never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.elements import parse_operation, parse_service_message

pytestmark = pytest.mark.unit

TAGS = ("createtopic", "deletetopic", "listtopics", "subscribe", "cancel", "topiclist", "x")
NAMES = ("topic", "transID", "subscriber", "duration", "name", "extra")
VALUES = st.one_of(
    st.sampled_from(["1", "0", "-1", "a.b", "A", "m@e.com", "", "99999999999", "a..b", "&amp;"]),
    st.text(max_size=12),
)


def _escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")


@st.composite
def documents(draw: st.DrawFn) -> str:
    tag = draw(st.sampled_from(TAGS))
    attrs = draw(st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=5))
    text = "".join(f' {name}="{_escape(value)}"' for name, value in attrs.items())
    body = draw(st.sampled_from(["", "x", "<topic name='a' />", "<y/>"]))
    return f"<{tag}{text}>{body}</{tag}>" if body else f"<{tag}{text} />"


@settings(max_examples=400, deadline=None)
@given(st.one_of(documents(), st.text(max_size=60), st.binary(max_size=60)))
def test_parsing_never_crashes(document: str | bytes) -> None:
    codes = []
    for parse in (parse_operation, parse_service_message):
        try:
            parse(document)
        except ApexError as exc:
            codes.append(int(exc.code))
    assert set(codes) <= {500, 501, 553}
