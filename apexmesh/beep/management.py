"""Channel management elements of BEEP channel zero (RFC 3080 sections 2.3 and 7.1).

greeting, start, profile, close, ok and error: parsed from application/beep+xml through
the hardened parser and serialized by hand (the elements are tiny and fixed, so string
building is both clearer and faster than building trees).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Final

from apexmesh.beep.codes import ReplyCode
from apexmesh.beep.errors import RemoteProtocolError
from apexmesh.beep.limits import MAX_NUMBER
from apexmesh.beep.xml import Element, XmlError, escape_attr, escape_text, parse_xml

#: RFC 3080 section 2.3.1.2: a piggybacked initialization message "must be no longer
#: than 4K octets in length".
MAX_PROFILE_CONTENT_OCTETS: Final = 4096

_XML_LANG: Final = "{http://www.w3.org/XML/1998/namespace}lang"


class ManagementError(RemoteProtocolError):
    """A channel-zero element is poorly formed or invalid; ``code`` is 500 or 501."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileOffer:
    """A ``profile`` element: in a greeting, a start, or a positive reply to a start."""

    #: The profile's URI.
    uri: str
    #: The initialization message as character data, or None when absent.
    content: str | None = None
    #: True when the ``encoding`` attribute is ``base64``.
    base64: bool = False

    @property
    def data(self) -> bytes | None:
        """The initialization message as octets (base64 decoded when so encoded)."""
        if self.content is None:
            return None
        if self.base64:
            try:
                return base64.b64decode(self.content, validate=True)
            except (binascii.Error, ValueError):
                raise ManagementError(
                    "profile content is not valid base64", code=ReplyCode.PARAMETER_SYNTAX_ERROR
                ) from None
        return self.content.encode("utf-8")


