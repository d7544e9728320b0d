"""Pure helpers over Kubernetes objects as JSON dicts: conditions, nodes, claims, deletion, JSON Pointers.

No I/O: these read the camelCase dicts the API server sends (or the watch
caches hold). Pods and VirtualMachineInstances both count as compute that
may hold a PersistentVolumeClaim.
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


def holders(compute: list[dict], claim: str) -> list[dict]:
    """The Pods and VMIs of ``compute`` that use PVC ``claim`` and have not finished (terminating ones included)."""
    return [obj for obj in compute if uses_claim(obj, claim) and ((obj.get("status") or {}).get("phase") not in FINISHED_PHASES)]


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
