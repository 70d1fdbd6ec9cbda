"""Redis repositories of apex-mesh, one module per kind of state (DESIGN.md, layer 2).

Keys and channels are named in :mod:`apexmesh.store.keys` only; multi-step changes run as
Lua scripts (or MULTI) kept beside the repository that uses them.
"""
