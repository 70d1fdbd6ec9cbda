"""Settings helpers: typed environment reading and the unsafe-unless-dev rule."""

from __future__ import annotations

import pytest

from apexmesh.ops.settings import (
    SettingsError,
    check_redis_url,
    env_flag,
    env_float,
    env_int,
    env_list,
)

pytestmark = pytest.mark.unit


def test_readers() -> None:
    env = {"A": "1", "B": "off", "N": "42", "F": "0.5", "L": " a, b ,,c "}
    assert env_flag(env, "A") is True
    assert env_flag(env, "B") is False
    assert env_flag(env, "missing", default=True) is True
    assert env_int(env, "N", 0) == 42
    assert env_float(env, "F", 1.0) == 0.5
    assert env_list(env, "L") == ("a", "b", "c")
    assert env_list(env, "missing", ("x",)) == ("x",)


def test_redis_url_rule() -> None:
    assert check_redis_url("redis://127.0.0.1:6379/0", dev=True)
    assert check_redis_url("redis://:pw@redis:6379/0", dev=False)
    assert check_redis_url("rediss://redis:6380/0", dev=False)
    with pytest.raises(SettingsError):
        check_redis_url("redis://redis:6379/0", dev=False)
    with pytest.raises(SettingsError):
        check_redis_url("memcached://x", dev=True)
