"""The zero-to-jupyterhub chart's values, as the tests need them.

Three steps, each modelled on what the chart documents (chart 4.x; see
``tests/data/z2jh/README.md`` for the carried files):

1. :func:`coalesce`: helm merges the user's values over the chart's
   ``values.yaml`` (maps merge key by key, a ``null`` removes a default,
   anything else replaces it) and validates the result against the chart's
   ``values.schema.yaml``; :func:`schema_errors` does that validation.
2. :func:`z2jh_config`: the chart's hub reads the merged values from a
   mounted Secret and builds its traitlets config: ``singleuser.<key>`` sets
   ``c.KubeSpawner.<trait>`` when the value is not null (camelCase key,
   snake_case trait; a few keys are renamed), ``singleuser.image`` gives
   ``name:tag``, ``singleuser.storage.type`` decides kubespawner's own PVC and
   volumes, ``cull.*`` adds the idle-culler service, ``hub.services`` and
   ``hub.loadRoles`` add services (their API tokens kept in the chart's
   Secret) and roles, ``hub.config.<Class>`` is applied as
   ``c[Class].update(...)``, then the ``*.py`` files mounted in
   ``/usr/local/etc/jupyterhub/jupyterhub_config.d/`` run in name order, then
   ``hub.extraConfig`` in key order.

This is our own minimal loader for the keys our values and the chart's
defaults use, written from that documented behaviour; it is not the chart's
code. ``tests/test_helm_values.py`` checks that WorkspaceSpawner, configured
this way, gets our settings unchanged.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path

import jsonschema
import yaml
from traitlets.config import Config

from tests.support.paths import DATA, REPO

ROOT = REPO
HELM_VALUES = ROOT / "helm-values"
Z2JH_DATA = DATA / "z2jh"
#: The chart's hub config file (the hub's ``--config``); the hub runs in /srv/jupyterhub, its database volume.
HUB_CONFIG_FILE = "/usr/local/etc/jupyterhub/jupyterhub_config.py"
#: Where the chart's hub loads extra ``*.py`` config files from.
CONFIG_D_MOUNT = "/usr/local/etc/jupyterhub/jupyterhub_config.d/"

#: ``singleuser.<key>`` → ``c.KubeSpawner.<trait>`` where the names differ (others: camelCase → snake_case).
RENAMED_SINGLEUSER_KEYS = {
    "image.pullPolicy": "image_pull_policy",
    "events": "events_enabled",
    "serviceAccountName": "service_account",
    "storage.extraLabels": "storage_extra_labels",
    "extraNodeAffinity.required": "node_affinity_required",
    "extraNodeAffinity.preferred": "node_affinity_preferred",
    "extraPodAffinity.required": "pod_affinity_required",
    "extraPodAffinity.preferred": "pod_affinity_preferred",
    "extraPodAntiAffinity.required": "pod_anti_affinity_required",
    "extraPodAntiAffinity.preferred": "pod_anti_affinity_preferred",
    "memory.limit": "mem_limit",
    "memory.guarantee": "mem_guarantee",
    "cpu.limit": "cpu_limit",
    "cpu.guarantee": "cpu_guarantee",
    "extraResource.limits": "extra_resource_limits",
    "extraResource.guarantees": "extra_resource_guarantees",
    "extraEnv": "environment",
}
#: ``singleuser.<key>`` copied to the KubeSpawner trait of the same name in snake_case.
SAME_NAME_SINGLEUSER_KEYS = (
    "podNameTemplate",
    "startTimeout",
    "extraLabels",
    "extraAnnotations",
    "uid",
    "fsGid",
    "nodeSelector",
    "lifecycleHooks",
    "initContainers",
    "extraContainers",
    "profileList",
    "extraPodConfig",
)
#: ``hub.<key>`` → ``c.JupyterHub.<trait>`` (camelCase → snake_case).
HUB_KEYS = (
    "concurrentSpawnLimit",
    "activeServerLimit",
    "baseUrl",
    "allowNamedServers",
    "namedServerLimitPerUser",
    "redirectToServer",
    "shutdownOnLogout",
    "templateVars",
)
#: The chart's own Secret (release "jupyterhub"): it holds each hub.services entry's API token.
CHART_SECRET = "hub"


def load_yaml(path: Path):
    """The parsed YAML document at ``path``."""
    return yaml.safe_load(Path(path).read_text())


def our_values() -> dict:
    """``helm-values/values.yaml``."""
    return load_yaml(HELM_VALUES / "values.yaml")


def chart_defaults() -> dict:
    """The chart's own ``values.yaml`` (carried copy)."""
    return load_yaml(Z2JH_DATA / "values.yaml")


