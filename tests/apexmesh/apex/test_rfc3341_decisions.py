"""Decisions for every example entry of RFC 3341 and draft-schwartz-apex-pubsub section 7.

One table: (policy, owner, actor, token, allowed). Each policy is the set of explicit
entries an example installs; the four default entries of RFC 3341 section 3 are always
present underneath.
"""

from __future__ import annotations

import pytest

from apexmesh.apex.access import (
    AccessEntry,
    ActionSet,
    ActorPattern,
    OwnerRules,
    TokenRegistry,
)
from apexmesh.apex.endpoint import Endpoint

pytestmark = pytest.mark.unit

REGISTRY = TokenRegistry()
TOPIC = "apex=pubsub/music.jazz.milesdavis@example.com"

#: (owner, actor, actions) triples, named after the example that shows them.
POLICIES: dict[str, list[tuple[str, str, str]]] = {
    # RFC 3341 section 3.1
    "rfc3341-3.1": [
        ("fred@example.com", "wilma@example.com", "all:all"),
        ("fred@example.com", "mr.slate@example.com", "core:data"),
        ("fred/appl=wb@example.com", "barney/appl=wb@example.com", "core:data"),
        ("fred@example.com", "*@example.com", "core:data presence:subscribe presence:watch"),
        ("fred@example.com", "*@*", "core:data"),
    ],
    # RFC 3341 section 2.3, before and after barney's entry becomes all:none
    "rfc3341-2.3-before": [
        (
            "fred@example.com",
            "barney@example.com",
            "core:data presence:subscribe presence:watch",
        ),
        ("fred@example.com", "*@example.com", "core:data"),
    ],
    "rfc3341-2.3-after": [
        ("fred@example.com", "barney@example.com", "all:none"),
        ("fred@example.com", "*@example.com", "core:data"),
    ],
    # RFC 3341 section 3: the explicit '*@*' core:data entry
    "rfc3341-3-star": [("fred@example.com", "*@*", "core:data")],
    # RFC 3341 section 3.1, domain wildcards
    "rfc3341-3.1-domains": [
        ("fred@example.com", "*@*.foo.example.com", "presence:watch"),
        ("fred@example.com", "*@*.example.com", "presence:subscribe"),
    ],
    # draft-schwartz-apex-pubsub-02 section 7
    "pubsub-create": [
        (
            "apex=pubsub@example.com",
            "*@example.com",
            "pubsub:createtopic pubsub:deletetopic",
        )
    ],
    "pubsub-subscribe": [
        (TOPIC, "*@*", "pubsub:subscribe"),
        (TOPIC, "apex=pubsub/music.jazz.milesdavis@forwarder.com", "pubsub:subscribe"),
    ],
    "pubsub-publish-except-slate": [
        (TOPIC, "*@*", "core:data"),
        (TOPIC, "mr.slate@example.com", ""),
    ],
    "pubsub-subscriber-publishes": [(TOPIC, "barney@rubble.com", "core:data")],
}

