"""Team GPU pools: ``c.TeamGPUPools.pools``, nodes a group of users shares among themselves, checked when loaded.

A pool is a set of GPU nodes (a group's own 8-GPU development nodes, say)
that carry one node label, optionally with a taint. The members of the
pool's JupyterHub groups see the profiles that name the pool (a profile
joins it with ``team_pool: "<pool>"`` in its ``kubespawner_override``) and
may take up to all its GPUs; every other workspace is kept off the pool's
nodes by a required node affinity on the pool's label (the taint, if any,
is a second fence, not the only one). Inside the team it is soft
isolation, not a quota: card-hours count as anywhere else.

The placement rules themselves are :mod:`workspacespawner.gpu.placement`;
who holds a pool's GPUs now is :mod:`workspacespawner.gpu.poolholders`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from traitlets import Dict, TraitError, validate
from traitlets.config import Configurable

from workspacespawner.core import names

#: Taint effects a pool's taint may have (core/v1 ``Taint.effect``).
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
POOL_KEYS = {"groups", "node_selector", "taint"}
TAINT_KEYS = {"key", "value", "effect"}
#: What a pool name may be (a profile slug's characters).
POOL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class TeamPool:
    """One team pool: ``name``; ``groups`` (JupyterHub group names whose members use it); its nodes' ``label`` and
    ``value`` (the node label every node of the pool carries); ``taint``: ``(key, value, effect)`` its nodes carry, or
    None."""

    name: str
    groups: tuple[str, ...]
    label: str
    value: str
    taint: tuple[str, str, str] | None = None

    def member(self, group_names: Iterable[str], is_admin: bool = False) -> bool:
        """Whether a user in ``group_names`` may use the pool (admins may, as they may start any profile)."""
        return is_admin or bool(set(self.groups) & set(group_names))

    def holds(self, node: dict) -> bool:
        """Whether Node ``node`` (a core/v1 Node dict) is one of the pool's: it carries the pool's label and value."""
        return ((node.get("metadata") or {}).get("labels") or {}).get(self.label) == self.value

    def toleration(self) -> dict | None:
        """The core/v1 ``Toleration`` of the pool's taint (operator ``Equal``), or None when the pool has no taint."""
        if self.taint is None:
            return None
        key, value, effect = self.taint
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}


def _label_key_ok(key) -> bool:
    if not isinstance(key, str) or not key or key.count("/") > 1:
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and not names.is_dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.match(name))


def _label_value_ok(value) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def _pool(name, spec) -> TeamPool:
    where = f"TeamGPUPools.pools[{name!r}]"
    if not isinstance(name, str) or not POOL_NAME.match(name):
        raise TraitError(f"TeamGPUPools.pools: {name!r} is not a pool name (lowercase letters, digits, '-', '_', '.')")
    if not isinstance(spec, Mapping):
        raise TraitError(f"{where} must be a dict with 'groups', 'node_selector' and optionally 'taint', not {spec!r}")
    unknown = set(spec) - POOL_KEYS
    if unknown:
        raise TraitError(f"{where}: unknown key {sorted(unknown)[0]!r} (allowed: {', '.join(sorted(POOL_KEYS))})")
    groups = spec.get("groups")
    if not isinstance(groups, list) or not groups or not all(isinstance(g, str) and g for g in groups):
        raise TraitError(f"{where}['groups'] must be a non-empty list of JupyterHub group names, not {groups!r}")
    selector = spec.get("node_selector")
    if not isinstance(selector, Mapping) or len(selector) != 1:
        raise TraitError(f"{where}['node_selector'] must be one node label and its value, such as "
                         f"{{'example.org/team-pool': 'vision'}}, not {selector!r}")
    (label, value), = selector.items()
    if not _label_key_ok(label) or not _label_value_ok(value):
        raise TraitError(f"{where}['node_selector'] = {dict(selector)!r}: not a valid node label and value")
    taint = spec.get("taint")
    if taint is not None:
        if not isinstance(taint, Mapping) or set(taint) - TAINT_KEYS or "key" not in taint or "effect" not in taint:
            raise TraitError(f"{where}['taint'] must be {{'key': ..., 'value': ..., 'effect': ...}} (value optional), "
                             f"not {taint!r}")
        if not _label_key_ok(taint["key"]) or not _label_value_ok(taint.get("value", "")):
            raise TraitError(f"{where}['taint'] = {dict(taint)!r}: not a valid taint key and value")
        if taint["effect"] not in TAINT_EFFECTS:
            raise TraitError(f"{where}['taint']['effect'] must be one of {', '.join(TAINT_EFFECTS)}, not {taint['effect']!r}")
        taint = (taint["key"], taint.get("value", ""), taint["effect"])
    return TeamPool(name, tuple(groups), label, value, taint)


