"""The objects of a VM workspace made to match its manifests: root DataVolume, VirtualMachine, cloud-init Secret, Service.

Each ``ensure_*`` reads first, creates on 404, and refuses an object of
that name that is not ours or is another user's (never adopted). None of
them ever deletes anything. :func:`withdraw_unmade_root_disk` deletes only a
root DataVolume that never got a volume, so that the next start asks CDI
afresh. API followed: ``cdi.kubevirt.io/v1beta1``
DataVolumes and ``kubevirt.io/v1`` VirtualMachines through
``CustomObjectsApi`` (get, create, replace with ``resourceVersion``);
core/v1 Secrets and Services through ``CoreV1Api``.
"""

from __future__ import annotations

import logging

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.backends.vm import manifests as vmmanifests
from workspacespawner.core import names
from workspacespawner.core.errors import WorkspaceError
from workspacespawner.k8s.kinds import DATA_VOLUME, VIRTUAL_MACHINE
from workspacespawner.k8s.objects import condition, owner_tests
from workspacespawner.k8s.owned import call as _call
from workspacespawner.k8s.owned import core_accessors, ensure_owned, refuse_foreign

log = logging.getLogger("workspacespawner")

DATA_VOLUMES = DATA_VOLUME.gvp
VIRTUAL_MACHINES = VIRTUAL_MACHINE.gvp


#: What a watch cache says of an object: ``(known, object)``; ``known`` False when no cache can tell
#: (``Kube.peek``'s answer). ``(True, None)``: there is none of ours by that name.
UNKNOWN = (False, None)


async def _ensure_custom(custom_api, key: tuple[str, str, str], manifest: dict, user_name: str, what: str, reason: str,
                         cached: tuple[bool, dict | None] = UNKNOWN, created_as: dict | None = None):
    group, version, plural = key
    created_as = created_as or manifest
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    known, found = cached
    if known and found is not None and names.owned_by(found.get("metadata") or {}, user_name):
        return found, False  # as the watch holds it: no read
    return await ensure_owned(
        read=lambda: _call(custom_api.get_namespaced_custom_object, group, version, namespace, plural, name),
        create=lambda: _call(custom_api.create_namespaced_custom_object, group, version, namespace, plural, created_as),
        user_name=user_name,
        what=what,
        reason=reason,
        create_first=known and found is None,
    )


async def ensure_root_disk(custom_api, manifest: dict, user_name: str, *, cached=UNKNOWN) -> tuple[dict, bool]:
    """Create the root DataVolume of ``manifest``, or reuse it as it is; return ``(datavolume, created)``.

    An existing DataVolume is never changed (its size, source and data are
    the user's); one that is not ``user_name``'s is refused (``root-disk``).
    ``cached``: what the DataVolume watch holds (see :data:`UNKNOWN`): ours
    is used without a read; none of ours is created without one.
    """
    dv, created = await _ensure_custom(custom_api, DATA_VOLUMES, manifest, user_name, "root disk", "root-disk", cached)
    if created:
        log.info("Created root disk %s/%s for %s", manifest["metadata"]["namespace"], manifest["metadata"]["name"], user_name)
    return dv, created


