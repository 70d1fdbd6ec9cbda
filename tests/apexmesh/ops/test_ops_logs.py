"""The shared JSON log setup: one JSON object per line, the service name, and the
correlation id of the data a line is about."""

from __future__ import annotations

import io
import json
import logging
import re
import sys

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from apexmesh.ops import logs
from apexmesh.ops.settings import SettingsError, log_level

pytestmark = pytest.mark.unit


def test_json_lines_with_correlation_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        logs.setup_logging("relay", "DEBUG")
        log = logging.getLogger("services.relay.router")
        log.info("no data here")
        token = logs.correlation_id.set("00112233aabbccdd")
        try:
            log.warning(
                "data from %s not delivered", "fred@example.com", extra={"peer": "1.2.3.4:5"}
            )
        finally:
            logs.correlation_id.reset(token)
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["service"] == "relay"
    assert first["logger"] == "services.relay.router"
    assert first["level"] == "INFO"
    assert "cid" not in first
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert second["message"] == "data from fred@example.com not delivered"
    assert second["cid"] == "00112233aabbccdd"
    assert second["peer"] == "1.2.3.4:5"


def test_correlation_ids_are_distinct_and_short() -> None:
    made = {logs.new_correlation_id() for _ in range(1000)}
    assert len(made) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{16}", cid) for cid in made)


def test_level_setting() -> None:
    assert log_level({}) == "INFO"
    assert log_level({"APEXMESH_LOG_LEVEL": "debug"}) == "DEBUG"
    with pytest.raises(SettingsError):
        log_level({"APEXMESH_LOG_LEVEL": "loud"})


def test_a_failure_without_a_message_is_named_by_its_type() -> None:
    """redis-py's TimeoutError() has no message: the pubsub pods logged "lease loop: "
    and "store unavailable: " with nothing after, during a cluster bench's failure."""
    assert logs.failure(RedisTimeoutError()) == "TimeoutError"
    assert logs.failure(RedisConnectionError("refused")) == "ConnectionError: refused"
    assert logs.failure(TimeoutError()) == "TimeoutError"
