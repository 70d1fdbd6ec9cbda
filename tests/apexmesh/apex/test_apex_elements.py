"""The APEX core element model (RFC 3340 sections 4.4, 6.1.2 and 9.1): the RFC's
examples, round trips, and the reply code of every kind of invalid input."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.elements import (
    MAX_DIAGNOSTIC_CHARS,
    MAX_RECIPIENTS_PER_DATA,
    Attach,
    Bind,
    Data,
    DataContent,
    Error,
    Ok,
    Originator,
    Recipient,
    Reply,
    Terminate,
    parse_apex,
    parse_attach,
    parse_bind,
    parse_data,
    parse_data_content,
    parse_error,
    parse_message,
    parse_ok,
    parse_originator,
    parse_recipient,
    parse_reply,
    parse_terminate,
    raw_inner,
)
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import MAX_OPTIONS_PER_ELEMENT, Option, TargetHop, parse_option
from apexmesh.apex.report import StatusResponse, parse_status_response
from apexmesh.beep.management import Start, parse_management

pytestmark = pytest.mark.unit

FRED = Endpoint.parse("fred@example.com")
BARNEY = Endpoint.parse("barney@example.com")
WILMA = Endpoint.parse("wilma@example.com")
OR = b"<originator identity='f@example.com' /><recipient identity='b@example.com' />"


def code_of(body: bytes) -> int:
    with pytest.raises(ApexError) as info:
        parse_apex(body)
    return int(info.value.code)


# --------------------------------------------------------------------------- RFC examples

# (section, text, expected element) for every element printed in RFC 3340 sections 4-6.
RFC_EXAMPLES: list[tuple[str, bytes, object]] = [
    ("4.1", b"<terminate transID='1' />", Terminate(trans_id=1)),
    (
        "4.2",
        b"<attach endpoint='fred@example.com'\n                               transID='1' />",
        Attach(endpoint=FRED, trans_id=1),
    ),
    (
        "4.2",
        b"<bind relay='example.com'\n                             transID='1' />",
        Bind(relay="example.com", trans_id=1),
    ),
    (
        "4.4.1",
        b"<attach endpoint='fred@example.com' transID='1' />",
        Attach(endpoint=FRED, trans_id=1),
    ),
    (
        "4.4.1",
        b"<attach endpoint='wilma@example.com' transID='2' />",
        Attach(endpoint=WILMA, trans_id=2),
    ),
    ("4.4.1", b"<ok />", Ok()),
    ("4.4.1", b"<error code='537'>access denied</error>", Error(code=537, text="access denied")),
    ("4.4.2", b"<bind relay='example.com' transID='1' />", Bind(relay="example.com", trans_id=1)),
    ("4.4.2", b"<bind relay='rubble.com' transID='2' />", Bind(relay="rubble.com", trans_id=2)),
    ("4.4.3", b"<terminate transID='1' />", Terminate(trans_id=1)),
    ("4.4.3", b"<terminate transID='13' />", Terminate(trans_id=13)),
    (
        "4.4.3",
        b"<error code='550'>unknown transaction-identifier</error>",
        Error(code=550, text="unknown transaction-identifier"),
    ),
    (
        "4.4.4",
        (
            b"<data content='cid:1@example.com'>\n"
            b"       <originator identity='fred@example.com' />\n"
            b"       <recipient identity='barney@example.com' />\n"
            b"   </data>"
        ),
        Data(
            content="cid:1@example.com",
            originator=Originator(identity=FRED),
            recipients=(Recipient(identity=BARNEY),),
        ),
    ),
    (
        "4.1",
        (
            b"<data content='cid:2@example.com'>\n"
            b"    <originator identity='fred@example.com' />\n"
            b"    <recipient identity='barney@example.com' />\n"
            b"</data>"
        ),
        Data(
            content="cid:2@example.com",
            originator=Originator(identity=FRED),
            recipients=(Recipient(identity=BARNEY),),
        ),
    ),
    (
        "5.1",
        (
            b"<data content='cid:1@example.com'>\n"
            b"    <originator identity='fred@example.com' />\n"
            b"    <recipient identity='barney@rubble.com' />\n"
            b"    <option internal='statusRequest' targetHop='final'\n"
            b"            mustUnderstand='true' transID='86' />\n"
            b"</data>"
        ),
        Data(
            content="cid:1@example.com",
            originator=Originator(identity=FRED),
            recipients=(Recipient(identity=Endpoint.parse("barney@rubble.com")),),
            options=(
                Option(
                    internal="statusRequest",
                    target_hop=TargetHop.FINAL,
                    must_understand=True,
                    trans_id=86,
                ),
            ),
        ),
    ),
    (
        "5.1",
        (
            b"<data content='cid:1@example.com'>\n"
            b"    <originator identity='fred@example.com' />\n"
            b"    <recipient identity='barney@example.com' />\n"
            b"    <option internal='statusRequest' targetHop='final'\n"
            b"            mustUnderstand='true' transID='86' />\n"
            b"</data>"
        ),
        Data(
            content="cid:1@example.com",
            originator=Originator(identity=FRED),
            recipients=(Recipient(identity=BARNEY),),
            options=(Option(internal="statusRequest", must_understand=True, trans_id=86),),
        ),
    ),
]


def _report(relay: str, destination: str, reply: bytes) -> bytes:
    return (
        b"<data content='#Content'>\n"
        b"    <originator identity='apex=report@" + relay.encode() + b"' />\n"
        b"    <recipient identity='fred@example.com' />\n"
        b"    <data-content Name='Content'>\n"
        b"        <statusResponse transID='86'>\n"
        b"            <destination identity='" + destination.encode() + b"'>\n"
        b"                " + reply + b"\n"
        b"            </destination>\n"
        b"        </statusResponse>\n"
        b"    </data-content>\n"
        b"</data>"
    )


# The report data of RFC 3340 section 5.1: (relay domain, destination, reply element, code).
RFC_REPORTS = [
    ("example.com", "barney@example.com", b"<reply code='250' />", 250),
    (
        "example.com",
        "barney@example.com",
        b"<reply code='550'>unknown endpoint\n                  identity</reply>",
        550,
    ),
    ("rubble.com", "barney@rubble.com", b"<reply code='250' />", 250),
]


@pytest.mark.parametrize(("relay", "destination", "reply", "code"), RFC_REPORTS)
def test_rfc_report_examples(relay: str, destination: str, reply: bytes, code: int) -> None:
    text = _report(relay, destination, reply)
    data = parse_apex(text)
    assert isinstance(data, Data)
    assert data.originator == Originator(identity=Endpoint.parse(f"apex=report@{relay}"))
    assert data.recipients == (Recipient(identity=FRED),)
    assert data.data_content is not None
    response = parse_apex(data.data_content.content)
    assert isinstance(response, StatusResponse)
    assert response.trans_id == 86
    (only,) = response.destinations
    assert only.identity == Endpoint.parse(destination)
    assert only.reply.code == code
    assert only.reply.trans_id is None
    assert parse_apex(data.to_xml()) == data


STATUS_550 = (
    b"<data content='#Content'>\n"
    b"    <originator identity='apex=report@example.com' />\n"
    b"    <recipient identity='fred@example.com' />\n"
    b"    <data-content Name='Content'>\n"
    b"        <statusResponse transID='86'>\n"
    b"            <destination identity='barney@example.com'>\n"
    b"                <reply code='550'>unknown endpoint\n"
    b"                                  identity</reply>\n"
    b"            </destination>\n"
    b"        </statusResponse>\n"
    b"    </data-content>\n"
    b"</data>"
)


@pytest.mark.parametrize(
    ("section", "text", "expected"),
    RFC_EXAMPLES,
    ids=[f"s{e[0]}-{i}" for i, e in enumerate(RFC_EXAMPLES)],
)
def test_rfc_example_parses_and_round_trips(section: str, text: bytes, expected: object) -> None:
    element = parse_apex(text)
    assert element == expected
    assert parse_apex(element.to_xml()) == element


def test_rfc_example_inline_content_is_kept_byte_exact() -> None:
    data = parse_data(STATUS_550)
    assert data.content == "#Content"
    assert data.originator == Originator(identity=Endpoint.parse("apex=report@example.com"))
    assert data.recipients == (Recipient(identity=FRED),)
    assert data.data_content is not None
    assert data.data_content.name == "Content"
    start = STATUS_550.index(b"<data-content Name='Content'>") + len(
        b"<data-content Name='Content'>"
    )
    end = STATUS_550.rindex(b"</data-content>")
    assert data.data_content.content == STATUS_550[start:end]
    assert parse_data(data.to_xml()) == data


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (
            (
                b"<start number='1'>\n"
                b"    <profile uri='http://iana.org/beep/APEX'>\n"
                b"        <![CDATA[<attach endpoint='fred@example.com'\n"
                b"                         transID='1' />]]>\n"
                b"    </profile>\n"
                b"</start>"
            ),
            Attach(endpoint=FRED, trans_id=1),
        ),
        (
            (
                b"<start number='1'>\n"
                b"    <profile uri='http://iana.org/beep/APEX'>\n"
                b"        <![CDATA[<bind relay='example.com'\n"
                b"                       transID='1' />]]>\n"
                b"    </profile>\n"
                b"</start>"
            ),
            Bind(relay="example.com", trans_id=1),
        ),
    ],
)
def test_rfc_section_4_2_piggybacked_elements(start: bytes, expected: object) -> None:
    element = parse_management(start)
    assert isinstance(element, Start)
    (offer,) = element.profiles
    assert offer.uri == "http://iana.org/beep/APEX"
    assert offer.data is not None
    assert parse_message(offer.data) == expected


def test_rfc_example_canonical_serialization() -> None:
    assert (
        Attach(endpoint=FRED, trans_id=1).to_xml()
        == b"<attach endpoint='fred@example.com' transID='1' />"
    )
    assert Terminate(trans_id=1).to_xml() == b"<terminate transID='1' />"
    assert (
        Error(code=537, text="access denied").to_xml() == b"<error code='537'>access denied</error>"
    )
    assert Ok().to_xml() == b"<ok />"
    assert Reply(code=250, trans_id=None).to_xml() == b"<reply code='250' />"


# --------------------------------------------------------------------------- per element


def test_parse_functions_check_the_root() -> None:
    assert parse_attach(b"<attach endpoint='fred@example.com' transID='7' />").trans_id == 7
    assert parse_bind(b"<bind relay='[10.0.0.1]' transID='7' />").relay == "[10.0.0.1]"
    assert parse_terminate(b"<terminate />") == Terminate()
    assert parse_ok(b"<ok/>") == Ok()
    assert parse_error(b"<error code='421' />") == Error(code=421)
    assert parse_reply(b"<reply code='250' transID='5' />") == Reply(code=250, trans_id=5)
    assert parse_originator(b"<originator identity='fred@example.com' />").identity == FRED
    assert parse_recipient(b"<recipient identity='barney@example.com' />").identity == BARNEY
    assert parse_data_content(b"<data-content Name='x'><a/></data-content>") == DataContent(
        name="x", content=b"<a/>"
    )
    with pytest.raises(ApexError) as info:
        parse_attach(b"<bind relay='example.com' transID='1' />")
    assert info.value.code == ApexReplyCode.PARAMETER_SYNTAX_ERROR


def test_bind_domain_is_canonical() -> None:
    assert parse_bind(b"<bind relay='Example.COM.' transID='1' />").relay == "example.com"


def test_terminate_defaults_and_diagnostic() -> None:
    text = b"<terminate code='421' xml:lang='en' transID='0'>going\n  down</terminate>"
    element = parse_terminate(text)
    assert element == Terminate(trans_id=0, code=421, text="going\n  down", lang="en")
    assert parse_terminate(element.to_xml()) == element


def test_reply_with_language_and_markup_characters_round_trips() -> None:
    reply = Reply(code=554, trans_id=9, text="a < b & 'c'", lang="fr")
    assert parse_reply(reply.to_xml()) == reply


def test_options_inside_every_container_round_trip() -> None:
    option = Option(internal="statusRequest", trans_id=3, target_hop=TargetHop.ALL)
    external = Option(
        external="http://example.com/opt#x",
        trans_id=4,
        must_understand=True,
        localize=("en-US", "fr"),
        content=b"<limit seconds='600'/>text",
    )
    data = Data(
        content="cid:9@example.com",
        originator=Originator(identity=FRED, options=(option,)),
        recipients=(Recipient(identity=BARNEY, options=(external,)), Recipient(identity=WILMA)),
        options=(external, option),
    )
    assert parse_data(data.to_xml()) == data
    attach = Attach(endpoint=FRED, trans_id=1, options=(option, external))
    assert parse_attach(attach.to_xml()) == attach
    bind = Bind(relay="example.com", trans_id=1, options=(external,))
    assert parse_bind(bind.to_xml()) == bind


def test_parse_message_accepts_only_payloads() -> None:
    assert parse_message(b"<ok />") == Ok()
    with pytest.raises(ApexError) as info:
        parse_message(b"<reply code='250' transID='1' />")
    assert info.value.code == 501


@pytest.mark.parametrize(
    "parse", [parse_apex, parse_attach, parse_data, parse_option, parse_status_response]
)
def test_unencodable_text_is_500(parse: object) -> None:
    assert callable(parse)
    with pytest.raises(ApexError) as info:
        parse("<ok>\ud800</ok>")
    assert info.value.code == ApexReplyCode.GENERAL_SYNTAX_ERROR


def test_str_input_is_accepted() -> None:
    assert parse_apex("<attach endpoint='fr\u00e9d@example.com' transID='1' />") == Attach(
        endpoint=Endpoint.parse("fr\u00e9d@example.com"), trans_id=1
    )


# --------------------------------------------------------------------------- invalid input

MISSING_REQUIRED = [
    b"<attach transID='1' />",
    b"<attach endpoint='fred@example.com' />",
    b"<bind transID='1' />",
    b"<bind relay='example.com' />",
    b"<data>" + OR + b"</data>",
    b"<data content='cid:x'><originator /><recipient identity='b@example.com' /></data>",
    b"<data content='cid:x'><originator identity='f@example.com' /><recipient /></data>",
    (b"<data content='#c'>" + OR + b"<data-content /></data>"),
    b"<option internal='statusRequest' />",
    b"<option transID='1' />",
    b"<reply transID='1' />",
    b"<reply code='250' />",
    b"<error />",
    (
        b"<statusResponse><destination identity='b@example.com'><reply code='250' /></destination>"
        b"</statusResponse>"
    ),
    b"<statusResponse transID='1'><destination><reply code='250' /></destination></statusResponse>",
    b"<attach endpoint='fred@example.com' transID='1'><option internal='x' /></attach>",
]


@pytest.mark.parametrize("text", MISSING_REQUIRED)
def test_missing_required_attribute_is_501(text: bytes) -> None:
    assert code_of(text) == ApexReplyCode.PARAMETER_SYNTAX_ERROR


INVALID = [
    b"<unknown />",
    b"<attach endpoint='fred@example.com' transID='1' extra='x' />",
    b"<attach endpoint='fred@example.com' transID='0' />",
    b"<attach endpoint='fred@example.com' transID='2147483648' />",
    b"<attach endpoint='fred@example.com' transID='-1' />",
    b"<attach endpoint='fred@example.com' transID='1'>text</attach>",
    b"<attach endpoint='fred@example.com' transID='1'><bind /></attach>",
    b"<terminate transID='x' />",
    b"<terminate transID='1'><b /></terminate>",
    b"<terminate code='25' transID='1' />",
    b"<terminate code='650' transID='1' />",
    b"<ok>x</ok>",
    b"<ok a='b' />",
    b"<ok><ok /></ok>",
    b"<data content='cid:x'><recipient identity='b@example.com' /></data>",
    b"<data content='cid:x'><originator identity='f@example.com' /></data>",
    (
        b"<data content='cid:x'><originator identity='f@example.com' />"
        b"<option internal='x' transID='1' /><recipient identity='b@example.com' /></data>"
    ),
    (
        b"<data content='cid:x'><originator identity='f@example.com' />"
        b"<recipient identity='b@example.com' /><originator identity='f@example.com' /></data>"
    ),
    (b"<data content=''>" + OR + b"</data>"),
    (b"<data content='a b'>" + OR + b"</data>"),
    (b"<data content='#c'>" + OR + b"<data-content Name='1bad' /></data>"),
    b"<option internal='a' external='http://x/' transID='1' />",
    b"<option internal='' external='' transID='1' />",
    b"<option internal='a b' transID='1' />",
    b"<option external='relative/uri' transID='1' />",
    b"<option internal='a' targetHop='next' transID='1' />",
    b"<option internal='a' mustUnderstand='yes' transID='1' />",
    b"<option internal='a' localize='' transID='1' />",
    b"<option internal='a' localize='en_US' transID='1' />",
    b"<destination identity='b@example.com'><reply code='250' /><reply code='250' /></destination>",
    b"<statusResponse transID='1'><reply code='250' /></statusResponse>",
    b"<statusResponse transID='1' />",
    b"<a:attach xmlns:a='urn:x' endpoint='fred@example.com' transID='1' />",
    b"<attach xmlns='urn:x' endpoint='fred@example.com' transID='1' />",
    b"<?xml version='1.0'?><ok />",
]


@pytest.mark.parametrize("text", INVALID)
def test_invalid_element_is_501(text: bytes) -> None:
    assert code_of(text) == ApexReplyCode.PARAMETER_SYNTAX_ERROR


@pytest.mark.parametrize(
    "text",
    [b"<attach endpoint='fred@example.com'", b"", b"not xml", b"<ok></ko>", b"\xff\xfe<ok/>"],
)
def test_poorly_formed_xml_is_500(text: bytes) -> None:
    assert code_of(text) == ApexReplyCode.GENERAL_SYNTAX_ERROR


BAD_ENDPOINTS = [
    b"<attach endpoint='fred' transID='1' />",
    b"<attach endpoint='@example.com' transID='1' />",
    b"<attach endpoint='fred@exa_mple.com' transID='1' />",
    b"<attach endpoint='fred/@example.com' transID='1' />",
    b"<bind relay='not a domain' transID='1' />",
    b"<bind relay='[300.0.0.1]' transID='1' />",
    b"<originator identity='fred@' />",
    b"<recipient identity='fr&#127;ed@example.com' />",
    b"<destination identity='x'><reply code='250' /></destination>",
]


@pytest.mark.parametrize("text", BAD_ENDPOINTS)
def test_bad_endpoint_is_553(text: bytes) -> None:
    assert code_of(text) == ApexReplyCode.PARAMETER_INVALID


def test_error_element_from_exception_is_bounded() -> None:
    huge = "x" * 5000
    with pytest.raises(ApexError) as info:
        parse_apex(f"<data content='{huge} y'>{OR.decode()}</data>".encode())
    error = Error.from_exception(info.value)
    assert error.code == ApexReplyCode.PARAMETER_SYNTAX_ERROR
    assert len(error.text) == MAX_DIAGNOSTIC_CHARS
    assert parse_error(error.to_xml()) == error
    short = Error.from_exception(ApexError(ApexReplyCode.NOT_AUTHORIZED, "access denied"))
    assert short == Error(code=537, text="access denied")


def test_error_names_the_transaction() -> None:
    with pytest.raises(ApexError) as info:
        parse_apex(b"<attach endpoint='fred' transID='42' />")
    assert info.value.trans_id == 42
    with pytest.raises(ApexError) as info:
        parse_apex(b"<option internal='a' targetHop='next' transID='8' />")
    assert info.value.trans_id == 8


BILLION_LAUGHS = (
    b"<?xml version='1.0'?>"
    b"<!DOCTYPE data [<!ENTITY a 'aaaaaaaaaa'><!ENTITY b '&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;'>"
    b"<!ENTITY c '&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;'>]>"
    b"<data content='#c'><originator identity='&c;@example.com' /></data>"
)


@pytest.mark.parametrize(
    "text",
    [
        BILLION_LAUGHS,
        b"<!DOCTYPE data [<!ENTITY x SYSTEM 'file:///etc/passwd'>]><error code='500'>&x;</error>",
        b"<!DOCTYPE ok><ok />",
        b"<error code='500'>&x;</error>",
    ],
)
def test_doctype_and_entities_are_501_without_expansion(text: bytes) -> None:
    with pytest.raises(ApexError) as info:
        parse_apex(text)
    assert info.value.code in (
        ApexReplyCode.PARAMETER_SYNTAX_ERROR,
        ApexReplyCode.GENERAL_SYNTAX_ERROR,
    )
    assert "aaaaaaaaaaaaaaaaaaaa" not in str(info.value)  # nothing was expanded
    if b"DOCTYPE" in text:
        assert info.value.code == ApexReplyCode.PARAMETER_SYNTAX_ERROR


# --------------------------------------------------------------------------- limits


def _data_with(recipients: int, options: int) -> bytes:
    return (
        b"<data content='cid:x'><originator identity='f@example.com' />"
        + b"<recipient identity='b@example.com' />" * recipients
        + b"<option internal='x' transID='1' />" * options
        + b"</data>"
    )


def test_recipient_limit() -> None:
    assert (
        len(parse_data(_data_with(MAX_RECIPIENTS_PER_DATA, 0)).recipients)
        == MAX_RECIPIENTS_PER_DATA
    )
    assert code_of(_data_with(MAX_RECIPIENTS_PER_DATA + 1, 0)) == ApexReplyCode.TRANSACTION_FAILED
    with pytest.raises(ApexError) as info:
        Data(
            content="cid:x",
            originator=Originator(identity=FRED),
            recipients=(Recipient(identity=BARNEY),) * (MAX_RECIPIENTS_PER_DATA + 1),
        )
    assert info.value.code == ApexReplyCode.TRANSACTION_FAILED


def test_for_recipients_is_the_same_data_for_other_recipients() -> None:
    option = Option(internal="statusRequest", trans_id=3)
    data = Data(
        content="cid:x",
        originator=Originator(identity=FRED, options=(option,)),
        recipients=(Recipient(identity=BARNEY),),
        options=(option,),
    )
    other = (Recipient(identity=FRED), Recipient(identity=BARNEY, options=(option,)))
    assert data.for_recipients(other) == Data(
        content="cid:x",
        originator=data.originator,
        recipients=other,
        options=(option,),
    )
    assert data.recipients == (Recipient(identity=BARNEY),)  # the original is untouched
    for recipients in ((), (Recipient(identity=BARNEY),) * (MAX_RECIPIENTS_PER_DATA + 1)):
        with pytest.raises(ApexError):
            data.for_recipients(recipients)


def test_option_limit() -> None:
    assert (
        len(parse_data(_data_with(1, MAX_OPTIONS_PER_ELEMENT)).options) == MAX_OPTIONS_PER_ELEMENT
    )
    assert code_of(_data_with(1, MAX_OPTIONS_PER_ELEMENT + 1)) == ApexReplyCode.TRANSACTION_FAILED
    many = b"<option internal='x' transID='1' />" * (MAX_OPTIONS_PER_ELEMENT + 1)
    assert code_of(b"<recipient identity='b@example.com'>" + many + b"</recipient>") == 554
    assert code_of(b"<attach endpoint='b@example.com' transID='1'>" + many + b"</attach>") == 554
    with pytest.raises(ApexError) as info:
        Attach(
            endpoint=FRED,
            trans_id=1,
            options=(Option(internal="x", trans_id=1),) * (MAX_OPTIONS_PER_ELEMENT + 1),
        )
    assert info.value.code == ApexReplyCode.TRANSACTION_FAILED


# --------------------------------------------------------------------------- construction


@pytest.mark.parametrize(
    "build",
    [
        lambda: Attach(endpoint=FRED, trans_id=0),
        lambda: Bind(relay="example.com", trans_id=2**31),
        lambda: Terminate(trans_id=-1),
        lambda: Terminate(code=99),
        lambda: Error(code=600),
        lambda: Reply(code=250, trans_id=0),
        lambda: Data(content="cid:x", originator=Originator(identity=FRED), recipients=()),
        lambda: Data(
            content="", originator=Originator(identity=FRED), recipients=(Recipient(identity=FRED),)
        ),
        lambda: DataContent(name="has space"),
        lambda: Option(trans_id=1),
        lambda: Option(internal="a", external="http://x/", trans_id=1),
        lambda: Option(internal="a", trans_id=0),
        lambda: Option(internal="a", trans_id=1, localize=()),
    ],
)
def test_constructors_refuse_invalid_values(build: object) -> None:
    assert callable(build)
    with pytest.raises(ApexError) as info:
        build()
    assert info.value.code == ApexReplyCode.PARAMETER_SYNTAX_ERROR


# --------------------------------------------------------------------------- data-content


def test_data_content_with_cdata_and_references_keeps_octets() -> None:
    inner = b'<![CDATA[<not-xml>]]> &#65;&amp;<x a="1 > 0"/>'
    text = (
        b"<data content='#c'><originator identity='f@example.com' />"
        b"<recipient identity='b@example.com' /><data-content Name='c'>"
        + inner
        + b"</data-content></data>"
    )
    data = parse_data(text)
    assert data.data_content == DataContent(name="c", content=inner)
    assert parse_data(data.to_xml()) == data


def test_data_content_decoy_in_option_falls_back_to_serialization() -> None:
    text = (
        b"<data content='#c'><originator identity='f@example.com' />"
        b"<recipient identity='b@example.com' />"
        b"<option internal='x' transID='1'><data-content Name='decoy'/></option>"
        b"<data-content Name='c'><real  attr='1'/></data-content></data>"
    )
    data = parse_data(text)
    assert data.data_content == DataContent(name="c", content=b'<real attr="1"/>')
    assert data.options[0].content == b'<data-content Name="decoy"/>'
    assert parse_data(data.to_xml()) == data


def test_data_content_with_inherited_namespace_is_serialized_with_it() -> None:
    text = (
        b"<data xmlns:p='urn:p' content='#c'><originator identity='f@example.com' />"
        b"<recipient identity='b@example.com' /><data-content Name='c'><p:x/></data-content></data>"
    )
    data = parse_data(text)
    assert data.data_content is not None
    assert data.data_content.content == b'<p:x xmlns:p="urn:p"/>'
    assert parse_data(data.to_xml()) == data


def test_empty_data_content() -> None:
    text = (
        b"<data content='#c'><originator identity='f@example.com' />"
        b"<recipient identity='b@example.com' /><data-content Name='c'/></data>"
    )
    assert parse_data(text).data_content == DataContent(name="c")


def test_raw_inner_candidates() -> None:
    assert raw_inner(b"<a><data-content Name='x>'>in</data-content></a>", "data-content") == b"in"
    assert raw_inner(b"<data-content Name='x' />", "data-content") == b""
    assert raw_inner(b"<a />", "data-content") is None
    assert raw_inner(b"<data-content Name='unterminated", "data-content") is None
    assert raw_inner(b"<data-content Name='x'>no end", "data-content") is None


# --------------------------------------------------------------------------- architecture

ELEMENT_MODULES = ["_dtd", "content", "data", "elements", "errors", "hops", "options", "report"]
NO_IO = {"asyncio", "socket", "ssl", "grpc", "redis", "fastapi", "lxml", "uvicorn", "time"}


@pytest.mark.parametrize("name", ELEMENT_MODULES)
def test_element_modules_import_no_io_clock_or_lxml(name: str) -> None:
    path = Path(__file__).resolve().parents[3] / "apexmesh" / "apex" / f"{name}.py"
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported & NO_IO == set()
