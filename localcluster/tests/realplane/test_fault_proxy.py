"""The fault proxy in front of the real kube-apiserver (localcluster.realplane.faultproxy).

It is how hub-level fault tests reach the real plane: requests and watch
streams pass through unchanged, an injected fault is answered as a Status
object the way the embedded server answers it, every request is recorded,
and a caller's own bearer token is passed on (the API server authorizes
that identity, not the proxy's admin certificate).
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import yaml
from kubernetes_asyncio import client, config, watch
from localcluster.realplane.faultproxy import FaultProxy


@pytest.fixture
async def proxy(plane):
    pki = plane.pki
    proxy = await FaultProxy(plane.url, pki.path("ca.crt"), pki.path("admin.crt"), pki.path("admin.key")).start()
    try:
        yield proxy
    finally:
        await proxy.stop()


@pytest.fixture
async def via_proxy(proxy, tmp_path):
    api = await config.new_client_from_config(config_file=str(proxy.write_kubeconfig(tmp_path / "proxy.kubeconfig")))
    try:
        yield api
    finally:
        await api.close()


async def test_requests_and_watch_streams_pass_and_are_recorded(proxy, via_proxy):
    core = client.CoreV1Api(via_proxy)
    name = f"cm-{uuid.uuid4().hex[:6]}"
    listed = await core.list_namespaced_config_map("default")
    stream = watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=listed.metadata.resource_version,
                                  timeout_seconds=20)

    async def first_added():
        async for event in stream:
            if event["type"] == "ADDED" and event["object"].metadata.name == name:
                return event

    seen = asyncio.ensure_future(first_added())
    await asyncio.sleep(0.5)
    await core.create_namespaced_config_map("default", {"metadata": {"name": name}, "data": {"k": "v"}})
    event = await asyncio.wait_for(seen, 20)
    assert event["object"].data == {"k": "v"}
    created = proxy.requests.matching("POST", r"/api/v1/namespaces/default/configmaps$")
    assert [(r.status, r.body["metadata"]["name"]) for r in created] == [(201, name)]
    assert proxy.requests.count("GET", r"/configmaps$") >= 2  # the list and the watch
    await core.delete_namespaced_config_map(name, "default")


async def test_a_compressed_answer_keeps_its_content_encoding(proxy, via_proxy):
    """kube-apiserver gzips an answer over 128 KiB for a client that accepts it (kubespawner's reflectors read such
    lists raw): the proxy passes the body through as it is, so it passes its Content-Encoding on too."""
    core = client.CoreV1Api(via_proxy)
    name = f"big-{uuid.uuid4().hex[:6]}"
    await core.create_namespaced_config_map("default", {"metadata": {"name": name}, "data": {"k": uuid.uuid4().hex * 8192}})
    try:
        raw = await core.read_namespaced_config_map(name, "default", _preload_content=False)
        assert raw.headers.get("Content-Encoding") == "gzip"
        assert len((await raw.json())["data"]["k"]) == 32 * 8192
    finally:
        await core.delete_namespaced_config_map(name, "default")


async def test_a_body_without_content_type_is_passed_on_without_one(proxy, via_proxy):
    """The kubernetes 37 sync client creates a Pod without a Content-Type header; kube-apiserver reads such a body
    as JSON. The proxy must not label it (aiohttp would send application/octet-stream, answered 415)."""
    name = f"untyped-{uuid.uuid4().hex[:6]}"
    api = via_proxy
    url = f"{api.configuration.host}/api/v1/namespaces/default/configmaps"
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).encode()
    answer = await api.rest_client.pool_manager.request("POST", url, data=body, skip_auto_headers=("Content-Type",))
    assert answer.status == 201, await answer.text()
    assert [r.content_type for r in proxy.requests.matching("POST", r"/configmaps$")] == [""]
    await client.CoreV1Api(api).delete_namespaced_config_map(name, "default")


async def test_a_fault_is_answered_as_a_status_then_requests_pass_again(proxy, via_proxy):
    core = client.CoreV1Api(via_proxy)
    proxy.faults.add("GET", r"/api/v1/namespaces/default$", status=503, reason="ServiceUnavailable", message="etcd is gone", count=1)
    with pytest.raises(client.ApiException) as refused:
        await core.read_namespace("default")
    assert refused.value.status == 503
    assert '"message": "etcd is gone"' in refused.value.body and '"kind": "Status"' in refused.value.body
    assert (await core.read_namespace("default")).metadata.name == "default"
    assert [r.status for r in proxy.requests.matching("GET", r"/api/v1/namespaces/default$")] == [503, 200]


async def test_a_callers_bearer_token_is_passed_on(plane, proxy, tmp_path):
    name = f"nobody-{uuid.uuid4().hex[:6]}"
    direct = await asyncio.to_thread(plane.serviceaccount_kubeconfig, "default", name, tmp_path / "sa.kubeconfig")
    token = yaml.safe_load(direct.read_text())["users"][0]["user"]["token"]
    api = await config.new_client_from_config(config_file=str(proxy.write_kubeconfig(tmp_path / "sa-proxy.kubeconfig", token=token)))
    try:
        with pytest.raises(client.ApiException) as forbidden:
            await client.CoreV1Api(api).list_namespaced_secret("default")
        assert forbidden.value.status == 403
        assert f"system:serviceaccount:default:{name}" in forbidden.value.body
    finally:
        await api.close()
