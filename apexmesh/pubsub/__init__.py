"""The APEX publish-subscribe service (draft-schwartz-apex-pubsub-02), sans I/O.

:mod:`apexmesh.pubsub.elements` is the element model of the DTD of section 6.1 and the
topic-name syntax of section 2; :mod:`apexmesh.pubsub.core` holds the steps of sections
4.2 to 4.7 as pure functions of the state they read (time passed in). Like the cores in
``apexmesh/apex``, nothing here performs I/O (tests/apexmesh/pubsub/test_pubsub_layering.py).
"""
