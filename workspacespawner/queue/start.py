"""A spawner's start in a GPU queue: the queue it waits in, and its wait (issue #41), for either kind of workspace.

A container's Pod and a VM's virt-launcher Pod wait alike: Kueue holds the
Pod at its gate, :func:`~.line.wait_in_line` follows it. The backends pass
how their Pod is found (``pod()``, from the shared Pod caches); the rest
comes from ``spawner``: a WorkspaceSpawner (its resolved ``profile``,
``services``, ``namespace``, ``api``, ``start_timeout``, ``user``, ``name``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

import aiohttp
from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.k8s.kinds import POD
from workspacespawner.queue import line
from workspacespawner.queue.config import GPUQueue

log = logging.getLogger("workspacespawner")


def queue_of(spawner, groups: Iterable[str]) -> GPUQueue | None:
    """The queue a start of ``spawner``'s resolved profile waits in for a user in JupyterHub ``groups``
    (:func:`~.line.queue_for`), or None."""
    profile = spawner.profile
    if profile is None:
        return None
    return line.queue_for(spawner.services.gpu_queues, groups, gpus=profile.gpus, resource=profile.gpu_resource,
                          kind=profile.workspace_kind)


async def wait(spawner, queue: GPUQueue, say: Callable[[str], None], *, pod: Callable[[], dict | None]) -> None:
    """:func:`~.line.wait_in_line` for ``spawner``'s start in ``queue``, its Pod as ``pod()`` gives it now."""
    s = spawner
    profile = s.profile
    product = s.services.economy.display_name(profile.gpu_product) if profile.gpu_product else None
    reader = s.services.line_reader(s.api.api_client)
    waiter = line.Waiter(
        queue=queue, namespace=s.namespace, need=line.need_words(profile.gpus, profile.gpu_resource, product),
        limit=line.wait_limit(queue, float(s.start_timeout)), pod=pod, say=say,
        admitted=lambda at: s.services.quota.admitted(s.user.name, s.name or "", at),
        workload=lambda uid: reader.workload(s.services.kube.custom_api, s.namespace, uid),
        gone=lambda seen: pod_gone(s.services.kube, seen, timeout=s.k8s_api_request_timeout))
    await line.wait_in_line(waiter, reader)


async def pod_gone(kube, pod: dict, *, timeout: float) -> bool:
    """Whether the API server no longer has ``pod`` (a Pod dict: gone, or its name taken by another uid), read through
    ``kube`` (a :class:`~workspacespawner.k8s.api.Kube`); False when it cannot be asked now (the wait goes on and asks
    again at its next look)."""
    meta = pod.get("metadata") or {}
    try:
        found = await asyncio.wait_for(kube.get(POD, meta.get("namespace"), meta.get("name"), fresh=True), timeout)
    except (ApiException, TimeoutError, OSError, aiohttp.ClientError) as e:
        log.warning("Could not read Pod %s/%s: %s", meta.get("namespace"), meta.get("name"), e)
        return False
    return found is None or found["metadata"].get("uid") != meta.get("uid")
