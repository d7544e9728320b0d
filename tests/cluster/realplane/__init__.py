"""Real-control-plane tier (issue #14): see conftest.py."""
