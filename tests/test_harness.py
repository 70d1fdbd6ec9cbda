"""The test harness's own promises (issue #32): reserved ports stay out of the kernel's
hands and out of other test processes' hands; polling waits for a condition, not a time."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ports
from tests.support.polling import block_until, scaled, still_true, wait_until

pytestmark = pytest.mark.unit


def test_a_reserved_port_is_below_the_ephemeral_range_and_bindable() -> None:
    port = ports.reserved_port()
    assert ports.LOWEST <= port < ports._ephemeral_low()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # what the server named with it will do


def test_reserved_ports_are_distinct_and_locked_for_other_processes() -> None:
    mine = {ports.reserved_port() for _ in range(20)}
    assert len(mine) == 20
    probe = (
        "import fcntl, sys\n"
        "from tests.support.ports import LOCK_DIR\n"
        "taken = 0\n"
        "for port in sys.argv[1:]:\n"
        "    with (LOCK_DIR / f'{port}.lock').open('a') as handle:\n"
        "        try:\n"
        "            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "        except OSError:\n"
        "            taken += 1\n"
        "print(taken)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *map(str, mine)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.stdout.strip() == "20"


async def test_wait_until_takes_plain_and_async_conditions() -> None:
    box: list[int] = []
    asyncio.get_running_loop().call_later(0.01, box.append, 1)
    await wait_until(lambda: bool(box), 2.0)

    async def probe() -> bool:
        return len(box) == 1

    await wait_until(probe, 2.0)
    with pytest.raises(TimeoutError, match="never"):
        await wait_until(lambda: False, 0.02, what="never")


async def test_still_true_fails_as_soon_as_the_condition_breaks() -> None:
    box: list[int] = []
    await still_true(lambda: not box, 0.02)
    asyncio.get_running_loop().call_later(0.01, box.append, 1)
    with pytest.raises(AssertionError):
        await still_true(lambda: not box, 5.0)


def test_block_until_returns_the_first_true_value() -> None:
    values = iter([0, 0, 7])
    assert block_until(lambda: next(values), 2.0, every=0.001) == 7
    with pytest.raises(TimeoutError):
        block_until(lambda: None, 0.01, every=0.001)
    assert scaled(1.0) >= 1.0
