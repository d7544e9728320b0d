#!/usr/bin/env bash
# Build virtiofsd (the vhost-user virtio-fs daemon a real guest's home is shared through) from crates.io with
# cargo, into a cache folder outside the checkout:
#   ${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}/virtiofsd/<version>/bin/virtiofsd
# Reuses the folder when its marker (written last) matches this script and versions.env. Prints the bin folder
# on its last line.
#
# Needs: cargo (rustup's), and Debian's libcap-ng-dev and libseccomp-dev (README.md).
# Environment: WORKSPACESPAWNER_CACHE (cache root), VIRTIOFSD_INSTALL_FORCE=1 (ignore the marker).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

cache_root="${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}"
out="$cache_root/virtiofsd/$VIRTIOFSD_VERSION"
marker="$out/.installed"
stamp="$(cat "$here/install.sh" "$here/versions.env" | sha256sum | cut -d' ' -f1)"
if [[ "${VIRTIOFSD_INSTALL_FORCE:-0}" != 1 && -f "$marker" ]] && grep -qx "stamp=$stamp" "$marker" \
    && [[ -x "$out/bin/virtiofsd" ]]; then
    echo "reusing $out/bin (marker $marker)" >&2
    echo "$out/bin"
    exit 0
fi
command -v cargo >/dev/null || { echo "install.sh needs cargo (https://rustup.rs)" >&2; exit 1; }

rm -f "$marker"
started=$SECONDS
# --locked: the crate's own Cargo.lock, so a rebuild takes the same dependencies.
cargo install --locked --quiet --version "$VIRTIOFSD_VERSION" --root "$out" virtiofsd >&2
rm -f "$out/.crates.toml" "$out/.crates2.json"
printf 'version=%s\nbuilt=%s\nseconds=%s\nstamp=%s\n' "$VIRTIOFSD_VERSION" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "$((SECONDS - started))" "$stamp" > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$out/bin"
