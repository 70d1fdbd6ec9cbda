"""Bounded fuzzing of the frame parser and the session, inside the unit suite.

``tests/fuzz/fuzz_frames.py`` holds the target (usable by atheris). Here it runs over a
corpus of valid streams (the RFC 3080 transcripts and recorded session traffic) mutated
by a seeded generator for a bounded number of iterations and time, and over Hypothesis
binaries. Any exception escaping the target is a bug.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_beep_rfc_transcripts import TRANSCRIPTS, load
from test_beep_session_pair import Pair, body

from apexmesh.beep.management import ProfileOffer
from tests.support.fuzzing import load_target
from tests.support.fuzzing import mutate as mutate_bytes

pytestmark = pytest.mark.unit

target = load_target("fuzz_frames")

#: Control octets (see ``fuzz_one``): initiator or listener, whole or in small chunks.
CONTROLS = (0x00, 0x40, 0x21, 0x63, 0x80, 0xC0, 0xA4, 0xE0)


def corpus() -> list[tuple[bool, bytes]]:
    """(sent by the initiator, octets) of valid streams."""
    seeds: list[tuple[bool, bytes]] = []
    for path in TRANSCRIPTS:
        transcript = load(path)
        for side, role in transcript.roles.items():
            seeds.append((role.value == "initiator", transcript.stream(side)))
    pair = Pair()
    wire: list[tuple[bool, bytes]] = []
    original = pair._deliver

    def tap(data: bytes, to: object) -> list:  # type: ignore[type-arg]
        wire.append((to is pair.lis, data))
        return original(data, to)  # type: ignore[arg-type]

    pair._deliver = tap  # type: ignore[method-assign]
    ch = pair.ini.start_channel([ProfileOffer(uri="http://example.org/beep/echo", content="x")])
    pair.pump()
    pair.lis.accept_channel(ch, "http://example.org/beep/echo")
    pair.pump()
    for size in (0, 10, 5000):
        pair.ini.send_msg(ch, body(b"m" * size))
    pair.pump()
    for msgno in range(3):
        pair.lis.send_ans(ch, msgno, body(b"a"))
        pair.lis.send_nul(ch, msgno)
    pair.pump()
    pair.ini.close_channel(ch)
    pair.pump()
    pair.ini.close()
    pair.pump()
    seeds.extend((ini, b"".join(d for f, d in wire if f is ini)) for ini in (True, False))
    return seeds


def mutate(rng: random.Random, data: bytes, other: bytes) -> bytes:
    return mutate_bytes(
        rng,
        data,
        other,
        numbers=(0, 1, 2, 9, 4095, 4096, 2**31, 2**32),
        inserts=(b"END\r\n", b"\r\n", b"SEQ 0 0 4096\r\n", b"NUL 1 0 . 0 0\r\nEND\r\n", b" "),
    )


def test_seed_corpus_never_raises() -> None:
    for from_ini, data in corpus():
        control = 0x40 if from_ini else 0x00  # the initiator's octets go to a listener
        target.fuzz_one(bytes([control]) + data)
        target.fuzz_one(bytes([control | 0x20]) + data)


def test_mutated_corpus_never_raises() -> None:
    """A few seconds of seeded mutation fuzzing, bounded in iterations too (longer with
    ``APEXMESH_FUZZ_SECONDS``, see tests/fuzz/README.md)."""
    rng = random.Random(int(os.environ.get("APEXMESH_FUZZ_SEED", "3080")))
    seeds = corpus()
    seconds = float(os.environ.get("APEXMESH_FUZZ_SECONDS", "0")) or 4.0
    limit = 10**12 if "APEXMESH_FUZZ_SECONDS" in os.environ else 20_000
    deadline = time.monotonic() + seconds
    iterations = 0
    while iterations < limit and time.monotonic() < deadline:
        from_ini, data = rng.choice(seeds)
        _, other = rng.choice(seeds)
        control = rng.choice(CONTROLS) & ~0xC0
        control |= 0x40 if from_ini else 0x00
        target.fuzz_one(bytes([control]) + mutate(rng, data, other))
        iterations += 1
    print(f"fuzz_frames: {iterations} mutated inputs in {seconds:.0f} s")
    assert iterations >= 200


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_raise(data: bytes) -> None:
    target.fuzz_one(data)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(CONTROLS),
    st.lists(
        st.sampled_from(
            [
                b"MSG ",
                b"RPY ",
                b"ERR ",
                b"ANS ",
                b"NUL ",
                b"SEQ ",
                b"0 ",
                b"1 ",
                b"2 ",
                b". ",
                b"* ",
                b"52 ",
                b"4096 ",
                b"2147483647 ",
                b"\r\n",
                b"END\r\n",
                b"Content-Type: application/beep+xml",
                b"<start number='1'><profile uri='http://example.org/beep/echo' /></start>",
                b"<close number='0' code='200' />",
                b"<greeting />",
                b"<ok />",
                b"<error code='550' />",
            ]
        ),
        max_size=40,
    ),
)
def test_token_soup_never_raises(control: int, tokens: list[bytes]) -> None:
    target.fuzz_one(bytes([control]) + b"".join(tokens))
