#!/usr/bin/env python3
"""Generate the wrapper Go modules that build KubeVirt's and CDI's control plane.

kubevirt.io/kubevirt replaces kubevirt.io/api, kubevirt.io/client-go and
github.com/golang/glog with folders of its repository (./staging/src/...);
kubevirt.io/containerized-data-importer does the same with
kubevirt.io/containerized-data-importer-api. So ``go install
kubevirt.io/kubevirt/cmd/virt-api@vX`` is refused, as for Kubernetes
(tools/k8s). The wrapper modules written here require the release, mirror its
replace list, and point each staged module at its published release
(kubevirt.io/api and client-go at the KubeVirt version, the CDI API at the CDI
version, glog at GLOG_VERSION): see tools/gomodwrap.py. The kubevirt wrapper
also holds one small command of ours, ``kubevirt-install-objects`` (its
main.go is not generated), which prints virt-operator's install strategy.

Usage: python3 tools/kubevirt/gen_gomod.py [--out DIR] [--no-tidy]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import gomodwrap  # noqa: E402  (tools/gomodwrap.py, shared with tools/k8s)


def _kubevirt_staged(mod: str, version: str, versions: dict) -> str:
    if mod == "github.com/golang/glog":
        return f"{mod} {versions['GLOG_VERSION']}"
    return f"{mod} {version}"  # kubevirt.io/api, kubevirt.io/client-go


WRAPPERS = {
    "kubevirt": {
        "module": "kubevirt.io/kubevirt",
        "version_key": "KUBEVIRT_VERSION",
        "tools": [
            "kubevirt.io/kubevirt/cmd/virt-controller",
            "kubevirt.io/kubevirt/cmd/virt-api",
            # ours (modules/kubevirt/kubevirt-install-objects/main.go): prints
            # virt-operator's install strategy, for the real plane to apply
            "workspacespawner.invalid/controlplane/kubevirt/kubevirt-install-objects",
        ],
        "published": _kubevirt_staged,
    },
    "cdi": {
        "module": "kubevirt.io/containerized-data-importer",
        "version_key": "CDI_VERSION",
        "tools": [
            "kubevirt.io/containerized-data-importer/cmd/cdi-controller",
            "kubevirt.io/containerized-data-importer/cmd/cdi-apiserver",
            # ours (modules/cdi/cdi-install-objects/main.go): prints cdi-operator's
            # resources, for the real plane to apply
            "workspacespawner.invalid/controlplane/cdi/cdi-install-objects",
        ],
        # kubevirt.io/containerized-data-importer-api, published with the release's version
        "published": lambda mod, v, _versions: f"{mod} {v}",
    },
}


def main() -> int:
    return gomodwrap.main("tools/kubevirt/gen_gomod.py", WRAPPERS, HERE, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
