"""Content-based message selection (draft-wyman-apex-pubsub-00 sections 5.4 to 5.6).

:mod:`.types` holds what the classes share (identifier kinds from the selector schema,
the message as a selector sees it, the predicates the matcher indexes); :mod:`.jms` and
:mod:`.ldap` are the two registered classes; :mod:`.registry` looks classes up by name
(566 for an unknown one); :mod:`.wildcard` matches LIKE and substring patterns without
backtracking.
"""
