"""Validation of written objects, as the Kubernetes API server does it on create and update.

Three layers, each mirroring a part of the real server:

1. **Schema.** Built-in kinds are checked against kubernetes-validate's
   *strict* JSON schemas of the local cluster's release (:mod:`.version`, or
   the newest older one the installed package carries); KubeVirt, CDI and snapshot kinds against their OpenAPI v2
   definitions in ``localcluster/schemas``, made strict the way a structural
   CRD schema is: an object that lists ``properties`` takes no other field.
   As for every custom resource, the top-level ``metadata`` of those kinds is
   checked as ``ObjectMeta``, not through the CRD schema. ``null`` is accepted
   wherever a value is (the API server drops it on decode).
2. **Object metadata** (apimachinery's ``ValidateObjectMeta``): the name is a
   DNS-1123 subdomain, a DNS-1123 label for Namespaces and a DNS-1035 label for
   Services; label keys and annotation keys are qualified names, label values
   at most 63 characters; annotations total at most 256 KiB.
3. **Update rules**: metadata name/namespace/uid, and the immutable fields of
   Pods, PersistentVolumeClaims, Secrets, ConfigMaps, Services and
   VolumeSnapshots.

Every failure raises :func:`.errors.invalid` (422 ``Invalid``) with one cause
per problem, worded as Kubernetes words them, e.g.
``{"field": "spec.storageClassName", "reason": "FieldValueInvalid",
"message": "Invalid value: \\"fast\\": field is immutable"}``.
Schemas are compiled once per kind and shared by every :class:`Validator`.
"""

from __future__ import annotations

import base64
import functools
import importlib.resources
import json
import re
from decimal import Decimal, InvalidOperation

import jsonschema
import kubernetes_validate.utils
import referencing
import referencing.jsonschema

from . import errors
from .kinds import KINDS, Kind
from .version import KUBERNETES_VERSION

#: Where the CRD-style OpenAPI documents live, by the prefix ``Kind.schema`` uses.
OPENAPI_FILES = {
    "kubevirt": "kubevirt-openapi.trimmed.json",
    "cdi": "cdi-openapi.trimmed.json",
    "snapshot": "snapshot-openapi.json",
}

_DEFINITIONS_URI = "https://kubernetes.io/api/_definitions.json"
_OBJECT_META_REF = _DEFINITIONS_URI + "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_OPENAPI_URI = "urn:workspacespawner:localcluster:{}"

#: Quantity syntax (resource.Quantity): a signed decimal, then a binary-SI, decimal-SI or exponent suffix.
QUANTITY_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
_QUANTITY_RE = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?")
#: The regular expression Kubernetes names in its "quantities must match" message.
_QUANTITY_MESSAGE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_SUFFIXES = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
    "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
}

_QUANTITY_SCHEMA = {"type": ["string", "integer", "number", "null"], "pattern": QUANTITY_PATTERN}
_INT_OR_STRING_SCHEMA = {"type": ["string", "integer", "null"]}


# --- names, labels, quantities (apimachinery/pkg/util/validation) -----------

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)

#: Total size of a object's annotations (keys plus values), as apimachinery's TotalAnnotationSizeLimitB.
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def is_dns1123_label(value: str) -> list[str]:
    """Problems with ``value`` as an RFC 1123 label (Kubernetes ``IsDNS1123Label``); empty when valid."""
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.fullmatch(value):
        out.append(_DNS1123_LABEL_MSG)
    return out


def is_dns1123_subdomain(value: str) -> list[str]:
    """Problems with ``value`` as an RFC 1123 subdomain (Kubernetes ``IsDNS1123Subdomain``)."""
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        out.append(_DNS1123_SUBDOMAIN_MSG)
    return out


def is_dns1035_label(value: str) -> list[str]:
    """Problems with ``value`` as an RFC 1035 label (Kubernetes ``IsDNS1035Label``, Service names)."""
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _DNS1035_LABEL.fullmatch(value):
        out.append(_DNS1035_LABEL_MSG)
    return out


