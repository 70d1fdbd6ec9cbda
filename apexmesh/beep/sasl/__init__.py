"""SASL for BEEP, sans-I/O: the SASL profile family (RFC 3080 section 4.1), the
ANONYMOUS (RFC 4505), PLAIN (RFC 4616), CRAM-MD5 (RFC 2195), DIGEST-MD5 (RFC 2831) and
SCRAM-SHA-256 (RFC 7677) mechanisms, all authentication only (no SASL security layer),
a listener's offer (:class:`SaslServers`) and its guessing throttle
(:mod:`apexmesh.beep.sasl.throttle`).

No I/O, no clock: nonces come from :mod:`secrets` unless a test injects them; the
throttle is told the time.
"""

from __future__ import annotations

from apexmesh.beep.sasl.blob import (
    MAX_BLOB_OCTETS,
    MAX_SASL_XML_OCTETS,
    Blob,
    BlobStatus,
    ErrorElement,
    encode_blob,
    encode_error,
    parse_blob,
    parse_element,
)
from apexmesh.beep.sasl.credentials import (
    CredentialStore,
    ScramKeys,
    StaticCredentials,
    make_scram_keys,
)
from apexmesh.beep.sasl.mechanism import SaslError
from apexmesh.beep.sasl.profile import (
    SASL_URI_PREFIX,
    SUPPORTED_MECHANISMS,
    Authorizer,
    RefusedServerExchange,
    SaslClientExchange,
    SaslServerExchange,
    mechanism_from_uri,
    profile_uri,
)
from apexmesh.beep.sasl.servers import SaslServers

__all__ = [
    "MAX_BLOB_OCTETS",
    "MAX_SASL_XML_OCTETS",
    "SASL_URI_PREFIX",
    "SUPPORTED_MECHANISMS",
    "Authorizer",
    "Blob",
    "BlobStatus",
    "CredentialStore",
    "ErrorElement",
    "RefusedServerExchange",
    "SaslClientExchange",
    "SaslError",
    "SaslServerExchange",
    "SaslServers",
    "ScramKeys",
    "StaticCredentials",
    "encode_blob",
    "encode_error",
    "make_scram_keys",
    "mechanism_from_uri",
    "parse_blob",
    "parse_element",
    "profile_uri",
]
