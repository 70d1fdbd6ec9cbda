"""The pubsub service, ``apex=pubsub`` and ``apex=pubsub/TOPIC`` (draft-schwartz-apex-
pubsub-02): topics, subscriptions with leases, publishing by data to a topic, and
redistribution between domains. Pods are stateless (state in Redis); operations arrive
from the relays (``WellKnownEndpoint.Deliver``) and answers and forwarded data leave
through them (``RelayService.Submit``). See docs/pubsub.md."""
