#!/usr/bin/env bash
# Build Kueue's manager from its Go module (sigs.k8s.io/kueue@$KUEUE_VERSION) and keep the manifests the real control
# plane applies (the module's config/: CRDs, RBAC, webhooks, the visibility API), into a cache folder outside the
# checkout:
#   ${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}/kueue/<version>/{bin/kueue,config/}
# Reuses the folder when its marker (written last) matches this script and versions.env. Prints the folder on its
# last line (the value of WORKSPACESPAWNER_KUEUE_DIR).
#
# Environment: WORKSPACESPAWNER_CACHE (cache root), KUEUE_BUILD_P (go build -p, default: number of cores),
# KUEUE_BUILD_FORCE=1 (ignore the marker).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

cache_root="${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}"
out="$cache_root/kueue/$KUEUE_VERSION"
marker="$out/.built"

# Go's own caches, under the cache root and shared by all pinned versions.
export GOMODCACHE="$cache_root/kueue/gomodcache"
export GOCACHE="$cache_root/kueue/gocache"
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOTELEMETRY=off

stamp="$(cat "$here/build.sh" "$here/versions.env" | sha256sum | cut -d' ' -f1)"
if [[ "${KUEUE_BUILD_FORCE:-0}" != 1 && -f "$marker" ]] && grep -qx "stamp=$stamp" "$marker" \
    && [[ -x "$out/bin/kueue" && -d "$out/config/default" ]]; then
    echo "reusing $out (marker $marker)" >&2
    echo "$out"
    exit 0
fi

rm -rf "$out"
mkdir -p "$out/bin" "$GOMODCACHE" "$GOCACHE"
par="${KUEUE_BUILD_P:-$(nproc)}"
# The version variables Kueue's Makefile sets (the tag's commit is not known from the module proxy).
vpkg=sigs.k8s.io/kueue/pkg/version
echo "building kueue $KUEUE_VERSION (-p $par)" >&2
GOBIN="$out/bin" go install -p "$par" -trimpath -ldflags "-s -w -X $vpkg.GitVersion=$KUEUE_VERSION" \
    "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
# The manifests as the module ships them: kustomize bases, which the real plane renders with its kubectl
# (`kubectl kustomize config/default`, the install Kueue's releases publish) and applies.
cp -r "$GOMODCACHE/sigs.k8s.io/kueue@$KUEUE_VERSION/config" "$out/config"
chmod -R u+w "$out/config"
printf 'kueue=%s\nbuilt=%s\nstamp=%s\n' "$KUEUE_VERSION" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$stamp" > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$out"
