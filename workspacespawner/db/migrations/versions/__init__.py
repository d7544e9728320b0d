"""Schema revisions of the ledger and the audit trail, oldest first (``0001``, ``0002``, ...)."""
