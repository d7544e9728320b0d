"""What a VM workspace's objects say, in plain words: pure functions over VM, VMI and DataVolume dicts.

The spawner feeds them the objects as the shared watch caches hold them
(:mod:`.reflectors`) and shows or acts on what comes back. The fields read
are KubeVirt's and CDI's:

* ``VirtualMachine.status``: ``printableStatus`` (``Stopped``,
  ``Provisioning``, ``WaitingForVolumeBinding``, ``Starting``, ``Running``,
  ``Stopping``, ``Terminating``, ``CrashLoopBackOff``, ``ErrorUnschedulable``,
  ``ErrorPvcNotFound``, ``DataVolumeError``), ``startFailure``
  (``consecutiveFailCount``); ``spec.runStrategy``.
* ``VirtualMachineInstance.status``: ``phase`` (``Pending``, ``Scheduling``,
  ``Scheduled``, ``Running``, ``Succeeded``, ``Failed``), ``reason``,
  ``nodeName``, ``interfaces[].ipAddress``, conditions ``Ready``,
  ``PodScheduled`` (False/``Unschedulable``) and ``Synchronized``
  (False/``FailedPvcNotFound``); ``metadata.deletionTimestamp``.
* ``DataVolume.status``: ``phase`` (``Pending``, ``CloneScheduled``,
  ``CloneInProgress``, ``Succeeded``, ``Failed``, ``WaitForFirstConsumer``,
  ...), ``progress`` (``"45.50%"``), condition ``Running`` (its message on
  failure).

Failure reason words: ``root-disk`` (the clone failed), ``golden-image`` (its source is not there),
``clone-refused`` (CDI will not clone it as asked), ``disk-missing``
(a PVC the VM uses does not exist), ``unschedulable`` (no node can run it),
``crash-loop`` (the guest failed to boot).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workspacespawner.core.milestones import Milestone
from workspacespawner.k8s.events import no_node_message
from workspacespawner.k8s.objects import condition
from workspacespawner.lifecycle.disks import requested_storage
from workspacespawner.lifecycle.phases import Observed, Phase, Status, degraded

#: VMI phases after which nothing runs any more.
FINAL_PHASES = ("Succeeded", "Failed")
#: DataVolume phases in which the VM may start (the last two: CDI waits for the VM to be scheduled).
DV_USABLE_PHASES = ("Succeeded", "WaitForFirstConsumer", "PendingPopulation")
#: What the spawn page says once the VM is asked to start, until the VMI tells more.
STARTING_MESSAGE = "Starting your virtual machine"
#: VM printableStatus values that are failures by themselves.
VM_ERROR_STATUSES = ("ErrorUnschedulable", "ErrorPvcNotFound", "DataVolumeError", "CrashLoopBackOff")

_PERCENT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*%\s*")


@dataclass(frozen=True)
class Failure:
    """A start that will not succeed by waiting: a fixed ``reason`` word and a ``message`` for the user."""

    reason: str
    message: str


@dataclass(frozen=True)
class VMStatus:
    """Where a VM workspace stands.

    ``state``: ``Absent`` (no VM), ``Stopped``, ``Provisioning`` (the root
    disk is being cloned), ``Starting``, ``Running``, ``Stopping``.
    ``message``: one line for the spawn page. ``progress``: how far
    (0-100) towards ``milestone``: the clone's percentage while
    provisioning, a boot's stage (:mod:`.guestconsole`), else None. ``failure``: set when
    the start cannot succeed. ``ready``: the VMI is Running and Ready (its
    server accepts connections). ``ip``/``node``: the guest's pod-network
    address and node, once known. ``milestone``: the start's milestone this
    status reaches (``progress`` percent of the way to it: a clone's, a
    boot's), if any.
    """

    state: str
    message: str
    progress: float | None = None
    failure: Failure | None = None
    ready: bool = False
    ip: str | None = None
    node: str | None = None
    milestone: Milestone | None = None


def _status(obj: dict | None) -> dict:
    return (obj or {}).get("status") or {}


def _condition_is(obj: dict | None, ctype: str, status: str, reason: str | None = None) -> dict | None:
    cond = condition(obj, ctype)
    if cond is None or cond.get("status") != status or (reason is not None and cond.get("reason") != reason):
        return None
    return cond


def clone_progress(dv: dict | None) -> float | None:
    """The DataVolume's ``status.progress`` as a number (``"45.50%"`` is 45.5); None when unknown (``N/A``)."""
    match = _PERCENT.fullmatch(str(_status(dv).get("progress") or ""))
    return float(match.group(1)) if match else None


def datavolume_usable(dv: dict | None) -> bool:
    """Whether the VM may start on this DataVolume (cloned, or waiting for its first consumer)."""
    return _status(dv).get("phase") in DV_USABLE_PHASES


def datavolume_failure(dv: dict | None) -> Failure | None:
    """A :class:`Failure` (``root-disk``) when the DataVolume's phase is ``Failed``."""
    if _status(dv).get("phase") != "Failed":
        return None
    running = condition(dv, "Running") or {}
    detail = _sentence(running.get("message") or running.get("reason") or "the copy failed")
    return Failure(
        "root-disk",
        f"Your root disk could not be created from the system image: {detail}. "
        "Nothing was deleted; please ask an administrator.",
    )


#: CDI's reason (condition ``Bound``, a Warning Event) for a clone whose source, the DataSource's PVC or snapshot, is not there.
CLONE_WITHOUT_SOURCE = "CloneWithoutSource"


def golden_image_not_ready(dv: dict | None) -> Failure | None:
    """A :class:`Failure` (``golden-image``) when CDI waits on the golden image a DataVolume clones from (CDI#2571).

    CDI leaves such a DataVolume ``Pending`` with condition ``Bound``
    reason ``CloneWithoutSource``, and clones as soon as the image is there;
    the start fails at once with the image (the ``spec.sourceRef``
    DataSource) and CDI's reason named, and keeps the DataVolume.
    """
    waiting = _clone_not_started(dv, CLONE_WITHOUT_SOURCE)
    if waiting is None:
        return None
    image, message = waiting
    return Failure(
        "golden-image",
        f"The system image {image} is not ready ({CLONE_WITHOUT_SOURCE}: {_sentence(message or 'no source')}), "
        "so your root disk cannot be made yet. Your disks are kept; please ask an administrator to fix the image, "
        "then start again.",
    )


#: CDI's reason (condition ``Bound``, a Warning Event) for a clone it will not make as asked: above all a root disk
#: smaller than the golden image's PVC (its message: "... target resources requests storage size is smaller than the
#: source 2147483648 < 4294967296"), or content types that differ.
CLONE_VALIDATION_FAILED = "CloneValidationFailed"


def clone_refused(dv: dict | None) -> Failure | None:
    """A :class:`Failure` (``clone-refused``) when CDI refuses to clone the golden image as the profile asks.

    CDI leaves such a DataVolume ``Pending`` with condition ``Bound``
    reason ``CloneValidationFailed`` for ever; nothing was cloned. A root
    disk smaller than its image is an administrator's setting
    (``vm_root_disk_size``), which the sentence names.
    """
    refused = _clone_not_started(dv, CLONE_VALIDATION_FAILED)
    if refused is None:
        return None
    image, message = refused
    return Failure(
        "clone-refused",
        f"Your root disk cannot be cloned from the system image {image}: CDI refused the clone "
        f"({CLONE_VALIDATION_FAILED}: {_sentence(message or 'no reason given')}). "
        f"An administrator must make this profile's vm_root_disk_size (now {requested_storage(dv) or 'unset'}) "
        "at least the image's size. Nothing was cloned and your disks are kept.",
    )


def _clone_not_started(dv: dict | None, reason: str) -> tuple[str, str] | None:
    """``(the golden image, CDI's message)`` when CDI keeps DataVolume ``dv`` from cloning for ``reason``: phase
    ``Pending`` (or none yet), condition ``Bound`` with that reason; else None. The image is the ``spec.sourceRef``
    DataSource, as ``namespace/name``."""
    if dv is None or _status(dv).get("phase") not in (None, "", "Pending"):
        return None
    bound = condition(dv, "Bound") or {}
    if bound.get("reason") != reason:
        return None
    ref = (dv.get("spec") or {}).get("sourceRef") or {}
    namespace = ref.get("namespace") or (dv.get("metadata") or {}).get("namespace", "")
    image = f"{namespace}/{ref['name']}" if ref.get("name") else "of this profile"
    return image, bound.get("message") or ""


def vmi_terminating(vmi: dict | None) -> bool:
    """Whether the VMI is being deleted."""
    return bool(vmi and (vmi.get("metadata") or {}).get("deletionTimestamp"))


def vmi_ready(vmi: dict | None) -> bool:
    """Whether the VMI's guest is up and its server answers (condition ``Ready`` True)."""
    return vmi is not None and _condition_is(vmi, "Ready", "True") is not None


def vmi_active(vmi: dict | None) -> bool:
    """Whether the VMI exists and may still run a guest (not Succeeded or Failed)."""
    return vmi is not None and _status(vmi).get("phase") not in FINAL_PHASES


def start_failures(vm: dict | None) -> int:
    """How many boots in a row failed (``status.startFailure.consecutiveFailCount``)."""
    return int((_status(vm).get("startFailure") or {}).get("consecutiveFailCount") or 0)


def vmi_address(vmi: dict | None) -> str | None:
    """The guest's pod-network address (first interface with one), or None."""
    for interface in _status(vmi).get("interfaces") or []:
        if interface.get("ipAddress"):
            return interface["ipAddress"]
    return None


def _sentence(text: str) -> str:
    """``text`` without its final full stop, to be followed by one of ours."""
    return text.strip().rstrip(".")


def _boot_failure(vm: dict | None) -> Failure:
    count = start_failures(vm)
    return Failure("crash-loop", f"Your virtual machine failed to boot ({count} failed {'boot' if count == 1 else 'boots'} in a row).")


def _vmi_failure(vmi: dict | None, scale_up: bool, launcher: dict | None = None) -> Failure | None:
    """Failures the VMI itself reports: a missing PVC, no node, a guest that did not boot. ``launcher``: the VMI's
    virt-launcher Pod, whose own ``PodScheduled=False`` (kube-scheduler's, at once) counts before virt-controller
    copies it onto the VMI (KubeVirt v1.4 may take its retry backoff, minutes, to do so)."""
    missing = _condition_is(vmi, "Synchronized", "False", "FailedPvcNotFound")
    if missing:
        return Failure(
            "disk-missing",
            f"A disk of your workspace is missing: {_sentence(missing.get('message') or 'a PVC was not found')}. "
            "Nothing was deleted; please ask an administrator.",
        )
    unschedulable = (_condition_is(vmi, "PodScheduled", "False", "Unschedulable")
                     or (vmi is not None and _condition_is(launcher, "PodScheduled", "False", "Unschedulable")))
    if unschedulable and not scale_up:
        return Failure("unschedulable", no_node_message(unschedulable.get("message"), "workspace"))
    if _status(vmi).get("phase") == "Failed":
        why = _status(vmi).get("reason") or "the guest stopped during boot"
        return Failure("crash-loop", f"Your virtual machine failed to boot ({_sentence(why)}).")
    return None


def _vm_error(vm: dict | None, vmi: dict | None, dv: dict | None) -> Failure | None:
    """A failure read from the VM's printableStatus alone (for callers without a start baseline)."""
    printable = _status(vm).get("printableStatus")
    if printable not in VM_ERROR_STATUSES:
        return None
    if printable == "DataVolumeError":
        return datavolume_failure(dv) or Failure("root-disk", "Your root disk could not be created. Please ask an administrator.")
    if printable == "ErrorPvcNotFound":
        return Failure("disk-missing", "A disk of your workspace is missing. Nothing was deleted; please ask an administrator.")
    if printable == "ErrorUnschedulable":
        return Failure("unschedulable", no_node_message(None, "workspace"))
    return _boot_failure(vm)


def _running(vmi: dict) -> VMStatus:
    node, ip = _status(vmi).get("nodeName"), vmi_address(vmi)
    ready = _condition_is(vmi, "Ready", "True") is not None
    if ready:
        return VMStatus("Running", f"Your virtual machine is running on {node}", ready=True, ip=ip, node=node,
                        milestone=Milestone.ANSWERING)
    return VMStatus("Starting", f"Your virtual machine is booting on {node}; waiting for its server to answer", ip=ip,
                    node=node, milestone=Milestone.STARTED)


def _with_vmi(vmi: dict, scale_up: bool) -> VMStatus:
    if vmi_terminating(vmi):
        return VMStatus("Stopping", "Your virtual machine is shutting down", node=_status(vmi).get("nodeName"))
    phase = _status(vmi).get("phase") or "Pending"
    node = _status(vmi).get("nodeName")
    if phase == "Running":
        return _running(vmi)
    if phase in FINAL_PHASES:
        return VMStatus("Stopped", f"Your virtual machine has {'shut down' if phase == 'Succeeded' else 'failed'}", node=node)
    if phase == "Scheduled":
        return VMStatus("Starting", f"Booting your virtual machine on {node}", node=node, milestone=Milestone.NODE_FOUND)
    unschedulable = _condition_is(vmi, "PodScheduled", "False", "Unschedulable")
    if unschedulable and scale_up:
        return VMStatus("Starting", f"The cluster is adding a node for your workspace: {unschedulable.get('message', '')}")
    if phase == "Scheduling":
        return VMStatus("Starting", "Looking for a node with free resources for your virtual machine")
    return VMStatus("Starting", "Preparing your virtual machine's disks")


def _without_vmi(vm: dict | None, dv: dict | None) -> VMStatus:
    if vm is None:
        return VMStatus("Absent", "Your virtual machine does not exist yet")
    printable = _status(vm).get("printableStatus")
    if dv is not None and not datavolume_usable(dv):
        percent = clone_progress(dv)
        phase = _status(dv).get("phase") or "Pending"
        if percent is None:
            return VMStatus("Provisioning", f"Preparing your root disk ({phase})")
        return VMStatus("Provisioning", f"Copying the system image to your root disk: {percent:.0f}%", progress=percent,
                        milestone=Milestone.ROOT_DISK_READY)
    if printable == "WaitingForVolumeBinding":
        return VMStatus("Starting", "Waiting for your disks to be attached")
    if printable == "CrashLoopBackOff":
        return VMStatus("Starting", "Waiting to retry after a failed boot")
    if printable in ("Starting", "Provisioning") or (vm.get("spec") or {}).get("runStrategy") not in (None, "Halted", "Manual"):
        return VMStatus("Starting", STARTING_MESSAGE)
    return VMStatus("Stopped", "Your virtual machine is stopped")


def interpret(
    vm: dict | None,
    vmi: dict | None,
    dv: dict | None,
    *,
    failures_before: int | None = None,
    scale_up: bool = False,
    launcher: dict | None = None,
) -> VMStatus:
    """The :class:`VMStatus` of a workspace from its VM, VMI and root DataVolume (each may be None).

    Failures come first: a Failed DataVolume, then what the VMI reports
    (missing PVC, unschedulable unless ``scale_up``, boot failure). During a
    start pass ``failures_before``, the VM's ``startFailure`` count read just
    before the start: a boot failure is then a count above it, and the VM's
    printableStatus (which lags behind its VMI, and may still describe the
    previous start) is not read for failures, nor is its ``Stopped``: it
    reads ``Starting``. Without it, the error printableStatuses count as
    failures too. ``launcher``: the VMI's virt-launcher Pod, when cached (see :func:`_vmi_failure`).
    """
    failure = datavolume_failure(dv) or _vmi_failure(vmi, scale_up, launcher)
    if failure is None and failures_before is None:
        failure = _vm_error(vm, vmi, dv)
    elif failure is None and start_failures(vm) > failures_before:
        failure = _boot_failure(vm)
    current = _with_vmi(vmi, scale_up) if vmi is not None else _without_vmi(vm, dv)
    if failures_before is not None and current.state == "Stopped" and vmi is None:
        current = VMStatus("Starting", STARTING_MESSAGE)  # the VM's status has not caught up yet
    if failure is not None:
        return VMStatus(current.state, failure.message, current.progress, failure, current.ready, current.ip, current.node)
    return current


def exit_status(vm: dict | None, vmi: dict | None) -> int | None:
    """What ``Spawner.poll()`` answers: None while the guest runs or KubeVirt is starting it, else an exit code.

    0 for a VM that is stopped, shutting down or gone; 1 for a guest that
    failed or a VM in a crash loop. A guest that ended while its VM's
    runStrategy keeps it running (``Always``; ``RerunOnFailure`` after a
    failure) is None too: KubeVirt boots the VM again from the same disks,
    as the kubelet restarts a workspace Pod's container, and the hub's
    route (the VM's Service) reaches the new guest; only a crash loop ends
    the server. Telling otherwise would depend on whether the hub's poll
    came in the second between the old guest's end and the new one.
    """
    if vm is not None and _kept_running(vm, vmi):
        return 1 if _status(vm).get("printableStatus") == "CrashLoopBackOff" else None
    if vmi is not None:
        if vmi_terminating(vmi) or _status(vmi).get("phase") == "Succeeded":
            return 0
        return 1 if _status(vmi).get("phase") == "Failed" else None
    if vm is None:
        return 0
    printable = _status(vm).get("printableStatus")
    if printable == "CrashLoopBackOff":
        return 1
    wants_running = (vm.get("spec") or {}).get("runStrategy") in ("Always", "RerunOnFailure", "Once")
    if wants_running and printable in ("Starting", "Provisioning", "WaitingForVolumeBinding"):
        return None
    return 0


def _kept_running(vm: dict, vmi: dict | None) -> bool:
    """Whether KubeVirt starts ``vm`` again when its guest (``vmi``, if any) has ended: runStrategy ``Always``, or
    ``RerunOnFailure`` unless the guest shut down by itself."""
    strategy = (vm.get("spec") or {}).get("runStrategy")
    return strategy == "Always" or (strategy == "RerunOnFailure" and _status(vmi or {}).get("phase") != "Succeeded")


#: What :func:`interpret`'s state means as a lifecycle phase (Stopped and Absent: no compute).
_PHASE_OF_STATE = {
    "Running": Phase.RUNNING,
    "Starting": Phase.STARTING,
    "Stopping": Phase.STOPPING,
    "Provisioning": Phase.PROVISIONING_DISK,
}


class VMKindStatus:
    """:class:`~workspacespawner.lifecycle.phases.KindStatus` of a VM workspace: its VM and VMI, and its root DataVolume."""

    def compute_status(self, observed: Observed) -> Status | None:
        if observed.vm is None and observed.vmi is None:
            return None
        current = interpret(observed.vm, observed.vmi, observed.root)
        if current.failure is not None and current.failure.reason in ("root-disk", "disk-missing"):
            return degraded(current.failure.reason, current.failure.message)
        phase = _PHASE_OF_STATE.get(current.state)
        return None if phase is None else Status(phase)

    def root_disk_status(self, observed: Observed) -> Status | None:
        failure = datavolume_failure(observed.root)
        if failure is not None:
            return degraded(failure.reason, failure.message)
        if observed.root is not None and not datavolume_usable(observed.root):
            return Status(Phase.PROVISIONING_DISK)
        return None
