"""A slow consumer against a relay running as a process (issue #16, "Must show").

barney attaches and then reads nothing; fred sends 50,000 data of 4 KiB to him as fast
as the relay lets him. The relay must hold only a bounded amount for barney (its RSS
grows by less than 64 MB), slow fred down (his data wait for their answers) and, once
barney has kept data waiting past the slow-consumer limit, refuse further data with 421
instead of queueing it. When barney finally reads, he gets exactly the data fred got
``ok`` for, in order; the relay's memory comes back down.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from apexmesh.client import ApexRequestError, connect_endpoint
from tests.services.relay.test_relay_held_processes import relay_process
from tests.support.mesh import Mesh, apex_channel, beep_session, receive_msg, start_answer

pytestmark = pytest.mark.integration

MESSAGES = 50_000
SIZE = 4096
#: The relay's slow-consumer limit for this test (10 s by default).
SLOW_AFTER = 2.0


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def body(seq: int) -> bytes:
    return f"{seq:08d}".encode().ljust(SIZE, b"-")


async def test_a_reader_that_never_reads_slows_the_sender_and_bounds_the_relay(
    mesh: Mesh, tmp_path: Path
) -> None:
    async with relay_process(
        mesh, tmp_path, "slow-relay", APEXMESH_RELAY_SLOW_CONSUMER_SECONDS=str(SLOW_AFTER)
    ) as (process, info):
        pid = process.process.pid
        port = info["edge_port"]
        async with beep_session(port) as raw:
            barney = await apex_channel(raw, "<attach endpoint='barney@example.com' transID='1' />")
            assert start_answer(barney) == ("ok", "")
            fred_client = await connect_endpoint("127.0.0.1", port, max_in_flight=512)
            try:
                fred = await fred_client.attach("fred@example.com")
                before = rss_bytes(pid)
                peak = before
                accepted: list[int] = []
                refused = 0
                slowed = False

                async def sample() -> None:
                    nonlocal peak
                    while True:
                        peak = max(peak, rss_bytes(pid))
                        await asyncio.sleep(0.05)  # a sampling interval, not a wait

                sampler = asyncio.ensure_future(sample())
                sends: list[asyncio.Future[object]] = []
                for seq in range(MESSAGES):
                    if fred_client.in_flight >= 512:
                        slowed = True
                    await fred_client.writable()
                    future = fred.submit("barney@example.com", body(seq))
                    future.add_done_callback(
                        lambda f, s=seq: accepted.append(s) if f.exception() is None else None
                    )
                    sends.append(future)
                results = await asyncio.gather(*sends, return_exceptions=True)
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
                for result in results:
                    if isinstance(result, ApexRequestError):
                        assert result.code == 421, result
                        refused += 1
                    else:
                        assert not isinstance(result, BaseException), result
                assert slowed, "the sender never had to wait"
                assert refused > 0, "a consumer that never reads must end up shed"
                assert len(accepted) + refused == MESSAGES
                assert peak - before < 64 << 20, f"relay grew {(peak - before) >> 20} MB"
                # barney reads at last: exactly what was accepted, in order.
                got: list[int] = []
                with contextlib.suppress(TimeoutError):
                    while len(got) < len(accepted):
                        payload, _ = await receive_msg(barney, within=5.0)
                        seq_text = payload.split(b"\r\n\r\n")[-1][:8]
                        got.append(int(seq_text))
                assert got == sorted(accepted)
                with pytest.raises(TimeoutError):
                    await receive_msg(barney, within=0.5)
                settled = rss_bytes(pid)
                print(
                    f"slow consumer: {len(accepted)} accepted, {refused} refused with 421, "
                    f"relay RSS {before >> 20} MB -> peak {peak >> 20} MB -> "
                    f"{settled >> 20} MB after reading"
                )
                assert settled - before < 64 << 20
            finally:
                await fred_client.close()
