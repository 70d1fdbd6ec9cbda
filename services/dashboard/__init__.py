"""The live web dashboard of a mesh: topology, per-pod rates, topics, held data, and a
trace view of one message's path (issue #22, docs/operations.md)."""
