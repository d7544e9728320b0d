"""KubeVirt's VirtualMachine subresources: the ``start`` and ``stop`` calls ``virtctl start/stop`` make.

``PUT /apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}/start|stop``
(``v1Start``/``v1Stop`` in KubeVirt's OpenAPI spec; bodies ``v1.StartOptions``
and ``v1.StopOptions``), through kubernetes_asyncio's ``ApiClient`` (the
generated clients have no method for them). Transient errors are retried
(:func:`workspacespawner.k8s.owned.call`).
"""

from __future__ import annotations

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.k8s.owned import call as _call

#: KubeVirt's VM subresource path, ``{action}`` appended: ``start`` or ``stop``.
VM_ACTION_PATH = "/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}/"
#: The ``Accept`` header of the calls, as client-go (and so virtctl) sends it: virt-api's start and stop routes
#: declare no response type, and its go-restful answers 406 Not Acceptable to ``application/json`` alone.
ACCEPT = "application/json, */*"


async def _vm_action(api_client, namespace: str, name: str, action: str, body: dict) -> None:
    await _call(
        api_client.call_api,
        VM_ACTION_PATH + action,
        "PUT",
        path_params={"namespace": namespace, "name": name},
        header_params={"Accept": ACCEPT, "Content-Type": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
        response_types_map={},
        _return_http_data_only=True,
    )


async def start_vm(api_client, namespace: str, name: str) -> None:
    """``PUT .../virtualmachines/{name}/start`` with an empty ``v1.StartOptions``; a Halted VM becomes ``Always``."""
    await _vm_action(api_client, namespace, name, "start", {})


async def stop_vm(api_client, namespace: str, name: str, *, grace_period: int | None = None) -> bool:
    """``PUT .../virtualmachines/{name}/stop`` (``v1.StopOptions``); False when there was nothing to stop.

    ``grace_period`` (seconds) shortens the guest's shutdown (0: at once).
    KubeVirt's 409 ("VM is not running", or a Halted VM without a shorter
    grace period) and 404 (no VM) mean there is nothing to stop.
    """
    body = {} if grace_period is None else {"gracePeriod": int(grace_period)}
    try:
        await _vm_action(api_client, namespace, name, "stop", body)
    except ApiException as e:
        if e.status in (404, 409):
            return False
        raise
    return True
