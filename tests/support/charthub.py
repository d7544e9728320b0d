"""The zero-to-jupyterhub chart's own hub configuration, rendered by Helm, run by a test hub.

:func:`hub_files` renders the chart (:func:`tests.support.chart.render`)
and writes what the rendered hub Deployment mounts under
``/usr/local/etc/jupyterhub`` (the chart's ``jupyterhub_config.py`` and
``z2jh.py`` from its ConfigMap, the name templates, the Secret with the
merged ``values.yaml``) into a folder, with that prefix pointed at the
folder, and returns the hub container's environment (its ``env`` with the
Secret's values and the Pod's namespace, plus the Service variables
Kubernetes would give it). :func:`hub_config` is the config text a
:class:`~tests.support.hubharness.Hub` runs: the chart's file as the hub
image runs it, then only what a loopback hub must change (the proxy started
by the hub, the hub's address from the harness). No stand-in for the
chart's code: the values reach the spawner through the chart's own Python.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path

from tests.support.chart import render

#: Where the chart's hub Deployment mounts its config files.
MOUNT_ROOT = "/usr/local/etc/jupyterhub"


def _find(objects: list[dict], kind: str, name: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _secret_data(secret: dict) -> dict[str, str]:
    data = {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}
    return {**data, **(secret.get("stringData") or {})}


def hub_files(values: Mapping, *, namespace: str, root: Path) -> dict[str, str]:
    """Write the hub's mounted config files for ``values`` under ``root``; return the hub container's environment."""
    objects = render(values, namespace=namespace)
    pod = _find(objects, "Deployment", "hub")["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "hub"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    sources = {("configMap", o["metadata"]["name"]): o.get("data") or {} for o in objects if o["kind"] == "ConfigMap"}
    sources |= {("secret", o["metadata"]["name"]): _secret_data(o) for o in objects if o["kind"] == "Secret"}
    for mount in container["volumeMounts"]:
        if not mount["mountPath"].startswith(MOUNT_ROOT):
            continue  # the database volume (/srv/jupyterhub): the harness's own database
        volume = volumes[mount["name"]]
        kind = "configMap" if "configMap" in volume else "secret"
        ref = volume[kind]
        data = sources[(kind, ref.get("name") or ref.get("secretName"))]
        files = {item["path"]: data[item["key"]] for item in ref["items"]} if ref.get("items") else dict(data)
        target = root / mount["mountPath"][len(MOUNT_ROOT):].strip("/")
        if mount.get("subPath"):
            files, target = {target.name: files[mount["subPath"]]}, target.parent
        for path, text in files.items():
            (target / path).parent.mkdir(parents=True, exist_ok=True)
            (target / path).write_text(text.replace(MOUNT_ROOT, str(root)))
    secrets = {o["metadata"]["name"]: _secret_data(o) for o in objects if o["kind"] == "Secret"}
    env = {"PROXY_API_SERVICE_PORT": "8001", "HUB_SERVICE_PORT": "8081"}  # Kubernetes' variables of the two Services
    for entry in container.get("env") or ():
        source = entry.get("valueFrom") or {}
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "secretKeyRef" in source:
            env[entry["name"]] = secrets[source["secretKeyRef"]["name"]][source["secretKeyRef"]["key"]]
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[entry["name"]] = namespace
    return env


def hub_config(root: Path) -> str:
    """Config text running the chart's ``jupyterhub_config.py`` from ``root``, then what a loopback test hub changes."""
    return (
        f"load_subconfig({str(root / 'jupyterhub_config.py')!r})\n"
        "# a test hub on loopback: it starts its proxy, and listens where the harness says (hub_ip/hub_port)\n"
        "c.ConfigurableHTTPProxy.should_start = True\n"
        "c.JupyterHub.hub_bind_url = ''\n"
        "c.JupyterHub.hub_connect_url = ''\n"
    )
