"""Calls held at one gate, counted while inside: what a test of a concurrency bound
(a window of calls, a pool of running tasks) watches."""

from __future__ import annotations

import asyncio


class HeldCalls:
    """An async callable whose calls wait until :meth:`release`; ``inside`` is how many
    are waiting now, ``most`` the most that ever waited at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self._gate = asyncio.Event()

    async def __call__(self) -> None:
        self.inside += 1
        self.most = max(self.most, self.inside)
        try:
            await self._gate.wait()
        finally:
            self.inside -= 1

    def release(self) -> None:
        """Let every waiting call, and every later one, through."""
        self._gate.set()


__all__ = ["HeldCalls"]
