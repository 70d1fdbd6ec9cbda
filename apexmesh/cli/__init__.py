"""``apexctl`` (also ``kubectl apex``): the operator's command line for a mesh, local or
in a cluster (issue #22, docs/operations.md)."""
