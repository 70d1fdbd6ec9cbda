"""A createtopic's access statement (apexmesh/pubsub/topic_access.py), sans I/O: roles
to entries, a narrower pattern keeping a broader one's roles, the default, the wire
form read back, and every refusal's code."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apexmesh.apex import _dtd
from apexmesh.apex.access import ActorPattern
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.elements import CreateTopic, createtopic_from
from apexmesh.pubsub.topic_access import (
    PUBLISH_TOKENS,
    SUBSCRIBE_TOKENS,
    Audience,
    TopicAccess,
    covers,
    default_access,
    tokens_of,
)

pytestmark = pytest.mark.unit

SUBSCRIBE = frozenset(SUBSCRIBE_TOKENS)
PUBLISH = frozenset(PUBLISH_TOKENS)


def table(access: TopicAccess) -> dict[str, frozenset[str]]:
    return {str(grant.actor): grant.actions for grant in access.entries}


def test_the_default_lets_the_domain_subscribe_and_only_the_owner_publish() -> None:
    assert table(default_access("example.com")) == {"*@example.com": SUBSCRIBE}


def test_audiences_and_patterns() -> None:
    anyone = TopicAccess.stating("d.com", subscribers=Audience.ANYONE, publishers=Audience.ANYONE)
    assert table(anyone) == {"*@*": SUBSCRIBE | PUBLISH}
    named = TopicAccess.stating(
        "d.com", subscribers=["barney@d.com", "*@rubble.com"], publishers="barney@d.com"
    )
    assert table(named) == {"barney@d.com": SUBSCRIBE | PUBLISH, "*@rubble.com": SUBSCRIBE}


def test_a_narrower_pattern_keeps_the_roles_of_a_broader_one() -> None:
    # RFC 3341 3.1 selects fred's exact entry alone: it must carry subscribe too.
    stated = TopicAccess.stating("d.com", subscribers=Audience.DOMAIN, publishers=["fred@d.com"])
    assert table(stated) == {"*@d.com": SUBSCRIBE, "fred@d.com": SUBSCRIBE | PUBLISH}
    wide = TopicAccess.stating("d.com", subscribers=["*@*.d.com"], publishers=["*@x.d.com"])
    assert table(wide) == {"*@*.d.com": SUBSCRIBE, "*@x.d.com": SUBSCRIBE | PUBLISH}


def test_the_owner_only_is_everyone_else_denied() -> None:
    only = TopicAccess.stating("d.com", subscribers=Audience.OWNER, publishers=Audience.OWNER)
    assert only.grants == ()
    assert table(only) == {"*@*": frozenset()}


ENDPOINTS = st.sampled_from(
    [
        "fred@d.com",
        "fred/appl=wb@d.com",
        "apex=pubsub@d.com",
        "apex=pubsub/t@d.com",
        "wilma@x.d.com",
        "wilma@rubble.com",
        "barney@d.com",
    ]
)
PATTERNS = st.sampled_from(
    [
        "*@*",
        "*@d.com",
        "*@*.d.com",
        "*@x.d.com",
        "apex=*@*",
        "apex=*@d.com",
        "fred@d.com",
        "fred/*@d.com",
        "fred/appl=wb@d.com",
        "apex=pubsub/t@d.com",
        "wilma@*",
    ]
)


@given(broad=PATTERNS, narrow=PATTERNS, endpoint=ENDPOINTS)
def test_covers_agrees_with_matching(broad: str, narrow: str, endpoint: str) -> None:
    """If ``broad`` covers ``narrow``, every endpoint ``narrow`` matches ``broad`` does."""
    b, n, e = ActorPattern.parse(broad), ActorPattern.parse(narrow), Endpoint.parse(endpoint)
    if covers(b, n) and n.matches(e):
        assert b.matches(e)
    assert covers(n, n)


def test_the_statement_travels_in_createtopic() -> None:
    stated = TopicAccess.stating("d.com", subscribers=Audience.DOMAIN, publishers=["fred@d.com"])
    op = CreateTopic(topic="news", trans_id=7, access=stated)
    assert b"<access actor='*@d.com' actions='pubsub:cancel pubsub:subscribe' />" in op.to_xml()
    assert createtopic_from(_dtd.parse_root(op.to_xml())) == op
    only = CreateTopic(topic="news", trans_id=7, access=TopicAccess(()))
    assert createtopic_from(_dtd.parse_root(only.to_xml())).access == TopicAccess(())
    plain = createtopic_from(_dtd.parse_root(b"<createtopic topic='news' transID='7' />"))
    assert plain.access is None  # the service's default applies
    assert TopicAccess.from_json(stated.to_json()) == stated


@pytest.mark.parametrize(
    ("child", "code"),
    [
        ("<access actor='nobody' actions='core:data' />", 553),
        ("<access actor='*@d.com' actions='core:nothing' />", 553),
        ("<access actor='*@d.com' actions='nocolon' />", 501),
        ("<access actor='*@d.com' />", 501),
        ("<access owner='x@d.com' actor='*@d.com' actions='' />", 501),
        ("<access actor='*@d.com' actions='core:data' />" * 65, 501),
    ],
)
def test_a_bad_statement_is_refused_with_its_code(child: str, code: int) -> None:
    xml = f"<createtopic topic='news' transID='3'>{child}</createtopic>".encode()
    with pytest.raises(ApexError) as refused:
        createtopic_from(_dtd.parse_root(xml))
    assert (refused.value.code, refused.value.trans_id) == (code, 3)


def test_roles_and_tokens() -> None:
    assert tokens_of(["subscribe", "publish"]) == SUBSCRIBE | PUBLISH
    assert tokens_of(["core:data"]) == PUBLISH
    with pytest.raises(ApexError):
        tokens_of(["read"])