def is_qualified_name(value: str) -> list[str]:
    """Problems with ``value`` as a label or annotation key (Kubernetes ``IsQualifiedName``).

    An optional DNS-1123 subdomain prefix (at most 253 characters) and ``/``,
    then a name of at most 63 alphanumerics, ``-``, ``_`` or ``.``.
    """
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        out = []
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            out = ["prefix part must be non-empty"]
        else:
            out = ["prefix part " + msg for msg in is_dns1123_subdomain(prefix)]
    else:
        return [
            "a qualified name " + _QUALIFIED_NAME_MSG
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED_NAME.fullmatch(name):
        out.append("name part " + _QUALIFIED_NAME_MSG)
    return out


def is_valid_label_value(value: str) -> list[str]:
    """Problems with ``value`` as a label value (Kubernetes ``IsValidLabelValue``): at most 63, may be empty."""
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _LABEL_VALUE.fullmatch(value):
        out.append(_LABEL_VALUE_MSG)
    return out


def parse_quantity(value) -> Decimal:
    """The exact value of a Kubernetes quantity (``resource.Quantity``): ``"10Gi"``, ``"500m"``, ``2``.

    Raises ValueError for a string ``resource.ParseQuantity`` would refuse,
    TypeError for a value that is neither a string nor a number.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError(f"not a quantity: {value!r}")
    if not isinstance(value, str):
        return Decimal(str(value))
    match = _QUANTITY_RE.fullmatch(value)
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number).scaleb(int(suffix[1:]))
        return Decimal(number) * _SUFFIXES[suffix]
    except (InvalidOperation, KeyError) as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc


# --- causes ------------------------------------------------------------------


def _render(value) -> str:
    """A value as Kubernetes prints it in an error (strings quoted, objects by their type)."""
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(value)


def _cause(field: str, reason: str, message: str) -> dict:
    return {"field": field, "reason": reason, "message": message}


def _invalid(field: str, value, detail: str) -> dict:
    return _cause(field, "FieldValueInvalid", f"Invalid value: {_render(value)}: {detail}")


def _forbidden(field: str, detail: str) -> dict:
    return _cause(field, "FieldValueForbidden", f"Forbidden: {detail}")


def _required(field: str, detail: str = "") -> dict:
    return _cause(field, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def _immutable(field: str, new, old) -> list[dict]:
    """Kubernetes ``ValidateImmutableField``: a cause when ``new`` differs from ``old``."""
    return [] if new == old else [_invalid(field, new, "field is immutable")]


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


# --- schemas -------------------------------------------------------------------


def _schema_dir(version: str):
    """kubernetes-validate's strict schema folder for ``version`` (or the newest older one)."""
    def key(v):
        return tuple(int(p) for p in v.split(".")[:2])

    available = kubernetes_validate.utils.all_versions()
    older = [v for v in available if key(v) <= key(version)]
    chosen = older[-1] if older else available[-1]
    return importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{chosen}-local-strict"


def _nullable_strict(schema) -> None:
    """Make an OpenAPI v2 schema behave as a structural CRD schema does on the API server.

    Objects that list ``properties`` reject unknown fields, and ``null`` is
    accepted everywhere (the server drops nulls before validating).
    """
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind is not None:
        types = [kind] if isinstance(kind, str) else list(kind)
        if "null" not in types:
            types.append("null")
        schema["type"] = types
    if "properties" in schema and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    for sub in _dict(schema.get("properties")).values():
        _nullable_strict(sub)
    for key in ("items", "additionalProperties"):
        _nullable_strict(schema.get(key))
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            _nullable_strict(sub)


def _patch_scalars(definitions: dict) -> None:
    """Quantity takes a string or a number, IntOrString a string or an integer, as on the wire."""
    for name, schema in definitions.items():
        if name.endswith("resource.Quantity"):
            definitions[name] = {"description": schema.get("description", ""), **_QUANTITY_SCHEMA}
        elif name.endswith("intstr.IntOrString"):
            definitions[name] = {"description": schema.get("description", ""), **_INT_OR_STRING_SCHEMA}


def _load_openapi(prefix: str) -> dict:
    text = importlib.resources.files(__package__ + ".schemas").joinpath(OPENAPI_FILES[prefix]).read_text("utf-8")
    document = json.loads(text)
    definitions = document["definitions"]
    for schema in definitions.values():
        _nullable_strict(schema)
    _patch_scalars(definitions)
    return document


@functools.cache
def _registry(version: str) -> tuple[referencing.Registry, object]:
    """Every schema document, loaded once: kubernetes-validate's definitions and our OpenAPI files."""
    folder = _schema_dir(version)
    defs = json.loads(folder.joinpath("_definitions.json").read_text("utf-8"))
    _patch_scalars(defs["$defs"])
    resources = [(_DEFINITIONS_URI, referencing.Resource.from_contents(defs))]
    spec = referencing.jsonschema.DRAFT202012
    for prefix in OPENAPI_FILES:
        resources.append((_OPENAPI_URI.format(prefix), spec.create_resource(_load_openapi(prefix))))
    return referencing.Registry().with_resources(resources).crawl(), folder


def _absolute_refs(schema, base: str):
    """A copy of ``schema`` whose local ``#/definitions/...`` refs point into the document at ``base``."""
    if isinstance(schema, dict):
        out = {k: _absolute_refs(v, base) for k, v in schema.items()}
        if isinstance(out.get("$ref"), str) and out["$ref"].startswith("#"):
            out["$ref"] = base + out["$ref"]
        return out
    if isinstance(schema, list):
        return [_absolute_refs(v, base) for v in schema]
    return schema


@functools.cache
def _compiled(schema: str, kind: str, api_version: str, version: str) -> jsonschema.protocols.Validator:
    """The compiled validator for one kind; built on first use, then shared."""
    registry, folder = _registry(version)
    if schema == "kubernetes":
        suffix = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
        root = json.loads(folder.joinpath(f"{kind.lower()}-{suffix}.json").read_text("utf-8"))
    else:
        prefix, _, definition = schema.partition(":")
        base = _OPENAPI_URI.format(prefix)
        document = registry.contents(base)
        root = _absolute_refs(document["definitions"][definition], base)
        root["properties"]["metadata"] = {"$ref": _OBJECT_META_REF}
        root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return jsonschema.Draft202012Validator(root, registry=registry)


def _field_path(error: jsonschema.ValidationError) -> list[str]:
    """The instance path as Kubernetes writes it: properties dotted, indices and map keys in brackets."""
    steps = list(error.absolute_path)
    tokens = list(error.absolute_schema_path)[:-1]
    parts: list[str] = []
    i = 0
    it = iter(tokens)
    for token in it:
        if i >= len(steps):
            break
        if token == "properties":
            next(it, None)
            parts.append(f".{steps[i]}")
            i += 1
        elif token in ("items", "additionalProperties", "patternProperties"):
            if token == "patternProperties":
                next(it, None)
            parts.append(f"[{steps[i]}]")
            i += 1
        elif token in ("allOf", "anyOf", "oneOf", "prefixItems"):
            next(it, None)
    for step in steps[i:]:
        parts.append(f"[{step}]" if isinstance(step, int) else f".{step}")
    return parts


def _join(parts: list[str], *more: str) -> str:
    return "".join(parts + [f".{m}" for m in more]).lstrip(".")


def _schema_causes(error: jsonschema.ValidationError) -> list[dict]:
    """Kubernetes-style causes for one jsonschema error."""
    parts = _field_path(error)
    field = _join(parts)
    keyword, value = error.validator, error.instance
    if keyword == "additionalProperties" and isinstance(value, dict):
        known = _dict(error.schema.get("properties"))
        return [
            _cause(_join(parts, k), "FieldValueInvalid", f'unknown field "{_join(parts, k)}"')
            for k in value
            if k not in known
        ]
    if keyword == "required" and isinstance(value, dict):
        return [_required(_join(parts, k)) for k in error.validator_value if k not in value]
    if keyword == "type":
        types = error.validator_value
        expected = " or ".join(t for t in ([types] if isinstance(types, str) else types) if t != "null")
        detail = f"Invalid value: {_render(value)}: must be of type {expected}"
        return [_cause(field, "FieldValueTypeInvalid", detail)]
    if keyword == "enum":
        supported = ", ".join(json.dumps(v) for v in error.validator_value if v is not None)
        return [_cause(field, "FieldValueNotSupported", f"Unsupported value: {_render(value)}: supported values: {supported}")]
    if keyword == "pattern":
        detail = _QUANTITY_MESSAGE if error.validator_value == QUANTITY_PATTERN else f"should match '{error.validator_value}'"
        return [_invalid(field, value, detail)]
    if keyword == "maxLength":
        return [_cause(field, "FieldValueTooLong", f"Too long: may not be more than {error.validator_value} bytes")]
    if keyword == "maxItems":
        return [_cause(field, "FieldValueTooMany", f"Too many: must have at most {error.validator_value} items")]
    if keyword == "minLength":
        return [_invalid(field, value, f"should be at least {error.validator_value} chars long")]
    if keyword == "oneOf":
        return [_invalid(field, value, "must validate one and only one schema (oneOf)")]
    if keyword == "anyOf":
        return [_invalid(field, value, "must validate at least one schema (anyOf)")]
    return [_invalid(field, value, error.message)]


# --- metadata --------------------------------------------------------------------

#: Which name rule each kind follows (default: DNS-1123 subdomain), as in Kubernetes' registry.
NAME_RULES = {
    ("", "Namespace"): is_dns1123_label,
    ("", "Service"): is_dns1035_label,
}


def metadata_causes(kind: Kind, meta) -> list[dict]:
    """Problems with ``metadata`` as apimachinery's ``ValidateObjectMeta`` finds them.

    Name required and well-formed for its kind, namespace a DNS-1123 label,
    label keys/values and annotation keys well-formed, annotations within
    256 KiB in total.
    """
    if not isinstance(meta, dict):
        return [] if meta is not None else [_required("metadata.name", "name or generateName is required")]
    causes = []
    name = meta.get("name")
    if not name:
        causes.append(_required("metadata.name", "name or generateName is required"))
    elif isinstance(name, str):
        rule = NAME_RULES.get((kind.group, kind.kind), is_dns1123_subdomain)
        causes += [_invalid("metadata.name", name, msg) for msg in rule(name)]
    namespace = meta.get("namespace")
    if kind.namespaced and isinstance(namespace, str) and namespace:
        causes += [_invalid("metadata.namespace", namespace, msg) for msg in is_dns1123_label(namespace)]
    elif not kind.namespaced and namespace:
        causes.append(_forbidden("metadata.namespace", "not allowed on this type"))
    for key, value in _dict(meta.get("labels")).items():
        causes += [_invalid("metadata.labels", key, msg) for msg in is_qualified_name(key)]
        if isinstance(value, str):
            causes += [_invalid("metadata.labels", value, msg) for msg in is_valid_label_value(value)]
    annotations = _dict(meta.get("annotations"))
    size = 0
    for key, value in annotations.items():
        causes += [_invalid("metadata.annotations", key, msg) for msg in is_qualified_name(key.lower())]
        size += len(key.encode()) + (len(value.encode()) if isinstance(value, str) else 0)
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        detail = f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"
        causes.append(_cause("metadata.annotations", "FieldValueTooLong", detail))
    return causes


# --- update rules ----------------------------------------------------------------

_POD_UPDATE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
_IMMUTABLE_WHEN_SET = "field is immutable when `immutable` is set"


def _with_old_images(new_list, old_list):
    if not (isinstance(new_list, list) and isinstance(old_list, list) and len(new_list) == len(old_list)):
        return new_list
    out = []
    for new, old in zip(new_list, old_list, strict=True):
        if isinstance(new, dict) and isinstance(old, dict):
            new = {k: v for k, v in new.items() if k != "image"}
            if "image" in old:
                new["image"] = old["image"]
        out.append(new)
    return out


def _pod_update(new: dict, old: dict) -> list[dict]:
    """Kubernetes ``ValidatePodUpdate``: only images, activeDeadlineSeconds, tolerations change; nodeName is set once."""
    spec, before = _dict(new.get("spec")), _dict(old.get("spec"))
    if spec == before:
        return []
    candidate = dict(spec)
    for key in ("containers", "initContainers"):
        if key in candidate:
            candidate[key] = _with_old_images(candidate[key], before.get(key))
    mutable = ["activeDeadlineSeconds", "tolerations"]
    if not before.get("nodeName"):
        mutable.append("nodeName")
    for key in mutable:
        candidate.pop(key, None)
        if key in before:
            candidate[key] = before[key]
    if candidate == before:
        return []
    changed = sorted(k for k in set(candidate) | set(before) if candidate.get(k) != before.get(k))
    return [_forbidden("spec", _POD_UPDATE_MESSAGE + "\n  changed: " + ", ".join(f"spec.{k}" for k in changed))]


def _same_quantity(a, b) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except (TypeError, ValueError):
        return a == b


_PVC_UPDATE_MESSAGE = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"


def _pvc_update(new: dict, old: dict) -> list[dict]:
    """Kubernetes ``ValidatePersistentVolumeClaimUpdate``: class, modes, mode and bound volume are fixed; storage changes only on a Bound claim, and only grows.

    The message of a change to an unbound claim's storage names the changed
    field, where Kubernetes prints a Go diff of the two specs.
    """
    spec, before = _dict(new.get("spec")), _dict(old.get("spec"))
    causes = _immutable("spec.storageClassName", spec.get("storageClassName"), before.get("storageClassName"))
    causes += _immutable("spec.accessModes", spec.get("accessModes") or [], before.get("accessModes") or [])
    causes += _immutable("spec.volumeMode", spec.get("volumeMode") or "Filesystem", before.get("volumeMode") or "Filesystem")
    if before.get("volumeName"):
        causes += _immutable("spec.volumeName", spec.get("volumeName"), before["volumeName"])
    size = _dict(_dict(spec.get("resources")).get("requests")).get("storage")
    old_size = _dict(_dict(before.get("resources")).get("requests")).get("storage")
    if _dict(old.get("status")).get("phase") != "Bound" and not _same_quantity(size, old_size):
        causes.append(_forbidden("spec", _PVC_UPDATE_MESSAGE + "\n  changed: spec.resources.requests.storage"))
        return causes
    try:
        shrinks = parse_quantity(size) < parse_quantity(old_size)
    except (TypeError, ValueError):
        shrinks = False  # a malformed or missing size is the schema's or the create rule's to report
    if shrinks:
        causes.append(_forbidden("spec.resources.requests.storage", "field can not be less than previous value"))
    return causes


def _secret_data(obj: dict) -> dict:
    """Secret data as stored: ``stringData`` folded into ``data`` (base64), as the API server does."""
    data = dict(_dict(obj.get("data")))
    for key, value in _dict(obj.get("stringData")).items():
        if isinstance(value, str):
            data[key] = base64.b64encode(value.encode()).decode()
    return data


def _immutable_data(new: dict, old: dict, fields: dict) -> list[dict]:
    if old.get("immutable") is not True:
        return []
    causes = [_forbidden(field, _IMMUTABLE_WHEN_SET) for field, get in fields.items() if get(new) != get(old)]
    if new.get("immutable") is not True:
        causes.append(_forbidden("immutable", _IMMUTABLE_WHEN_SET))
    return causes


def _secret_update(new: dict, old: dict) -> list[dict]:
    """Kubernetes ``ValidateSecretUpdate``: type is fixed; data is fixed once ``immutable: true``."""
    causes = _immutable("type", new.get("type") or "Opaque", old.get("type") or "Opaque")
    return causes + _immutable_data(new, old, {"data": _secret_data})


def _configmap_update(new: dict, old: dict) -> list[dict]:
    """Kubernetes ``ValidateConfigMapUpdate``: data and binaryData are fixed once ``immutable: true``."""
    return _immutable_data(
        new,
        old,
        {
            "data": lambda o: _dict(o.get("data")),
            "binaryData": lambda o: _dict(o.get("binaryData")),
        },
    )


def _service_update(new: dict, old: dict) -> list[dict]:
    """Kubernetes ``ValidateServiceUpdate``: a set clusterIP (and clusterIPs[0]) never changes.

    Unless the Service becomes ``type: ExternalName``, which has no cluster IP.
    """
    spec, before = _dict(new.get("spec")), _dict(old.get("spec"))
    if spec.get("type") == "ExternalName" or not before.get("clusterIP"):
        return []
    causes = _immutable("spec.clusterIP", spec.get("clusterIP"), before["clusterIP"])
    new_ips, old_ips = spec.get("clusterIPs") or [], before.get("clusterIPs") or []
    if old_ips and new_ips and new_ips[0] != old_ips[0]:
        causes.append(_invalid("spec.clusterIPs[0]", new_ips[0], "may not change once set"))
    return causes


def _volumesnapshot_update(new: dict, old: dict) -> list[dict]:
    """The VolumeSnapshot CRD's rules: ``spec.source`` fields are immutable."""
    source = _dict(_dict(new.get("spec")).get("source"))
    before = _dict(_dict(old.get("spec")).get("source"))
    causes = []
    for key in ("persistentVolumeClaimName", "volumeSnapshotContentName"):
        if source.get(key) != before.get(key):
            causes.append(_invalid(f"spec.source.{key}", source.get(key), f"{key} is immutable"))
    return causes


#: Update rules by (group, kind), beyond the metadata rules every kind has.
UPDATE_RULES = {
    ("", "Pod"): _pod_update,
    ("", "PersistentVolumeClaim"): _pvc_update,
    ("", "Secret"): _secret_update,
    ("", "ConfigMap"): _configmap_update,
    ("", "Service"): _service_update,
    ("snapshot.storage.k8s.io", "VolumeSnapshot"): _volumesnapshot_update,
}


def update_causes(kind: Kind, new: dict, old: dict) -> list[dict]:
    """Problems with changing ``old`` into ``new`` (Kubernetes ``ValidateObjectMetaUpdate`` plus the kind's update rule)."""
    meta, before = _dict(new.get("metadata")), _dict(old.get("metadata"))
    causes = _immutable("metadata.name", meta.get("name"), before.get("name"))
    causes += _immutable("metadata.namespace", meta.get("namespace") or "", before.get("namespace") or "")
    if meta.get("uid") and before.get("uid"):
        causes += _immutable("metadata.uid", meta["uid"], before["uid"])
    rule = UPDATE_RULES.get((kind.group, kind.kind))
    if rule is not None:
        causes += rule(new, old)
    return causes


def _container_name_causes(spec: dict) -> list[dict]:
    causes = []
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            name = _dict(container).get("name")
            if isinstance(name, str) and name:
                causes += [_invalid(f"spec.{key}[{i}].name", name, detail) for detail in is_dns1123_label(name)]
    return causes


def _port_number_causes(field: str, value) -> list[dict]:
    if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= 65535:
        return [_invalid(field, value, "must be between 1 and 65535, inclusive")]
    return []


def _service_port_causes(spec: dict) -> list[dict]:
    causes = []
    for i, port in enumerate(spec.get("ports") or []):
        port = _dict(port)
        causes += _port_number_causes(f"spec.ports[{i}].port", port.get("port"))
        causes += _port_number_causes(f"spec.ports[{i}].targetPort", port.get("targetPort"))
    return causes


#: Rules of a kind's spec the schema cannot state, checked on create and update (Kubernetes ``ValidatePodSpec``, ``ValidateService``).
SPEC_RULES = {("", "Pod"): _container_name_causes, ("", "Service"): _service_port_causes}


def spec_causes(kind: Kind, obj: dict) -> list[dict]:
    """Problems :data:`SPEC_RULES` find in ``obj``'s spec: container names (RFC 1123 labels), Service port numbers."""
    rule = SPEC_RULES.get((kind.group, kind.kind))
    spec = obj.get("spec")
    return rule(spec) if rule is not None and isinstance(spec, dict) else []


def create_causes(kind: Kind, obj: dict) -> list[dict]:
    """Rules the schema cannot state: a PVC needs an access mode and a storage request (``ValidatePersistentVolumeClaimSpec``)."""
    if (kind.group, kind.kind) != ("", "PersistentVolumeClaim"):
        return []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    causes = []
    if not spec.get("accessModes"):
        causes.append(_required("spec.accessModes", "at least 1 access mode is required"))
    if "storage" not in _dict(_dict(spec.get("resources")).get("requests")):
        causes.append(_required("spec.resources[storage]"))
    return causes


# --- the validator ---------------------------------------------------------------


class Validator:
    """Validates objects the way a real API server would on create/update.

    Schema (kubernetes-validate strict for built-in kinds, the trimmed OpenAPI
    definitions for KubeVirt, CDI and snapshot kinds), object metadata
    (``ValidateObjectMeta``) and, on update, immutable fields
    (``ValidateObjectMetaUpdate`` and each kind's ``Validate*Update``).
    Compiled schemas are cached per kind for the life of the process.
    """

    def __init__(self, kinds=KINDS, kubernetes_version: str = KUBERNETES_VERSION):
        self.kinds = tuple(kinds)
        self.kubernetes_version = kubernetes_version

    def schema_validator(self, kind: Kind) -> jsonschema.protocols.Validator:
        """The compiled (and cached) jsonschema validator for ``kind``."""
        return _compiled(kind.schema, kind.kind, kind.api_version, self.kubernetes_version)

    def causes(self, kind: Kind, obj: dict, old: dict | None = None) -> list[dict]:
        """Every problem with ``obj`` as a list of Status causes; empty when valid.

        ``old`` is the stored object on update (None on create).
        """
        if not isinstance(obj, dict):
            return [_cause("", "FieldValueTypeInvalid", f"Invalid value: {_render(obj)}: must be of type object")]
        causes = []
        errors_found = sorted(self.schema_validator(kind).iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
        for error in errors_found:
            causes += _schema_causes(error)
        causes += metadata_causes(kind, obj.get("metadata"))
        causes += spec_causes(kind, obj)
        if old is None:
            causes += create_causes(kind, obj)
        else:
            causes += update_causes(kind, obj, old)
        unique = []
        for cause in causes:
            if cause not in unique:
                unique.append(cause)
        return unique

    def validate(self, kind: Kind, obj: dict, old: dict | None = None) -> None:
        """Raise errors.invalid(...) (422) if obj is not valid; `old` is the stored object on update (None on create)."""
        causes = self.causes(kind, obj, old)
        if causes:
            name = _dict(obj.get("metadata")).get("name", "") if isinstance(obj, dict) else ""
            raise errors.invalid(kind.kind, name if isinstance(name, str) else "", causes, kind.group)