def chart_schema() -> dict:
    """The chart's ``values.schema.yaml`` (carried copy, JSON Schema draft 7)."""
    return load_yaml(Z2JH_DATA / "values.schema.yaml")


def coalesce(defaults: Mapping, overrides: Mapping) -> dict:
    """``overrides`` over ``defaults`` as helm merges values: maps merge, null deletes, the rest replaces."""
    merged = copy.deepcopy(dict(defaults))
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def schema_errors(values: Mapping) -> list[str]:
    """Why ``values`` (merged over the chart's defaults) fail the chart's schema; empty when they pass."""
    validator = jsonschema.Draft7Validator(chart_schema())
    merged = coalesce(chart_defaults(), values)
    return [
        f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
        for error in sorted(validator.iter_errors(merged), key=lambda e: list(map(str, e.absolute_path)))
    ]


def lookup(values: Mapping, dotted: str, default=None):
    """``values["a"]["b"]`` for ``"a.b"``; ``default`` when a level is missing or not a map."""
    node = values
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def snake_case(camel: str) -> str:
    """``startTimeout`` → ``start_timeout``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", camel).lower()


def _resolve_env(extra_env, secrets: Mapping[tuple[str, str], str]) -> dict[str, str]:
    """``hub.extraEnv`` as the hub container's environment; ``secretKeyRef`` values come from ``secrets``."""
    items = extra_env.items() if isinstance(extra_env, Mapping) else ((e["name"], e) for e in extra_env or ())
    env = {}
    for name, spec in items:
        if not isinstance(spec, Mapping):
            env[name] = str(spec)
        elif "value" in spec:
            env[name] = str(spec["value"])
        elif "secretKeyRef" in spec.get("valueFrom", {}):
            ref = spec["valueFrom"]["secretKeyRef"]
            if (ref["name"], ref["key"]) in secrets:
                env[name] = secrets[(ref["name"], ref["key"])]
    return env


