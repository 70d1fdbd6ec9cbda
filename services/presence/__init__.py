"""The presence service, ``apex=presence`` (RFC 3343): presence entries, subscriptions
and watches in Redis; operations arrive from the relays (``WellKnownEndpoint.Deliver``),
answers leave through them (``RelayService.Submit``); other services and the relays use
``apexmesh.contracts.presence.v1``. See docs/presence.md."""
