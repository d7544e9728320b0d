"""VirtController: KubeVirt's virt-controller (the VirtualMachine and VirtualMachineInstance controllers).

VirtualMachine controller (``pkg/virt-controller/watch/vm``):

* A VM without ``spec.template.spec.domain.firmware.uuid`` gets one written
  into its spec (KubeVirt's firmware sync, ``CalculateLegacyUUID``: the
  UUIDv5 of the VM's name in KubeVirt's namespace), so every VMI of the VM,
  and the guest's cloud-init instance id, keep the same system UUID.
* Runs the VM's run strategy (``spec.runStrategy`` or legacy ``spec.running``):
  ``Always``/``RerunOnFailure``/``Once`` create a VMI when none exists,
  ``Halted`` deletes it, ``Manual`` follows ``status.stateChangeRequests``;
  Stop requests (``uid`` of the VMI) delete the VMI, Start requests create
  one, and both are trimmed once done (see :mod:`..vmactions`).
* A VMI is created (same name; labels and annotations from the template; the
  VM as controlling owner; finalizer ``foregroundDeleteVirtualMachine``) only
  once the VM's DataVolumes (``volumes[].dataVolume``) have ``Succeeded``
  (or wait for their first consumer); a Failed DataVolume keeps it from
  starting.
* A VMI that ``Failed`` under ``Always``/``RerunOnFailure`` is deleted and
  recreated after a back-off (``status.startFailure``; ``crashloop_seconds``
  doubling up to ``crashloop_max_seconds``), during which the VM reads
  ``CrashLoopBackOff``.
* ``status``: ``printableStatus`` (first match wins, as KubeVirt orders them:
  Terminating, Stopping, Running, ErrorPvcNotFound, DataVolumeError,
  ErrorUnschedulable, Provisioning, WaitingForVolumeBinding, Starting,
  CrashLoopBackOff, Stopped), ``ready``, ``created``, ``runStrategy``,
  ``conditions`` (``Ready`` from the VMI, or False ``VMINotExists``, plus the
  VMI's other conditions), written through the status subresource.

VirtualMachineInstance controller (``pkg/virt-controller/watch/vmi``), with
the VMI standing for its virt-launcher Pod:

* A new VMI goes ``Pending``; while a PVC or DataVolume it uses is missing it
  stays there with ``Synchronized=False`` reason ``FailedPvcNotFound``;
  otherwise it moves to ``Scheduling``, where the scheduler places it
  (``Scheduled`` + ``status.nodeName``) and the node agent runs the guest
  (``Running``, ``Ready``).
* Deleting a VMI: the node agent stops the guest and removes the finalizer;
  for a VMI that never reached a node, or has already finished, this
  controller removes it.
* A placed VMI gets its virt-launcher Pod (:mod:`.launcher`: the VMI's
  labels and annotations, its claims as volumes, its resources and GPUs in
  the compute container), bound to its node and mirroring its phase; the
  Pod is deleted when the VMI finishes, is being deleted or is gone.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import uuid

from ..conditions import find_condition, has_condition, remove_condition, set_condition
from ..errors import ApiError
from ..runstrategy import FINAL_PHASES, run_strategy
from ..store import rfc3339
from .base import Controller
from .launcher import CREATED_BY_LABEL, is_launcher, launcher_container_statuses, make_launcher_pod
from .refs import DATA_VOLUMES, PODS, PVCS, VMIS, VMS, claim_names, get_or_none, owner_reference
from .scheduler import vmi_requests

log = logging.getLogger("localcluster.virt")

COMPONENT = "virtualmachine-controller"
FINALIZER = "foregroundDeleteVirtualMachine"
DV_READY_PHASES = ("Succeeded", "WaitForFirstConsumer", "PendingPopulation")
STARTING_PHASES = (None, "", "Pending", "Scheduling", "Scheduled")

#: The namespace of KubeVirt's name-based firmware UUIDs (``magicUUID`` in pkg/virt-controller/watch/vm/firmware.go).
FIRMWARE_UUID_NAMESPACE = uuid.UUID("6a1a24a1-4061-4607-8bf4-a3963d0c5895")


def _parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def _phase(obj: dict | None) -> str | None:
    return ((obj or {}).get("status") or {}).get("phase")


def _template_spec(vm: dict) -> dict:
    return ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}


def legacy_firmware_uuid(vm_name: str) -> str:
    """KubeVirt's ``CalculateLegacyUUID``: the firmware UUID virt-controller gives a VM that has none."""
    return str(uuid.uuid5(FIRMWARE_UUID_NAMESPACE, vm_name))


