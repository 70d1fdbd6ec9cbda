"""Composition root of the report service: builds everything from settings, no globals.

Start order: the relay channels (lazy, nothing is dialled yet), the gRPC server, then the
admin HTTP server. Stop order is the reverse, with the gRPC grace period first so
in-flight reports finish (uvicorn's shutdown order), and the relay channels last since
those reports still use them.
"""

from __future__ import annotations

import dataclasses
import os

import grpc
from prometheus_client import Gauge

from apexmesh.contracts.endpoint.v1 import endpoint_pb2_grpc
from apexmesh.contracts.report.v1 import report_pb2_grpc
from apexmesh.ops.admin import AdminSpec, Guard
from apexmesh.ops.audit import AuthFailures
from apexmesh.ops.http import HttpServer
from apexmesh.ops.registry import service_registry
from apexmesh.rpc.retry import SUBMIT
from apexmesh.rpc.server import create_server, graceful_stop
from services.report.http import create_http_app
from services.report.servicer import (
    OWED_REPORT,
    RelayPool,
    ReportEndpointServicer,
    ReportMetrics,
    ReportServicer,
)
from services.report.settings import ReportSettings


class ReportApp:
    """One running report service: relay channels, gRPC and HTTP servers."""

    def __init__(self, settings: ReportSettings) -> None:
        self.settings = settings
        self.registry = service_registry("report")
        self.metrics = ReportMetrics.create(self.registry)
        self.relays = RelayPool(
            settings.relay_addresses, timeout=settings.relay_timeout, metrics=self.metrics
        )
        Gauge(
            "apexmesh_report_relay_addresses",
            "Relay addresses configured to submit statusResponses through.",
            registry=self.registry,
        ).set(len(settings.relay_addresses))
        guard = Guard(settings.admin, AuthFailures("report", self.registry))
        self.http = HttpServer(
            create_http_app(
                self.registry,
                self.relays,
                AdminSpec(
                    guard=guard,
                    pod=f"report-{os.getpid()}",
                    domains=settings.domains,
                    details=lambda: {
                        "grpc_port": self.grpc_port,
                        "http_port": self.http_port,
                        "relays": list(settings.relay_addresses),
                    },
                ),
            )
        )
        self._grpc: grpc.aio.Server | None = None
        self.grpc_port = 0
        self.http_port = 0

    async def start(self) -> None:
        settings = self.settings
        retry = None
        if settings.retry_seconds > 0:
            retry = dataclasses.replace(
                OWED_REPORT,
                bound_seconds=settings.retry_seconds,
                # one submission's worst case: each of its attempts and their backoffs
                attempt_seconds=(settings.relay_timeout + 1.0) * (SUBMIT.attempts or 1),
            )
        report = ReportServicer(settings.domains, self.relays, self.metrics, retry=retry)
        endpoint = ReportEndpointServicer(self.metrics)
        self._grpc, self.grpc_port = await create_server(
            [
                lambda server: report_pb2_grpc.add_ReportServiceServicer_to_server(report, server),
                lambda server: endpoint_pb2_grpc.add_WellKnownEndpointServicer_to_server(
                    endpoint, server
                ),
            ],
            host=self.settings.grpc_host,
            port=self.settings.grpc_port,
            registry=self.registry,
        )
        self.http_port = await self.http.start(self.settings.http_host, self.settings.http_port)

    async def stop(self) -> None:
        if self._grpc is not None:
            await graceful_stop(self._grpc, self.settings.shutdown_grace)
            self._grpc = None
        await self.http.stop()
        await self.relays.aclose()


__all__ = ["ReportApp"]
