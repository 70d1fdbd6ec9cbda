"""Fuzz entry point for the APEX element parsers (RFC 3340 section 9.1 and the services'
DTDs: RFC 3341, RFC 3343, draft-schwartz-apex-pubsub).

``fuzz_one(data)`` never raises for any input: every parser may only refuse with
:class:`ApexError` (or the access service's :class:`AccessError`), each carrying the code
the peer is answered with. It feeds the octets to what a relay and the services parse
from a peer: the BEEP payload (MIME) and its control element, the element parser, and
the access, presence and pubsub operation parsers; and it checks that a document the
relay recognizes without parsing (``ParseMemo.known_data``, apexmesh/apex/memo.py) is what the
full parser makes of it. Any other exception, or a disagreement, is a bug.

Run it with atheris when installed, or for a bounded time with the seeded mutator that
the unit suite uses (no extra package)::

    python tests/fuzz/fuzz_apex.py [corpus_dir] [-max_total_time=600]   # atheris
    python tests/fuzz/fuzz_apex.py --seconds 600                          # mutator

The unit suite (``tests/apexmesh/apex/test_apex_fuzz.py``) runs it for a bounded number
of iterations and Hypothesis examples.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (atheris, --seconds): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apexmesh.apex.access import AccessError, TokenRegistry
from apexmesh.apex.access import parse_operation as parse_access
from apexmesh.apex.content import parse_payload
from apexmesh.apex.data import data_from
from apexmesh.apex.elements import Data, parse_apex, parse_message
from apexmesh.apex.errors import ApexError
from apexmesh.apex.memo import ParseMemo
from apexmesh.apex.presence import parse_operation as parse_presence
from apexmesh.apex.presence import parse_service_message as parse_presence_message
from apexmesh.beep.xml import XmlError, parse_xml
from apexmesh.pubsub.elements import parse_operation as parse_pubsub
from apexmesh.pubsub.elements import parse_service_message as parse_pubsub_message
from tests.support.fuzzing import fuzz_main
from tests.support.fuzzing import mutate as mutate_bytes

REGISTRY = TokenRegistry()

#: Valid documents and payloads the mutator starts from (one of each kind of element).
SEEDS: tuple[bytes, ...] = (
    (
        b"<data content='cid:1@example.com'><originator identity='fred@example.com' />"
        b"<recipient identity='barney@example.com' /></data>"
    ),
    (
        b"<data content='#Content'><originator identity='fred@example.com'>"
        b"<option internal='statusRequest' transID='3' /></originator>"
        b"<recipient identity='barney@example.com'><option internal='hold4Endpoint' transID='4' />"
        b"</recipient><option internal='dataTiming' targetHop='final' mustUnderstand='true' "
        b"transID='5'><dataTiming noLaterThan='10000' /></option>"
        b"<data-content Name='Content'><p a='1'>t&amp;u</p></data-content></data>"
    ),
    (
        b"<attach endpoint='fred/appl=wb@example.com' transID='1'>"
        b"<option internal='attachOverride' transID='2' /></attach>"
    ),
    b"<bind relay='example.com' transID='7' />",
    b"<terminate transID='0' code='421' xml:lang='en'>bye</terminate>",
    b"<ok />",
    b"<error code='550'>unknown endpoint identity</error>",
    (
        b"<statusResponse transID='86'><destination identity='barney@example.com'>"
        b"<reply code='250' /></destination></statusResponse>"
    ),
    (
        b"<query transID='1' owner='fred@example.com' actor='barney@example.com' "
        b"actions='core:data' />"
    ),
    (
        b"<set transID='2'><access owner='fred@example.com' actor='*@*.example.com' "
        b"actions='core:data presence:subscribe' lastUpdate='2000-05-14T13:02:00Z' /></set>"
    ),
    b"<subscribe publisher='fred@example.com' duration='86400' transID='100' />",
    (
        b"<publish publisher='fred@example.com' transID='1' timeStamp='2000-05-14T13:30:00Z'>"
        b"<presence publisher='fred@example.com' lastUpdate='1970-01-01T00:00:00Z'>"
        b"<tuple destination='apex:f%72ed@example.com' availableUntil='2525-12-31T23:59:59Z'>"
        b"<capability baseline='urn:ietf:rfc:2533'>x</capability></tuple></presence></publish>"
    ),
    b"<createtopic topic='music.jazz' transID='1' />",
    b"<subscribe subscriber='fred@example.com' topic='music.jazz' transID='2' duration='60' />",
    b"<topiclist transID='3'><topic name='a.b' /></topiclist>",
    (
        b'Content-Type: multipart/related; boundary="b"; type="application/beep+xml"\r\n\r\n'
        b"--b\r\nContent-Type: application/beep+xml\r\n\r\n<data content='cid:1@x.org'>"
        b"<originator identity='a@x.org' /><recipient identity='b@x.org' /></data>\r\n"
        b"--b\r\nContent-Type: text/plain\r\nContent-ID: <1@x.org>\r\n\r\nhi\r\n--b--\r\n"
    ),
    b"Content-Type: application/beep+xml\r\n\r\n<terminate transID='1' />",
)

_REFUSALS = (ApexError, AccessError)


#: What the fuzzer's "relay" remembers between inputs (a relay's memo, bounded).
MEMO = ParseMemo()


def check_known_data(raw: bytes) -> None:
    """A document recognized without parsing must be what the full parser makes of it,
    and one the full parser refuses must never be recognized."""
    known = MEMO.known_data(raw)
    if known is None:
        return
    try:
        full = data_from(parse_xml(raw), raw)
    except (ApexError, XmlError) as exc:
        raise AssertionError(f"known_data accepted what the parser refuses: {exc}") from None
    if known != full:
        raise AssertionError(f"known_data disagrees with the parser:\n{known}\n{full}")


def remembering_parse(data: bytes) -> object:
    """parse_apex as a relay calls it, remembering documents in :data:`MEMO`."""
    return parse_apex(data, MEMO)


def fuzz_one(data: bytes) -> None:
    """The fuzz target: every parser a peer's octets reach (see the module docstring)."""
    try:
        payload = parse_payload(data)
    except _REFUSALS:
        payload = None
    if payload is not None:
        with contextlib.suppress(_REFUSALS):
            parse_message(payload.control)
    for parse in (remembering_parse, parse_presence, parse_presence_message, parse_pubsub,
                  parse_pubsub_message):  # fmt: skip
        try:
            element = parse(data)
        except _REFUSALS:
            continue
        if isinstance(element, Data):
            check_known_data(data)
    with contextlib.suppress(_REFUSALS):
        parse_access(data, REGISTRY)
    check_known_data(data)