def make_vmi(vm: dict) -> dict:
    """The VMI virt-controller creates for ``vm``: the template, owned by the VM."""
    template = vm["spec"]["template"]
    meta = template.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    annotations["kubevirt.io/vm-generation"] = str(vm["metadata"].get("generation", 1))
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": vm["metadata"]["name"],
            "namespace": vm["metadata"]["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": annotations,
            "ownerReferences": [owner_reference(vm)],
            "finalizers": [FINALIZER],
        },
        "spec": copy.deepcopy(template["spec"]),
    }


class VirtController(Controller):
    """Turns VirtualMachines into VMIs and reports their status (see the module docstring).

    Knobs: ``crashloop_seconds`` (first back-off after a failed VMI, seconds,
    default 10) and ``crashloop_max_seconds`` (cap, default 300).
    """

    name = "virt"
    watches = (VMS, VMIS, DATA_VOLUMES, PVCS)
    reads = (PODS,)

    def __init__(self, cluster):
        super().__init__(cluster)
        self.crashloop_seconds = 10.0
        self.crashloop_max_seconds = 300.0
        self._timers: list[asyncio.TimerHandle] = []

    async def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        await super().stop()

    async def reconcile(self, kind, obj, deleted) -> None:
        meta = obj["metadata"]
        namespace = meta["namespace"]
        if kind.key == VMS:
            if not deleted:
                await self._sync_vm(namespace, meta["name"])
        elif kind.key == VMIS:
            if not deleted:
                await self._sync_vmi(namespace, meta["name"])
            await self._sync_launcher(obj, deleted)
            await self._sync_vm(namespace, meta["name"])
        else:
            # A disk changed: VMs and VMIs using it may move on.
            for key in (VMIS, VMS):
                for other in self.client.objects(self.client.kind(*key)):
                    spec = other.get("spec") or {}
                    volumes = (spec.get("template") or {}).get("spec", {}).get("volumes") if key == VMS else spec.get("volumes")
                    if other["metadata"]["namespace"] == namespace and meta["name"] in claim_names(volumes):
                        sync = self._sync_vm if key == VMS else self._sync_vmi
                        await sync(namespace, other["metadata"]["name"])

    # -- VMIs ----------------------------------------------------------------

    async def _sync_vmi(self, namespace: str, name: str) -> None:
        vmi = get_or_none(self.client, VMIS, namespace, name)
        if vmi is None:
            return
        kind = self.client.kind(*VMIS)
        meta = vmi["metadata"]
        status = vmi.setdefault("status", {})
        if meta.get("deletionTimestamp"):
            unplaced = not status.get("nodeName") or status.get("phase") in FINAL_PHASES
            if unplaced and FINALIZER in (meta.get("finalizers") or []):
                await self._drop_finalizer(vmi)
            return
        if status.get("phase") not in (None, "", "Pending"):
            return
        if FINALIZER not in (meta.get("finalizers") or []):
            meta.setdefault("finalizers", []).append(FINALIZER)
            vmi = await self.client.replace(kind, namespace, name, vmi)
            status = vmi.setdefault("status", {})
        conditions = status.setdefault("conditions", [])
        missing = self._missing_claim(namespace, vmi["spec"].get("volumes"))
        now = rfc3339(self.client.clock())
        if missing:
            status["phase"] = "Pending"
            set_condition(conditions, "Synchronized", "False", "FailedPvcNotFound",
                          f"PVC {namespace}/{missing} does not exist, waiting for it to appear", now=now)
        elif self._volumes_ready(namespace, vmi["spec"].get("volumes")):
            remove_condition(conditions, "Synchronized")
            status["phase"] = "Scheduling"
            status.setdefault("phaseTransitionTimestamps", []).append({"phase": "Scheduling", "phaseTransitionTimestamp": now})
        else:
            status["phase"] = "Pending"
        if not conditions:
            status.pop("conditions")
        await self.client.replace(kind, namespace, name, vmi, subresource="status")

    async def _sync_launcher(self, vmi: dict, deleted: bool) -> None:
        """Create, update or delete the virt-launcher Pod of ``vmi`` (see :mod:`.launcher`)."""
        meta = vmi["metadata"]
        status = vmi.get("status") or {}
        pods = self.client.kind(*PODS)
        mine = [p for p in self.client.objects(pods)
                if is_launcher(p) and (p["metadata"].get("labels") or {}).get(CREATED_BY_LABEL) == meta["uid"]]
        wanted = not deleted and not meta.get("deletionTimestamp") and status.get("nodeName") and status.get("phase") not in FINAL_PHASES
        try:
            if not wanted:
                for pod in mine:
                    if not pod["metadata"].get("deletionTimestamp"):
                        await self.client.delete(pods, pod["metadata"]["namespace"], pod["metadata"]["name"],
                                                 preconditions={"uid": pod["metadata"]["uid"]})
                return
            if not mine:
                mine = [await self.client.create(pods, meta["namespace"], make_launcher_pod(vmi, status["nodeName"], vmi_requests(vmi)))]
            phase = "Running" if status.get("phase") == "Running" else "Pending"
            for pod in mine:
                if (pod.get("status") or {}).get("phase") != phase and not pod["metadata"].get("deletionTimestamp"):
                    pod = copy.deepcopy(pod)  # the client's objects are the store's own: never written in place
                    pod_status = pod.setdefault("status", {})
                    pod_status["phase"] = phase
                    pod_status["containerStatuses"] = launcher_container_statuses(pod, running=phase == "Running", now=self.client.clock())
                    await self.client.replace(pods, pod["metadata"]["namespace"], pod["metadata"]["name"], pod, subresource="status")
        except ApiError as e:  # a race with another sync (409) or the Pod already gone (404): the next event settles it
            log.debug("virt: virt-launcher Pod of %s/%s: %s", meta["namespace"], meta["name"], e.message)

    async def _drop_finalizer(self, vmi: dict) -> None:
        meta = vmi["metadata"]
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        await self.client.replace(self.client.kind(*VMIS), meta["namespace"], meta["name"], vmi)

    def _missing_claim(self, namespace: str, volumes: list | None) -> str | None:
        """The first PVC or DataVolume a VMI uses that does not exist."""
        for volume in volumes or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and get_or_none(self.client, PVCS, namespace, claim) is None:
                return claim
            dv = (volume.get("dataVolume") or {}).get("name")
            if dv and get_or_none(self.client, DATA_VOLUMES, namespace, dv) is None and get_or_none(self.client, PVCS, namespace, dv) is None:
                return dv
        return None

    def _data_volumes(self, namespace: str, volumes: list | None) -> list[dict]:
        names = [(v.get("dataVolume") or {}).get("name") for v in volumes or []]
        found = (get_or_none(self.client, DATA_VOLUMES, namespace, n) for n in names if n)
        return [dv for dv in found if dv is not None]

    def _volumes_ready(self, namespace: str, volumes: list | None) -> bool:
        return all(_phase(dv) in DV_READY_PHASES for dv in self._data_volumes(namespace, volumes))

    # -- VMs -----------------------------------------------------------------

    async def _sync_vm(self, namespace: str, name: str) -> None:
        vm = get_or_none(self.client, VMS, namespace, name)
        if vm is None:
            return
        if not vm["metadata"].get("deletionTimestamp"):
            vm = await self._ensure_firmware_uuid(vm)
        vmi = get_or_none(self.client, VMIS, namespace, name)
        status = copy.deepcopy(vm.get("status") or {})
        requests = status.get("stateChangeRequests") or []
        if requests and self._request_done(requests[0], vmi):
            requests = requests[1:]
        if not vm["metadata"].get("deletionTimestamp"):
            vmi = await self._apply_run_strategy(vm, vmi, status, requests)
        if requests:
            status["stateChangeRequests"] = requests
        else:
            status.pop("stateChangeRequests", None)
        self._fill_status(vm, vmi, status, requests)
        if status != (vm.get("status") or {}):
            vm["status"] = status
            await self.client.replace(self.client.kind(*VMS), namespace, name, vm, subresource="status")

    async def _ensure_firmware_uuid(self, vm: dict) -> dict:
        """Write the legacy firmware UUID into a VM that has none (a spec change: the VM's generation moves on)."""
        domain = vm["spec"]["template"]["spec"].setdefault("domain", {})
        firmware = domain.get("firmware") or {}
        if firmware.get("uuid"):
            return vm
        domain["firmware"] = {**firmware, "uuid": legacy_firmware_uuid(vm["metadata"]["name"])}
        return await self.client.replace(self.client.kind(*VMS), vm["metadata"]["namespace"], vm["metadata"]["name"], vm)

    @staticmethod
    def _request_done(request: dict, vmi: dict | None) -> bool:
        """KubeVirt's isTrimFirstChangeRequestNeeded."""
        if request.get("action") == "Stop":
            return vmi is None or not request.get("uid") or request["uid"] != vmi["metadata"]["uid"]
        if request.get("action") == "Start":
            return vmi is not None and not vmi["metadata"].get("deletionTimestamp") and _phase(vmi) not in FINAL_PHASES
        return True

    def _in_backoff(self, status: dict) -> bool:
        retry = (status.get("startFailure") or {}).get("retryAfterTimestamp")
        return bool(retry) and _parse_time(retry) > self.client.clock()

    def _start_expected(self, vm: dict, status: dict, requests: list) -> bool:
        """KubeVirt's isVMIStartExpected: the run strategy (or a Start request) wants a VMI, and no back-off holds it."""
        if self._in_backoff(status):
            return False
        strategy = run_strategy(vm)
        if strategy in ("Always", "RerunOnFailure", "Once"):
            return True
        return bool(requests) and requests[0].get("action") == "Start"

    def _stop_expected(self, vm: dict, vmi: dict | None, requests: list) -> bool:
        if run_strategy(vm) == "Halted":
            return True
        first = requests[0] if requests else {}
        return first.get("action") == "Stop" and vmi is not None and first.get("uid") == vmi["metadata"]["uid"]

    async def _apply_run_strategy(self, vm: dict, vmi: dict | None, status: dict, requests: list) -> dict | None:
        """Act on the run strategy and requests; returns the VMI as it is afterwards."""
        strategy = run_strategy(vm)
        if vmi is not None and vmi["metadata"].get("deletionTimestamp"):
            return vmi  # wait for the old VMI to go
        if vmi is not None and self._stop_expected(vm, vmi, requests):
            return await self._delete_vmi(vm, vmi)
        if vmi is not None and _phase(vmi) == "Running":
            status.pop("startFailure", None)
        restart = (strategy == "Always" and _phase(vmi) in FINAL_PHASES) or (strategy == "RerunOnFailure" and _phase(vmi) == "Failed")
        if vmi is not None and restart:
            if _phase(vmi) == "Failed":
                self._record_failure(vm, vmi, status)
            return await self._delete_vmi(vm, vmi)
        if vmi is None and self._start_expected(vm, status, requests) and self._can_create(vm):
            return await self._create_vmi(vm, status)
        return vmi

    def _can_create(self, vm: dict) -> bool:
        """Whether every DataVolume the VM uses is ready (a Failed or in-progress one holds the start)."""
        volumes = _template_spec(vm).get("volumes")
        return self._volumes_ready(vm["metadata"]["namespace"], volumes)

    async def _create_vmi(self, vm: dict, status: dict) -> dict:
        vmi = await self.client.create(self.client.kind(*VMIS), vm["metadata"]["namespace"], make_vmi(vm))
        status["observedGeneration"] = status["desiredGeneration"] = vm["metadata"].get("generation", 1)
        await self.client.record_event(vm, "SuccessfulCreate",
            f"Started the virtual machine by creating the new virtual machine instance {vmi['metadata']['name']}",
            component=COMPONENT,
        )
        return vmi

    async def _delete_vmi(self, vm: dict, vmi: dict) -> dict | None:
        meta = vmi["metadata"]
        if _phase(vmi) in FINAL_PHASES and FINALIZER in (meta.get("finalizers") or []):
            await self._drop_finalizer(vmi)  # nothing runs any more: let it go at once
        try:
            await self.client.delete(self.client.kind(*VMIS), meta["namespace"], meta["name"])
        except ApiError as e:
            if e.code != 404:
                raise
        await self.client.record_event(vm, "SuccessfulDelete",
            f"Stopped the virtual machine by deleting the virtual machine instance {meta['uid']}",
            component=COMPONENT,
        )
        return get_or_none(self.client, VMIS, meta["namespace"], meta["name"])

    def _record_failure(self, vm: dict, vmi: dict, status: dict) -> None:
        failure = status.get("startFailure") or {}
        if failure.get("lastFailedVMIUID") == vmi["metadata"]["uid"]:
            return
        count = int(failure.get("consecutiveFailCount", 0)) + 1
        delay = min(self.crashloop_max_seconds, self.crashloop_seconds * 2 ** (count - 1))
        now = self.client.clock()
        # The wire carries whole seconds: round the retry time up so the back-off is never cut short.
        retry = (now + datetime.timedelta(seconds=delay + 1)).replace(microsecond=0)
        status["startFailure"] = {
            "consecutiveFailCount": count,
            "lastFailedVMIUID": vmi["metadata"]["uid"],
            "retryAfterTimestamp": rfc3339(retry),
        }
        wake = (retry - now).total_seconds() + 0.05
        self._timers = [t for t in self._timers if not t.cancelled()]
        self._timers.append(asyncio.get_running_loop().call_later(wake, self._requeue, vm))

    def _requeue(self, vm: dict) -> None:
        self._queue.put_nowait((self.client.kind(*VMS), vm, False))

    # -- status --------------------------------------------------------------

    def _fill_status(self, vm: dict, vmi: dict | None, status: dict, requests: list) -> None:
        now = rfc3339(self.client.clock())
        status["created"] = vmi is not None
        status["ready"] = vmi is not None and has_condition(vmi, "Ready", "True") and not vmi["metadata"].get("deletionTimestamp")
        status["runStrategy"] = run_strategy(vm)
        conditions = status.setdefault("conditions", [])
        vmi_conditions = ((vmi or {}).get("status") or {}).get("conditions") or []
        ready = find_condition(vmi_conditions, "Ready")
        if vmi is None:
            set_condition(conditions, "Ready", "False", "VMINotExists", "VMI does not exist", now=now)
        elif ready is None:
            set_condition(conditions, "Ready", "False", "VMIConditionMissing", "VMI is missing the Ready condition", now=now)
        else:
            remove_condition(conditions, "Ready")
            conditions.append(copy.deepcopy(ready))
        mirrored = {c["type"] for c in vmi_conditions}
        conditions[:] = [c for c in conditions if c["type"] in ("Ready", "Failure") or c["type"] in mirrored]
        for cond in vmi_conditions:
            if cond["type"] != "Ready":
                remove_condition(conditions, cond["type"])
                conditions.append(copy.deepcopy(cond))
        status["printableStatus"] = self._printable(vm, vmi, status, requests)

    def _printable(self, vm: dict, vmi: dict | None, status: dict, requests: list) -> str:
        """KubeVirt's setPrintableStatus: the first status whose test holds."""
        namespace = vm["metadata"]["namespace"]
        volumes = _template_spec(vm).get("volumes")
        data_volumes = self._data_volumes(namespace, volumes)
        final = vmi is not None and _phase(vmi) in FINAL_PHASES
        start_expected = self._start_expected(vm, status, requests)
        checks = (
            ("Terminating", lambda: bool(vm["metadata"].get("deletionTimestamp"))),
            ("Stopping", lambda: vmi is not None and not final and (
                bool(vmi["metadata"].get("deletionTimestamp")) or self._stop_expected(vm, vmi, requests))),
            ("Running", lambda: _phase(vmi) == "Running"),
            ("ErrorPvcNotFound", lambda: vmi is not None and has_condition(vmi, "Synchronized", "False", "FailedPvcNotFound")),
            ("DataVolumeError", lambda: any(_phase(dv) == "Failed" for dv in data_volumes)),
            ("ErrorUnschedulable", lambda: vmi is not None and has_condition(vmi, "PodScheduled", "False", "Unschedulable")),
            ("Provisioning", lambda: any(_phase(dv) not in DV_READY_PHASES + ("Failed",) for dv in data_volumes)),
            ("WaitingForVolumeBinding", lambda: (start_expected or (vmi is not None and not final))
                and self._has_unbound_claim(namespace, volumes)),
            ("Starting", lambda: (vmi is None and start_expected) or (vmi is not None and _phase(vmi) in STARTING_PHASES)),
            ("CrashLoopBackOff", lambda: (vmi is None or final) and not start_expected
                and int((status.get("startFailure") or {}).get("consecutiveFailCount", 0)) > 0
                and run_strategy(vm) in ("Always", "RerunOnFailure", "Once")),
            ("Stopped", lambda: final or (vmi is None and not start_expected)),
        )
        for printable, test in checks:
            if test():
                return printable
        return "Unknown"

    def _has_unbound_claim(self, namespace: str, volumes: list | None) -> bool:
        for claim in claim_names(volumes):
            pvc = get_or_none(self.client, PVCS, namespace, claim)
            if pvc is not None and _phase(pvc) != "Bound":
                return True
        return False
