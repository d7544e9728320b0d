"""What every admin command shares: arguments, the hub's config, the cluster, the audit log, output.

``-f/--config``: the hub's ``jupyterhub_config.py`` (default
``./jupyterhub_config.py`` if there), loaded with traitlets'
``PyFileConfigLoader`` as JupyterHub does
(:func:`workspacespawner.quota.cli.load_hub_config`). The spawner settings
are the merged ``c.Spawner``, ``c.KubeSpawner`` and ``c.WorkspaceSpawner``
sections, checked by the spawner's own traits (:func:`lifecycle_settings`).

Kubernetes: ``--kubeconfig FILE``, else ``$KUBECONFIG``, else, when
``-f`` names the config ``workspacespawner demo`` wrote, the demo's local
cluster's kubeconfig next to it (:func:`kubeconfig_of`), else
``~/.kube/config`` when present, else the in-cluster service account
(kubernetes_asyncio). Namespace: ``--namespace``, else
``c.KubeSpawner.namespace``, else the service account's namespace, else
``default``.

``--actor``: the admin's name in audit records (default: the login name).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

from traitlets.config import Config

from workspacespawner.admin.arguments import add_common_arguments  # noqa: F401 (every command's, from here)
from workspacespawner.config.check import merged_settings, traits_from_config
from workspacespawner.k8s.api import Kube
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.lifecycle.settings import LifecycleTraits
from workspacespawner.quota.cli import load_hub_config
from workspacespawner.quota.config import WorkspaceQuota

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

#: The first line of the ``jupyterhub_config.py`` that ``workspacespawner demo`` writes in its state directory.
DEMO_CONFIG_MARK = "# Written by `workspacespawner demo`"
#: Where, in the demo's state directory (the folder of that config), its local cluster's kubeconfig is.
DEMO_KUBECONFIG = Path("cluster") / "kubeconfig"


def load_config(args) -> Config:
    """The hub's config named by ``args.config`` (an empty one if there is none)."""
    return load_hub_config(args.config)


def spawner_settings(config: Config) -> dict:
    """The spawner's settings: ``c.Spawner``, then ``c.KubeSpawner``, then ``c.WorkspaceSpawner`` (later wins)."""
    return merged_settings(config)


def lifecycle_settings(config: Config) -> LifecycleTraits:
    """The lifecycle traits (``retention_days``, ``reclaim_policy``, ``disk_limit``, ...) as the hub's spawner sees them, checked."""
    return traits_from_config(LifecycleTraits, config)


def namespace_of(config: Config, override: str | None) -> str:
    """The workspaces' namespace (see the module docstring)."""
    if override:
        return override
    configured = spawner_settings(config).get("namespace")
    if configured:
        return configured
    if SERVICE_ACCOUNT_NAMESPACE.exists():
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


def quota_settings(config: Config) -> WorkspaceQuota:
    """The hub's ``c.WorkspaceQuota`` settings (ledger URL, disk limits)."""
    return WorkspaceQuota(config=config)


def audit_log(config: Config, *, read_only: bool = False) -> AuditLog:
    """The audit log in the ledger's database (``c.WorkspaceQuota.ledger_url``), schema brought up to date.

    ``read_only``: for a command that only reads, a SQLite ledger file that
    does not exist raises ``LedgerUnavailable`` instead of being created
    (:meth:`WorkspaceQuota.existing_ledger_url`).
    """
    settings = quota_settings(config)
    url = settings.existing_ledger_url() if read_only else settings.database_url()
    log = AuditLog.from_url(url, timeout=settings.ledger_timeout)
    log.ensure_ready()
    return log


def kubeconfig_of(args) -> str | None:
    """The kubeconfig the commands use when ``--kubeconfig`` is not given and ``$KUBECONFIG`` is not set: the demo's
    local cluster's (``<state dir>/cluster/kubeconfig``) when ``-f`` names a config the demo wrote and that file is
    there; else ``args.kubeconfig`` (None: :func:`kube_client`'s own order)."""
    if args.kubeconfig or os.environ.get("KUBECONFIG") or not getattr(args, "config", None):
        return args.kubeconfig
    config = Path(args.config)
    try:
        with config.open(encoding="utf-8") as f:
            written_by_demo = f.readline().startswith(DEMO_CONFIG_MARK)
    except OSError:
        return None
    found = config.parent / DEMO_KUBECONFIG
    return str(found) if written_by_demo and found.is_file() else None


def actor_of(args) -> str:
    """The admin's name for the audit trail."""
    return getattr(args, "actor", None) or getpass.getuser()


@asynccontextmanager
async def kube_client(kubeconfig: str | None):
    """A :class:`~workspacespawner.k8s.api.Kube` for the cluster (see the module docstring), closed afterwards."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if kubeconfig or Path(path.split(os.pathsep)[0]).exists() or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        if not Path(path.split(os.pathsep)[0]).exists():
            raise FileNotFoundError(f"no kubeconfig at {path}: pass --kubeconfig FILE or set KUBECONFIG "
                                    "(`workspacespawner demo` prints the line to export for its local cluster)")
        await config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        yield Kube(client.CoreV1Api(api_client), client.CustomObjectsApi(api_client))


def print_rows(rows: list[dict], columns: list[str], *, as_json: bool = False, out=None, empty: str = "(none)") -> None:
    """``rows`` as JSON (one array) or an aligned table of ``columns``."""
    out = out or sys.stdout
    if as_json:
        json.dump(rows, out, indent=2, default=str)
        out.write("\n")
        return
    shown = [{c: "" if row.get(c) is None else str(row.get(c)) for c in columns} for row in rows]
    widths = {c: max([len(c)] + [len(row[c]) for row in shown]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip(), file=out)
    for row in shown:
        print("  ".join(row[c].ljust(widths[c]) for c in columns).rstrip(), file=out)
    if not rows:
        print(empty, file=out)


def errors() -> tuple[type[BaseException], ...]:
    """What an admin command reports in one line (exit 1) instead of a traceback."""
    from kubernetes_asyncio.client.rest import ApiException
    from kubernetes_asyncio.config import ConfigException

    from workspacespawner.k8s.api import NotOurs
    from workspacespawner.lifecycle.disks import DiskOpError
    from workspacespawner.quota.ledger import LedgerUnavailable

    return (LedgerUnavailable, FileNotFoundError, ConfigException, ApiException, DiskOpError, NotOurs, ValueError)


def describe(error: BaseException) -> str:
    """One line for ``error``: an API error by status, reason and the server's own explanation (its Status message)."""
    from workspacespawner.k8s.apistatus import one_line

    if getattr(error, "status", None) is not None and hasattr(error, "reason"):
        return f"the cluster answered {one_line(error)}"
    return str(error)


def run(coroutine) -> int:
    """``asyncio.run(coroutine)``: its exit code; a known error in one line (exit 1), Ctrl-C exit 130."""
    try:
        return asyncio.run(coroutine)
    except errors() as e:
        return fail(describe(e))
    except KeyboardInterrupt:
        return 130


def fail(message: str, code: int = 1) -> int:
    """Print ``message`` to stderr; return the exit code."""
    print(f"workspacespawner: {message}", file=sys.stderr)
    return code
