"""Properties of the RFC 3341 core, checked with Hypothesis.

* The indexed selection of :class:`OwnerRules` always agrees with the definition of
  section 3.1: among all (explicit and non-overridden default) entries whose pattern
  matches, the one with the best (domain, local) rank.
* Whatever bytes arrive, ``parse_operation`` either returns an operation or raises
  :class:`AccessError` with a registered code: never any other exception.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apexmesh.apex.access import (
    AccessEntry,
    AccessError,
    ActionSet,
    ActorPattern,
    OwnerRules,
    TokenRegistry,
    default_entries,
    parse_operation,
)
from apexmesh.apex.codes import for_code
from apexmesh.apex.endpoint import Endpoint

pytestmark = pytest.mark.unit

ADDRESSES = st.sampled_from(["fred", "wilma", "apex=pubsub", "apex=access", "barney", "f*"])
SUBS = st.one_of(st.none(), st.sampled_from(["appl=wb", "x", "music.jazz"]))
DOMAINS = st.sampled_from(
    ["example.com", "foo.example.com", "bar.foo.example.com", "other.org", "[10.0.0.1]"]
)


@st.composite
def endpoints(draw: st.DrawFn) -> Endpoint:
    return Endpoint(draw(ADDRESSES), draw(SUBS), draw(DOMAINS))


@st.composite
def patterns(draw: st.DrawFn) -> str:
    local = draw(
        st.one_of(
            st.sampled_from(["*", "apex=*", "fred/*", "apex=pubsub/*", "f\\*"]),
            endpoints().map(lambda e: e.local.replace("*", "\\*")),
        )
    )
    domain = draw(
        st.sampled_from(["*", "*.example.com", "*.foo.example.com", "example.com", "other.org"])
    )
    return f"{local}@{domain}"


@settings(max_examples=300)
@given(
    owner=endpoints(),
    actor=endpoints(),
    actors=st.lists(patterns(), max_size=8),
    tokens=st.lists(st.sampled_from(["core:data", "pubsub:subscribe", "all:none"]), max_size=2),
)
def test_indexed_selection_matches_the_definition(
    owner: Endpoint, actor: Endpoint, actors: list[str], tokens: list[str]
) -> None:
    entries = [
        AccessEntry(owner, ActorPattern.parse(a), ActionSet(frozenset(tokens))) for a in actors
    ]
    rules = OwnerRules.build(owner, entries)
    explicit = {entry.actor.key: entry for entry in entries}
    candidates = list(explicit.values()) + [
        entry for entry in default_entries(owner) if entry.actor.key not in explicit
    ]
    ranked = [(rank, e) for e in candidates if (rank := e.actor.rank(actor)) is not None]
    best_rank = min(rank for rank, _ in ranked)
    best = [entry for rank, entry in ranked if rank == best_rank]
    assert len(best) == 1
    assert rules.select(actor) == best[0]


@settings(max_examples=300)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda tag, attrs: f"<{tag} {attrs} />".encode(),
            st.sampled_from(["query", "get", "set", "access", "x"]),
            st.text(max_size=80),
        ),
    )
)
def test_parse_operation_only_raises_access_error(content: bytes) -> None:
    code: int | None = None
    try:
        parse_operation(content, TokenRegistry())
    except AccessError as exc:
        code = exc.code
    assert code is None or for_code(code) is not None
