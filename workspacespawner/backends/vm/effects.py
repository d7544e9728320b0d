"""The objects of a VM workspace made to match its manifests: root DataVolume, VirtualMachine, cloud-init Secret, Service.

Each ``ensure_*`` reads first, creates on 404, and refuses an object of
that name that is not ours or is another user's (never adopted). None of
them ever deletes anything; :func:`blank_cloudinit_token` takes the API
token out of a stopped VM's Secret. API followed: ``cdi.kubevirt.io/v1beta1``
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
from workspacespawner.k8s.owned import call as _call
from workspacespawner.k8s.owned import core_accessors, ensure_owned, refuse_foreign

log = logging.getLogger("workspacespawner")

DATA_VOLUMES = DATA_VOLUME.gvp
VIRTUAL_MACHINES = VIRTUAL_MACHINE.gvp


async def _ensure_custom(custom_api, key: tuple[str, str, str], manifest: dict, user_name: str, what: str, reason: str):
    group, version, plural = key
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    return await ensure_owned(
        read=lambda: _call(custom_api.get_namespaced_custom_object, group, version, namespace, plural, name),
        create=lambda: _call(custom_api.create_namespaced_custom_object, group, version, namespace, plural, manifest),
        user_name=user_name,
        what=what,
        reason=reason,
    )


async def ensure_root_disk(custom_api, manifest: dict, user_name: str) -> tuple[dict, bool]:
    """Create the root DataVolume of ``manifest``, or reuse it as it is; return ``(datavolume, created)``.

    An existing DataVolume is never changed (its size, source and data are
    the user's); one that is not ``user_name``'s is refused (``root-disk``).
    """
    dv, created = await _ensure_custom(custom_api, DATA_VOLUMES, manifest, user_name, "root disk", "root-disk")
    if created:
        log.info("Created root disk %s/%s for %s", manifest["metadata"]["namespace"], manifest["metadata"]["name"], user_name)
    return dv, created


async def ensure_vm(custom_api, manifest: dict, user_name: str) -> tuple[dict, bool]:
    """Create the VirtualMachine of ``manifest``, or bring an existing one to it; return ``(vm, changed)``.

    An existing VM whose spec differs from the profile (GPU count, CPU,
    memory, disks, run strategy, ...) gets the manifest's spec, labels and
    annotations; call this only while the VM has no VMI (after
    :meth:`VMWorkspace.fence`), so the new template applies at the next
    start. A VM that is not ``user_name``'s is refused (``vm``).
    """
    group, version, plural = VIRTUAL_MACHINES
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    vm, created = await _ensure_custom(custom_api, VIRTUAL_MACHINES, manifest, user_name, "virtual machine", "vm")
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


async def write_cloudinit_secret(core_api, manifest: dict, user_name: str) -> None:
    """Create the cloud-init Secret of ``manifest``, or replace the existing one (a fresh token every start).

    A Secret of that name that is not ``user_name``'s is refused
    (``cloud-init``). The contents are never logged.
    """
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    read, create = core_accessors(core_api, "secret", manifest)
    for _attempt in range(3):
        secret, created = await ensure_owned(read=read, create=create, user_name=user_name, what="cloud-init settings", reason="cloud-init")
        if created:
            return
        body = dict(manifest, metadata=dict(manifest["metadata"], resourceVersion=secret["metadata"]["resourceVersion"]))
        try:
            await _call(core_api.replace_namespaced_secret, name, namespace, body)
            return
        except ApiException as e:
            if e.status not in (404, 409):
                raise
    raise WorkspaceError("Your virtual machine's settings could not be written; please try again.", reason="cloud-init", status_code=500)


async def blank_cloudinit_token(core_api, namespace: str, name: str, user_name: str) -> bool:
    """Blank the API token in the stopped VM's cloud-init Secret (:func:`.manifests.without_api_token`); True if it was.

    A revoked token should not stay readable in the cluster until the next
    start. A missing Secret, one that is not ``user_name``'s or one with no
    token left is not changed. The write is a replace at the read
    ``resourceVersion`` (a start writing meanwhile wins). The contents are
    never logged.
    """
    read, _create = core_accessors(core_api, "secret", {"metadata": {"namespace": namespace, "name": name}})
    for _attempt in range(3):
        try:
            secret = await read()
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        if not names.owned_by(secret.get("metadata") or {}, user_name):
            log.warning("Not touching the cloud-init Secret %s/%s: it is not %s's", namespace, name, user_name)
            return False
        data = vmmanifests.without_api_token(secret)
        if data is None:
            return False
        try:
            await _call(core_api.replace_namespaced_secret, name, namespace, dict(secret, data=data))
        except ApiException as e:
            if e.status == 404:
                return False
            if e.status != 409:
                raise
            continue
        log.info("Blanked the API token in the cloud-init Secret %s/%s of %s", namespace, name, user_name)
        return True
    return False


async def ensure_service(core_api, manifest: dict, user_name: str) -> dict:
    """Create the VM's Service of ``manifest``, or reuse it; return it (with its ``spec.clusterIP``).

    A Service of that name that is not ``user_name``'s is refused (``service``).
    """
    read, create = core_accessors(core_api, "service", manifest)
    service, _created = await ensure_owned(read=read, create=create, user_name=user_name, what="server address", reason="service")
    return service
