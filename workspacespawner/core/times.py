"""Times as the Kubernetes API writes them (RFC 3339), read into aware UTC datetimes."""

from __future__ import annotations

from datetime import UTC, datetime

#: The earliest aware time: where an object without a time sorts.
EPOCH = datetime.min.replace(tzinfo=UTC)


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 / ISO 8601 time (``2025-06-01T12:00:00Z``, with or without fractions of a second) as an aware
    UTC datetime (naive means UTC); None for None or ``""``. Raises ValueError for text that is no time."""
    if not text:
        return None
    moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
