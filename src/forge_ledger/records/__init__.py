"""What is done with a session's record once it is stored: seal it and check exports against
the seal (:mod:`.sealing`), write and check its document file (:mod:`.spec`), fork it from a
past position and compare sessions (:mod:`.lineage`), replay it against the current code
(:mod:`.replay`).

Each takes an opened :class:`~forge_ledger.ledger.Ledger` and a session; the application
layer (:mod:`forge_ledger.app.records`) opens the store and calls them. The package itself
imports nothing, so reading a document file never loads the orchestrator that replay needs.
"""
