"""The relaying core (RFC 3340 section 4.4.4.1), sans-I/O: what happened to a recipient
(:mod:`apexmesh.relay.outcomes`) and where each recipient goes
(:mod:`apexmesh.relay.routing`), as pure values and functions fed the facts a relay
knows. No event loop, socket, gRPC or Redis here, and nothing of ``services/``
(tests/test_architecture.py): the relay service (services/relay/) keeps the BEEP and gRPC
adapters, the futures that carry outcomes, and the composition root."""