CASES: list[tuple[str, str, str, str, bool]] = [
    # --- RFC 3341 section 3.1 "Briefly:"
    ("rfc3341-3.1", "fred@example.com", "fred@example.com", "presence:publish", True),
    ("rfc3341-3.1", "fred@example.com", "wilma@example.com", "access:set", True),
    ("rfc3341-3.1", "fred@example.com", "wilma@example.com", "presence:watch", True),
    ("rfc3341-3.1", "fred@example.com", "apex=presence@example.com", "presence:watch", True),
    ("rfc3341-3.1", "fred@example.com", "apex=pubsub/x@example.com", "access:get", True),
    ("rfc3341-3.1", "fred@example.com", "mr.slate@example.com", "core:data", True),
    ("rfc3341-3.1", "fred@example.com", "mr.slate@example.com", "presence:subscribe", False),
    ("rfc3341-3.1", "fred/appl=wb@example.com", "barney/appl=wb@example.com", "core:data", True),
    (
        "rfc3341-3.1",
        "fred/appl=wb@example.com",
        "barney/appl=wb@example.com",
        "presence:subscribe",
        False,
    ),
    ("rfc3341-3.1", "fred/appl=wb@example.com", "barney@example.com", "core:data", False),
    ("rfc3341-3.1", "fred@example.com", "barney@example.com", "core:data", True),
    ("rfc3341-3.1", "fred@example.com", "barney@example.com", "presence:subscribe", True),
    ("rfc3341-3.1", "fred@example.com", "barney@example.com", "presence:watch", True),
    ("rfc3341-3.1", "fred@example.com", "barney@example.com", "presence:publish", False),
    ("rfc3341-3.1", "fred@example.com", "barney@example.com", "access:get", False),
    ("rfc3341-3.1", "fred@example.com", "barney/appl=wb@example.com", "presence:watch", True),
    ("rfc3341-3.1", "fred@example.com", "Wilma@example.com", "access:set", False),
    ("rfc3341-3.1", "fred@example.com", "dino@bedrock.org", "core:data", True),
    ("rfc3341-3.1", "fred@example.com", "dino@bedrock.org", "presence:subscribe", False),
    ("rfc3341-3.1", "fred@example.com", "apex=pubsub@bedrock.org", "core:data", True),
    ("rfc3341-3.1", "fred@example.com", "apex=pubsub@bedrock.org", "presence:watch", False),
    ("rfc3341-3.1", "fred@example.com", "dino@[10.0.0.1]", "core:data", True),
    # --- RFC 3341 section 2.3 (all:none)
    ("rfc3341-2.3-before", "fred@example.com", "barney@example.com", "presence:watch", True),
    ("rfc3341-2.3-after", "fred@example.com", "barney@example.com", "presence:watch", False),
    ("rfc3341-2.3-after", "fred@example.com", "barney@example.com", "core:data", False),
    ("rfc3341-2.3-after", "fred@example.com", "betty@example.com", "core:data", True),
    # --- RFC 3341 section 3: defaults, and an explicit '*@*' overriding only its twin
    ("rfc3341-3-star", "fred@example.com", "dino@bedrock.org", "core:data", True),
    ("rfc3341-3-star", "fred@example.com", "apex=report@example.com", "all:all", True),
    ("rfc3341-3-star", "fred@example.com", "apex=report@bedrock.org", "core:data", True),
    ("rfc3341-3-star", "fred@example.com", "apex=report@bedrock.org", "presence:watch", False),
    ("rfc3341-3-star", "fred@example.com", "fred/appl=wb@example.com", "presence:watch", False),
    ("rfc3341-3.1", "fred@example.com", "betty@bedrock.org", "all:none", False),
    # --- RFC 3341 section 3.1: the shorter domain wildcard wins, and matches zero labels
    ("rfc3341-3.1-domains", "fred@example.com", "a@bar.foo.example.com", "presence:watch", True),
    (
        "rfc3341-3.1-domains",
        "fred@example.com",
        "a@bar.foo.example.com",
        "presence:subscribe",
        False,
    ),
    ("rfc3341-3.1-domains", "fred@example.com", "a@foo.example.com", "presence:watch", True),
    ("rfc3341-3.1-domains", "fred@example.com", "a@example.com", "presence:subscribe", True),
    ("rfc3341-3.1-domains", "fred@example.com", "a@elsewhere.com", "presence:subscribe", False),
    ("rfc3341-3.1-domains", "fred@example.com", "a@notexample.com", "presence:subscribe", False),
    # --- draft-schwartz-apex-pubsub section 7: only example.com creates topics
    ("pubsub-create", "apex=pubsub@example.com", "barney@example.com", "pubsub:createtopic", True),
    ("pubsub-create", "apex=pubsub@example.com", "barney@example.com", "pubsub:deletetopic", True),
    ("pubsub-create", "apex=pubsub@example.com", "barney@example.com", "pubsub:subscribe", False),
    ("pubsub-create", "apex=pubsub@example.com", "barney@rubble.com", "pubsub:createtopic", False),
    ("pubsub-create", "apex=pubsub@example.com", "apex=report@example.com", "pubsub:all", True),
    # anyone subscribes, and the forwarder.com pubsub server too
    ("pubsub-subscribe", TOPIC, "barney@rubble.com", "pubsub:subscribe", True),
    ("pubsub-subscribe", TOPIC, "fred/appl=wb@example.com", "pubsub:subscribe", True),
    (
        "pubsub-subscribe",
        TOPIC,
        "apex=pubsub/music.jazz.milesdavis@forwarder.com",
        "pubsub:subscribe",
        True,
    ),
    ("pubsub-subscribe", TOPIC, "apex=pubsub/other@forwarder.com", "pubsub:subscribe", False),
    ("pubsub-subscribe", TOPIC, "barney@rubble.com", "pubsub:cancel", False),
    ("pubsub-subscribe", TOPIC, "barney@rubble.com", "core:data", False),
    # anyone publishes, except mr.slate (an entry with empty actions denies)
    ("pubsub-publish-except-slate", TOPIC, "barney@rubble.com", "core:data", True),
    ("pubsub-publish-except-slate", TOPIC, "fred@example.com", "core:data", True),
    ("pubsub-publish-except-slate", TOPIC, "mr.slate@example.com", "core:data", False),
    ("pubsub-publish-except-slate", TOPIC, "mr.slate/appl=wb@example.com", "core:data", True),
    # subscribing adds a core:data entry for the subscriber: only subscribers publish
    ("pubsub-subscriber-publishes", TOPIC, "barney@rubble.com", "core:data", True),
    ("pubsub-subscriber-publishes", TOPIC, "wilma@rubble.com", "core:data", False),
    ("pubsub-subscriber-publishes", TOPIC, "apex=pubsub@example.com", "pubsub:cancel", True),
    ("pubsub-subscriber-publishes", TOPIC, "apex=pubsub@forwarder.com", "core:data", True),
]


