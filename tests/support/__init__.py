"""Helpers shared by the test tiers: the hub harness, cluster helpers, chart values, the RBAC map, a PostgreSQL server."""
