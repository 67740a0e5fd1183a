#!/usr/bin/env bash
# Installs the Debian packages real nodes (`localfleet up --real-nodes N`) and `make image` use, when
# any is missing (root; docs/local-fleet.md, Real nodes): containerd, runc, the CNI plugins, a static
# busybox for test pods, gcc and libc6-dev for the pause image, and buildah + mmdebstrap for our image.
set -euo pipefail
PACKAGES=(containerd runc containernetworking-plugins busybox-static gcc libc6-dev iproute2 buildah mmdebstrap)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-real-node-packages: missing ${missing[*]}; as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "install-real-node-packages: apt-get install ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
