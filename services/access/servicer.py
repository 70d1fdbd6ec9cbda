"""The access service's operations (RFC 3341 section 4) and its gRPC servicer.

:class:`AccessOperations` runs the numbered steps of the query, get and set operations
over the sans-I/O core (:mod:`apexmesh.apex.access`) and the Redis repository
(:mod:`apexmesh.store.access_entries`). Every outcome is an APEX element for the
originator: bad input becomes a ``reply`` with the code RFC 3341 names, storage trouble a
421, and no exception leaves :meth:`AccessOperations.handle`.

:class:`AccessServicer` adapts it to ``apexmesh.contracts.access.v1``; its Check and
CheckMany are served through a :class:`~apexmesh.store.access_cache.CachedAccessChecker`
kept correct by the same change channel callers use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram
from redis.exceptions import RedisError

from apexmesh.apex.access import (
    AccessError,
    Allow,
    Decision,
    Deny,
    Domains,
    Get,
    List,
    OperationResult,
    OwnerRules,
    Query,
    Reply,
    Set,
    SetNotice,
    TokenRegistry,
    answer_get,
    answer_list,
    answer_query,
    authorize,
    check_inputs,
    check_subject,
    decide,
    parse_operation,
)
from apexmesh.apex.access import Outbound as OutboundData
from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.contracts.access.v1 import access_pb2, access_pb2_grpc
from apexmesh.rpc.access import decision_to_proto, result_to_proto
from apexmesh.store.access_cache import CachedAccessChecker, CheckKey
from apexmesh.store.access_entries import AccessEntryStore, ChangeOutcome

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AccessMetrics:
    """Prometheus series of the access service, registered on the app's registry."""

    operations: Counter
    checks: Counter
    check_seconds: Histogram

    @classmethod
    def create(cls, registry: CollectorRegistry) -> AccessMetrics:
        return cls(
            operations=Counter(
                "apexmesh_access_operations",
                "APEX operations handled by apex=access, by element and reply code.",
                ["operation", "code"],
                registry=registry,
            ),
            checks=Counter(
                "apexmesh_access_checks",
                "Access decisions served over gRPC, by result.",
                ["result"],
                registry=registry,
            ),
            check_seconds=Histogram(
                "apexmesh_access_check_duration_seconds",
                "Time to serve one Check or CheckMany call.",
                buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5),
                registry=registry,
            ),
        )


class AccessOperations:
    """Query, get, set and check, step by step (RFC 3341 sections 3.1 and 4.2-4.4)."""

    def __init__(
        self,
        store: AccessEntryStore,
        domains: Domains,
        registry: TokenRegistry,
        *,
        operators: Sequence[Endpoint] = (),
        clock: Callable[[], datetime],
        metrics: AccessMetrics | None = None,
    ) -> None:
        self._store = store
        self._domains = domains
        self._registry = registry
        self._operators = frozenset(operators)
        self._clock = clock
        self._metrics = metrics

    async def handle(self, originator: str, content: bytes) -> OperationResult:
        """Handle one operation sent by ``originator``; always returns an answer."""
        name = "unknown"
        trans_id = 0
        try:
            try:
                sender = Endpoint.parse(originator)
            except EndpointError as exc:
                raise AccessError(exc.code, f"originator: {exc}") from None
            operation = parse_operation(content, self._registry)
            name = type(operation).__name__.lower()
            trans_id = operation.trans_id
            subject = check_subject(operation.owner, self._domains)
            rules, _ = await self._store.load(subject)
            if sender not in self._operators:
                authorize(rules, sender, operation.required_token)
            if isinstance(operation, Query):
                answer: Allow | Deny | SetNotice = answer_query(operation, rules)
                result = self._answer(originator, answer.to_xml())
            elif isinstance(operation, Get):
                result = self._answer(originator, answer_get(operation, rules).to_xml())
            elif isinstance(operation, List):
                result = self._answer(originator, answer_list(operation, rules).to_xml())
            else:
                result = await self._set(operation, subject, originator)
        except AccessError as exc:
            code = exc.code
            ident = exc.trans_id if exc.trans_id is not None else trans_id
            result = OperationResult(
                OutboundData(originator, _reply(code, ident, str(exc))), (), code
            )
        except (RedisError, OSError) as exc:
            _log.warning("access store unavailable: %s", exc)
            code = ApexReplyCode.SERVICE_NOT_AVAILABLE
            result = OperationResult(
                OutboundData(originator, _reply(code, trans_id, code.text)), (), code
            )
        if self._metrics is not None:
            self._metrics.operations.labels(name, str(int(result.code))).inc()
        return result

    async def _set(self, operation: Set, subject: Endpoint, originator: str) -> OperationResult:
        """Steps 4-9 of RFC 3341 section 4.4 (one atomic compare-and-set in Redis)."""
        change = await self._store.change(
            subject, operation.actor, operation.actions, operation.last_update, self._clock()
        )
        if change.entry is None:
            raise AccessError(
                ApexReplyCode.TRANSACTION_IN_PROGRESS,
                _REFUSALS[change.outcome],
                trans_id=operation.trans_id,
            )
        notice = SetNotice(operation.trans_id, change.entry)
        # An APEX service's entries (a topic's, apex=pubsub/TOPIC) are not notified: data
        # to a topic endpoint is a publication, which would hand the notice to every
        # subscriber; the service reads its entries from here when it needs them.
        notifications = (
            ()
            if subject.is_service
            else (OutboundData(str(subject), notice.to_xml().encode("utf-8")),)
        )
        return OperationResult(
            OutboundData(originator, _reply(ApexReplyCode.SUCCESS, operation.trans_id)),
            notifications,
            ApexReplyCode.SUCCESS,
        )

    @staticmethod
    def _answer(originator: str, xml: str) -> OperationResult:
        return OperationResult(
            OutboundData(originator, xml.encode("utf-8")), (), ApexReplyCode.SUCCESS
        )

    async def version(self) -> int:
        return await self._store.version()

    async def check_many(self, checks: Sequence[CheckKey]) -> tuple[list[Decision], int]:
        """Uncached decisions, loading each distinct owner once, the owners of one call
        in one transaction (a burst of misses is one call: issue #33); the version returned is
        the oldest any decision was computed at (so a cache never stores a stale one)."""
        parsed: list[tuple[Endpoint, Endpoint, str] | Decision] = []
        for owner, actor, token in checks:
            try:
                parsed.append(check_inputs(owner, actor, token, self._domains, self._registry))
            except AccessError as exc:
                parsed.append(Decision(False, exc.code, str(exc)))
        subjects = list(dict.fromkeys(p[0] for p in parsed if not isinstance(p, Decision)))
        loaded: dict[Endpoint, OwnerRules] = {}
        versions: list[int] = []
        for start in range(0, len(subjects), LOAD_BATCH):
            chunk = subjects[start : start + LOAD_BATCH]
            rules, version = await self._store.load_many(chunk)
            loaded.update(zip(chunk, rules, strict=True))
            versions.append(version)
        decisions = [
            p if isinstance(p, Decision) else decide(loaded[p[0]], p[1], p[2]) for p in parsed
        ]
        version = min(versions) if versions else await self._store.version()
        return decisions, version


