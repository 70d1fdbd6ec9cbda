"""APEX reply codes (RFC 3340 section 10)."""

from __future__ import annotations

import pytest

from apexmesh.apex.codes import ApexReplyCode, for_code
from apexmesh.beep.codes import ReplyCode

pytestmark = pytest.mark.unit


def test_rfc3340_section10_codes_are_all_registered() -> None:
    rfc = [250, 421, 450, 451, 454, 500, 501, 504, 530, 534, 535, 537, 538, 550, 553, 554, 555]
    for code in rfc:
        member = for_code(code)
        assert member is not None
        assert member.text


def test_shared_codes_reuse_beep_numbers() -> None:
    for member in ReplyCode:
        if member != 200:
            assert ApexReplyCode[member.name] == member


def test_transient_and_unknown() -> None:
    assert ApexReplyCode.SERVICE_NOT_AVAILABLE.transient
    assert not ApexReplyCode.NO_SUCH_ENTRY.transient
    assert for_code(299) is None
