"""Pure helpers over Kubernetes objects as JSON dicts: conditions, nodes, claims, deletion, JSON Pointers.

No I/O: these read the camelCase dicts the API server sends (or the watch
caches hold). Pods and VirtualMachineInstances both count as compute that
may hold a PersistentVolumeClaim.

A virt-launcher Pod stands for its VMI (:func:`counted_once`): on a real
cluster KubeVirt's virt-controller copies the VMI's labels and annotations
onto it, mounts the VMI's claims in it (a DataVolume as the PVC of the same
name) and gives its ``compute`` container the VMI's resources, GPUs
included, so any reader of Pods by our labels sees each VM workspace twice.
"""

from __future__ import annotations

from workspacespawner.core import names


def pointer(*parts: str) -> str:
    """A JSON Pointer (RFC 6901) to ``parts``: ``pointer("metadata", "labels", "a/b")`` is ``/metadata/labels/a~1b``."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def owner_tests(user_name: str) -> list[dict]:
    """JSON Patch ``test`` operations that hold only on an object that is ours and ``user_name``'s.

    The managed-by label and the owner label (sha256 of the exact name) always; the
    exact-name annotation too when the name is ASCII. kube-apiserver's ``test``
    compares the raw JSON of the two values, and kubernetes_asyncio sends
    non-ASCII characters as ``\\uXXXX`` escapes while the server stores them as
    UTF-8, so a ``test`` of a non-ASCII name never holds on a real cluster; the
    owner label already pins that exact name.
    """
    tests = [
        {"op": "test", "path": pointer("metadata", "labels", names.MANAGED_BY_LABEL), "value": names.MANAGED_BY},
        {"op": "test", "path": pointer("metadata", "labels", names.OWNER_LABEL), "value": names.owner_id(user_name)},
    ]
    if user_name.isascii():
        tests.append({"op": "test", "path": pointer("metadata", "annotations", names.OWNER_ANNOTATION), "value": user_name})
    return tests


def uses_claim(obj: dict, claim: str) -> bool:
    """Whether a Pod's or VMI's volumes use PVC ``claim`` (directly, or as a DataVolume of that name)."""
    spec = obj.get("spec") or {}
    for volume in spec.get("volumes") or []:
        if (volume.get("persistentVolumeClaim") or {}).get("claimName") == claim:
            return True
        if (volume.get("dataVolume") or {}).get("name") == claim:
            return True
    return False


#: Pod and VMI phases after which nothing holds a volume any more.
FINISHED_PHASES = ("Succeeded", "Failed")


def is_virt_launcher(obj: dict) -> bool:
    """Whether ``obj`` is a KubeVirt virt-launcher Pod: a Pod (``kind`` unset counts as one) labelled ``kubevirt.io=virt-launcher``."""
    if obj.get("kind") not in (None, "Pod"):
        return False
    return ((obj.get("metadata") or {}).get("labels") or {}).get(names.VIRT_LAUNCHER_LABEL) == names.VIRT_LAUNCHER


def launched_vmi(obj: dict) -> str | None:
    """The uid of the VMI a virt-launcher Pod runs (its ``kubevirt.io/created-by`` label); None for anything else."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(names.CREATED_BY_LABEL) if is_virt_launcher(obj) else None


def counted_once(compute: list[dict]) -> list[dict]:
    """``compute`` (Pods and VMIs, ``kind`` set on VMIs) without the virt-launcher Pods whose VMI is among them, order kept.

    The one rule every reader of compute follows: a VMI stands for its
    virt-launcher Pod (joined by the Pod's ``kubevirt.io/created-by`` label,
    the VMI's uid, never by name), so a VM workspace is one workspace, its
    GPUs, CPU and disks held once. A launcher Pod whose VMI is not there
    (the VMI already gone while the Pod still terminates) stands for
    itself: it still holds its node's devices and its claims.
    """
    vmis = {(obj.get("metadata") or {}).get("uid") for obj in compute if obj.get("kind") == "VirtualMachineInstance"}
    vmis.discard(None)
    return [obj for obj in compute if launched_vmi(obj) not in vmis]


def holders(compute: list[dict], claim: str) -> list[dict]:
    """The Pods and VMIs of ``compute`` that use PVC ``claim`` and have not finished (terminating ones included).

    A VM's disks are held by its VMI, once (:func:`counted_once`).
    """
    return [obj for obj in counted_once(compute)
            if uses_claim(obj, claim) and ((obj.get("status") or {}).get("phase") not in FINISHED_PHASES)]


def node_of(obj: dict | None) -> str | None:
    """The node a Pod (``spec.nodeName``) or VMI (``status.nodeName``) is placed on, or None."""
    if obj is None:
        return None
    return (obj.get("spec") or {}).get("nodeName") or (obj.get("status") or {}).get("nodeName")


def terminating(obj: dict | None) -> bool:
    """Whether the object is being deleted (``metadata.deletionTimestamp`` set)."""
    return bool(obj and (obj.get("metadata") or {}).get("deletionTimestamp"))


def ready_condition(obj: dict | None) -> bool | None:
    """The ``Ready`` condition of a Node, Pod or VMI as True/False; None when it has none."""
    cond = condition(obj, "Ready")
    return None if cond is None else cond.get("status") == "True"


def condition(obj: dict | None, ctype: str) -> dict | None:
    """The ``status.conditions`` entry of type ``ctype`` of any object (Pod, Node, VMI, DataVolume...), or None."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None
