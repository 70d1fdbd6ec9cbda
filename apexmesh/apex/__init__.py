"""The APEX layer (RFC 3340-3343), sans I/O.

APEX runs on top of BEEP the way HTTP/3 runs on top of QUIC in aioquic: this package
holds the element models, endpoint naming, reply codes and service decisions, and never
imports an event loop, a socket, gRPC, Redis or a web framework (DESIGN.md, layer 1).
Adapters in ``apexmesh.store``, ``apexmesh.rpc`` and the services do the I/O.
"""

from __future__ import annotations

from apexmesh.apex.codes import ApexReplyCode
from apexmesh.apex.endpoint import Endpoint, EndpointError
from apexmesh.apex.errors import ApexError

__all__ = ["ApexError", "ApexReplyCode", "Endpoint", "EndpointError"]
