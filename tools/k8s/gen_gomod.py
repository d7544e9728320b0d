#!/usr/bin/env python3
"""Generate the wrapper Go modules that build the real control plane.

k8s.io/kubernetes and go.etcd.io/etcd/server/v3 both carry replace directives
that point at directories inside their own repositories (./staging/src/...,
../api, ...). Those only apply when the module is the main module, so
``go install k8s.io/kubernetes/cmd/kube-apiserver@vX`` is refused. A wrapper
module that *requires* the release and mirrors each local replace with the
published module version builds the same code from the module proxy.

For each pinned release (tools/k8s/versions.env) this script reads the
release's own go.mod (``go mod download -json MOD@VERSION`` -> ``.GoMod``),
and writes ``modules/<name>/go.mod`` with:

* the release's ``go`` and ``godebug`` lines,
* ``require`` of the release and ``tool`` lines for the commands to build,
* one ``replace`` per local-path replace of the release, pointing at the
  published version (k8s staging modules: v1.MINOR.PATCH -> v0.MINOR.PATCH;
  etcd sibling modules: the same v3.x.y).

Then it runs ``go mod tidy`` in each wrapper to write go.sum. Nothing of
Kubernetes or etcd is copied into this repository.

Usage: python3 tools/k8s/gen_gomod.py [--out DIR] [--no-tidy]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import gomodwrap  # noqa: E402  (tools/gomodwrap.py, shared with tools/kubevirt)

WRAPPERS = {
    "kube": {
        "module": "k8s.io/kubernetes",
        "version_key": "K8S_VERSION",
        "tools": [
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-scheduler",
            # a kubectl of the same version, for the tests (no version skew)
            "k8s.io/kubernetes/cmd/kubectl",
        ],
        # staging modules are published as v0.<minor>.<patch> for v1.<minor>.<patch>
        "published": lambda mod, v, _versions: f"{mod} {re.sub(r'^v1[.]', 'v0.', v)}",
    },
    "etcd": {
        "module": "go.etcd.io/etcd/server/v3",
        "version_key": "ETCD_VERSION",
        "tools": ["go.etcd.io/etcd/server/v3"],
        "binaries": ["etcd"],
        # sibling modules are published with the same version
        "published": lambda mod, v, _versions: f"{mod} {v}",
    },
}


def main() -> int:
    return gomodwrap.main("tools/k8s/gen_gomod.py", WRAPPERS, HERE, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
