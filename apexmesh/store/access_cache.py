"""Caching access decisions safely (RFC 3340 section 4.4.4.1 step 5.3 on every message).

The relay asks "may this originator send to this recipient" (``core:data``) for every
recipient of every data element. Asking the access service each time would put a gRPC
round trip on the hot path, so callers keep decisions in a local bounded cache (LRU,
:class:`~apexmesh.common.cache.BoundedCache`) and drop them when they may have become
wrong. The protocol (docs/access.md, "Cache protocol"):

1. Every committed change increments the version counter and publishes
   ``"<version> <owner>"`` on the change channel in the same Lua script
   (:mod:`apexmesh.store.access_entries`).
2. The cache subscribes to the channel *before* it serves anything from memory. For each
   notification it drops that owner's decisions; if the version is not exactly one more
   than the last one seen, a notification was missed and it drops everything.
3. Every ``resync_interval`` seconds (and after any subscription error) it reads the
   version counter; if it differs from the last one seen it drops everything. While the
   subscription is down the cache is bypassed entirely.
4. A decision fetched from the source is stored only if the cache stayed synced while
   it was fetched (nothing dropped everything), its owner was not invalidated meanwhile,
   and the source computed it at a version no older than the cache had seen when the
   fetch began. So a slow answer computed from old entries is never stored after the
   invalidation that made it stale: a change the answer may not reflect either came
   before the fetch (the version rule refuses it) or its notification arrives during
   the fetch (that owner's answers are not stored) or after it (it drops what was
   stored). The rule is per owner so that a burst of changes to *other* owners (topic
   creations, subscriptions: each writes entries) does not keep every fetch uncached;
   it was one counter for all owners until issue #28 found almost nothing cached under
   such churn.

A stale decision can therefore live only as long as a notification takes to arrive, or
``resync_interval`` if notifications are lost. The fast path, :meth:`lookup`, is one
dictionary probe and involves no I/O.

**Misses in bursts.** A topic's first publications, or a new subscriber's, miss for many
checks at once, from many callers. Misses are not fetched one call each: every miss of
one turn of the event loop goes to the source in one ``check_many`` (one ``CheckMany``
to the access service), and a check already being fetched is waited for, not asked
again (issue #33: a cold topic cost a unary call per publication, in series).

**A bounded window.** At most ``max_in_flight`` calls are at the source at once; the
batches of a larger burst wait their turn here, where their callers wait anyway, and
their deadline starts when they are sent. Unbounded, a burst of 10,000 subscriptions
(40 calls at once) made every call share the access service's CPU, each ran past its
deadline and all 10,000 were refused (451) although none had to be: the window slows
the callers instead (the bench's ``--redis cluster`` topics scenario, issue #30).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Sequence
from typing import Final, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from apexmesh.aio.tasks import stop_task, within
from apexmesh.apex.access import Decision
from apexmesh.common.cache import BoundedCache
from apexmesh.store.keys import Keys

_log = logging.getLogger(__name__)

#: A check as the relay asks it: (owner, actor, token).
CheckKey = tuple[str, str, str]

#: Largest number of decisions kept; past it the least recently used one makes room.
DEFAULT_MAX_DECISIONS: Final = 200_000


class DecisionSource(Protocol):
    """Where uncached decisions come from: the access service over gRPC, or the store."""

    async def check_many(self, checks: Sequence[CheckKey]) -> tuple[list[Decision], int]:
        """Decide each check; return the decisions and the access version used."""
        ...


#: Most checks sent to the source in one call (a larger burst is several calls).
MAX_BATCH: Final = 256

#: Calls at the source at once (more batches wait their turn, unsent).
DEFAULT_MAX_IN_FLIGHT: Final = 4

#: Seconds closing the change subscription may take before it is abandoned.
PUBSUB_CLOSE_SECONDS: Final = 5.0


class _FetchWatch:
    """What happened while one call was at the source, deciding what of it may be stored."""

    __slots__ = ("owners", "stale", "version", "whole")

    def __init__(self, version: int, owners: set[str], synced: bool) -> None:
        #: The access version the cache had seen when the call was sent.
        self.version = version
        self.owners = owners
        #: Owners invalidated since: their answers may predate the change.
        self.stale: set[str] = set()
        #: False once everything was dropped (a missed notification, a lost subscription).
        self.whole = synced


class CachedAccessChecker:
    """Local decision cache kept correct by the version counter and change channel."""

    def __init__(
        self,
        source: DecisionSource,
        redis: Redis,
        keys: Keys,
        *,
        resync_interval: float = 1.0,
        max_decisions: int = DEFAULT_MAX_DECISIONS,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        self._source = source
        self._max_in_flight = max_in_flight
        self._redis = redis
        self._keys = keys
        self._resync_interval = resync_interval
        self._max_decisions = max_decisions
        self._decisions: BoundedCache[CheckKey, Decision] = BoundedCache(
            "access-decisions", max_decisions
        )
        #: The cached checks of each owner (for :meth:`_invalidate_owner`). Entries the
        #: cache evicted stay here until the index is rebuilt (:meth:`_store`).
        self._by_owner: dict[str, set[CheckKey]] = {}
        self._indexed = 0
        self._version = -1
        self._synced = False
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Set by :meth:`aclose` before it cancels the listener, which also checks it
        #: after each read: a cancellation lost inside redis-py's timed read (seen on
        #: Python 3.11, in about 1 of 10 stops of a looping ``get_message``) otherwise
        #: left the listener running until the next cancel, a stop stalled 5 to 10 s.
        self._closing = False
        #: Checks being fetched, and those waiting for this turn's fetch to start.
        self._fetching: dict[CheckKey, asyncio.Future[tuple[Decision, int]]] = {}
        self._next_batch: list[CheckKey] = []
        #: Batches closed but not sent: the window was full (:meth:`_send_queued`).
        self._queued: collections.deque[list[CheckKey]] = collections.deque()
        self._fetches: set[asyncio.Task[None]] = set()
        #: What each call at the source must not store (at most ``max_in_flight``).
        self._at_source: set[_FetchWatch] = set()
        self.hits = 0
        self.misses = 0
        #: Calls made to the source (each one ``check_many`` of one or more checks).
        self.fetches = 0

    async def start(self) -> None:
        """Subscribe to the change channel and wait until the cache is usable."""
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="access-cache-listener")
        await self._ready.wait()

    async def aclose(self) -> None:
        self._closing = True
        task, self._task = self._task, None
        # Room for the listener's own close of its subscription (PUBSUB_CLOSE_SECONDS):
        # cancelling that close midway leaves the subscription's connection open (a
        # socket leaked until garbage collection).
        await stop_task(task, grace=PUBSUB_CLOSE_SECONDS + 1)
        while self._queued:  # never sent: their callers are cancelled, as a fetch's are
            for key in self._queued.popleft():
                wait = self._fetching.pop(key, None)
                if wait is not None:
                    wait.cancel()
        for fetch in list(self._fetches):
            await stop_task(fetch)
        self._invalidate_all()
        self._synced = False

    async def __aenter__(self) -> CachedAccessChecker:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    @property
    def version(self) -> int:
        """The last access version this cache has seen (-1 before the first sync)."""
        return self._version

    @property
    def synced(self) -> bool:
        return self._synced

    def __len__(self) -> int:
        return len(self._decisions)

    def lookup(self, owner: str, actor: str, token: str) -> Decision | None:
        """The cached decision, or None. No I/O: this is the per-message fast path."""
        return self._decisions.get((owner, actor, token))

    async def check(self, owner: str, actor: str, token: str) -> Decision:
        """The decision for one check, from the cache when possible."""
        decision = self._decisions.get((owner, actor, token))
        if decision is not None:
            self.hits += 1
            return decision
        return (await self.check_many([(owner, actor, token)]))[0]

    async def check_many(self, checks: Sequence[CheckKey]) -> list[Decision]:
        """Decisions for many checks (all recipients of one data element) in one call."""
        return (await self.check_many_versioned(checks))[0]

    async def check_many_versioned(self, checks: Sequence[CheckKey]) -> tuple[list[Decision], int]:
        """Like :meth:`check_many`, with the oldest access version any answer reflects;
        this makes the cache itself a :class:`DecisionSource` (the access service serves
        its gRPC checks through one)."""
        found: list[Decision | None] = [self._decisions.get(key) for key in checks]
        missing = [key for key, decision in zip(checks, found, strict=True) if decision is None]
        self.hits += len(checks) - len(missing)
        if not missing:
            return [decision for decision in found if decision is not None], self._version
        self.misses += len(missing)
        waits = [self._fetch_later(key) for key in missing]
        answers: dict[CheckKey, Decision] = {}
        version = self._version if len(missing) < len(checks) else None
        for key, wait in zip(missing, waits, strict=True):
            # Shielded: a caller cancelled leaves the shared fetch to the others.
            decision, fetched_at = await asyncio.shield(wait)
            answers[key] = decision
            version = fetched_at if version is None else min(version, fetched_at)
        decisions = [
            decision if decision is not None else answers[key]
            for key, decision in zip(checks, found, strict=True)
        ]
        assert version is not None  # noqa: S101  (at least one check was missing)
        return decisions, version

    def _fetch_later(self, key: CheckKey) -> asyncio.Future[tuple[Decision, int]]:
        """The fetch of ``key`` already under way, or a place in this turn's batch."""
        wait = self._fetching.get(key)
        if wait is None:
            loop = asyncio.get_running_loop()
            wait = self._fetching[key] = loop.create_future()
            if not self._next_batch:
                loop.call_soon(self._start_batch)
            self._next_batch.append(key)
            if len(self._next_batch) >= MAX_BATCH:
                self._start_batch()
        return wait

    def _start_batch(self) -> None:
        batch, self._next_batch = self._next_batch, []
        if not batch:
            return  # sent already, once it was full
        self._queued.append(batch)
        self._send_queued()

    def _send_queued(self) -> None:
        """Send queued batches while the window has room (oldest first)."""
        while self._queued and len(self._fetches) < self._max_in_flight:
            fetch = asyncio.get_running_loop().create_task(self._fetch(self._queued.popleft()))
            self._fetches.add(fetch)
            fetch.add_done_callback(self._fetched)

    def _fetched(self, fetch: asyncio.Task[None]) -> None:
        self._fetches.discard(fetch)
        self._send_queued()

    async def _fetch(self, batch: list[CheckKey]) -> None:
        """One ``check_many`` for the batch; its answers cached when they may be."""
        watch = _FetchWatch(self._version, {owner for owner, _, _ in batch}, self._synced)
        self._at_source.add(watch)
        self.fetches += 1
        waits = [self._fetching[key] for key in batch]
        try:
            fetched, version = await self._source.check_many(batch)
        except asyncio.CancelledError:  # closing: the waiters are cancelled too
            for wait in waits:
                wait.cancel()
            raise
        except Exception as exc:  # noqa: BLE001  (each waiter gets it; the task ends quietly)
            for wait in waits:
                if not wait.done():
                    wait.set_exception(exc)
                    wait.exception()  # retrieved: a batch nobody waits for any more logs nothing
            return
        finally:
            self._at_source.discard(watch)
            for key in batch:
                self._fetching.pop(key, None)
        answers = dict(zip(batch, fetched, strict=True))
        if self._synced and watch.whole and version >= watch.version:
            self._store(
                {key: answer for key, answer in answers.items() if key[0] not in watch.stale}
            )
        for key, wait in zip(batch, waits, strict=True):
            if not wait.done():
                wait.set_result((answers[key], version))

    def _store(self, answers: dict[CheckKey, Decision]) -> None:
        for key, decision in answers.items():
            owners = self._by_owner.setdefault(key[0], set())
            if key not in owners:
                owners.add(key)
                self._indexed += 1
            self._decisions.put(key, decision)
        if self._indexed > 2 * self._max_decisions:
            # The index names evicted checks too: rebuild it from what is cached, so it
            # stays within twice the cache's size (amortized, one pass per evicted half).
            self._by_owner = {}
            for key in self._decisions:
                self._by_owner.setdefault(key[0], set()).add(key)
            self._indexed = len(self._decisions)

    def _invalidate_owner(self, owner: str) -> None:
        for watch in self._at_source:
            if owner in watch.owners:
                watch.stale.add(owner)
        keys = self._by_owner.pop(owner, set())
        self._indexed -= len(keys)
        for key in keys:
            self._decisions.pop(key)

    def _invalidate_all(self) -> None:
        for watch in self._at_source:
            watch.whole = False
        self._decisions.clear()
        self._by_owner.clear()
        self._indexed = 0

    def _notified(self, payload: str) -> None:
        version_text, _, owner = payload.partition(" ")
        try:
            version = int(version_text)
        except ValueError:
            self._invalidate_all()
            return
        if version != self._version + 1:
            self._invalidate_all()
        else:
            self._invalidate_owner(owner)
        self._version = max(self._version, version)

    async def _resync(self) -> None:
        value = await self._redis.get(self._keys.access_version())
        version = int(value or 0)
        if version != self._version:
            self._invalidate_all()
            self._version = version

    async def _listen(self) -> None:
        channel = self._keys.access_changes()
        backoff = 0.05
        while not self._closing:
            pubsub = self._redis.pubsub()
            try:
                if self._keys.cluster:
                    # The cluster client's pub/sub routes by its slot table, which the
                    # first command loads (and a failover reloads).
                    await self._redis.ping()
                await pubsub.subscribe(channel)
                # The subscription is confirmed before the version is read, so no change
                # can slip between the two unnoticed.
                while True:
                    confirmation = await pubsub.get_message(timeout=self._resync_interval)
                    if self._closing:
                        return
                    if confirmation is not None and confirmation.get("type") == "subscribe":
                        break
                await self._resync()
                self._synced = True
                self._ready.set()
                backoff = 0.05
                while True:
                    message = await pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=self._resync_interval
                    )
                    if self._closing:
                        return
                    if message is None:
                        await self._resync()
                    elif message.get("type") == "message":
                        data = message["data"]
                        self._notified(data.decode() if isinstance(data, bytes) else str(data))
            except (RedisError, OSError) as exc:
                _log.warning("access cache lost its subscription: %s", exc)
                self._synced = False
                self._invalidate_all()
                self._ready.set()
                await asyncio.sleep(backoff)  # reconnect backoff, not a readiness wait
                backoff = min(backoff * 2, 2.0)
            finally:
                # Bounded: closing a subscription interrupted by cancellation can wait on
                # a connection that will never answer, and shutdown must not hang on it.
                with contextlib.suppress(RedisError, OSError, TimeoutError):
                    await within(pubsub.aclose(), PUBSUB_CLOSE_SECONDS)  # type: ignore[no-untyped-call, unused-ignore]


__all__ = ["CachedAccessChecker", "CheckKey", "DecisionSource"]
