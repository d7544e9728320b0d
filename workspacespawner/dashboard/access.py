"""Who may see and do what on the dashboard (pure): a :class:`Viewer` from the hub's user model.

The hub's OAuth gives the service the viewer's model (``name``, ``admin``,
``groups``, and ``scopes``: the OAuth token's, intersected with the
service's ``oauth_client_allowed_scopes``). The dashboard's custom scopes,
with ``<name>`` the service name (``WorkspacesDashboard.service_name``):

``custom:<name>:read``     read workspaces: unfiltered all; ``!user=U`` U's; ``!group=G`` every member of G's
``custom:<name>:act``      act on workspaces (stop, snapshot, ...): unfiltered anyone's; ``!user=U`` U's
``custom:<name>:cluster``  the Cluster view (team leads: their team's workspaces in it)
``custom:<name>:reports``  the Reports view

A hub admin (``admin: true`` in the model) may do all of it. Every user
may read and act on their own workspaces whatever the scopes say: the
service's own access scope already admitted them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Grant:
    """One custom scope as held: ``all`` (unfiltered), else the ``users`` and ``groups`` its filters name."""

    all: bool = False
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    def covers(self, owner: str, owner_groups: Iterable[str]) -> bool:
        """Whether it reaches ``owner``, a member of ``owner_groups``."""
        return self.all or owner in self.users or bool(self.groups & set(owner_groups))

    @property
    def any(self) -> bool:
        """Whether it grants anything."""
        return self.all or bool(self.users) or bool(self.groups)


def grant_of(scopes: Iterable[str], scope: str) -> Grant:
    """What ``scopes`` (JupyterHub scope strings) hold of ``scope``: ``custom:x:read``, ``custom:x:read!user=ann``,
    ``custom:x:read!group=lab``; other filters (``!server=``, ``!service=``) grant nothing here."""
    everything, users, groups = False, set(), set()
    for held in scopes:
        base, _, filter_ = held.partition("!")
        if base != scope:
            continue
        if not filter_:
            everything = True
            continue
        kind, _, value = filter_.partition("=")
        if kind == "user" and value:
            users.add(value)
        elif kind == "group" and value:
            groups.add(value)
    return Grant(everything, frozenset(users), frozenset(groups))


@dataclass(frozen=True)
class Viewer:
    """The person looking at the dashboard, with what they may see and do.

    ``members``: JupyterHub group name -> its members' names (the hub's
    groups), to resolve ``!group=`` filters and :meth:`readable_users`.
    """

    name: str
    admin: bool = False
    groups: frozenset[str] = frozenset()
    read: Grant = Grant()
    act: Grant = Grant()
    cluster: bool = False
    reports: bool = False
    members: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_model(cls, model: dict, *, service_name: str = "workspaces",
                   members: Mapping[str, Iterable[str]] | None = None) -> Viewer:
        """The viewer the hub's user ``model`` (``name``, ``admin``, ``groups``, ``scopes``) describes.

        ``service_name``: the dashboard's service name (its scopes are
        ``custom:<service_name>:...``). A service's model (``kind:
        service``) is a viewer with no groups and no admin flag.
        """
        scopes = list(model.get("scopes") or [])
        prefix = f"custom:{service_name}:"
        return cls(
            name=model["name"],
            admin=bool(model.get("admin")) and model.get("kind", "user") == "user",
            groups=frozenset(model.get("groups") or ()),
            read=grant_of(scopes, prefix + "read"),
            act=grant_of(scopes, prefix + "act"),
            cluster=grant_of(scopes, prefix + "cluster").any,
            reports=grant_of(scopes, prefix + "reports").all,
            members={g: frozenset(m) for g, m in (members or {}).items()},
        )

    def _groups_of(self, user: str) -> set[str]:
        return {g for g, m in self.members.items() if user in m}

    def can_read(self, owner: str) -> bool:
        """Whether the viewer may see ``owner``'s workspaces, disks and card-hours."""
        return owner == self.name or self.admin or self.read.covers(owner, self._groups_of(owner))

    def readable_users(self, all_users: Iterable[str]) -> set[str]:
        """The names of ``all_users`` whose workspaces the viewer may see (their own always, if listed or not)."""
        return {u for u in all_users if self.can_read(u)} | {self.name}

    def can_act(self, owner: str) -> bool:
        """Whether the viewer may stop, snapshot, expand, restore and give back ``owner``'s disks and servers."""
        return owner == self.name or self.admin or self.act.covers(owner, self._groups_of(owner))

    @property
    def sees_all(self) -> bool:
        """Whether the viewer reads everyone's workspaces (admin, or the unfiltered read scope)."""
        return self.admin or self.read.all

    @property
    def sees_cluster(self) -> bool:
        """Whether the Cluster view is theirs: an admin, or a team lead (the cluster scope, any filter)."""
        return self.admin or self.cluster

    @property
    def sees_reports(self) -> bool:
        """Whether the Reports view is theirs: an admin, or the unfiltered reports scope."""
        return self.admin or self.reports

    @property
    def teams(self) -> set[str]:
        """The groups whose members' workspaces the viewer reads through a ``!group=`` filter."""
        return set(self.read.groups)
