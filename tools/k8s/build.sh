#!/usr/bin/env bash
# Build the real control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd; and kubectl of the same version for the tests) from
# the pinned Go modules, into a cache folder outside
# the checkout:
#   ${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}/k8s/<k8s>-etcd<etcd>/bin
# Reuses the folder when its marker (written last) matches the wrapper go.mod
# and go.sum files. Prints the bin folder on its last line.
#
# Environment: WORKSPACESPAWNER_CACHE (cache root), K8S_BUILD_P (go build -p,
# default: number of cores), K8S_BUILD_FORCE=1 (ignore the marker).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

cache_root="${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}"
key="${K8S_VERSION}-etcd${ETCD_VERSION}"
out="$cache_root/k8s/$key"
bin="$out/bin"
marker="$out/.built"

# Go's own caches live under the cache root too, shared by all pinned
# versions, so a warm rebuild (or a version bump) is cheap.
export GOMODCACHE="$cache_root/k8s/gomodcache"
export GOCACHE="$cache_root/k8s/gocache"
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOTELEMETRY=off

stamp="$(cat "$here/build.sh" "$here/versions.env" "$here"/modules/*/go.mod "$here"/modules/*/go.sum | sha256sum | cut -d' ' -f1)"
if [[ "${K8S_BUILD_FORCE:-0}" != 1 && -f "$marker" ]] && grep -qx "stamp=$stamp" "$marker" \
    && [[ -x "$bin/kube-apiserver" && -x "$bin/kube-controller-manager" && -x "$bin/kube-scheduler" && -x "$bin/etcd" ]]; then
    echo "reusing $bin (marker $marker)" >&2
    echo "$bin"
    exit 0
fi

rm -f "$marker"
mkdir -p "$bin" "$out/src" "$GOMODCACHE" "$GOCACHE"
par="${K8S_BUILD_P:-$(nproc)}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

for m in kube etcd; do
    mkdir -p "$out/src/$m"
    cp "$here/modules/$m/go.mod" "$here/modules/$m/go.sum" "$out/src/$m/"
done

# Kubernetes: the version variables that `/version` and `--version` report
# (what hack/lib/version.sh sets). The commit of the tag is not known from the
# module proxy, so gitCommit is set empty (instead of the '$Format:%H$'
# placeholder the source carries).
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
kpkg=k8s.io/component-base/version
kflags="-s -w -X $kpkg.gitVersion=$K8S_VERSION -X $kpkg.gitMajor=1 -X $kpkg.gitMinor=$minor"
kflags+=" -X $kpkg.gitCommit= -X $kpkg.gitTreeState=archive -X $kpkg.buildDate=$build_date"
echo "building kube-apiserver kube-controller-manager kube-scheduler kubectl $K8S_VERSION (-p $par)" >&2
(cd "$out/src/kube" && go build -p "$par" -trimpath -ldflags "$kflags" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl)

# etcd: the version string is a constant in go.etcd.io/etcd/api/v3/version;
# GitSHA is a variable, set to say where the build came from.
echo "building etcd $ETCD_VERSION" >&2
(cd "$out/src/etcd" && go build -p "$par" -trimpath \
    -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$ETCD_VERSION" \
    -o "$bin/etcd" go.etcd.io/etcd/server/v3)

"$bin/kube-apiserver" --version >&2
"$bin/etcd" --version >&2
printf 'k8s=%s\netcd=%s\nbuilt=%s\nstamp=%s\n' "$K8S_VERSION" "$ETCD_VERSION" "$build_date" "$stamp" > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$bin"