@dataclass(frozen=True, slots=True, kw_only=True)
class Greeting:
    """The ``greeting`` element (section 2.3.1.1)."""

    #: Profiles the sender supports in the server role.
    profiles: tuple[str, ...] = ()
    #: Optional channel management features.
    features: tuple[str, ...] = ()
    #: Language tags for diagnostics, most desirable first.
    localize: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """The ``start`` element (section 2.3.1.2)."""

    #: Channel number to create.
    number: int
    #: Profiles offered, in the sender's order of preference.
    profiles: tuple[ProfileOffer, ...]
    #: Desired server name for the session, if any.
    server_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Close:
    """The ``close`` element (section 2.3.1.3); number 0 releases the session."""

    #: Channel number, 0 for the whole session.
    number: int
    #: Three-digit reply code.
    code: int
    #: Textual diagnostic, if any.
    text: str = ""
    #: Language of the diagnostic, if given.
    lang: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Ok:
    """The ``ok`` element (section 2.3.1.4)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorElement:
    """The ``error`` element (section 2.3.1.5)."""

    #: Three-digit reply code.
    code: int
    #: Textual diagnostic, if any.
    text: str = ""
    #: Language of the diagnostic, if given.
    lang: str | None = None


ManagementElement = Greeting | Start | Close | Ok | ErrorElement | ProfileOffer


def _number(value: str | None, what: str, *, minimum: int) -> int:
    if value is None:
        raise ManagementError(f"{what} attribute is missing", code=ReplyCode.PARAMETER_SYNTAX_ERROR)
    if not value.isascii() or not value.isdigit() or len(value) > 10:
        raise ManagementError(
            f"{what} attribute is not a number", code=ReplyCode.PARAMETER_SYNTAX_ERROR
        )
    number = int(value)
    if not minimum <= number <= MAX_NUMBER:
        raise ManagementError(
            f"{what} attribute out of range", code=ReplyCode.PARAMETER_SYNTAX_ERROR
        )
    return number


def _code(value: str | None) -> int:
    if value is None or len(value) != 3 or not value.isdigit() or value[0] not in "12345":
        raise ManagementError(
            "code attribute is not a three-digit reply code", code=ReplyCode.PARAMETER_SYNTAX_ERROR
        )
    return int(value)


def _tokens(value: str | None) -> tuple[str, ...]:
    return tuple(value.split()) if value else ()


def parse_management(body: bytes) -> ManagementElement:
    """Parse one channel-zero element; raise :class:`ManagementError` (500/501) if bad."""
    try:
        root = parse_xml(body)
    except XmlError as exc:
        raise ManagementError(str(exc), code=ReplyCode(exc.code)) from None
    tag = root.tag
    if tag == "greeting":
        profiles = []
        for child in root:
            if child.tag != "profile" or child.get("uri") is None:
                raise ManagementError(
                    "greeting may contain only profile elements with a uri",
                    code=ReplyCode.PARAMETER_SYNTAX_ERROR,
                )
            profiles.append(str(child.get("uri")))
        return Greeting(
            profiles=tuple(profiles),
            features=_tokens(root.get("features")),
            localize=_tokens(root.get("localize")),
        )
    if tag == "start":
        number = _number(root.get("number"), "number", minimum=1)
        offers = tuple(_parse_profile(child) for child in root)
        if not offers:
            raise ManagementError(
                "start element offers no profile", code=ReplyCode.PARAMETER_SYNTAX_ERROR
            )
        return Start(number=number, profiles=offers, server_name=root.get("serverName"))
    if tag == "profile":
        return _parse_profile(root)
    if tag == "close":
        number_attr = root.get("number", "0")
        return Close(
            number=_number(number_attr, "number", minimum=0),
            code=_code(root.get("code")),
            text=(root.text or "").strip(),
            lang=root.get(_XML_LANG),
        )
    if tag == "ok":
        return Ok()
    if tag == "error":
        return ErrorElement(
            code=_code(root.get("code")), text=(root.text or "").strip(), lang=root.get(_XML_LANG)
        )
    raise ManagementError(
        f"unexpected element {tag!r} on channel zero", code=ReplyCode.PARAMETER_SYNTAX_ERROR
    )


def _parse_profile(element: Element) -> ProfileOffer:
    if element.tag != "profile":
        raise ManagementError(
            "start may contain only profile elements", code=ReplyCode.PARAMETER_SYNTAX_ERROR
        )
    uri = element.get("uri")
    if not uri:
        raise ManagementError(
            "profile element lacks its uri", code=ReplyCode.PARAMETER_SYNTAX_ERROR
        )
    encoding = element.get("encoding", "none")
    if encoding not in ("none", "base64"):
        raise ManagementError(
            "profile encoding must be none or base64", code=ReplyCode.PARAMETER_SYNTAX_ERROR
        )
    if len(element):
        raise ManagementError(
            "profile content must be character data (use CDATA for XML)",
            code=ReplyCode.PARAMETER_SYNTAX_ERROR,
        )
    text = element.text
    content = text.strip() if text is not None and text.strip() else None
    if content is not None and len(content.encode("utf-8")) > MAX_PROFILE_CONTENT_OCTETS:
        raise ManagementError(
            "profile initialization message exceeds 4K octets",
            code=ReplyCode.PARAMETER_SYNTAX_ERROR,
        )
    return ProfileOffer(uri=uri, content=content, base64=encoding == "base64")


# --- serialization -------------------------------------------------------------------


def _profile_xml(offer: ProfileOffer) -> str:
    uri = escape_attr(offer.uri)
    if offer.content is None:
        return f"<profile uri='{uri}' />"
    encoding = " encoding='base64'" if offer.base64 else ""
    content = offer.content
    if not offer.base64 and "]]>" not in content:
        body = f"<![CDATA[{content}]]>"
    else:
        body = escape_text(content)
    return f"<profile uri='{uri}'{encoding}>{body}</profile>"


def greeting_xml(greeting: Greeting) -> bytes:
    """Serialize a greeting."""
    attrs = ""
    if greeting.features:
        attrs += f" features='{escape_attr(' '.join(greeting.features))}'"
    if greeting.localize:
        attrs += f" localize='{escape_attr(' '.join(greeting.localize))}'"
    if not greeting.profiles:
        return f"<greeting{attrs} />".encode()
    inner = "".join(f"<profile uri='{escape_attr(uri)}' />" for uri in greeting.profiles)
    return f"<greeting{attrs}>{inner}</greeting>".encode()


def start_xml(start: Start) -> bytes:
    """Serialize a start request."""
    attrs = f" number='{start.number}'"
    if start.server_name is not None:
        attrs += f" serverName='{escape_attr(start.server_name)}'"
    inner = "".join(_profile_xml(p) for p in start.profiles)
    return f"<start{attrs}>{inner}</start>".encode()


def profile_xml(offer: ProfileOffer) -> bytes:
    """Serialize the profile element of a positive reply to start."""
    return _profile_xml(offer).encode()


def close_xml(close: Close) -> bytes:
    """Serialize a close request."""
    attrs = f" number='{close.number}' code='{close.code}'"
    if close.lang:
        attrs += f" xml:lang='{escape_attr(close.lang)}'"
    if close.text:
        return f"<close{attrs}>{escape_text(close.text)}</close>".encode()
    return f"<close{attrs} />".encode()


OK_XML: Final = b"<ok />"


def error_xml(code: int, text: str = "", lang: str | None = None) -> bytes:
    """Serialize an error element."""
    attrs = f" code='{code}'"
    if lang:
        attrs += f" xml:lang='{escape_attr(lang)}'"
    if text:
        return f"<error{attrs}>{escape_text(text)}</error>".encode()
    return f"<error{attrs} />".encode()
