"""The data elements of one publication's fan-out, and their submission ids (sans I/O).

Section 4.7.1 step 2 forwards a publication as data elements naming the subscribers. The
service submits one element per relay pod holding some of them (so each pod relays to
its own endpoints without a hop) and per chunk of at most ``MAX_RECIPIENTS_PER_DATA``.
Each element's ``SubmitRequest.submission_id`` is derived, never random, so that a
publication delivered again (a relay retrying a cut-off call, on this pubsub pod or
another) submits the same ids to the same relay pods, which relay each id once
(docs/pubsub.md, "Retries and idempotency").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from apexmesh.apex.data import MAX_RECIPIENTS_PER_DATA
from apexmesh.apex.endpoint import Endpoint


@dataclass(frozen=True, slots=True)
class FanoutChunk:
    """One data element of a publication's fan-out, for one relay pod."""

    #: gRPC address of the relay pod holding these recipients ("": any relay).
    address: str
    recipients: tuple[Endpoint, ...]
    #: The Submit's id: the same for every attempt, on every pubsub pod (see
    #: :func:`plan_fanout`).
    submission_id: str
    #: transID of the chunk's dataHopping option: derived from the topic, the relay pod
    #: and the chunk's index, never from the publication, so that a retried chunk is
    #: the very same data and successive publications of a topic differ from one
    #: another in their content reference only (the relays and subscribers then answer
    #: them from an earlier parse, apexmesh/apex/memo.py).
    trans_id: int


def plan_fanout(
    recipients: Iterable[Endpoint],
    placement: Mapping[Endpoint, str],
    delivery_id: str,
    *,
    topic: str = "",
    chunk: int = MAX_RECIPIENTS_PER_DATA,
) -> list[FanoutChunk]:
    """The data elements of one publication: recipients grouped by the relay pod that
    holds them (``placement``; absent or "" for any relay), each group sorted by the
    endpoints' text and cut in chunks of at most ``chunk``.

    A chunk's submission id is a digest of (``delivery_id``, address, chunk index): a
    relay that retries the publication with the same delivery id, on this pubsub pod or
    another, makes it submit the same ids to the same relay pods, which relay each id
    once. (If a subscriber subscribed, ended or moved to another relay pod in between,
    the chunks differ; docs/pubsub.md, "Retries and idempotency".)"""
    groups: dict[str, list[Endpoint]] = {}
    for recipient in recipients:
        groups.setdefault(placement.get(recipient, ""), []).append(recipient)
    out: list[FanoutChunk] = []
    for address in sorted(groups):
        members = sorted(groups[address], key=str)
        for index, start in enumerate(range(0, len(members), chunk)):
            digest = hashlib.blake2b(
                f"{delivery_id}\n{address}\n{index}".encode(), digest_size=16
            ).hexdigest()
            shape = hashlib.blake2b(f"{topic}\n{address}\n{index}".encode(), digest_size=4).digest()
            out.append(
                FanoutChunk(
                    address=address,
                    recipients=tuple(members[start : start + chunk]),
                    submission_id=f"pubsub-{digest}",
                    trans_id=int.from_bytes(shape, "big") % 2_147_483_647 or 1,
                )
            )
    return out


__all__ = ["FanoutChunk", "plan_fanout"]
