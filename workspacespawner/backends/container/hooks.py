"""kubespawner's Pod hooks of WorkspaceSpawner, each handed to its container backend.

kubespawner calls these on the spawner while it builds and waits for the Pod
(a container start only): the manifest, the readiness check and the start's
Events. :class:`PodHooks` is a mixin listed before ``KubeSpawner`` (so
``super()`` is kubespawner's) and no Configurable (it adds no config section).
"""

from __future__ import annotations


class PodHooks:
    """``get_pod_manifest``, ``is_pod_running`` and ``events`` through ``self._container`` (a
    :class:`~.backend.ContainerBackend`)."""

    async def get_pod_manifest(self):
        """kubespawner's Pod, plus the home volume at ``home_mount_path`` (its working directory), the tiers, and where
        it may and should run (:meth:`.ContainerBackend.pod_manifest`)."""
        pod = await super().get_pod_manifest()
        return self._container.pod_manifest(pod, tiers_now=self._current_tiers(), where=self.gpu_view.placement())

    def is_pod_running(self, pod):
        """kubespawner's readiness check, failing fast when the Pod cannot run (no node, bad image, crash loop)."""
        self._container.check_pod(pod, fail_fast_unschedulable=self.fail_fast_unschedulable)
        return super().is_pod_running(pod)

    @property
    def events(self):
        """kubespawner's ``events``: this Pod's Events after the start's marker, oldest first
        (:meth:`.ContainerBackend.start_events`)."""
        return self._container.start_events()
