"""Shared gRPC glue (DESIGN.md, layer 2): server factory, graceful stop, typed clients.

The services and their tests build every grpc.aio server through :func:`create_server`,
which binds loopback port 0 by default and returns the port actually bound, so nothing in
the project ever guesses a free port.
"""

from __future__ import annotations

from apexmesh.rpc.server import create_server, graceful_stop

__all__ = ["create_server", "graceful_stop"]
