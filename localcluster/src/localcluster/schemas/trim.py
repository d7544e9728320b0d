"""Extract the definitions the local cluster needs from the full KubeVirt and CDI OpenAPI specs.

Run once when the upstream specs are refreshed::

    python -m localcluster.schemas.trim /path/to/shared/schemas

For each spec, starts from the root definitions of the kinds the local
cluster serves, follows ``$ref`` transitively (including the
``k8s.io.api.core``/``apimachinery`` types they reference) and writes exactly
those definitions, unchanged, next to this file as ``<name>.trimmed.json``.
Everything else (paths, parameters, unrelated kinds) is dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: Source file -> root definitions (the kinds the local cluster serves from it).
ROOTS: dict[str, tuple[str, ...]] = {
    "kubevirt-openapi.json": ("v1.VirtualMachine", "v1.VirtualMachineInstance"),
    "cdi-openapi.json": ("v1beta1.DataVolume", "v1beta1.DataSource"),
}

#: A trimmed file past this size means the roots pull in far more than they should.
MAX_BYTES = 400 * 1024

_PREFIX = "#/definitions/"


def _refs(node) -> set[str]:
    """Every definition name a schema fragment refers to (``#/definitions/<name>``)."""
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                if not ref.startswith(_PREFIX):
                    raise ValueError(f"unsupported $ref {ref!r}")
                found.add(ref[len(_PREFIX):])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def reachable(definitions: dict, roots) -> list[str]:
    """Names of the definitions reachable from ``roots`` by ``$ref``, sorted."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in definitions:
            raise KeyError(f"definition {name!r} is referenced but missing")
        seen.add(name)
        todo.extend(_refs(definitions[name]) - seen)
    return sorted(seen)


def trim(spec: dict, roots, source: str) -> dict:
    """The trimmed document: the source's swagger/info plus the reachable definitions."""
    definitions = spec["definitions"]
    info = dict(spec.get("info", {}))
    info["x-trimmed-from"] = source
    info["x-trimmed-roots"] = list(roots)
    return {
        "swagger": spec.get("swagger", "2.0"),
        "info": info,
        "definitions": {name: definitions[name] for name in reachable(definitions, roots)},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder holding kubevirt-openapi.json and cdi-openapi.json")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent, help="where to write (default: next to this file)")
    args = parser.parse_args(argv)
    status = 0
    for filename, roots in ROOTS.items():
        spec = json.loads((args.source / filename).read_text(encoding="utf-8"))
        trimmed = trim(spec, roots, filename)
        text = json.dumps(trimmed, indent=1, ensure_ascii=False) + "\n"
        target = args.out / filename.replace(".json", ".trimmed.json")
        target.write_text(text, encoding="utf-8")
        size = len(text.encode("utf-8"))
        print(f"{target.name}: {len(trimmed['definitions'])} of {len(spec['definitions'])} definitions, {size // 1024} KiB")
        if size > MAX_BYTES:
            print(f"{target.name} is larger than {MAX_BYTES // 1024} KiB: check the roots", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