#: Octets the mutator inserts: the XML and MIME pieces the parsers decide on.
INSERTS: tuple[bytes, ...] = (
    b"<", b">", b"'", b'"', b"&", b"&amp;", b"<![CDATA[", b"]]>", b"<!--", b"<x>", b"</x>",
    b"/>", b" transID='1'", b"\x00", b"\xff", b"\r\n\r\n",
    b"<option internal='x' mustUnderstand='true' transID='9' />",
)  # fmt: skip
#: Numbers the mutator writes: the bounds of transIDs, durations and sizes.
NUMBERS: tuple[int, ...] = (0, -1, 2**31, 2**31 - 1, 10**12)
#: Content values the mutator gives a data element: the relay's known_data path.
CONTENT_VALUES: tuple[bytes, ...] = (
    b"cid:2@x", b"#Content", b"#Other", b"", b"a&amp;b", b"\xc3\xa9", b"x y",
)  # fmt: skip


def mutate(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """One mutation of a seed: another content value for a data element (a fifth of the
    time, when it is one), else the shared byte-level mutator."""
    if data.startswith(b"<data content='") and rng.randrange(5) == 0:
        end = data.find(b"'", 15)
        if end > 0:
            return data[:15] + rng.choice(CONTENT_VALUES) + data[end:]
    return mutate_bytes(rng, data, other, numbers=NUMBERS, inserts=INSERTS)


def run(seconds: float, *, seed: int = 3340, limit: int | None = None) -> int:
    """Fuzz with the seeded mutator for ``seconds`` (or ``limit`` inputs); the count."""
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    done = 0
    for document in SEEDS:  # the known_data path needs each seed parsed once first
        fuzz_one(document)
    while time.monotonic() < deadline and (limit is None or done < limit):
        fuzz_one(mutate(rng, rng.choice(SEEDS), rng.choice(SEEDS)))
        done += 1
    return done


def main() -> None:  # pragma: no cover - a long run, by hand
    fuzz_main("fuzz_apex", run, fuzz_one)


if __name__ == "__main__":  # pragma: no cover
    main()