#: Owners whose entries one transaction reads (one Redis round trip for them all).
LOAD_BATCH = 512


_REFUSALS = {
    ChangeOutcome.MISSING: "no such entry, but lastUpdate was supplied",
    ChangeOutcome.STALE: "lastUpdate does not match the entry (changed meanwhile)",
    ChangeOutcome.EXISTS: "entry exists; get it and supply its lastUpdate",
}


def _reply(code: ApexReplyCode, trans_id: int, text: str = "") -> bytes:
    return Reply(code, trans_id, text).to_xml().encode("utf-8")


class AccessServicer(access_pb2_grpc.AccessServiceServicer):
    """gRPC face of the access service (``apexmesh.contracts.access.v1``)."""

    def __init__(
        self,
        operations: AccessOperations,
        checker: CachedAccessChecker,
        metrics: AccessMetrics,
    ) -> None:
        self._operations = operations
        self._checker = checker
        self._metrics = metrics

    async def _decide(self, checks: Sequence[CheckKey]) -> tuple[list[Decision], int]:
        started = time.perf_counter()
        try:
            decisions, version = await self._checker.check_many_versioned(checks)
        finally:
            self._metrics.check_seconds.observe(time.perf_counter() - started)
        for decision in decisions:
            if decision.allowed:
                result = "allowed"
            elif decision.code == ApexReplyCode.NOT_AUTHORIZED:
                result = "denied"
            else:
                result = "invalid"
            self._metrics.checks.labels(result).inc()
        return decisions, version

    async def Check(  # noqa: N802 - generated servicer method name
        self, request: access_pb2.CheckRequest, context: grpc.aio.ServicerContext
    ) -> access_pb2.CheckResponse:
        try:
            decisions, version = await self._decide([(request.owner, request.actor, request.token)])
        except (RedisError, OSError) as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"access store: {exc}")
        return access_pb2.CheckResponse(decision=decision_to_proto(decisions[0]), version=version)

    async def CheckMany(  # noqa: N802 - generated servicer method name
        self, request: access_pb2.CheckManyRequest, context: grpc.aio.ServicerContext
    ) -> access_pb2.CheckManyResponse:
        checks = [(item.owner, item.actor, item.token) for item in request.checks]
        try:
            decisions, version = await self._decide(checks)
        except (RedisError, OSError) as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"access store: {exc}")
        return access_pb2.CheckManyResponse(
            decisions=[decision_to_proto(item) for item in decisions], version=version
        )

    async def HandleOperation(  # noqa: N802 - generated servicer method name
        self, request: access_pb2.OperationRequest, _context: grpc.aio.ServicerContext
    ) -> access_pb2.OperationResponse:
        result = await self._operations.handle(request.originator, bytes(request.content))
        return result_to_proto(result)

    async def GetVersion(  # noqa: N802 - generated servicer method name
        self, _request: access_pb2.GetVersionRequest, context: grpc.aio.ServicerContext
    ) -> access_pb2.GetVersionResponse:
        try:
            version = await self._operations.version()
        except (RedisError, OSError) as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"access store: {exc}")
        return access_pb2.GetVersionResponse(version=version)


__all__ = ["AccessMetrics", "AccessOperations", "AccessServicer"]
