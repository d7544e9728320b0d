"""Plain JSON dicts (camelCase, as the API server sends them) turned into kubernetes_asyncio's typed models.

kubespawner builds its Pod as ``V1Pod`` models; our builders return plain
dicts. :func:`to_model` converts one into the model kubespawner expects,
nested objects included, by the models' own ``openapi_types`` and
``attribute_map``, so code reading the Pod (kubespawner's and ours) sees the
same types whoever added the volume.
"""

from __future__ import annotations

import re

from kubernetes_asyncio import client

_LIST = re.compile(r"list\[(.+)\]")
_DICT = re.compile(r"dict\(str, (.+)\)")


def to_model(klass: str | type, data):
    """``data`` (a dict of the JSON form) as an instance of model ``klass`` (``"V1Volume"`` or the class); other values as they are."""
    name = klass if isinstance(klass, str) else klass.__name__
    if data is None:
        return None
    if match := _LIST.fullmatch(name):
        return [to_model(match.group(1), item) for item in data]
    if match := _DICT.fullmatch(name):
        return {key: to_model(match.group(1), value) for key, value in data.items()}
    model = getattr(client, name, None)
    if model is None or not isinstance(data, dict):
        return data
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    kwargs = {}
    for key, value in data.items():
        attr = by_json.get(key, key if key in model.openapi_types else None)
        if attr is None:
            raise ValueError(f"{key!r} is not a field of {name}")
        kwargs[attr] = to_model(model.openapi_types[attr], value)
    return model(**kwargs)
