"""What one relay does with the options of a ``data`` element (RFC 3340 sections 4.4.4.1
and 5), as a pure function of the element, the hop position and the options understood.

A relay handles a ``data`` in two phases (section 4.4.4.1):

* before answering ``ok`` (step 2) it processes the per-data options; an applicable
  per-data option it does not understand and that has mustUnderstand true fails the
  whole operation, so :func:`plan_data` raises :class:`ApexError` 504 for it;
* after ``ok`` (steps 4 and 5) it processes the per-originator options and, recipient by
  recipient, the per-recipient options, then transmits a new ``data`` holding "that
  recipient element and all applicable options". A failure there concerns one
  recipient only, so it is recorded in that recipient's :class:`RecipientPlan`.

For each recipient the caller says whether this relay is the final hop (it transmits
directly to the recipient's application, section 5); the targetHop rules of
:mod:`apexmesh.apex.options` then decide what applies here and what travels on. The
content (``content`` attribute and ``data-content``) is never modified (section 4.4.4.1).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import (
    Option,
    OptionRegistry,
    OptionSelection,
    applies,
    not_understood,
    select_options,
)


class Placement(enum.Enum):
    """Where an option sits in a ``data`` (RFC 3340 section 4.4.4)."""

    DATA = "data"
    ORIGINATOR = "originator"
    RECIPIENT = "recipient"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacedOption:
    """An option together with its containing element."""

    placement: Placement
    option: Option


@dataclass(frozen=True, slots=True, kw_only=True)
class RecipientPlan:
    """What this relay does for one recipient of a ``data``."""

    #: The recipient element as received.
    recipient: Recipient
    #: True when this relay transmits directly to the recipient (the final hop).
    final: bool
    #: Applicable, understood options to process, per-data first, then per-originator,
    #: then per-recipient (the order of section 4.4.4.1).
    process: tuple[PlacedOption, ...] = ()
    #: Applicable options not understood and not mustUnderstand (may be noted).
    ignored: tuple[PlacedOption, ...] = ()
    #: The error in processing (504) when a per-originator or per-recipient option that
    #: applies is not understood and has mustUnderstand true; None otherwise.
    failure: ApexError | None = None
    #: The ``data`` to transmit for this recipient, None when ``failure`` is set.
    forward: Data | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DataPlan:
    """The option processing of one ``data`` at this relay."""

    #: Per-data options this relay processes (step 2): applicable for at least one
    #: recipient and understood.
    data_options: tuple[Option, ...]
    #: One plan per recipient, in document order.
    recipients: tuple[RecipientPlan, ...]


def plain(data: Data) -> bool:
    """One recipient and no option anywhere: :func:`plan_data` forwards such data as
    received, and a relay owes no report for it."""
    recipients = data.recipients
    return (
        len(recipients) == 1
        and not recipients[0].options
        and not data.options
        and not data.originator.options
    )


def plan_data(
    data: Data, registry: OptionRegistry, *, is_final: Callable[[Endpoint], bool]
) -> DataPlan:
    """Apply RFC 3340 section 5 to ``data`` at this relay.

    ``is_final(endpoint)`` tells whether this relay delivers to ``endpoint`` directly.
    Raises :class:`ApexError` 504 when a per-data option applies, is not understood and
    has mustUnderstand true (the operation fails before ``ok``).
    """
    if plain(data):
        # Most data: the general steps below would make exactly this plan, the data
        # forwarded as received.
        recipient = data.recipients[0]
        plan = RecipientPlan(recipient=recipient, final=is_final(recipient.identity), forward=data)
        return DataPlan(data_options=(), recipients=(plan,))
    finals = tuple(is_final(recipient.identity) for recipient in data.recipients)
    any_final = any(finals)
    data_options: list[Option] = []
    for option in data.options:
        if not applies(option, final=any_final):
            continue
        if registry.understands(option):
            data_options.append(option)
        elif option.must_understand:
            raise not_understood(option)
    shared: dict[bool, _Shared | ApexError] = {}
    plans = tuple(
        _plan_recipient(data, recipient, registry, final=final, shared=shared)
        for recipient, final in zip(data.recipients, finals, strict=True)
    )
    return DataPlan(data_options=tuple(data_options), recipients=plans)


@dataclass(frozen=True, slots=True)
class _Shared:
    """What the per-data and per-originator options make of every recipient with the same
    ``final``: computed once per data, so a fan-out to many recipients pays for its
    options once, not once per recipient."""

    #: The data as forwarded (its recipients replaced per recipient).
    base: Data
    process: tuple[PlacedOption, ...]
    ignored: tuple[PlacedOption, ...]


def _shared_selections(
    data: Data, registry: OptionRegistry, final: bool, shared: dict[bool, _Shared | ApexError]
) -> _Shared | ApexError:
    found = shared.get(final)
    if found is None:
        try:
            per_data = select_options(data.options, registry, final=final)
            per_originator = select_options(data.originator.options, registry, final=final)
        except ApexError as exc:
            found = shared[final] = exc
            return found
        groups = ((Placement.DATA, per_data), (Placement.ORIGINATOR, per_originator))
        originator = _forwarded_originator(data, per_originator)
        base = data
        if originator is not data.originator or per_data.forward != data.options:
            base = dataclasses.replace(data, originator=originator, options=per_data.forward)
        found = shared[final] = _Shared(
            base=base,
            process=_placed(groups, "process"),
            ignored=_placed(groups, "ignored"),
        )
    return found


def _placed(
    groups: Iterable[tuple[Placement, OptionSelection]], kind: Literal["process", "ignored"]
) -> tuple[PlacedOption, ...]:
    """The ``process`` or ``ignored`` options of each selection, with their placement."""
    return tuple(
        PlacedOption(placement=placement, option=option)
        for placement, selection in groups
        for option in getattr(selection, kind)
    )


def _plan_recipient(
    data: Data,
    recipient: Recipient,
    registry: OptionRegistry,
    *,
    final: bool,
    shared: dict[bool, _Shared | ApexError],
) -> RecipientPlan:
    if not (data.options or data.originator.options or recipient.options):
        # No options anywhere (most data): nothing to process, and a data element with
        # this recipient alone is forwarded as is, which lets the relay send the bytes
        # it received.
        if len(data.recipients) != 1:
            data = data.for_recipients((recipient,))
        return RecipientPlan(recipient=recipient, final=final, forward=data)
    common = _shared_selections(data, registry, final, shared)
    if isinstance(common, ApexError):
        return RecipientPlan(recipient=recipient, final=final, failure=common)
    if not recipient.options:
        # The recipient element is forwarded as received; everything else is shared.
        return RecipientPlan(
            recipient=recipient,
            final=final,
            process=common.process,
            ignored=common.ignored,
            forward=common.base.for_recipients((recipient,)),
        )
    try:
        per_recipient = select_options(recipient.options, registry, final=final)
    except ApexError as exc:
        return RecipientPlan(recipient=recipient, final=final, failure=exc)
    groups = ((Placement.RECIPIENT, per_recipient),)
    kept = per_recipient.forward
    if len(kept) == len(recipient.options) and all(
        mine is theirs for mine, theirs in zip(kept, recipient.options, strict=True)
    ):
        # Every option goes on (a robust delivery's, targetHop final, at the last relay
        # but one): the recipient as received, whose serialization is made already.
        forwarded = recipient
    else:
        forwarded = Recipient(identity=recipient.identity, options=kept)
    return RecipientPlan(
        recipient=recipient,
        final=final,
        process=common.process + _placed(groups, "process"),
        ignored=common.ignored + _placed(groups, "ignored"),
        forward=common.base.for_recipients((forwarded,)),
    )


def _forwarded_originator(data: Data, selection: OptionSelection) -> Originator:
    """The originator element to forward: the received one when no option is removed."""
    if selection.forward == data.originator.options:
        return data.originator
    return Originator(identity=data.originator.identity, options=selection.forward)


def combine(plans: Sequence[RecipientPlan]) -> Data:
    """One ``data`` for several recipients bound for the same next hop.

    Section 4.4.4.1 lets a relay group recipients "providing that these semantics are
    preserved": the per-data and per-originator options each recipient would receive
    must be the same, which holds for recipients with the same ``final`` value. Raises
    :class:`ApexError` (450, the relay's own mistake, not the peer's) otherwise.
    """
    forwards: list[Data] = []
    for plan in plans:
        if plan.forward is None:
            raise ApexError(
                ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "a failed recipient has nothing to send"
            )
        forwards.append(plan.forward)
    if not forwards:
        raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "nothing to combine")
    first = forwards[0]
    recipients: list[Recipient] = []
    for forward in forwards:
        if (
            forward.content != first.content
            or forward.originator != first.originator
            or forward.options != first.options
            or forward.data_content != first.data_content
        ):
            raise ApexError(
                ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT,
                "recipients with different options cannot share one data element",
            )
        recipients.extend(forward.recipients)
    return Data(
        content=first.content,
        originator=first.originator,
        recipients=tuple(recipients),
        options=first.options,
        data_content=first.data_content,
    )


__all__ = [
    "DataPlan",
    "PlacedOption",
    "Placement",
    "RecipientPlan",
    "combine",
    "plain",
    "plan_data",
]
