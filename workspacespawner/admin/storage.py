"""``workspacespawner storage [--team T]``: which users mount which team folders.

Reads the hub's own configuration (``-f``, see :mod:`.common`) for
``team_folders`` (checked as the hub checks it, :func:`~workspacespawner.storage.startcheck.check_storage_config`)
and the hub's database (``c.JupyterHub.db_url``, or ``--db-url``) for each
group's members: a member mounts the team's folder at every start. With
``--cluster`` it also reads each team claim from Kubernetes (phase, size)
and, where the storage reports it, its use from the kubelets' stats
summaries (``/api/v1/nodes/<node>/proxy/stats/summary``; RBAC ``nodes/proxy: get``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections.abc import Mapping, Sequence

from kubernetes_asyncio.client.rest import ApiException
from traitlets import TraitError

from workspacespawner.admin.common import (
    add_common_arguments,
    fail,
    kube_client,
    kubeconfig_of,
    load_config,
    namespace_of,
    print_rows,
)
from workspacespawner.core.quantities import gib
from workspacespawner.k8s.kinds import PVC
from workspacespawner.quota.cli import hub_groups
from workspacespawner.storage.startcheck import check_storage_config
from workspacespawner.storage.tiers import TeamFolder, volume_usage

log = logging.getLogger("workspacespawner.storage")

COLUMNS = ["team", "claim", "mount", "mode", "size", "users"]
CLUSTER_COLUMNS = ["team", "claim", "mount", "mode", "size", "phase", "used", "users"]


def team_rows(folders: Mapping[str, TeamFolder], groups_of: Mapping[str, set[str]]) -> list[dict]:
    """One row per team folder (sorted by team): where it mounts, how, and the users in its group (``groups_of``: user -> groups)."""
    rows = []
    for f in sorted(folders.values(), key=lambda f: f.group):
        members = sorted(user for user, groups in groups_of.items() if f.group in groups)
        known = any(f.group in groups for groups in groups_of.values())
        rows.append({
            "team": f.group,
            "claim": f"{f.claim}:{f.sub_path}" if f.sub_path else f.claim,
            "mount": f.mount_path,
            "mode": "ro" if f.read_only else "rw",
            "size": f.size,
            "users": ", ".join(members) if members else ("-" if known else "(no member in the hub)"),
        })
    return rows


async def add_cluster_view(rows: Sequence[dict], kube, namespace: str) -> None:
    """Add each row's claim ``phase`` (``missing`` if none), bound ``size`` and ``used`` where the kubelets report it."""
    for row in rows:
        claim = await kube.get(PVC, namespace, row["claim"].split(":", 1)[0])
        status = (claim or {}).get("status") or {}
        row["phase"] = status.get("phase", "Pending") if claim else "missing"
        row["size"] = (status.get("capacity") or {}).get("storage") or row["size"]
    usage: dict = {}
    try:
        for node in (await kube.core_api.list_node()).items:
            text = await kube.core_api.connect_get_node_proxy_with_path(node.metadata.name, "stats/summary")
            usage.update(volume_usage(json.loads(text) if isinstance(text, str) else text))
    except (ApiException, ValueError) as e:
        log.info("volume use not reported by the kubelets (%s)", getattr(e, "reason", e))
    for row in rows:
        used, _capacity = usage.get((namespace, row["claim"].split(":", 1)[0]), (None, None))
        row["used"] = gib(used) if used is not None else None


async def _run(args) -> int:
    try:
        config = load_config(args)
        folders = check_storage_config(config).team_folders
    except (OSError, TraitError) as e:
        return fail(f"storage: {e}")
    if args.db_url:
        config.JupyterHub.db_url = args.db_url
    groups_of = hub_groups(config)
    if groups_of is None:
        return fail(f"storage: cannot read the hub database {config.JupyterHub.get('db_url', 'sqlite:///jupyterhub.sqlite')} "
                    "(run where the hub runs, or pass --db-url)")
    if args.team:
        unknown = sorted(set(args.team) - set(folders))
        if unknown:
            return fail(f"storage: no team folder for {', '.join(map(repr, unknown))}")
        folders = {team: folders[team] for team in args.team}
    rows = team_rows(folders, groups_of)
    if args.cluster:
        async with kube_client(kubeconfig_of(args)) as kube:
            await add_cluster_view(rows, kube, namespace_of(config, args.namespace))
    print_rows(rows, CLUSTER_COLUMNS if args.cluster else COLUMNS, as_json=args.json,
               empty="(no team folders: c.WorkspaceSpawner.team_folders is empty)")
    return 0


def main(argv=None) -> int:
    """``workspacespawner storage [--team T] [-f jupyterhub_config.py] [--db-url URL] [--cluster] [--json]``."""
    parser = argparse.ArgumentParser(prog="workspacespawner storage", description="List which users mount which team folders.")
    add_common_arguments(parser, actor=False)
    parser.add_argument("--team", action="append", help="only this team (a JupyterHub group); may repeat")
    parser.add_argument("--db-url", help="the hub database (default: the config's c.JupyterHub.db_url)")
    parser.add_argument("--cluster", action="store_true", help="also show each claim's phase, size and use from Kubernetes")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return asyncio.run(_run(parser.parse_args(argv)))
