"""The frame reader and encoders (RFC 3080 section 2.2.1, RFC 3081 section 3.1.3)."""

from __future__ import annotations

import pytest

from apexmesh.beep.errors import FramingError
from apexmesh.beep.frames import Frame, FrameReader, SeqFrame, encode_frame, encode_seq

pytestmark = pytest.mark.unit


def test_encode_matches_the_abnf() -> None:
    assert encode_frame("MSG", 0, 1, False, 52, b"hello") == b"MSG 0 1 . 52 5\r\nhelloEND\r\n"
    assert encode_frame("ANS", 1, 0, True, 20, b"", 7) == b"ANS 1 0 * 20 0 7\r\nEND\r\n"
    assert encode_frame("RPY", 1, 0, False, 0, memoryview(b"abc")[1:]) == (
        b"RPY 1 0 . 0 2\r\nbcEND\r\n"
    )
    assert encode_seq(3, 4294967295, 4096) == b"SEQ 3 4294967295 4096\r\n"


def test_reader_returns_frames_and_seq() -> None:
    reader = FrameReader(4096)
    reader.feed(encode_frame("ANS", 1, 2, True, 3, b"xy", 4) + encode_seq(1, 5, 6))
    assert reader.next_frame() == Frame("ANS", 1, 2, True, 3, b"xy", 4)
    assert reader.next_frame() == SeqFrame(1, 5, 6)
    assert reader.next_frame() is None
    assert reader.buffered == 0


def test_payload_may_contain_anything_including_end() -> None:
    payload = b"END\r\nMSG 0 0 . 0 0\r\n\x00\xff"
    reader = FrameReader(4096)
    reader.feed(encode_frame("MSG", 0, 0, False, 0, payload))
    frame = reader.next_frame()
    assert isinstance(frame, Frame)
    assert frame.payload == payload


def test_partial_frame_waits_then_completes() -> None:
    data = encode_frame("MSG", 1, 0, False, 0, b"z" * 3000)
    reader = FrameReader(4096)
    reader.feed(data[:100])
    assert reader.next_frame() is None
    assert reader.next_frame() is None
    reader.feed(data[100:2000])
    assert reader.next_frame() is None
    reader.feed(data[2000:])
    frame = reader.next_frame()
    assert isinstance(frame, Frame)
    assert frame.payload == b"z" * 3000


def test_input_buffers_are_copied_not_kept() -> None:
    """A caller may reuse its receive buffer after feed()."""
    data = bytearray(encode_frame("MSG", 1, 0, False, 0, b"abcd"))
    reader = FrameReader(4096)
    reader.feed(data)
    data[:] = b"X" * len(data)
    frame = reader.next_frame()
    assert isinstance(frame, Frame)
    assert frame.payload == b"abcd"
    view = memoryview(bytearray(encode_frame("RPY", 1, 0, False, 4, b"ef")))
    reader.feed(view[:7])
    reader.feed(view[7:])
    view[:] = b"Y" * len(view)
    frame = reader.next_frame()
    assert isinstance(frame, Frame)
    assert frame.payload == b"ef"


def test_trailing_data_is_handed_over_and_the_reader_restarts() -> None:
    reader = FrameReader(4096)
    data = encode_frame("MSG", 1, 0, False, 0, b"z" * 100)
    reader.feed(b"RPY 0 1 . 0 0\r\nEND\r\n" + data[:50])
    assert isinstance(reader.next_frame(), Frame)
    assert reader.next_frame() is None  # waits for the rest of the second frame
    assert reader.take_trailing_data() == data[:50]
    assert reader.buffered == 0
    reader.feed(b"SEQ 0 0 4096\r\n")
    assert reader.next_frame() == SeqFrame(0, 0, 4096)


def test_size_above_the_limit_fails_at_the_header() -> None:
    reader = FrameReader(4096)
    reader.feed(b"MSG 1 0 . 0 4097\r\n")
    with pytest.raises(FramingError):
        reader.next_frame()
    reader = FrameReader(4096)
    reader.feed(encode_frame("MSG", 1, 0, False, 0, b"q" * 4097))
    with pytest.raises(FramingError):
        reader.next_frame()


@pytest.mark.parametrize(
    "data",
    [
        b"MSG 0 1 . 0 3\r\nabcEMD\r\n",
        b"RPY 0 1 . 0 1 5\r\naEND\r\n",  # answer number on a non-ANS frame
        b"ANS 0 1 . 0 1\r\naEND\r\n",  # ANS without its answer number
        b"ANS 0 1 . 0 1 2147483648\r\naEND\r\n",
        b"SEQ 0 4294967296 1\r\n",
        b"SEQ 2147483648 0 1\r\n",
        b"SEQ 0 0\r\n",
        b"XYZ",
        b"M\r\n",
        b"MSG 0 1 . 0 1\rxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    ],
)
def test_poorly_formed(data: bytes) -> None:
    reader = FrameReader(4096)
    reader.feed(data)
    with pytest.raises(FramingError):
        reader.next_frame()
