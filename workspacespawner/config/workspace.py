"""What kind of workspace a start makes and which IDE it opens: ``c.WorkspaceSpawner.workspace_kind``, ``ide`` and friends.

A trait-only class (``HasTraits``) mixed into WorkspaceSpawner, so these are
``c.WorkspaceSpawner.*`` settings (usually set per profile in
``kubespawner_override``) and no config section of their own.
"""

from __future__ import annotations

import logging

from traitlets import Bool, Enum, Float, HasTraits, TraitError, Unicode, default, validate

from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.profiles import IDES, WORKSPACE_KINDS, validate_profile_list
from workspacespawner.config.traittypes import warn_once

#: Environment every workspace gets unless ``environment`` sets it: code-server behind jupyter-server-proxy on a
#: Unix socket (jupyter-vscode-proxy >= 0.7), not a TCP port (see :attr:`WorkspaceTraits.ide`).
IDE_ENV = {"JUPYTER_VSCODE_PROXY_USE_SOCKET": "true"}


class WorkspaceTraits(HasTraits):
    """The workspace kind (container or VM), the IDE, and how a start that cannot be placed fails."""

    workspace_kind = Enum(
        WORKSPACE_KINDS,
        "container",
        config=True,
        help="""How a workspace runs: ``container`` (a Pod) or ``vm`` (a KubeVirt VirtualMachine).

        Usually set per profile in ``kubespawner_override``.
        """,
    )

    ide = Enum(
        IDES,
        "jupyterlab",
        config=True,
        help="""The IDE a workspace opens: ``jupyterlab`` (``/lab``) or ``code-server``.

        code-server is served through jupyter-server-proxy at
        :attr:`code_server_url`, behind JupyterHub's login, with the same
        identity and access policy as JupyterLab. Usually set per profile.
        Every workspace (JupyterLab's launcher opens VS Code too) gets
        ``JUPYTER_VSCODE_PROXY_USE_SOCKET=true`` unless ``environment``
        sets it: jupyter-vscode-proxy then starts code-server (with
        ``--auth none``) on a Unix socket only the server's user may open,
        never on a TCP port another process could reach.
        """,
    )

    code_server_url = Unicode(
        "/vscode/",
        config=True,
        help="""Path (under the server's URL) where jupyter-server-proxy serves code-server.

        ``/vscode/`` is where the ``jupyter-vscode-proxy`` package mounts it.
        A code-server profile opens this path instead of ``/lab``.
        """,
    )

    code_server_check_timeout = Float(
        60.0,
        min=1,
        max=3600,
        config=True,
        help="""Seconds a code-server profile's start waits for code-server's answer at :attr:`code_server_url`.

        Once its server runs, such a start asks that path itself (with the
        server's API token), which also starts code-server, so the first page
        of VS Code is quick. When the image has no code-server
        (jupyter-vscode-proxy finds none on the PATH; the server answers a bare
        500 and logs ``Can not find code-server in PATH``) the start fails: the
        spawn page says what the administrators must install, with the
        server's log line, and the server is stopped (disks kept). A 500 that
        nothing explains (a VM's guest, whose log the hub cannot read) fails
        the start the same way, naming the likely cause as likely. The wait
        ends 5 s before ``start_timeout`` at the latest; no answer by then
        judges nothing, and JupyterHub's own wait for the server
        (``http_timeout``) follows as for any profile.
        """,
    )

    fail_fast_unschedulable = Bool(
        True,
        config=True,
        help="""Fail a start as soon as the scheduler says no node can run the Pod.

        While the cluster autoscaler reports a scale-up (Event
        ``TriggeredScaleUp``), the start keeps waiting within
        ``start_timeout`` instead. ``False`` waits out ``start_timeout``
        as kubespawner does.
        """,
    )


class KubeSpawnerGuards(HasTraits):
    """What WorkspaceSpawner changes in KubeSpawner's own settings: profile_list checked whole, its PVC logic kept off.

    ``storage_pvc_ensure`` and ``delete_pvc`` are forced off (said when
    set): the home PersistentVolumeClaim is created by WorkspaceSpawner from
    kubespawner's ``storage_*`` settings and is never deleted with a user or
    a server.
    """

    @validate("profile_list")
    def _check_profile_list(self, proposal):
        try:
            validate_profile_list(proposal.value, self.trait_names(), GPUEconomy(config=self.config).declared())
        except ValueError as e:
            raise TraitError(str(e)) from None
        return proposal.value

    @default("storage_pvc_ensure")
    def _storage_pvc_ensure_default(self):
        return False

    @validate("storage_pvc_ensure")
    def _keep_storage_pvc_ensure_off(self, proposal):
        if proposal.value:  # z2jh's storage type "dynamic" sets it for every spawner: said once
            warn_once(self.log, "KubeSpawner.storage_pvc_ensure=True left off: WorkspaceSpawner creates the home PVC "
                                "itself, from the same storage_* settings.", logging.INFO)
        return False

    @validate("delete_pvc")
    def _keep_delete_pvc_off(self, proposal):
        if proposal.value:
            self.log.warning("KubeSpawner.delete_pvc=True ignored: WorkspaceSpawner never deletes a home volume on user or server deletion.")
        return False
