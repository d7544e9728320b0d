#!/usr/bin/env bash
# Build KubeVirt's virt-controller and virt-api and CDI's cdi-controller and
# cdi-apiserver from the pinned Go modules (tools/kubevirt/modules), and our
# kubevirt-install-objects (virt-operator's install strategy as JSON), into a
# cache folder outside the checkout:
#   ${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}/kubevirt/<kubevirt>-cdi<cdi>/bin
# Reuses the folder when its marker (written last) matches this script, the
# versions and the wrapper go.mod/go.sum files. Prints the bin folder on its
# last line (the value of WORKSPACESPAWNER_KUBEVIRT_BIN).
#
# Environment: WORKSPACESPAWNER_CACHE (cache root), KUBEVIRT_BUILD_P (go build
# -p, default: number of cores), KUBEVIRT_BUILD_FORCE=1 (ignore the marker).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

cache_root="${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}"
out="$cache_root/kubevirt/${KUBEVIRT_VERSION}-cdi${CDI_VERSION}"
bin="$out/bin"
marker="$out/.built"
binaries=(virt-controller virt-api kubevirt-install-objects cdi-controller cdi-apiserver cdi-install-objects)

# Go's own caches, under the cache root and shared by all pinned versions.
export GOMODCACHE="$cache_root/kubevirt/gomodcache"
export GOCACHE="$cache_root/kubevirt/gocache"
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOTELEMETRY=off

complete() {
    local b
    for b in "${binaries[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
}

stamp="$(cat "$here/build.sh" "$here/versions.env" "$here"/modules/*/go.mod "$here"/modules/*/go.sum \
    "$here"/modules/*/*/*.go | sha256sum | cut -d' ' -f1)"
if [[ "${KUBEVIRT_BUILD_FORCE:-0}" != 1 && -f "$marker" ]] && grep -qx "stamp=$stamp" "$marker" && complete; then
    echo "reusing $bin (marker $marker)" >&2
    echo "$bin"
    exit 0
fi

rm -f "$marker"
mkdir -p "$bin" "$GOMODCACHE" "$GOCACHE"
par="${KUBEVIRT_BUILD_P:-$(nproc)}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
rm -rf "$out/src"
cp -r "$here/modules" "$out/src"

# The version variables their hack/version.sh scripts set (the tag's commit is
# not known from the module proxy: gitCommit stays empty, tree state "archive").
kpkg=kubevirt.io/client-go/version
kflags="-s -w -X $kpkg.gitVersion=$KUBEVIRT_VERSION -X $kpkg.gitTreeState=archive -X $kpkg.buildDate=$build_date"
echo "building virt-controller virt-api $KUBEVIRT_VERSION (-p $par)" >&2
(cd "$out/src/kubevirt" && go build -p "$par" -trimpath -ldflags "$kflags" -o "$bin/" \
    kubevirt.io/kubevirt/cmd/virt-controller \
    kubevirt.io/kubevirt/cmd/virt-api \
    ./kubevirt-install-objects)

cpkg=kubevirt.io/containerized-data-importer/pkg/version
cflags="-s -w -X $cpkg.gitVersion=$CDI_VERSION -X $cpkg.gitTreeState=archive -X $cpkg.buildDate=$build_date"
echo "building cdi-controller cdi-apiserver cdi-install-objects $CDI_VERSION (-p $par)" >&2
(cd "$out/src/cdi" && go build -p "$par" -trimpath -ldflags "$cflags" -o "$bin/" \
    kubevirt.io/containerized-data-importer/cmd/cdi-controller \
    kubevirt.io/containerized-data-importer/cmd/cdi-apiserver \
    ./cdi-install-objects)

complete
printf 'kubevirt=%s\ncdi=%s\nbuilt=%s\nstamp=%s\n' "$KUBEVIRT_VERSION" "$CDI_VERSION" "$build_date" "$stamp" > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$bin"
