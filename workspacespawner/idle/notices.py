"""The idle-GPU messages each user should read now, per server, in memory: the idle pass writes, pages read.

Kept apart from the quota's announcements
(:mod:`workspacespawner.quota.announce`), which the quota enforcer
rewrites at each of its passes.
"""

from __future__ import annotations


class IdleNotices:
    """``{user: {server: text}}``: the warning or stop message of each of a user's servers (plain text)."""

    def __init__(self):
        self._messages: dict[str, dict[str, str]] = {}

    def set(self, user: str, server: str, text: str) -> None:
        """Show ``text`` about ``user``'s ``server`` (``""``: the default server)."""
        self._messages.setdefault(user, {})[server] = text

    def clear(self, user: str, server: str) -> None:
        """Show nothing about ``user``'s ``server``."""
        mine = self._messages.get(user)
        if mine is not None:
            mine.pop(server, None)
            if not mine:
                self._messages.pop(user, None)

    def of(self, user: str) -> list[str]:
        """``user``'s messages, the default server's first, then by server name."""
        return [text for _server, text in sorted((self._messages.get(user) or {}).items())]

    def keys(self) -> set[tuple[str, str]]:
        """Every ``(user, server)`` with a message."""
        return {(user, server) for user, mine in self._messages.items() for server in mine}


#: The hub process's idle-GPU messages.
IDLE_NOTICES = IdleNotices()
