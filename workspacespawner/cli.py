"""The ``workspacespawner`` command: one sub-command per job.

``workspacespawner demo``          the local cluster and a demo JupyterHub on loopback
``workspacespawner localcluster``  the local Kubernetes API server alone, for kubectl
``workspacespawner usage``         card-hours used and left per user, and running workspaces
``workspacespawner storage``       which users mount which team folders
``workspacespawner disk``          expand, snapshot, restore, rebuild and list users' disks (audited)
``workspacespawner image``         publish a stopped VM workspace's root disk as a golden image (audited)
``workspacespawner retention``     retained disks: list, purge past retain-until, reclaim for a user
``workspacespawner fence``         force-delete a user's Pods/VMIs on a node that is down (audited)
``workspacespawner queues``        the Kueue objects of the hub's GPU queues, for kubectl apply
``workspacespawner audit``         the audit trail of disk operations
``workspacespawner dashboard``     the Workspaces dashboard, a JupyterHub service the hub starts
"""

from __future__ import annotations

import sys

COMMANDS = {
    "demo": ("workspacespawner.demo", "run the local cluster and a demo JupyterHub on http://127.0.0.1:8000"),
    "localcluster": ("localcluster.__main__", "run the local Kubernetes API server until Ctrl-C"),
    "usage": ("workspacespawner.quota.cli", "card-hours used and left per user, and running workspaces"),
    "storage": ("workspacespawner.admin.storage", "which users mount which team folders (--team T, -f jupyterhub_config.py)"),
    "disk": ("workspacespawner.admin.disk", "expand, snapshot, restore, rebuild and list users' disks (audited)"),
    "image": ("workspacespawner.admin.image", "publish a stopped VM workspace's root disk as a golden image (audited)"),
    "retention": ("workspacespawner.admin.retention", "retained disks: list, purge past retain-until, reclaim for a user"),
    "fence": ("workspacespawner.admin.fence", "force-delete a user's Pods/VMIs on a node that is down (audited)"),
    "orphans": ("workspacespawner.admin.orphans", "Pods/VMIs no server of the hub runs (orphans, ghosts); --remove removes them"),
    "queues": ("workspacespawner.admin.queues", "the Kueue objects of the hub's GPU queues, for kubectl apply -f - (-f jupyterhub_config.py)"),
    "audit": ("workspacespawner.admin.audit", "the audit trail of disk operations (--user U --since DATE --json)"),
    "dashboard": ("workspacespawner.dashboard.command", "the Workspaces dashboard service (the hub starts it; -f jupyterhub_config.py)"),
}


#: What ``demo`` and ``localcluster`` say when the local cluster's distribution is not installed.
LOCALCLUSTER_MISSING = (
    "the local cluster is not installed: it is its own distribution, workspacespawner-localcluster, in the "
    "folder localcluster/ of the workspacespawner repository (a hub image does not need it). "
    "From a checkout: pip install -e ./localcluster"
)


def _usage() -> str:
    lines = ["usage: workspacespawner COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<14} {about}" for name, (_module, about) in COMMANDS.items()]
    lines.append("\n`workspacespawner COMMAND --help` tells more.")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Dispatch ``argv[0]`` to its sub-command's ``main(rest)``; exit code 2 for an unknown command."""
    import importlib

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"workspacespawner: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(COMMANDS[name][0])
    except ModuleNotFoundError as e:
        if e.name != "localcluster":
            raise
        print(f"workspacespawner {name}: {LOCALCLUSTER_MISSING}", file=sys.stderr)
        return 2
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
