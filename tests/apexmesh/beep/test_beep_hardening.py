"""Session behaviour found missing when the mesh was audited and run against Vortex and
beepcore-java: a listener that requires privacy (RFC 3080 sections 3 and 9), Vortex's
NUL frame with an empty MIME header (an interop setting), the server's reason carried
to the SASL client, and 10,000-deep XML answered 501 (non-valid), not 500."""

from __future__ import annotations

import pytest
from test_beep_session_pair import Pair, only

from apexmesh.beep import events as ev
from apexmesh.beep.errors import LocalProtocolError
from apexmesh.beep.frames import encode_frame
from apexmesh.beep.management import ProfileOffer
from apexmesh.beep.mime import beep_xml
from apexmesh.beep.sasl import SaslClientExchange, SaslServerExchange, StaticCredentials
from apexmesh.beep.session import Role, Session, SessionConfig, State
from apexmesh.beep.tuning import TLS_PROFILE, SaslServer, sasl_profile
from apexmesh.beep.xml import XmlError, parse_xml

pytestmark = pytest.mark.unit

APEX = "http://iana.org/beep/APEX"
ECHO = "http://example.org/beep/echo"
CREDENTIALS = StaticCredentials({"fred@example.com": "flintstone"})


def sasl_factory(mechanism: str, tls_active: bool) -> SaslServer:
    return SaslServerExchange(
        mechanism, CREDENTIALS, tls_active=tls_active, realm="example.com", host="example.com"
    )


def private(**extra: object) -> SessionConfig:
    return SessionConfig(
        profiles=(APEX,),
        tls_available=True,
        sasl_mechanisms=("SCRAM-SHA-256", "PLAIN"),
        sasl_server=sasl_factory,
        require_privacy=True,
        **extra,  # type: ignore[arg-type]
    )


# ----------------------------------------------------------------------- privacy


def test_a_private_listener_offers_only_tls_before_tuning() -> None:
    pair = Pair(listener=private())
    [greeting] = only(pair.ini_events, ev.GreetingReceived)
    assert greeting.profiles == (TLS_PROFILE,)


@pytest.mark.parametrize(
    ("profile", "code"),
    [(APEX, 550), (sasl_profile("PLAIN"), 538), (sasl_profile("SCRAM-SHA-256"), 538)],
)
def test_a_private_listener_refuses_every_other_profile_before_tls(profile: str, code: int) -> None:
    pair = Pair(listener=private())
    pair.ini.start_channel([ProfileOffer(uri=profile)])
    ini, lis = pair.pump()
    [failed] = only(ini, ev.ChannelStartFailed)
    assert failed.code == code
    assert not only(lis, ev.ChannelStartRequested)
    assert pair.lis.state is State.OPEN  # refused, not ended


def test_after_tls_the_private_listener_offers_everything() -> None:
    pair = Pair(listener=private())
    pair.ini.start_tls()
    pair.pump()
    assert pair.ini.state is State.TUNING
    pair.ini.tls_established()
    pair.lis.tls_established()
    pair.pump()
    greeting = only(pair.ini_events, ev.GreetingReceived)[-1]
    assert set(greeting.profiles) == {
        APEX,
        sasl_profile("SCRAM-SHA-256"),
        sasl_profile("PLAIN"),
    }


def test_privacy_needs_tls() -> None:
    with pytest.raises(LocalProtocolError, match="TLS"):
        Session(Role.LISTENER, SessionConfig(profiles=(APEX,), require_privacy=True))


# ----------------------------------------------------------------------- NUL interop

#: What Vortex 1.1 sends by default to end a one-to-many reply: a NUL frame whose payload
#: is the empty MIME header (the CRLF that ends no entity-headers).
VORTEX_NUL = b"\r\n"


def vortex_answers(pair: Pair, nul_payload: bytes) -> list[ev.Event]:
    """The listener answers MSG 0 on channel 1 with one ANS and Vortex's NUL, as raw
    frames written by hand (this implementation never sends such a NUL)."""
    channel = pair.open_channel(ECHO)
    pair.ini.send_msg(channel, beep_xml(b"<ask />"))
    pair.pump()
    answer = beep_xml(b"<one />")
    frames = encode_frame("ANS", channel, 0, False, 0, answer, 0) + encode_frame(
        "NUL", channel, 0, False, len(answer), nul_payload
    )
    return pair.ini.receive_data(frames)


def test_vortex_nul_ends_the_session_by_default() -> None:
    pair = Pair(initiator=SessionConfig(profiles=(ECHO,)))
    events = vortex_answers(pair, VORTEX_NUL)
    [ended] = only(events, ev.SessionTerminated)
    assert "NUL" in ended.reason


def test_vortex_nul_is_accepted_with_the_interop_setting() -> None:
    pair = Pair(initiator=SessionConfig(profiles=(ECHO,), accept_nul_mime_header=True))
    events = vortex_answers(pair, VORTEX_NUL)
    assert not only(events, ev.SessionTerminated)
    [done] = only(events, ev.AnswersCompleted)
    assert done.msgno == 0
    assert pair.ini.state is State.OPEN


def test_the_interop_setting_accepts_nothing_else_in_a_nul() -> None:
    pair = Pair(initiator=SessionConfig(profiles=(ECHO,), accept_nul_mime_header=True))
    events = vortex_answers(pair, b"Content-Type: text/plain\r\n\r\n")
    assert only(events, ev.SessionTerminated)


# ----------------------------------------------------------------------- SASL reason


def test_a_sasl_failure_carries_the_servers_code_and_reason() -> None:
    pair = Pair(
        initiator=SessionConfig(),
        listener=SessionConfig(
            profiles=(APEX,), sasl_mechanisms=("SCRAM-SHA-256",), sasl_server=sasl_factory
        ),
    )
    exchange = SaslClientExchange(
        "SCRAM-SHA-256", authcid="fred@example.com", password="wrong", host="example.com"
    )
    pair.ini.start_sasl("SCRAM-SHA-256", exchange)
    ini, _ = pair.pump()
    [failed] = only(ini, ev.AuthenticationFailed)
    assert failed.code == 535
    assert failed.text == "authentication failure"


# ----------------------------------------------------------------------- deep XML


def test_ten_thousand_deep_xml_is_non_valid_501() -> None:
    deep = b"<a>" * 10_000 + b"</a>" * 10_000
    with pytest.raises(XmlError) as refused:
        parse_xml(deep)
    assert refused.value.code == 501


def test_broken_deep_xml_is_still_poorly_formed_500() -> None:
    with pytest.raises(XmlError) as refused:
        parse_xml(b"<a><b></a>")
    assert refused.value.code == 500
