"""Fuzz entry point for the BEEP frame parser and session.

``fuzz_one(data)`` never raises for any input: the frame reader may only raise
:class:`FramingError` (caught here), and the session must turn every peer error into a
``SessionTerminated`` event or an ERR reply. Any other exception is a bug.

Run it with atheris when installed::

    python tests/fuzz/fuzz_frames.py [corpus_dir] [-max_total_time=60]

The unit suite (``tests/apexmesh/beep/test_beep_fuzz.py``) runs it for a bounded
number of iterations with a seeded mutator, so it works without atheris.
"""

from __future__ import annotations

import contextlib
import sys

from apexmesh.beep import events as ev
from apexmesh.beep.errors import FramingError, LocalProtocolError
from apexmesh.beep.frames import FrameReader, encode_frame
from apexmesh.beep.mime import beep_xml
from apexmesh.beep.session import Role, Session, SessionConfig

ECHO = "http://example.org/beep/echo"
_GREETING = beep_xml(b"<greeting />")
GREETING = encode_frame("RPY", 0, 0, False, 0, _GREETING)
_START = beep_xml(f"<start number='1'><profile uri='{ECHO}' /></start>".encode())
#: A greeting and a start for channel 1: fuzz input after it reaches channel 1's code.
OPENED = GREETING + encode_frame("MSG", 0, 1, False, len(_GREETING), _START)

CONFIG = SessionConfig(profiles=(ECHO,), tls_available=True, max_message_octets=64 * 1024)


def fuzz_reader(data: bytes, chunk: int) -> None:
    """Parse ``data`` in pieces of ``chunk`` octets until it is used up or rejected."""
    reader = FrameReader(64 * 1024)
    try:
        for i in range(0, len(data), chunk):
            reader.feed(data[i : i + chunk])
            while reader.next_frame() is not None:
                pass
    except FramingError:
        return


def react(session: Session, event: ev.Event) -> None:
    """The application: accept every channel, echo every message, finish TLS at once."""
    if isinstance(event, ev.ChannelStartRequested):
        session.accept_channel(event.channel, ECHO, "<hi />")
    elif isinstance(event, ev.MessageReceived):
        session.send_rpy(event.channel, event.msgno, event.payload)
    elif isinstance(event, ev.TlsStartRequired):
        session.tls_established()


def fuzz_session(data: bytes, role: Role, prefix: bytes, chunk: int) -> None:
    """Feed ``prefix + data`` to a session, acting like an application that says yes."""
    session = Session(role, CONFIG)
    stream = prefix + data
    for i in range(0, len(stream), chunk):
        for event in session.receive_data(stream[i : i + chunk], now=float(i)):
            # An application acting in a state that forbids it gets its own error.
            with contextlib.suppress(LocalProtocolError):
                react(session, event)
        session.data_to_send()
    session.handle_timer(1e9)
    session.receive_eof()
    session.data_to_send()


def fuzz_one(data: bytes) -> None:
    """The fuzz target. The first octet picks how the rest is fed: bits 0-4 the chunk
    size (when bit 5 is set, else all at once), bit 6 the role (listener when set), bit 7
    a prefix that opens the session first (greeting, plus channel 1 for a listener)."""
    if not data:
        return
    control, data = data[0], data[1:]
    chunk = (control & 0x1F) + 1 if control & 0x20 else len(data) + 1
    fuzz_reader(data, chunk)
    role = Role.LISTENER if control & 0x40 else Role.INITIATOR
    prefix = b""
    if control & 0x80:
        prefix = OPENED if role is Role.LISTENER else GREETING
    fuzz_session(data, role, prefix, chunk)


def main() -> None:  # pragma: no cover - needs atheris
    try:
        import atheris
    except ImportError:
        sys.exit(
            "atheris is not installed: pip install atheris (the unit suite runs this "
            "target without it: tests/apexmesh/beep/test_beep_fuzz.py)"
        )
    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    main()
