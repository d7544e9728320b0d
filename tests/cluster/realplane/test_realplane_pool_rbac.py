"""Real RBAC of the root-disk pool: its keeper runs with the ``hub`` ServiceAccount's token and helm-values/rbac.yaml.

One real control plane (the golden image seeded, an audit log of the hub's
ServiceAccount: tests/cluster/realplane/test_realplane_rbac.py's ``real``).
With the hub's credentials, a :class:`~workspacespawner.backends.vm.pool.RootDiskPoolKeeper`
clones a pool disk of the demo's golden image (CDI's clone check), a start
claims it, the keeper clones a replacement; the admin points the DataSource
at another source, and the keeper retires the disk cloned from the old one
(a DELETE with preconditions) and clones anew. Then: no request was
refused, and the pool's own grants (``datasources`` get in the golden-image
namespace, ``datavolumes`` delete) were what its requests needed, which
test_realplane_rbac.py's scenario (no pool) excuses by name.

Runs only with WORKSPACESPAWNER_CONTROL_PLANE=real and WORKSPACESPAWNER_K8S_BIN.
"""

from __future__ import annotations

import asyncio
import time

from tests.cluster.realplane.test_realplane_rbac import HUB, NS, allowed, attributes, audited_requests, real, triple_of
from tests.support.hubharness import core_and_custom
from workspacespawner.backends.vm.manifests import VMIdentity, VMSettings
from workspacespawner.backends.vm.pool import POOL_SELECTOR, RootDiskPoolKeeper
from workspacespawner.config.rootdiskpool import PoolEntry, PoolShape
from workspacespawner.core import names
from workspacespawner.demo import GOLDEN_IMAGE
from workspacespawner.k8s.api import Kube

__all__ = ["real"]  # the fixture, shared with test_realplane_rbac
GOLDEN_NS, IMAGE = GOLDEN_IMAGE
SHAPE = PoolShape(IMAGE, GOLDEN_NS, "10Gi", "ceph-rbd", "Block")  # no smaller than the image: CDI refuses that
DV = ("cdi.kubevirt.io", "v1beta1", NS, "datavolumes")


def pool_disks(custom) -> list[dict]:
    return custom.list_namespaced_custom_object(*DV, label_selector=POOL_SELECTOR)["items"]


def until_ready(custom, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        ready = [d for d in pool_disks(custom) if (d.get("status") or {}).get("phase") == "Succeeded"]
        if ready:
            return ready[0]
        assert time.monotonic() < deadline, [(d["metadata"]["name"], d.get("status")) for d in pool_disks(custom)]
        time.sleep(0.5)


async def keeper_of_the_hub(kubeconfig, body) -> None:
    """Run ``body(keeper)`` with a keeper holding the hub ServiceAccount's credentials."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        kube = Kube(client.CoreV1Api(api), client.CustomObjectsApi(api))
        await body(RootDiskPoolKeeper(kube, NS, [PoolEntry(SHAPE, 1)], interval=1.0))


def test_the_pool_keeper_needs_and_gets_its_grants(real):
    kubeconfig = real.plane.serviceaccount_kubeconfig(NS, "hub", create=False)
    with core_and_custom(real) as (_core, custom):
        source = custom.get_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", GOLDEN_NS, "datasources", IMAGE)["spec"]["source"]

        def point_at(new_source: dict) -> None:
            custom.patch_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", GOLDEN_NS, "datasources", IMAGE,
                                                  {"spec": {"source": new_source}})

        async def scenario(keeper: RootDiskPoolKeeper) -> None:
            await keeper.refill()
            first = await asyncio.to_thread(until_ready, custom)
            settings = VMSettings(golden_image=IMAGE, golden_image_namespace=GOLDEN_NS, root_disk_size="10Gi")
            ident = VMIdentity.for_workspace(namespace=NS, user_name="pia", kubespawner_username="pia", base_name="ws-pia", home_pvc="")
            claimed = await keeper.claim(ident, settings, recorded=None, annotations={})
            assert claimed is not None and claimed["metadata"]["name"] == first["metadata"]["name"]
            await keeper.refill()  # a replacement, from the current source
            [replacement] = pool_disks(custom)
            point_at({"pvc": {"namespace": GOLDEN_NS, "name": f"{IMAGE}-respin"}})  # the admin's new image
            try:
                await keeper.refill()  # retires the replacement, clones from the new source
            finally:
                point_at(source)
            names_now = [d["metadata"]["name"] for d in pool_disks(custom) if not d["metadata"].get("deletionTimestamp")]
            assert replacement["metadata"]["name"] not in names_now and len(names_now) == 1
            assert names.owned_by(custom.get_namespaced_custom_object(*DV, first["metadata"]["name"])["metadata"], "pia")

        asyncio.run(keeper_of_the_hub(kubeconfig, scenario))
    requests = [attributes(e) for e in audited_requests(real.audit_log, HUB)]
    refused = [e for e in audited_requests(real.audit_log, HUB)
               if e["annotations"].get("authorization.k8s.io/decision") != "allow" or e["responseStatus"]["code"] == 403]
    assert refused == [], refused
    made = {(triple_of(a), a.get("namespace")) for a in requests}
    assert (("cdi.kubevirt.io", "datasources", "get"), GOLDEN_NS) in made  # the pool's own grants, and used
    assert (("cdi.kubevirt.io", "datavolumes", "delete"), NS) in made
    assert all(allowed(real.plane, HUB, a) for a in requests)
