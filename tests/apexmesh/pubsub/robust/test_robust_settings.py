"""A robust topic's createtopic attributes (docs/robust.md)."""

from __future__ import annotations

import json

import pytest

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.errors import ApexError
from apexmesh.pubsub.robust.seq import Resolution
from apexmesh.pubsub.robust.settings import (
    ContributionRate,
    RobustSettings,
    settings_from_attributes,
)

pytestmark = pytest.mark.unit


def test_no_robust_attribute_is_a_best_effort_topic() -> None:
    assert settings_from_attributes({"topic": "a"}) is None


def test_defaults_and_every_attribute() -> None:
    assert settings_from_attributes({"robust": "true"}) == RobustSettings()
    attrs = {
        "robust": "true",
        "seqbits": "16",
        "retaincount": "500",
        "retainms": "60000",
        "heartbeatms": "250",
        "itemheader": "symbol",
        "contributions": "5/20",
    }
    settings = settings_from_attributes(attrs)
    assert settings == RobustSettings(
        resolution=Resolution.BITS16,
        retain_count=500,
        retain_ms=60_000,
        heartbeat_ms=250,
        item_header="symbol",
        contributions=ContributionRate(per_second=5, burst=20),
    )
    assert settings.to_attributes() == attrs
    assert RobustSettings.from_json(json.loads(settings.dumps())) == settings


@pytest.mark.parametrize(
    ("attrs", "code"),
    [
        ({"seqbits": "16"}, ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        ({"robust": "yes"}, ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        ({"robust": "true", "seqbits": "8"}, ApexReplyCode.PARAMETER_INVALID),
        ({"robust": "true", "seqbits": "x"}, ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        ({"robust": "true", "retaincount": "0"}, ApexReplyCode.PARAMETER_INVALID),
        ({"robust": "true", "retainms": "10"}, ApexReplyCode.PARAMETER_INVALID),
        ({"robust": "true", "heartbeatms": "99999999"}, ApexReplyCode.PARAMETER_INVALID),
        ({"robust": "true", "itemheader": "a b"}, ApexReplyCode.PARAMETER_INVALID),
        ({"robust": "true", "contributions": "5"}, ApexReplyCode.PARAMETER_SYNTAX_ERROR),
        ({"robust": "true", "contributions": "0/5"}, ApexReplyCode.PARAMETER_INVALID),
    ],
)
def test_bad_attributes(attrs: dict[str, str], code: ApexReplyCode) -> None:
    with pytest.raises(ApexError) as caught:
        settings_from_attributes(attrs, trans_id=7)
    assert caught.value.code is code
    assert caught.value.trans_id == 7