def rules_for(policy: str, owner: Endpoint) -> OwnerRules:
    entries = [
        AccessEntry(
            Endpoint.parse(o), ActorPattern.parse(a), ActionSet(REGISTRY.parse_actions(acts))
        )
        for o, a, acts in POLICIES[policy]
    ]
    return OwnerRules.build(owner, entries)


@pytest.mark.parametrize(("policy", "owner", "actor", "token", "allowed"), CASES)
def test_decision(policy: str, owner: str, actor: str, token: str, allowed: bool) -> None:
    owner_ep = Endpoint.parse(owner)
    rules = rules_for(policy, owner_ep)
    REGISTRY.validate(token)
    assert rules.allows(Endpoint.parse(actor), (token,)) is allowed


@pytest.mark.parametrize(("policy", "owner", "actor", "token", "allowed"), CASES)
def test_selected_entry_is_best_by_rank(
    policy: str, owner: str, actor: str, token: str, allowed: bool
) -> None:
    """The indexed selection agrees with a brute-force sort over all patterns."""
    owner_ep = Endpoint.parse(owner)
    rules = rules_for(policy, owner_ep)
    actor_ep = Endpoint.parse(actor)
    candidates = [
        (rank, entry)
        for entry in [*rules.explicit.values(), *_defaults_not_overridden(rules)]
        if (rank := entry.actor.rank(actor_ep)) is not None
    ]
    best = min(candidates, key=lambda item: item[0])[1]
    assert rules.select(actor_ep) == best


def _defaults_not_overridden(rules: OwnerRules) -> list[AccessEntry]:
    from apexmesh.apex.access import default_entries

    return [e for e in default_entries(rules.owner) if e.actor.key not in rules.explicit]
