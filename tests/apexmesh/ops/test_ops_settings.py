"""Settings helpers: typed environment reading and the unsafe-unless-dev rule."""

from __future__ import annotations

import pytest

from apexmesh.ops.settings import (
    SettingsError,
    bind_host,
    check_grpc_target,
    check_redis_url,
    env_flag,
    env_float,
    env_int,
    env_list,
    env_pairs,
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


@pytest.mark.parametrize(
    "text", ["relay:7401", "10.0.0.1:7401", "[::1]:7401", "pod-1.relay.svc:65535"]
)
def test_grpc_targets_accepted(text: str) -> None:
    assert check_grpc_target("X", text) == text


@pytest.mark.parametrize(
    "text", ["relay", ":7401", "relay:0", "relay:99999", "relay:x", "[::1:7401", "a b:1", "[zz]:1"]
)
def test_grpc_targets_refused(text: str) -> None:
    with pytest.raises(SettingsError, match="X"):
        check_grpc_target("X", text)


def test_wildcard_binds_only_in_development() -> None:
    assert bind_host({}, "H", dev=False) == "127.0.0.1"
    assert bind_host({"H": "0.0.0.0"}, "H", dev=True) == "0.0.0.0"
    with pytest.raises(SettingsError, match="every interface"):
        bind_host({"H": "0.0.0.0"}, "H", dev=False)


def test_env_pairs() -> None:
    assert env_pairs({"P": "a=1, b = 2"}, "P") == {"a": "1", "b": "2"}
    with pytest.raises(SettingsError, match="name=value"):
        env_pairs({"P": "a=1,b"}, "P")
