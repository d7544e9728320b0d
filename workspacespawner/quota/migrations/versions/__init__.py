"""Ledger schema revisions, oldest first (``0001``, ``0002``, ...)."""
