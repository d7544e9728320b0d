"""The zero-to-jupyterhub chart rendered by Helm itself, with the project's values.

Helm v4's chart engine through ``helm-python-sdk`` (PyPI; a ctypes binding
of Helm's Go SDK, no helm binary, no network): :func:`validate` checks values
against the chart's ``values.schema.json`` as ``helm install`` does,
:func:`render` renders the templates offline (``helm template``; the
``lookup`` function finds nothing) and returns the objects. The chart is
the 4.4.0 release carried in ``tests/data/z2jh-chart-4.4.0`` (source and
licence in its README).
"""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from tests.support.paths import DATA, REPO

CHART = DATA / "z2jh-chart-4.4.0" / "jupyterhub"
#: The project's chart values (the operator tutorial, docs/source/tutorials/operator-z2jh.md).
VALUES = REPO / "helm-values" / "values.yaml"
#: What the operator tutorial's ``helm upgrade --install`` names the release.
RELEASE = "jupyterhub"


def our_values() -> dict:
    """``helm-values/values.yaml`` as a dict."""
    return yaml.safe_load(VALUES.read_text())


def validate(values: Mapping) -> None:
    """Validate ``values`` against the chart's schema; raises ``helm_python.HelmValuesError`` naming the key."""
    from helm_python.chart import Chart

    with Chart.load(str(CHART)) as chart:
        chart.validate_schema(dict(values))


def render(values: Mapping, *, namespace: str, release: str = RELEASE) -> list[dict]:
    """The objects the chart renders for a first install of ``release`` in ``namespace``.

    The values are validated first (as ``helm install`` does). Templates
    that render nothing, and ``NOTES.txt``, are left out; the list holds
    plain Kubernetes objects in template path order, without a namespace
    (Helm sends each to the release's). Raises ``helm_python.HelmValuesError``
    or ``helm_python.HelmRenderError``.
    """
    from helm_python.chart import Chart

    with Chart.load(str(CHART)) as chart:
        chart.validate_schema(dict(values))
        manifests = chart.render(dict(values), name=release, namespace=namespace, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if not path.endswith(".yaml"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def by_kind(objects: list[dict]) -> dict[str, list[str]]:
    """``{kind: [names, sorted]}`` of rendered objects."""
    out: dict[str, list[str]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj["metadata"]["name"])
    return {kind: sorted(names) for kind, names in sorted(out.items())}
