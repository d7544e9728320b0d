"""Container workspaces: kubespawner's Pod path, with the home PVC and the storage tiers mounted.

The Pod is kubespawner's own (its ``_start``, ``poll``, its shared
Pod and Event reflectors); stop deletes it by uid (:meth:`ContainerBackend.stop`,
kubespawner's stop with a ``preconditions.uid``); this backend adds what a workspace
needs to the manifest kubespawner builds (:meth:`ContainerBackend.add_workspace_volumes`)
and fails a start fast when the Pod cannot run (:meth:`ContainerBackend.check_pod`).

API followed: core/v1 Pod (``spec.volumes``, ``containers[].volumeMounts``,
``initContainers``; delete with ``DeleteOptions.preconditions.uid``, 409 when
the uid no longer matches), kubespawner 7's Pod manifest (``V1Pod`` models).
"""

from __future__ import annotations

import asyncio
from functools import partial

from jupyterhub.utils import exponential_backoff
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException
from kubespawner import KubeSpawner

from workspacespawner import upstream
from workspacespawner.backends.base import Backend, StartContext
from workspacespawner.backends.container import progress
from workspacespawner.backends.container.podstatus import ContainerStatus
from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.core.tasks import with_helpers
from workspacespawner.core.times import EPOCH
from workspacespawner.gpu import placement
from workspacespawner.k8s import events
from workspacespawner.k8s.kinds import PVC
from workspacespawner.k8s.models import to_model
from workspacespawner.k8s.owned import TRANSIENT_STATUSES
from workspacespawner.lifecycle.phases import Observed, Status, WorkspaceRef
from workspacespawner.queue import line
from workspacespawner.queue import start as queued
from workspacespawner.queue.config import GPUQueue
from workspacespawner.storage import binding, home, tiers
from workspacespawner.storage.prepare import PreparedTiers

#: The name kubespawner gives the server's container (the Pod's first).
NOTEBOOK_CONTAINER = "notebook"