async def withdraw_unmade_root_disk(custom_api, dv: dict | None) -> bool:
    """Delete root DataVolume ``dv`` that CDI cannot clone: it waits for a golden image that is not there
    (``CloneWithoutSource``) or CDI refused the clone as asked (``CloneValidationFailed``: a disk smaller than its
    image); condition ``Bound`` not True, phase ``Pending``: it holds no data. True when deleted.

    Why: CDI's webhook signs a clone token naming the source PVC the DataSource named when the DataVolume was
    created, and only then. Once an administrator points the DataSource at a good image, that DataVolume can never
    clone ("invalid token", on the real CDI), and every later start would wait for it until its timeout. The delete
    is guarded by the DataVolume's ``uid`` and ``resourceVersion`` as read (a disk that moved on meanwhile is kept);
    its PVC, CDI's and never bound, goes with it.
    """
    if not dv:
        return False
    group, version, plural = DATA_VOLUMES
    meta, status = dv.get("metadata") or {}, dv.get("status") or {}
    if status.get("phase") not in (None, "", "Pending") or (condition(dv, "Bound") or {}).get("status") == "True":
        return False
    body = {"preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}, "propagationPolicy": "Background"}
    try:
        await _call(custom_api.delete_namespaced_custom_object, group, version, meta["namespace"], plural, meta["name"],
                    body=body)
    except ApiException as e:
        if e.status in (404, 409):
            return False
        raise
    log.info("Withdrew root disk %s/%s: it never got a volume (CDI could not clone it: %s); the next start makes "
             "it afresh", meta["namespace"], meta["name"], (condition(dv, "Bound") or {}).get("reason") or "no reason")
    return True


async def ensure_vm(custom_api, manifest: dict, user_name: str, *, cached=UNKNOWN, created_as: dict | None = None) -> tuple[dict, bool]:
    """Create the VirtualMachine of ``manifest``, or bring an existing one to it; return ``(vm, changed)``.

    An existing VM whose spec differs from the profile (GPU count, CPU,
    memory, disks, run strategy, ...) gets the manifest's spec, labels and
    annotations; call this only while the VM has no VMI (after
    :meth:`VMWorkspace.fence`), so the new template applies at the next
    start. A VM that is not ``user_name``'s is refused (``vm``). ``cached``:
    as for :func:`ensure_root_disk` (a cached VM behind the API answers the
    replace 409, and is read again); ``created_as``: the manifest a new VM
    is created from (``manifest`` with what only a new one carries, its
    first lifecycle record), default ``manifest``.
    """
    group, version, plural = VIRTUAL_MACHINES
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    vm, created = await _ensure_custom(custom_api, VIRTUAL_MACHINES, manifest, user_name, "virtual machine", "vm", cached,
                                       created_as)
    if created:
        log.info("Created virtual machine %s/%s for %s", namespace, name, user_name)
        return vm, True
    for _attempt in range(3):
        body = vmmanifests.vm_update_body(vm, manifest)
        if body is None:
            return vm, False
        try:
            vm = await _call(custom_api.replace_namespaced_custom_object, group, version, namespace, plural, name, body)
        except ApiException as e:
            if e.status != 409:
                raise
            vm = await _call(custom_api.get_namespaced_custom_object, group, version, namespace, plural, name)
            refuse_foreign(vm, user_name, what="virtual machine", reason="vm")
            continue
        log.info("Updated virtual machine %s/%s of %s to its profile", namespace, name, user_name)
        return vm, True
    raise WorkspaceError("Your virtual machine could not be updated; please try again.", reason="vm", status_code=500)


async def _patch_owned_secret(core_api, namespace: str, name: str, user_name: str, operations: list[dict]) -> bool:
    """One JSON Patch of Secret ``name``, guarded by :func:`~workspacespawner.k8s.objects.owner_tests`: True when
    applied, False when there is none; a ``test`` that fails answers 422 (``ApiException``)."""
    try:
        await _call(core_api.patch_namespaced_secret, name, namespace, owner_tests(user_name) + operations)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


async def write_cloudinit_secret(core_api, manifest: dict, user_name: str) -> None:
    """Write the cloud-init data of ``manifest`` (a fresh token every start): one guarded patch of the Secret that is
    there, else its create.

    A Secret of that name that is not ``user_name``'s is refused
    (``cloud-init``). The contents are never logged.
    """
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    read, create = core_accessors(core_api, "secret", manifest)
    for _attempt in range(3):
        try:
            if await _patch_owned_secret(core_api, namespace, name, user_name, [{"op": "add", "path": "/data", "value": manifest["data"]}]):
                return
            await create()
            return
        except ApiException as e:
            if e.status == 422:  # the owner test failed: say whose it is (a read, only on this refusal)
                refuse_foreign(await read(), user_name, what="cloud-init settings", reason="cloud-init")
            if e.status not in (404, 409, 422):
                raise
    raise WorkspaceError("Your virtual machine's settings could not be written; please try again.", reason="cloud-init", status_code=500)


async def ensure_service(core_api, manifest: dict, user_name: str) -> dict:
    """Create the VM's Service of ``manifest``, or reuse it; return it (with its ``spec.clusterIP``).

    A Service of that name that is not ``user_name``'s is refused (``service``).
    """
    read, create = core_accessors(core_api, "service", manifest)
    service, _created = await ensure_owned(read=read, create=create, user_name=user_name, what="server address", reason="service")
    return service
