"""The InRe option (draft-wyman-apex-pubsub-00 5.10.1, 7.7): built, parsed, grouped."""

from __future__ import annotations

import pytest

from apexmesh.apex import _dtd
from apexmesh.apex.data import Data, DataContent, Originator, data_from
from apexmesh.apex.endpoint import Endpoint
from apexmesh.apex.errors import ApexError
from apexmesh.apex.options import Option, TargetHop
from apexmesh.pubsub.inre import (
    INRE,
    delivery_ids,
    inre_option,
    recipients,
    subscription_ids_of,
)

pytestmark = pytest.mark.unit

U1 = Endpoint.parse("user1@example.com")
U2 = Endpoint.parse("user2@example.com")
U3 = Endpoint.parse("user3@example.com")


def test_the_option_is_final_not_must_understand_and_lists_ids_in_order() -> None:
    option = inre_option([101, 100, 101], trans_id=105)
    assert (option.internal, option.target_hop, option.must_understand) == (
        INRE,
        TargetHop.FINAL,
        False,
    )
    assert subscription_ids_of(option) == (100, 101)


def test_one_data_many_recipients_each_with_its_own_ids() -> None:
    grouped = delivery_ids([(U1, 101), (U2, 200), (U1, 100), (U3, None), (U1, None)])
    assert grouped == {U1: (100, 101), U2: (200,), U3: ()}
    data = Data(
        content="#Content",
        originator=Originator(identity=Endpoint.parse("apex=pubsub@example.com")),
        recipients=recipients(grouped, trans_id=105),
        data_content=DataContent(name="Content", content=b"x"),
    )
    back = data_from(_dtd.parse_root(data.to_xml()))
    found = {
        r.identity: tuple(i for o in r.options for i in subscription_ids_of(o))
        for r in back.recipients
    }
    assert found == grouped
    assert next(r for r in back.recipients if r.identity == U3).options == ()


def test_other_content_is_501() -> None:
    with pytest.raises(ApexError) as caught:
        subscription_ids_of(Option(internal=INRE, trans_id=1, content=b"<other/>"))
    assert caught.value.code == 501
    with pytest.raises(ApexError):
        subscription_ids_of(Option(internal="dataHopping", trans_id=1))
