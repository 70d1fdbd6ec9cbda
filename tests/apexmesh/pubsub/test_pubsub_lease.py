"""The Kubernetes Lease rule of leader election (sans I/O), one row per case."""

from __future__ import annotations

import pytest

from apexmesh.pubsub.lease import LeaseRecord, decide, lease_name

pytestmark = pytest.mark.unit

NOW = 1_000_000


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (None, "create"),
        (LeaseRecord(holder="pod-a", renew_ms=NOW - 1, duration_ms=3000), "renew"),
        (LeaseRecord(holder="pod-a", renew_ms=NOW - 10_000, duration_ms=3000), "renew"),
        (LeaseRecord(holder="pod-b", renew_ms=NOW - 1, duration_ms=3000), "follow"),
        (LeaseRecord(holder="pod-b", renew_ms=NOW - 3000, duration_ms=3000), "follow"),
        (LeaseRecord(holder="pod-b", renew_ms=NOW - 3001, duration_ms=3000), "take"),
        (LeaseRecord(holder="", renew_ms=NOW, duration_ms=3000), "take"),
    ],
)
def test_decide(current: LeaseRecord | None, expected: str) -> None:
    assert decide(current, "pod-a", NOW) == expected


def test_lease_names_are_dns_1123() -> None:
    assert lease_name("apexmesh", "example.com") == "apexmesh-pubsub-example-com"
    assert lease_name("Test_X", "[127.0.0.1]") == "test-x-pubsub-127-0-0-1"
    assert len(lease_name("p", "a" * 300)) <= 253
