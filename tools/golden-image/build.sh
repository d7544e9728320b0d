#!/usr/bin/env bash
# Build the golden image of VM workspaces from Debian's packages (issue #40), into a cache folder outside
# the checkout:
#   ${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}/golden-image/<suite>-<key>/
# holding disk.img (a raw ext4 filesystem, the whole disk: no partition table), vmlinuz and initrd.img (the
# tree's own kernel and initramfs, for QEMU's -kernel/-initrd; root=/dev/vda). <key> is a hash of build.sh and
# versions.env (and of tools/code-server's recipe: the image carries code-server, built by tools/code-server/install.sh,
# which reuses its own cache). Reuses the folder when its marker (written last) holds that key. Prints the folder last.
#
# Needs root (mmdebstrap's root mode, the chroot for pip), and mmdebstrap and e2fsprogs (README.md).
# Environment: WORKSPACESPAWNER_CACHE (cache root), GOLDEN_IMAGE_FORCE=1 (ignore the marker).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

cache_root="${WORKSPACESPAWNER_CACHE:-$HOME/.cache/workspacespawner}"
# code-server's recipe is part of the image's (the image carries its build)
code_server_recipe=("$here/../code-server/install.sh" "$here/../code-server/versions.env")
stamp="$(cat "$here/build.sh" "$here/versions.env" "${code_server_recipe[@]}" | sha256sum | cut -c1-16)"
out="$cache_root/golden-image/$DEBIAN_SUITE-$stamp"
marker="$out/.built"

if [[ "${GOLDEN_IMAGE_FORCE:-0}" != 1 && -f "$marker" ]] && grep -qx "stamp=$stamp" "$marker" \
    && [[ -f "$out/disk.img" && -f "$out/vmlinuz" && -f "$out/initrd.img" ]]; then
    echo "reusing $out (marker $marker)" >&2
    echo "$out"
    exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "build.sh needs root (mmdebstrap's root mode and a chroot); run it with sudo" >&2
    exit 1
fi
for cmd in mmdebstrap mkfs.ext4; do
    command -v "$cmd" >/dev/null || { echo "build.sh needs $cmd: apt-get install -y mmdebstrap e2fsprogs" >&2; exit 1; }
done

# code-server and its Node.js, from tools/code-server's cache (built there first when missing): the image gets the
# package and Node.js, without Node.js's C headers, and a wrapper on the PATH, as the singleuser image has it.
code_server_out="$(dirname "$(bash "$here/../code-server/install.sh" | tail -n 1)")"

rm -rf "$out"
work="$cache_root/golden-image/.build-$stamp"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
tree="$work/tree"
started=$SECONDS

# The guest's own configuration, written into the tree before the hooks below run.
cat > "$work/fstab" <<'FSTAB'
/dev/vda / ext4 errors=remount-ro 0 1
FSTAB
# NoCloud only (KubeVirt's cloudInitNoCloud is a `cidata` disk): cloud-init probes nothing else at boot.
# /etc/hosts names the guest's host name (sudo looks it up). No locale module: its default, en_US.UTF-8, is
# not generated in a minbase tree (update-locale fails and cloud-init reports an error); the tree's
# /etc/default/locale says C.UTF-8, which glibc has built in. The schema wants a string: "false" turns the module
# off as the boolean did, without an "Invalid cloud-config provided" warning on every boot.
cat > "$work/90-datasource.cfg" <<'CFG'
datasource_list: [NoCloud, None]
manage_etc_hosts: true
locale: "false"
CFG

cat > "$work/code-server" <<'SH'
#!/bin/sh
exec /opt/code-server/node/bin/node /opt/code-server/app/node_modules/code-server/out/node/entry.js "$@"
SH

# pip in the tree trusts the host's CA bundle while it builds (a machine behind an HTTPS proxy with its own CA
# reaches PyPI only so); the image keeps Debian's bundle.
host_ca="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"

# minbase without documentation, man pages or locales; mmdebstrap removes apt's lists and caches itself.
# The customize hooks run after the packages are installed: the guest's files, then the Python venv (pip runs
# inside the tree, with the host's resolv.conf that mmdebstrap puts there while it builds).
echo "building $DEBIAN_SUITE with: $DEBIAN_PACKAGES" >&2
# shellcheck disable=SC2086
mmdebstrap --mode=root --variant=minbase --format=directory \
    --include="${DEBIAN_PACKAGES// /,}" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --aptopt='Acquire::Languages "none"' \
    --aptopt='APT::Install-Recommends "false"' \
    --customize-hook="install -m 0644 '$work/fstab' \"\$1/etc/fstab\"" \
    --customize-hook="install -m 0644 '$work/90-datasource.cfg' \"\$1/etc/cloud/cloud.cfg.d/90-datasource.cfg\"" \
    --customize-hook='echo localhost > "$1/etc/hostname"' \
    --customize-hook='echo LANG=C.UTF-8 > "$1/etc/default/locale"' \
    --customize-hook='chroot "$1" python3 -m venv /opt/workspace/venv' \
    --customize-hook="install -m 0644 '$host_ca' \"\$1/tmp/host-ca.crt\"" \
    --customize-hook="chroot \"\$1\" env -u PIP_FIND_LINKS PIP_CERT=/tmp/host-ca.crt REQUESTS_CA_BUNDLE=/tmp/host-ca.crt SSL_CERT_FILE=/tmp/host-ca.crt /opt/workspace/venv/bin/pip install --no-cache-dir --disable-pip-version-check -q jupyterhub==$JUPYTERHUB_VERSION jupyterlab==$JUPYTERLAB_VERSION jupyter-server-proxy==$JUPYTER_SERVER_PROXY_VERSION jupyter-vscode-proxy==$JUPYTER_VSCODE_PROXY_VERSION" \
    --customize-hook='rm -f "$1/tmp/host-ca.crt"' \
    --customize-hook='ln -s /opt/workspace/venv/bin/jupyterhub-singleuser /opt/workspace/venv/bin/jupyter-lab "$1/usr/local/bin/"' \
    --customize-hook="mkdir -p \"\$1/opt/code-server\" && cp -a '$code_server_out/node' '$code_server_out/app' \"\$1/opt/code-server/\"" \
    --customize-hook='rm -rf "$1/opt/code-server/node/include"' \
    --customize-hook="install -m 0755 '$work/code-server' \"\$1/usr/local/bin/code-server\"" \
    --customize-hook='rm -rf "$1"/var/cache/apt/*.bin "$1"/var/log/*.log "$1"/root/.cache' \
    "$DEBIAN_SUITE" "$tree" "$DEBIAN_MIRROR" >&2

# The kernel and initramfs the tree installed, readable by the user who runs QEMU (Debian's vmlinuz is 0600).
kernel="$(ls "$tree/lib/modules")"
install -m 0644 "$tree/boot/vmlinuz-$kernel" "$work/vmlinuz"
install -m 0644 "$tree/boot/initrd.img-$kernel" "$work/initrd.img"
# The tree as an ext4 filesystem, without mounting anything (mkfs.ext4 -d copies owners and modes).
mkfs.ext4 -q -L root -d "$tree" "$work/disk.img" "$IMAGE_SIZE" >&2
chmod 0644 "$work/disk.img"
rm -rf "$tree" "$work/fstab" "$work/90-datasource.cfg" "$work/code-server"
mkdir -p "$(dirname "$out")"
mv "$work" "$out"
trap - EXIT
printf 'suite=%s\nkernel=%s\nbuilt=%s\nseconds=%s\nstamp=%s\n' "$DEBIAN_SUITE" \
    "$kernel" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((SECONDS - started))" "$stamp" > "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$out"
