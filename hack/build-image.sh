#!/usr/bin/env bash
# Builds our image from the repository's Dockerfile (`make image`; docs/local-fleet.md, Our image) and
# writes it as a docker-archive tar that `ctr -n k8s.io images import` and `docker load` both take.
#
#   hack/build-image.sh [OUT.tar]     (default build/image/kueue-federation.tar)
#
# With Docker: `docker build`, then `docker save`. Without it: `buildah bud` (Debian's buildah, as
# root, vfs storage, chroot isolation). The Dockerfile's base, python:3.11-slim, is pulled when a
# registry answers; when none does, a stand-in of the same name is made once with mmdebstrap
# (bookworm's Python 3.11 with pip, python-is-python3, its EXTERNALLY-MANAGED marker removed, as the
# official image's pip may install system-wide) and kept in buildah's storage. pip in the build reaches
# the package index with this machine's CA bundle mounted at Debian's path.
# The tag is the project's version (pyproject.toml): IMAGE=kueue-federation:<version>.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
IMAGE=${IMAGE:-kueue-federation:$VERSION}
OUT=${1:-build/image/kueue-federation.tar}
BASE=python:3.11-slim
CA=/etc/ssl/certs/ca-certificates.crt
mkdir -p "$(dirname "$OUT")"
t0=$SECONDS

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  docker build -t "$IMAGE" .
  docker save -o "$OUT" "$IMAGE"
  echo "build-image: $IMAGE built with docker into $OUT in $((SECONDS - t0))s"
  exit 0
fi

if ! command -v buildah >/dev/null 2>&1; then
  echo "build-image: neither docker nor buildah is installed; as root: apt-get install buildah mmdebstrap" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "build-image: buildah runs here as root (vfs storage, chroot isolation); run as root or with docker" >&2
  exit 1
fi
B=(buildah --storage-driver vfs)

if ! "${B[@]}" inspect --type image "localhost/$BASE" >/dev/null 2>&1 \
   && ! "${B[@]}" inspect --type image "docker.io/library/$BASE" >/dev/null 2>&1; then
  if timeout 60 "${B[@]}" pull --quiet "docker.io/library/$BASE" >/dev/null 2>&1; then
    echo "build-image: pulled $BASE"
  else
    if ! command -v mmdebstrap >/dev/null 2>&1; then
      echo "build-image: no registry answers for $BASE and mmdebstrap is not installed (apt-get install mmdebstrap)" >&2
      exit 1
    fi
    echo "build-image: no registry answers; making a stand-in $BASE with mmdebstrap (bookworm, Python 3.11)"
    rootfs=$(mktemp -d)
    trap 'rm -rf "$rootfs"' EXIT
    mmdebstrap --quiet --variant=minbase --include=python3,python3-pip,python-is-python3,ca-certificates \
      --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
      --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
      bookworm "$rootfs/rootfs.tar"
    ctr=$("${B[@]}" from scratch)
    mnt=$("${B[@]}" mount "$ctr")
    tar -xf "$rootfs/rootfs.tar" -C "$mnt"
    "${B[@]}" umount "$ctr" >/dev/null
    "${B[@]}" config --env PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
      --cmd python3 "$ctr"
    "${B[@]}" commit --quiet "$ctr" "localhost/$BASE" >/dev/null
    "${B[@]}" rm "$ctr" >/dev/null
  fi
fi

"${B[@]}" bud --quiet --pull=never --isolation chroot --layers=false \
  --volume "$CA:/etc/ssl/certs/ca-certificates.crt:ro" -t "$IMAGE" .
rm -f "$OUT"
"${B[@]}" push --quiet "$IMAGE" "docker-archive:$OUT:$IMAGE"
# The image this replaced, if any, is now untagged: removed, so that storage does not grow build by build.
"${B[@]}" rmi --prune >/dev/null 2>&1 || true
echo "build-image: $IMAGE built with buildah into $OUT in $((SECONDS - t0))s"