def _spawner_settings(c: Config, values: Mapping) -> None:
    """c.KubeSpawner / c.Spawner from ``singleuser.*`` and ``scheduling.*``."""
    keys = {key: snake_case(key) for key in SAME_NAME_SINGLEUSER_KEYS} | RENAMED_SINGLEUSER_KEYS
    for key, trait in keys.items():
        value = lookup(values, f"singleuser.{key}")
        if value is not None:
            c.KubeSpawner[trait] = copy.deepcopy(value)
    image = lookup(values, "singleuser.image.name")
    if image:
        tag = lookup(values, "singleuser.image.tag")
        c.KubeSpawner.image = f"{image}:{tag}" if tag else image
    tolerations = (lookup(values, "scheduling.userPods.tolerations") or []) + (lookup(values, "singleuser.extraTolerations") or [])
    if tolerations:
        c.KubeSpawner.tolerations = tolerations
    if lookup(values, "scheduling.userScheduler.enabled"):
        c.KubeSpawner.scheduler_name = "user-scheduler"
    purpose = lookup(values, "scheduling.userPods.nodeAffinity.matchNodePurpose")
    if purpose in ("prefer", "require"):
        term = {"matchExpressions": [{"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]}]}
        if purpose == "prefer":
            c.KubeSpawner.node_affinity_preferred = [*c.KubeSpawner.get("node_affinity_preferred", []), {"weight": 100, "preference": term}]
        else:
            c.KubeSpawner.node_affinity_required = [*c.KubeSpawner.get("node_affinity_required", []), term]
    c.KubeSpawner.allow_privilege_escalation = lookup(values, "singleuser.allowPrivilegeEscalation")
    metadata = lookup(values, "singleuser.cloudMetadata", {})
    if metadata.get("blockWithIptables"):
        # an init container dropping the Pod's traffic to the cloud metadata server
        blocker = {
            "name": "block-cloud-metadata",
            "image": f"{lookup(values, 'singleuser.networkTools.image.name')}:{lookup(values, 'singleuser.networkTools.image.tag')}",
            "command": ["iptables", "--append", "OUTPUT", "--protocol", "tcp", "--destination", metadata["ip"],
                        "--destination-port", "80", "--jump", "DROP"],
            "securityContext": {"privileged": True, "runAsUser": 0, "capabilities": {"add": ["NET_ADMIN"]}},
        }
        c.KubeSpawner.init_containers = [*c.KubeSpawner.get("init_containers", []), blocker]
    if lookup(values, "singleuser.cmd", "unset") != "unset":
        c.Spawner.cmd = lookup(values, "singleuser.cmd")
    if lookup(values, "singleuser.defaultUrl") is not None:
        c.Spawner.default_url = lookup(values, "singleuser.defaultUrl")
    if lookup(values, "hub.consecutiveFailureLimit") is not None:
        c.Spawner.consecutive_failure_limit = lookup(values, "hub.consecutiveFailureLimit")
    _storage_settings(c, values)


def _storage_settings(c: Config, values: Mapping) -> None:
    """kubespawner's own PVC and volumes from ``singleuser.storage`` (type dynamic, static or none)."""
    storage = lookup(values, "singleuser.storage", {})
    volumes, mounts = {}, {}
    if storage.get("type") == "dynamic":
        dynamic = storage.get("dynamic") or {}
        c.KubeSpawner.storage_pvc_ensure = True
        if dynamic.get("pvcNameTemplate"):
            c.KubeSpawner.pvc_name_template = dynamic["pvcNameTemplate"]
        for trait, value in (
            ("storage_class", dynamic.get("storageClass")),
            ("storage_access_modes", dynamic.get("storageAccessModes")),
            ("storage_capacity", storage.get("capacity")),
        ):
            if value is not None:
                c.KubeSpawner[trait] = value
        name = dynamic.get("volumeNameTemplate")
        volumes[name] = {"name": name, "persistentVolumeClaim": {"claimName": "{pvc_name}"}}
        mounts[name] = {"name": name, "mountPath": storage.get("homeMountPath"), "subPath": dynamic.get("subPath")}
    elif storage.get("type") == "static":
        static = storage.get("static") or {}
        volumes["home"] = {"name": "home", "persistentVolumeClaim": {"claimName": static.get("pvcName")}}
        mounts["home"] = {"name": "home", "mountPath": storage.get("homeMountPath"), "subPath": static.get("subPath")}
    c.KubeSpawner.volumes = volumes
    c.KubeSpawner.volume_mounts = mounts


def _hub_settings(c: Config, values: Mapping) -> None:
    """c.JupyterHub from ``hub.*`` (database, named servers, ...) and the idle culler from ``cull.*``."""
    db_type = lookup(values, "hub.db.type")
    if db_type == "sqlite-pvc":
        c.JupyterHub.db_url = "sqlite:///jupyterhub.sqlite"
    elif db_type == "sqlite-memory":
        c.JupyterHub.db_url = "sqlite://"
    elif lookup(values, "hub.db.url") is not None:
        c.JupyterHub.db_url = lookup(values, "hub.db.url")
    for key in HUB_KEYS:
        if lookup(values, f"hub.{key}") is not None:
            c.JupyterHub[snake_case(key)] = lookup(values, f"hub.{key}")
    c.JupyterHub.services = []
    c.JupyterHub.load_roles = []
    cull = lookup(values, "cull", {})
    if cull.get("enabled"):
        command = ["python3", "-m", "jupyterhub_idle_culler", "--url=http://localhost:8081/hub/api"]
        for key, flag in (("timeout", "--timeout"), ("every", "--cull-every"), ("concurrency", "--concurrency"), ("maxAge", "--max-age")):
            if cull.get(key):
                command.append(f"{flag}={cull[key]}")
        scopes = ["list:users", "read:users:activity", "read:servers", "delete:servers"]
        if cull.get("users"):
            command.append("--cull-users")
            scopes.append("admin:users")
        if not cull.get("adminUsers"):
            command.append("--cull-admin-users=false")
        if cull.get("removeNamedServers"):
            command.append("--remove-named-servers")
        c.JupyterHub.services.append({"name": "jupyterhub-idle-culler", "command": command})
        c.JupyterHub.load_roles.append({"name": "jupyterhub-idle-culler", "scopes": scopes, "services": ["jupyterhub-idle-culler"]})
    for key, service in (lookup(values, "hub.services") or {}).items():
        service = {k: v for k, v in copy.deepcopy(service).items() if k != "apiToken"}
        service.setdefault("name", key)
        service["api_token"] = service_token(values, key)
        c.JupyterHub.services.append(service)
    for key, role in (lookup(values, "hub.loadRoles") or {}).items():
        c.JupyterHub.load_roles.append({"name": key, **copy.deepcopy(role)})


def service_token(values: Mapping, key: str) -> str:
    """The API token of ``hub.services.<key>``: the one set in the values, else the one the chart generates.

    The chart generates a random token once and keeps it in its Secret
    (``hub``, key ``hub.services.<key>.apiToken``); a fixed stand-in here.
    """
    service = lookup(values, f"hub.services.{key}") or {}
    return service.get("apiToken") or service.get("api_token") or f"chart-generated-token-of-{key}"


def chart_secret(values: Mapping) -> dict[tuple[str, str], str]:
    """What the chart's own Secret holds that ``secretKeyRef`` may name: each service's API token."""
    return {(CHART_SECRET, f"hub.services.{key}.apiToken"): service_token(values, key) for key in lookup(values, "hub.services") or {}}


def hub_environment(values: Mapping, secrets: Mapping[tuple[str, str], str] | None = None, *, merge_defaults: bool = True) -> dict[str, str]:
    """The hub container's environment from ``hub.extraEnv``: ``secretKeyRef`` from ``secrets`` or the chart's Secret.

    Entries whose Secret key is unknown are left out, as a missing optional
    key would be.
    """
    values = coalesce(chart_defaults(), values) if merge_defaults else values
    return _resolve_env(lookup(values, "hub.extraEnv"), {**chart_secret(values), **(secrets or {})})


def z2jh_config(values: Mapping, *, secrets: Mapping[tuple[str, str], str] | None = None, merge_defaults: bool = True) -> Config:
    """The traitlets Config the chart's hub builds from ``values`` (see the module docstring).

    ``values`` are merged over the chart's defaults first (as helm does)
    unless ``merge_defaults`` is false. ``secrets`` maps ``(Secret name,
    key)`` to the value ``hub.extraEnv`` entries with ``secretKeyRef`` get
    (the chart's own Secret is filled in, see :func:`chart_secret`); that
    environment is in ``os.environ`` while the config files and
    ``hub.extraConfig`` run, as in the hub container.
    """
    values = coalesce(chart_defaults(), values) if merge_defaults else copy.deepcopy(dict(values))
    c = Config()
    c.JupyterHub.config_file = HUB_CONFIG_FILE  # the chart starts `jupyterhub --config HUB_CONFIG_FILE`
    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
    _hub_settings(c, values)
    _spawner_settings(c, values)
    for section, settings in (lookup(values, "hub.config") or {}).items():
        if not section[:1].isupper():
            raise SystemExit(f"hub.config.{section}: sections must be Configurable class names")
        c[section].update(copy.deepcopy(settings))
    env = hub_environment(values, secrets, merge_defaults=False)
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        pieces = {
            spec["mountPath"]: spec.get("stringData", "")
            for spec in (lookup(values, "hub.extraFiles") or {}).values()
            if spec["mountPath"].startswith(CONFIG_D_MOUNT) and spec["mountPath"].endswith(".py")
        }
        for path in sorted(pieces):
            exec(compile(pieces[path], Path(path).name, "exec"), {"c": c})
        for name, source in sorted((lookup(values, "hub.extraConfig") or {}).items()):
            exec(compile(source, f"hub.extraConfig.{name}", "exec"), {"c": c})
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return c