class ContainerBackend(Backend):
    """A container workspace of ``spawner`` (a :class:`~workspacespawner.spawner.WorkspaceSpawner`, whose KubeSpawner half runs the Pod)."""

    kind = "container"

    def __init__(self, spawner):
        self.spawner = spawner
        self.tiers: PreparedTiers | None = None
        self._status = ContainerStatus()
        self._claims: asyncio.Future | None = None  # the Pod's claim names, once its manifest is built

    def ref(self, *, home_pvc: str | None, fresh: bool = False) -> WorkspaceRef:
        s = self.spawner
        return WorkspaceRef(
            namespace=s.namespace, user_name=s.user.name, server_name=s.name or "", home_pvc=home_pvc, pod=s.pod_name
        )

    def new_disk_bytes(self, existing: set[str]) -> int:
        return 0

    def compute_status(self, observed: Observed) -> Status | None:
        return self._status.compute_status(observed)

    def root_disk_status(self, observed: Observed) -> Status | None:
        return self._status.root_disk_status(observed)

    async def fence(self, say=None) -> None:
        """Nothing of its own: a container's Pods are covered by the generic fence."""

    async def start(self, ctx: StartContext) -> str:
        """kubespawner's Pod start (its manifest passes through :meth:`add_workspace_volumes`), its claims bound in time,
        and, for a start that waits in a GPU queue, its wait in line.

        Next to kubespawner's wait for the Pod, the Pod's volume claims are
        watched (:func:`~workspacespawner.storage.binding.wait_bound`, within
        ``claim_binding_timeout``): a claim missing or not bound in time
        fails the start with the claim named. A Pod at Kueue's gate is
        followed by :func:`~workspacespawner.queue.line.wait_in_line` (its
        place on the spawn page, the wait's limit, its run opened once
        admitted).
        """
        self.tiers = ctx.tiers
        self._claims = asyncio.get_running_loop().create_future()
        ctx.say("Starting your server")
        spawner = self.spawner
        spawner._options_loaded = True  # kubespawner's _start loads them again: keep this resolution
        helpers = [self._claims_bound()]
        queue = self.queue(ctx.tiers.groups)
        if queue is not None:
            key = f"{spawner.namespace}/{spawner.pod_name}"
            helpers.append(queued.wait(spawner, queue, ctx.say, pod=lambda: spawner.pod_reflector.pods.get(key)
                                       if spawner.pod_reflector is not None else None))
        try:
            # the wait in line ends before the start does: its run is open once the Pod runs (the gate is gone)
            return await with_helpers(upstream.start_pod(spawner), helpers, then=1 if queue is not None else None)
        finally:
            spawner._options_loaded = False

    def queue(self, groups) -> GPUQueue | None:
        """The GPU queue this start's Pod waits in (:func:`~workspacespawner.queue.start.queue_of`), or None."""
        return queued.queue_of(self.spawner, groups)

    async def _claims_bound(self) -> None:
        s = self.spawner
        claims = await self._claims
        kube = s.services.kube

        def peek(claim: str) -> dict | None:
            return kube.peek(PVC, s.namespace, claim, copy=False)[1]  # read only, at each new version

        def changed(claim: str):
            return kube.next_change(PVC, s.namespace, claim)

        await binding.wait_bound(s.api, namespace=s.namespace, claims=claims, deadline=s.claim_binding_timeout,
                                 peek=peek, changed=changed)

    async def stop(self, now: bool = False) -> None:
        """Delete the Pod this stop knows, by uid, and wait until that Pod is gone (kubespawner's waiting).

        kubespawner's ``stop`` deletes by name and, after a client timeout,
        sends the DELETE again; a first DELETE the API server serves late
        would then remove the next start's Pod of the same name. Here every
        DELETE carries the uid (``preconditions.uid``) of the Pod in
        kubespawner's Pod reflector (read from the API when the cache has
        none), so a late one is refused (409) once the Pod was replaced. As
        in kubespawner, a Pod that does not go within ``start_timeout``
        restarts the reflector and raises TimeoutError.
        """
        spawner = self.spawner
        await upstream.watch_pods(spawner)
        key = f"{spawner.namespace}/{spawner.pod_name}"
        uid = _uid(spawner.pod_reflector.pods.get(key)) or await self._read_pod_uid()
        if uid is None:
            spawner.log.info("No pod %s to delete", key)
            return
        grace = 0 if now else spawner.delete_grace_period
        options = client.V1DeleteOptions(grace_period_seconds=grace, preconditions=client.V1Preconditions(uid=uid))
        await exponential_backoff(
            partial(self._delete_pod, options, grace, uid), f"Could not delete pod {key}", timeout=spawner.k8s_api_request_retry_timeout
        )
        try:
            await exponential_backoff(
                lambda: _uid(spawner.pod_reflector.pods.get(key)) != uid,
                f"pod {key} did not disappear in {spawner.start_timeout} seconds!",
                timeout=spawner.start_timeout,
            )
        except TimeoutError:
            spawner.log.error("Pod %s did not disappear, restarting pod reflector", key)
            await upstream.watch_pods(spawner, replace=True)
            raise

    async def _read_pod_uid(self) -> str | None:
        """The uid of the Pod named ``pod_name``, read from the API (None: there is none)."""
        s = self.spawner
        try:
            pod = await asyncio.wait_for(s.api.read_namespaced_pod(s.pod_name, s.namespace), s.k8s_api_request_timeout)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return pod.metadata.uid

    async def _delete_pod(self, options, grace: int, uid: str) -> bool:
        """One DELETE of the Pod with uid ``uid`` (for exponential_backoff): True when done or gone, False to try again.

        Tried again after a client timeout or a transient answer (429, 5xx);
        once the stop gives up, the hub's compute reconciler keeps removing it.
        """
        s = self.spawner
        key = f"{s.namespace}/{s.pod_name}"
        s.log.info("Deleting pod %s (uid %s)", key, uid)
        try:
            await asyncio.wait_for(
                s.api.delete_namespaced_pod(name=s.pod_name, namespace=s.namespace, body=options, grace_period_seconds=grace),
                s.k8s_api_request_timeout,
            )
        except TimeoutError:
            return False
        except ApiException as e:
            if e.status == 404:
                s.log.warning("No pod %s to delete. Assuming already deleted.", key)
                return True
            if e.status == 409:  # the uid precondition: the Pod of that name is another one now
                s.log.warning("Pod %s is no longer the one with uid %s; not deleting it", key, uid)
                return True
            if e.status in TRANSIENT_STATUSES:
                s.log.warning("Deleting pod %s: the API answered %s %s; trying again", key, e.status, e.reason)
                return False
            raise
        return True

    async def poll(self) -> int | None:
        """kubespawner's poll, from its Pod cache; a cache whose watch gave up is replaced first, never read. While the
        API server cannot be reached no answer is known: None, as kubespawner answers before its first load."""
        try:
            await upstream.watch_pods(self.spawner)
        except Exception as e:
            self.spawner.log.warning("Cannot poll %s while its watch is down: %s", upstream.log_name(self.spawner), e)
            return None
        return await KubeSpawner.poll(self.spawner)

    def image(self) -> str:
        return self.spawner.image

    async def server_log(self, lines: int) -> str | None:
        """The notebook container's log (``pods/log``, its last ``lines`` lines), as ``kubectl logs`` reads it."""
        s = self.spawner
        return await asyncio.wait_for(
            s.api.read_namespaced_pod_log(s.pod_name, s.namespace, container=NOTEBOOK_CONTAINER, tail_lines=lines),
            s.k8s_api_request_timeout,
        )

    def compute_events(self) -> list[dict]:
        # kubespawner's Event cache, of the Pod there is now, by time: an earlier Pod of the same name can have Events
        # stamped after this start began (its "Stopping container" when the kubelet is late). Not kubespawner's
        # ``events``: its marker of a start sorts Events as strings, and a scheduler Event ("…:05.5Z") in the second
        # of the old Pod's last kubelet Event ("…:05Z") sorted before it and was dropped.
        spawner = self.spawner
        pods = spawner.pod_reflector
        uid = _uid(pods.pods.get(f"{spawner.namespace}/{spawner.pod_name}") if pods is not None else None)
        return [] if uid is None else self.pod_events(uid)

    def pod_events(self, uid: str | None = None) -> list[dict]:
        """The Events of the spawner's Pod name in kubespawner's Event cache, oldest first; with ``uid``, only those of
        that Pod (or of none). ``[]`` without an Event cache."""
        spawner = self.spawner
        cache = spawner.event_reflector
        if not cache:
            return []
        found = [e for e in events.events_involving(cache.resources, spawner.pod_name)
                 if uid is None or e["involvedObject"].get("uid") in (uid, None)]
        return sorted(found, key=lambda e: events.event_time(e) or EPOCH)

    def start_events(self) -> list[dict]:
        """kubespawner's ``events``: this Pod's Events after the start's marker (its last Event before the start),
        oldest first (:meth:`pod_events`: the Event cache's, ordered by when each happened)."""
        found, marker = [], upstream.last_event(self.spawner)
        for event in self.pod_events():
            if marker and event["metadata"]["uid"] == marker:
                found = []  # the marker: only what came after it
            else:
                found.append(event)
        return found

    def event_object(self) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "name": self.spawner.pod_name}

    # -- the Pod ------------------------------------------------------------------------------

    def add_workspace_volumes(self, pod, *, home_pvc: str, home_mount_path: str, user_name: str, tiers_now: PreparedTiers):
        """kubespawner's ``V1Pod`` with the home (:func:`.home.home_volume`) at ``home_mount_path``, owner labels, and the tiers.

        Our volumes replace any of the same name, and kubespawner's own
        per-user volume (the one claiming its ``pvc_name``: z2jh's
        ``singleuser.storage.type: dynamic``); the notebook container
        (the first) gets the mounts and, without one of its own, the home as
        working directory; the scratch notice's init container gets the
        notebook's securityContext.
        """
        notebook = pod.spec.containers[0]
        sanitize = self.spawner.api.api_client.sanitize_for_serialization
        additions = tiers.pod_tiers(
            settings=tiers_now.settings,
            groups_of_user=tiers_now.groups,
            unavailable=tiers_now.unavailable,
            image=notebook.image,
            security_context=sanitize(notebook.security_context) if notebook.security_context else None,
        )
        volumes = [home.home_volume(home_pvc), *additions.volumes]
        mounts = [home.home_volume_mount(home_mount_path), *additions.volume_mounts]
        # kubespawner's own per-user volume (z2jh's storage type "dynamic" mounts {pvc_name}): our home replaces it
        ours = {v["name"] for v in volumes} | {_name(v) for v in pod.spec.volumes or [] if _claim_name(v) == self.spawner.pvc_name}
        pod.spec.volumes = [v for v in pod.spec.volumes or [] if _name(v) not in ours]
        pod.spec.volumes += [to_model("V1Volume", v) for v in volumes]
        notebook.volume_mounts = [m for m in notebook.volume_mounts or [] if _name(m) not in ours]
        notebook.volume_mounts += [to_model("V1VolumeMount", m) for m in mounts]
        if not notebook.working_dir:
            notebook.working_dir = home_mount_path
        added = {c["name"] for c in additions.init_containers}
        init = [c for c in pod.spec.init_containers or [] if _name(c) not in added]
        pod.spec.init_containers = init + [to_model("V1Container", c) for c in additions.init_containers] or None
        claims = [claim for claim in map(_claim_name, pod.spec.volumes) if claim]
        if self._claims is not None and not self._claims.done():
            self._claims.set_result(claims)
        pod.metadata.labels = {**(pod.metadata.labels or {}), **names.owner_labels(user_name)}
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), **names.owner_annotations(user_name)}
        return pod

    def pod_manifest(self, pod, *, tiers_now: PreparedTiers, where: placement.Placement):
        """kubespawner's ``V1Pod`` with the home, the tiers (:meth:`add_workspace_volumes`), where it may and should
        run (:meth:`place`) and, for a start that waits in a GPU queue, the queue's labels (Kueue holds the Pod at its
        gate until the queue has the GPUs: :func:`~workspacespawner.queue.line.pod_labels`)."""
        s = self.spawner
        pod = self.add_workspace_volumes(pod, home_pvc=s.home_pvc_name, home_mount_path=s.home_mount_path,
                                         user_name=s.user.name, tiers_now=tiers_now)
        pod.metadata.labels = {**pod.metadata.labels, **line.pod_labels(self.queue(tiers_now.groups))}
        return self.place(pod, where)

    def place(self, pod, where: placement.Placement):
        """kubespawner's ``V1Pod`` with ``where`` merged into its ``nodeSelector``, ``affinity`` and ``tolerations``
        (:func:`~workspacespawner.gpu.placement.apply`; what the admin's ``node_affinity_*`` and ``tolerations``
        settings put there stays)."""
        sanitize = self.spawner.api.api_client.sanitize_for_serialization
        spec = pod.spec
        current = {"nodeSelector": spec.node_selector, "affinity": sanitize(spec.affinity) if spec.affinity else None,
                   "tolerations": sanitize(spec.tolerations) if spec.tolerations else None}
        placed = placement.apply({k: v for k, v in current.items() if v}, where)
        spec.node_selector = placed.get("nodeSelector") or None
        spec.affinity = to_model("V1Affinity", placed.get("affinity"))
        spec.tolerations = to_model("list[V1Toleration]", placed.get("tolerations")) or None
        return pod

    def check_pod(self, pod: dict | None, *, fail_fast_unschedulable: bool) -> None:
        """Raise when ``pod`` cannot run: no node (unless the autoscaler reported a scale-up), a bad image, a crash loop.

        kubespawner calls it (through ``is_pod_running``) over and over while
        a start waits; the Pod's Events (:meth:`compute_events`, a pass over
        the namespace's whole Event cache) are read only for a Pod that found
        no node.
        """
        if pod is None or "deletionTimestamp" in pod["metadata"]:
            return
        unschedulable = progress.unschedulable_reason(pod)
        if unschedulable and progress.waits_for_claims(unschedulable):
            unschedulable = None  # the claims' own wait names them (see start)
        if unschedulable and fail_fast_unschedulable and not events.scale_up_triggered(self.compute_events()):
            raise WorkspaceError(events.no_node_message(unschedulable), reason="unschedulable", status_code=503)
        failure = progress.container_failure(pod)
        if failure:
            word, message = failure
            raise WorkspaceError(f"Your server could not start. {message}", reason=word, status_code=500)


def _name(obj) -> str | None:
    return obj.get("name") if isinstance(obj, dict) else getattr(obj, "name", None)


def _claim_name(volume) -> str | None:
    """The claim a Pod volume mounts, or None: a ``V1Volume`` (whose source kubespawner may leave a dict) or its dict."""
    source = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else getattr(volume, "persistent_volume_claim", None)
    if isinstance(source, dict):
        return source.get("claimName") or source.get("claim_name")
    return getattr(source, "claim_name", None)


def _uid(pod: dict | None) -> str | None:
    """The uid of a Pod as kubespawner's reflector keeps it (the API's JSON), or None."""
    return ((pod or {}).get("metadata") or {}).get("uid")
