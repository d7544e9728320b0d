# WorkspaceSpawner and the user's home volume.
# Copy into your hub's config (or mount with z2jh's hub.extraFiles); every
# c.KubeSpawner.* setting still applies, the c.WorkspaceSpawner.* ones are ours.
# `c` is the config object JupyterHub hands to config files.

c.JupyterHub.spawner_class = "workspace"  # the entry point of workspacespawner

# The home PersistentVolumeClaim: one per user, on Ceph RBD, never deleted by
# a stop, a failed start or a user deletion. Its settings are kubespawner's
# own (zero-to-jupyterhub: singleuser.storage.*); the template names a new
# home only, an existing one is found by its owner labels. The home is
# mounted at c.WorkspaceSpawner.home_mount_path (default /home/jovyan).
c.KubeSpawner.pvc_name_template = "home-{username}"
c.KubeSpawner.storage_class = "ceph-rbd"
c.KubeSpawner.storage_capacity = "10Gi"
c.KubeSpawner.storage_access_modes = ["ReadWriteOnce"]

# Fail a start at once when no node has the GPUs asked for (unless the
# cluster autoscaler is adding one), instead of waiting out start_timeout.
c.WorkspaceSpawner.fail_fast_unschedulable = True
c.KubeSpawner.start_timeout = 600
c.KubeSpawner.image = "quay.io/jupyter/scipy-notebook:2025-10-20"

# The spawn page's live numbers (GPUs free now, card-hours left) and the home
# page's "Your workspaces" panel: small JSON endpoints of the hub's own
# (/hub/spawn-page-data/<user>/<server>, /hub/workspaces-data/<user>) that
# read the hub's watch caches, and a home.html that extends JupyterHub's.
from workspacespawner.homepage import TEMPLATES  # noqa: E402
from workspacespawner.hubhandlers import HANDLERS  # noqa: E402

c.JupyterHub.extra_handlers.extend(HANDLERS)
c.JupyterHub.template_paths.insert(0, TEMPLATES)

