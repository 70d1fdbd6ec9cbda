"""Robust publish-subscribe after XEP-0040 (issue #19), sans I/O.

Link and source sequence numbers (:mod:`.seq`), a robust topic's settings
(:mod:`.settings`), the elements (:mod:`.elements`), the sender's per-link state
(:mod:`.link`) and heartbeat schedule (:mod:`.heartbeat`), publish types and last-value
images (:mod:`.publish_types`), permission tokens (:mod:`.permissions`), contributions
(:mod:`.contribution`) and the subscriber stub (:mod:`.stub`). The mapping onto APEX is
docs/robust.md. Like the rest of ``apexmesh/pubsub``, nothing here performs I/O or reads
a clock: time is an argument.
"""