def check_pools(value) -> dict:
    """``value`` checked as ``TeamGPUPools.pools``; raises ``traitlets.TraitError`` naming the pool and its bad entry.

    Shape: ``{pool: {"groups": [group, ...], "node_selector": {label: value}, "taint": {"key", "value", "effect"}}}``
    (``taint`` optional, ``value`` in it optional). Two pools may not share a node label and value.
    """
    if not isinstance(value, Mapping):
        raise TraitError(f"TeamGPUPools.pools must be a dict of pool names to pools, not {value!r}")
    seen: dict[tuple[str, str], str] = {}
    for name, spec in value.items():
        pool = _pool(name, spec)
        other = seen.setdefault((pool.label, pool.value), pool.name)
        if other != pool.name:
            raise TraitError(f"TeamGPUPools.pools[{name!r}] selects the same nodes as pool {other!r} "
                             f"({pool.label}={pool.value})")
    return dict(value)


class TeamGPUPools(Configurable):
    """The site's team GPU pools (``c.TeamGPUPools.pools``); see the module docstring."""

    pools = Dict(
        config=True,
        help="""GPU nodes a team shares among its members, by pool name.

        ``{pool: {"groups": [...], "node_selector": {label: value}, "taint": {"key": ..., "value": ..., "effect": ...}}}``:
        ``groups`` are the JupyterHub groups whose members use the pool;
        ``node_selector`` the one node label (and its value) the pool's
        nodes carry; ``taint`` (optional) the taint they carry, which the
        pool's workspaces tolerate. A profile joins a pool with
        ``team_pool: "<pool>"`` in its ``kubespawner_override``: only the
        members of the pool's groups (and admins) see it, and its
        workspaces run only on the pool's nodes. No other workspace ever
        runs there (a required node affinity keeps it off every pool's
        label). Card-hours count as anywhere else: a pool is not a quota.
        Empty (the default): no pools. Example::

            c.TeamGPUPools.pools = {
                "vision": {
                    "groups": ["vision-lab"],
                    "node_selector": {"example.org/team-pool": "vision"},
                    "taint": {"key": "example.org/team-pool", "value": "vision", "effect": "NoSchedule"},
                },
            }
        """,
    )

    @validate("pools")
    def _check_pools(self, proposal):
        return check_pools(proposal.value)

    def all(self) -> dict[str, TeamPool]:
        """``{name: TeamPool}`` of every pool, in the configured order."""
        return {name: _pool(name, spec) for name, spec in self.pools.items()}

    def pool(self, name: str) -> TeamPool | None:
        """The pool called ``name``, or None when there is none."""
        spec = self.pools.get(name)
        return None if spec is None else _pool(name, spec)


def pool_of_node(node: dict, pools: Mapping[str, TeamPool]) -> str | None:
    """The team pool Node ``node`` (a core/v1 Node dict) belongs to (:meth:`TeamPool.holds`), or None: the one
    definition of a node's team pool, for the spawner's placement and the dashboard's Cluster view alike."""
    return next((name for name, pool in pools.items() if pool.holds(node)), None)


def profile_pool_names(profile: dict) -> list[tuple[str, object]]:
    """``[(field, pool name)]`` of every ``team_pool`` a profile_list entry names (its override and its choices')."""
    found = []
    override = profile.get("kubespawner_override") or {}
    if "team_pool" in override:
        found.append(("kubespawner_override.team_pool", override["team_pool"]))
    for opt_name, option in (profile.get("profile_options") or {}).items():
        for choice_name, choice in ((option or {}).get("choices") or {}).items():
            if "team_pool" in ((choice or {}).get("kubespawner_override") or {}):
                found.append((f"profile_options.{opt_name}.choices.{choice_name}.kubespawner_override.team_pool", None))
    return found


def check_profile_pools(profile_list, pools: Mapping[str, TeamPool]) -> None:
    """Every ``team_pool`` of a static ``profile_list`` names a pool of ``pools``; raise ``TraitError`` naming the profile.

    A pool is joined by the profile as a whole (its ``kubespawner_override``), never by a choice of one of its options:
    who may see a profile cannot depend on what is chosen inside it.
    """
    entries = enumerate(profile_list) if isinstance(profile_list, list) else ()
    named = [(profile.get("slug") or f"#{i}", where, name) for i, profile in entries if isinstance(profile, dict)
             for where, name in profile_pool_names(profile)]
    for slug, field, name in named:
        if name is None:
            raise TraitError(f"profile_list: profile {slug!r}, field {field!r}: a team pool is joined by the profile's "
                             "own kubespawner_override, not by a choice")
        if name != "" and name not in pools:
            known = ", ".join(sorted(pools)) or "none configured"
            raise TraitError(f"profile_list: profile {slug!r}, field {field!r}: {name!r} is not a pool of "
                             f"c.TeamGPUPools.pools ({known})")


def pool_of_profile(profile: dict) -> str:
    """The team pool a profile_list entry joins (``""``: none)."""
    name = (profile.get("kubespawner_override") or {}).get("team_pool") or ""
    return name if isinstance(name, str) else ""


def pool_allows(profile: dict, pools: Mapping[str, TeamPool], group_names: Iterable[str], is_admin: bool = False) -> bool:
    """Whether a user in ``group_names`` may see and start ``profile`` as far as team pools go.

    True for a profile that joins no pool; for a pool profile, only members of the pool's groups and admins. A profile
    naming a pool that does not exist is shown to no one but admins (the start-up check refuses it before that).
    """
    name = pool_of_profile(profile)
    if not name:
        return True
    pool = pools.get(name)
    return is_admin or (pool is not None and pool.member(group_names))
