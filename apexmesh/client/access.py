"""Access entries from an endpoint (RFC 3341 over APEX): query, get, list, grant, deny.

An owner manages who may do what to it by sending operations to ``apex=access@DOMAIN``;
the creator of a topic owns ``apex=pubsub/TOPIC@DOMAIN`` that way (it holds
``access:*`` on it, docs/pubsub.md), so this is how an application lets others
subscribe to or publish on its topic, through the access service as an operator's
``apexctl access`` does::

    access = pubsub.access                       # or AccessClient(attachment, feed=...)
    await access.grant(owner, "barney@example.com", ["core:data"])
    await access.deny(owner, "mr.slate@example.com")           # denied everything
    await access.remove(owner, "mr.slate@example.com")         # the defaults again
    for entry in await access.entries(owner): ...

``grant`` and ``deny`` read the entry, change its actions and write it back with the
``lastUpdate`` they read (RFC 3341 section 4.4's compare and set), again when someone
changed it meanwhile (555). Every refusal raises :class:`AccessRequestError` with the
service's code: 537 without ``access:get``/``access:set`` on the owner, 553 an owner
outside the service's domains or a malformed actor or token, 550 an owner that is no
valid address, 421 the service's store unreachable.

The client does not read the attachment itself (one reader per attachment): whoever
reads it hands each received data to :meth:`AccessClient.feed`, which takes the answers
it is waiting for. :class:`apexmesh.client.PubsubClient` does so for its ``access``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from functools import partial

from apexmesh.apex.access import AccessEntry, Allow, Deny, Entries, Reply, SetNotice
from apexmesh.apex.access_answers import (
    Answer,
    get_xml,
    last_update_text,
    list_xml,
    parse_answer,
    query_xml,
    set_xml,
)
from apexmesh.apex.endpoint import well_known
from apexmesh.apex.errors import ApexError
from apexmesh.client.attachment import Attachment
from apexmesh.client.errors import ApexRequestError
from apexmesh.client.outgoing import XmlContent
from apexmesh.client.received import ReceivedData

#: Seconds a request waits for the service's answer by default.
DEFAULT_ANSWER_SECONDS = 10.0
#: Compare-and-set attempts of one grant or deny when others change the entry meanwhile.
CHANGE_ATTEMPTS = 5


class AccessRequestError(ApexRequestError):
    """The access service refused an operation: ``code`` is its reply code, ``owner``
    and ``actor`` what the operation was about."""

    def __init__(
        self, code: int, text: str = "", *, trans_id: int | None = None, owner: str = ""
    ) -> None:
        super().__init__(code, text, trans_id=trans_id)
        self.owner = owner


class AccessClient:
    """RFC 3341 operations of one attachment against ``apex=access@domain`` (the
    attachment's domain unless given). See the module docstring."""

    def __init__(
        self,
        attachment: Attachment,
        *,
        domain: str | None = None,
        next_trans_id: Callable[[], int] | None = None,
        before_send: Callable[[], None] | None = None,
    ) -> None:
        self.attachment = attachment
        #: Called before each request: the owner of the attachment's reader starts it.
        self._before_send = before_send
        self.service = well_known("access", domain or attachment.endpoint.domain)
        self._next = next_trans_id or itertools.count(1).__next__
        self._waiting: dict[int, asyncio.Future[Answer]] = {}

    def feed(self, received: ReceivedData) -> bool:
        """Take ``received`` when it answers a request of this client (True)."""
        if received.originator != self.service or not self._waiting:
            return False
        try:
            answer = parse_answer(received.content)
        except ApexError:
            return False
        waiter = self._waiting.pop(answer.trans_id, None)
        if waiter is None:
            return False
        if not waiter.done():
            waiter.set_result(answer)
        return True

    async def request(
        self,
        content: bytes,
        trans_id: int,
        *,
        timeout: float = DEFAULT_ANSWER_SECONDS,  # noqa: ASYNC109
    ) -> Answer:
        """Send one operation and return the answer carrying its transID;
        TimeoutError when none comes within ``timeout`` seconds."""
        if self._before_send is not None:
            self._before_send()
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting[trans_id] = waiter
        try:
            await self.attachment.send(self.service, XmlContent(content))
            async with asyncio.timeout(timeout):
                return await waiter
        finally:
            self._waiting.pop(trans_id, None)

    async def _ask(self, build: Callable[[int], bytes], owner: str) -> Answer:
        trans_id = self._next()
        answer = await self.request(build(trans_id), trans_id)
        if isinstance(answer, Reply) and answer.code != 250:
            raise AccessRequestError(
                int(answer.code), answer.diagnostic, trans_id=trans_id, owner=owner
            )
        return answer

    async def query(self, owner: str, actor: str, actions: Iterable[str]) -> bool:
        """Section 4.2: may ``actor`` (an endpoint) do every one of ``actions``?"""
        tokens = list(actions)
        answer = await self._ask(lambda t: query_xml(t, owner, actor, tokens), owner)
        if isinstance(answer, Allow | Deny):
            return isinstance(answer, Allow)
        raise AccessRequestError(550, f"unexpected answer {answer!r}", owner=owner)

    async def get(self, owner: str, actor: str) -> AccessEntry | None:
        """Section 4.3: the entry whose actor is ``actor`` exactly; None when there is
        none (551)."""
        try:
            answer = await self._ask(lambda t: get_xml(t, owner, actor), owner)
        except AccessRequestError as exc:
            if exc.code == 551:
                return None
            raise
        if isinstance(answer, SetNotice):
            return answer.entry
        raise AccessRequestError(550, f"unexpected answer {answer!r}", owner=owner)

    async def entries(self, owner: str) -> tuple[AccessEntry, ...]:
        """Every explicit entry of ``owner`` (apex-mesh's ``list``; RFC 3341's four
        default entries are not listed)."""
        answer = await self._ask(lambda t: list_xml(t, owner), owner)
        if isinstance(answer, Entries):
            return answer.entries
        raise AccessRequestError(550, f"unexpected answer {answer!r}", owner=owner)

    async def grant(self, owner: str, actor: str, actions: Iterable[str]) -> frozenset[str]:
        """Add ``actions`` to the entry of ``actor`` (created when absent); returns the
        entry's actions."""
        wanted = frozenset(actions)
        if not wanted:
            raise ValueError("grant needs at least one action")
        return await self._change(owner, actor, lambda now: (now or frozenset()) | wanted)

    async def deny(self, owner: str, actor: str, actions: Iterable[str] = ()) -> frozenset[str]:
        """Take ``actions`` away from ``actor``'s entry; none named: ``actor`` is denied
        everything (an entry with no actions, RFC 3341 section 3). Returns the entry's
        actions."""
        unwanted = frozenset(actions)
        return await self._change(
            owner,
            actor,
            lambda now: frozenset() if not unwanted else (now or frozenset()) - unwanted,
        )

    async def remove(self, owner: str, actor: str) -> bool:
        """Delete ``actor``'s entry (broader entries or the defaults apply again);
        False when there was none."""
        for _ in range(CHANGE_ATTEMPTS):
            entry = await self.get(owner, actor)
            if entry is None:
                return False
            stamp = last_update_text(entry)
            try:
                await self._ask(
                    partial(_set, owner=owner, actor=actor, actions=None, stamp=stamp), owner
                )
            except AccessRequestError as exc:
                if exc.code == 555:
                    continue
                raise
            return True
        raise AccessRequestError(555, "the entry keeps changing", owner=owner)

    async def _change(
        self,
        owner: str,
        actor: str,
        decide: Callable[[frozenset[str] | None], frozenset[str]],
    ) -> frozenset[str]:
        for _ in range(CHANGE_ATTEMPTS):
            entry = await self.get(owner, actor)
            before = None if entry is None or entry.actions is None else entry.actions.tokens
            after = decide(before)
            stamp = None if entry is None else last_update_text(entry)
            try:
                await self._ask(
                    partial(_set, owner=owner, actor=actor, actions=after, stamp=stamp), owner
                )
            except AccessRequestError as exc:
                if exc.code == 555:  # changed (or made) meanwhile: read it again
                    continue
                raise
            return after
        raise AccessRequestError(555, "the entry keeps changing", owner=owner)


def _set(
    trans_id: int, *, owner: str, actor: str, actions: frozenset[str] | None, stamp: str | None
) -> bytes:
    return set_xml(trans_id, owner, actor, actions, stamp)


__all__ = ["CHANGE_ATTEMPTS", "AccessClient", "AccessRequestError"]
