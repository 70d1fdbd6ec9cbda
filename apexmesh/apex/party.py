"""The APEX option party pack (RFC 3342): attachOverride (section 1) and dataHopping
(section 4), as pure functions of the options and of one hop's plan.

* ``attachOverride`` in an ``attach``: an application already attached as the endpoint
  has its attachment terminated with code 556, concurrently with the attach, which then
  proceeds as usual. :func:`overrides` tells whether an attach asks for it.
* ``dataHopping`` in a ``data`` (per-data, per-originator or per-recipient), with content
  ``<dataHopping noMoreThan='N' reportErrors='true|false' />`` (DTD of section 6, N a
  HOPS value 0..255, defaults 0 and false): when N is non-zero, a relay reduces it by one
  immediately before sending the data to the next relay (step 5.2 of RFC 3340 section
  4.4.4.1); at zero or less the data is not sent, and with reportErrors the originator
  gets a statusResponse echoing the option's transID with 550 for the recipient.
  :func:`next_relay` makes that decision for one recipient's
  :class:`~apexmesh.apex.hops.RecipientPlan`.

The relay understands both options (:data:`PARTY_OPTIONS`, added to its
:class:`~apexmesh.apex.options.OptionRegistry`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from apexmesh.apex import _dtd
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.data import Data, Originator, Recipient
from apexmesh.apex.errors import ApexError
from apexmesh.apex.hops import RecipientPlan
from apexmesh.apex.options import Option, TargetHop

#: RFC 3342 section 5.1.
ATTACH_OVERRIDE: Final = "attachOverride"
#: RFC 3342 section 5.4.
DATA_HOPPING: Final = "dataHopping"
#: The options of this module, for the relay's OptionRegistry.
PARTY_OPTIONS: Final = frozenset({ATTACH_OVERRIDE, DATA_HOPPING})

#: The code of the terminate that ends an overridden attachment (RFC 3342 section 1).
OVERRIDE_CODE: Final = 556
#: Its text, as in the RFC's example.
OVERRIDE_TEXT: Final = "overriden"

#: Upper bound of a HOPS value (RFC 3342 section 6).
MAX_HOPS: Final = 255
#: The permanent failure reported when the hop count runs out.
HOPS_EXHAUSTED: Final = ApexReplyCode.ACTION_NOT_TAKEN
HOPS_EXHAUSTED_TEXT: Final = "dataHopping: hop count exhausted"


def overrides(options: Iterable[Option]) -> bool:
    """True when the (processed) options of an attach include attachOverride."""
    return any(option.internal == ATTACH_OVERRIDE for option in options)


@dataclass(frozen=True, slots=True, kw_only=True)
class DataHopping:
    """The content of a dataHopping option (RFC 3342 section 6)."""

    #: Relays the data may still be sent to; 0 means the option is inactive.
    no_more_than: int = 0
    #: Whether an exhausted hop count is reported to the originator.
    report_errors: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.no_more_than <= MAX_HOPS:
            _dtd.fail(f"dataHopping: noMoreThan {self.no_more_than} out of range 0..{MAX_HOPS}")

    def to_xml(self) -> bytes:
        head = _dtd.attr("noMoreThan", str(self.no_more_than))
        head += _dtd.attr("reportErrors", "true" if self.report_errors else "false")
        return f"<dataHopping{head} />".encode()


def data_hopping_of(option: Option) -> DataHopping:
    """Parse the content of a dataHopping option (501 when it is not valid).

    An option without content takes the DTD defaults (noMoreThan 0: inactive).
    """
    if option.internal != DATA_HOPPING:
        _dtd.fail(f"{option.name!r} is not the dataHopping option", trans_id=option.trans_id)
    if not option.content.strip():
        return DataHopping()
    try:
        root = _dtd.parse_root(option.content)
        if _dtd.tag_of(root) != DATA_HOPPING or len(root) or (root.text or "").strip():
            _dtd.fail("dataHopping: the option holds one empty dataHopping element")
        attrs = _dtd.attributes(root, allowed=("noMoreThan", "reportErrors"))
        hops = attrs.get("noMoreThan", "0").strip()
        if not hops.isascii() or not hops.isdigit() or len(hops) > 3:
            _dtd.fail(f"dataHopping: noMoreThan {hops!r} is not a HOPS value")
        report = attrs.get("reportErrors", "false")
        if report not in ("true", "false"):
            _dtd.fail("dataHopping: reportErrors must be true or false")
        return DataHopping(no_more_than=int(hops), report_errors=report == "true")
    except ApexError as exc:
        exc.trans_id = option.trans_id
        raise


def data_hopping_option(trans_id: int, no_more_than: int, *, report_errors: bool = True) -> Option:
    """The option as RFC 3342 section 4 asks an originator to set it (targetHop all,
    mustUnderstand true)."""
    content = DataHopping(no_more_than=no_more_than, report_errors=report_errors).to_xml()
    return Option(
        internal=DATA_HOPPING,
        trans_id=trans_id,
        target_hop=TargetHop.ALL,
        must_understand=True,
        content=content,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HopStep:
    """What :func:`next_relay` decided for one recipient."""

    #: The data to send to the next relay (hop counts reduced), None when stopped.
    forward: Data | None
    #: The dataHopping option whose count ran out, None when the data goes on.
    stopped: Option | None = None
    #: Whether the originator gets an error report (the stopping option's reportErrors).
    report: bool = False


def next_relay(plan: RecipientPlan) -> HopStep:
    """Apply dataHopping to a recipient this relay is about to send to another relay.

    Every applicable dataHopping option (``plan.process``) with a non-zero count is
    reduced by one; the first that reaches zero stops the data. Reduced options replace
    their originals in ``plan.forward``. Raises :class:`ApexError` 501 (with the option's
    transID) for unparsable content. ``plan`` must not be a failed one.
    """
    forward = plan.forward
    if forward is None:
        raise ApexError(ApexReplyCode.ACTION_NOT_TAKEN_TRANSIENT, "a failed recipient")
    replaced: dict[Option, Option] = {}
    for placed in plan.process:
        option = placed.option
        if option.internal != DATA_HOPPING:
            continue
        hopping = data_hopping_of(option)
        if hopping.no_more_than == 0:
            continue
        left = hopping.no_more_than - 1
        if left <= 0:
            return HopStep(forward=None, stopped=option, report=hopping.report_errors)
        reduced = dataclasses.replace(hopping, no_more_than=left)
        replaced[option] = dataclasses.replace(option, content=reduced.to_xml())
    if not replaced:
        return HopStep(forward=forward)

    def swap(options: tuple[Option, ...]) -> tuple[Option, ...]:
        return tuple(replaced.get(option, option) for option in options)

    return HopStep(
        forward=Data(
            content=forward.content,
            originator=Originator(
                identity=forward.originator.identity, options=swap(forward.originator.options)
            ),
            recipients=tuple(
                Recipient(identity=r.identity, options=swap(r.options)) for r in forward.recipients
            ),
            options=swap(forward.options),
            data_content=forward.data_content,
        )
    )


__all__ = [
    "ATTACH_OVERRIDE",
    "DATA_HOPPING",
    "HOPS_EXHAUSTED",
    "HOPS_EXHAUSTED_TEXT",
    "MAX_HOPS",
    "OVERRIDE_CODE",
    "OVERRIDE_TEXT",
    "PARTY_OPTIONS",
    "DataHopping",
    "HopStep",
    "data_hopping_of",
    "data_hopping_option",
    "next_relay",
    "overrides",
]
