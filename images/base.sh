#!/usr/bin/env bash
# The local Debian base image (no registry here): debootstrap a minimal bookworm, then
# `docker import` it as fabric-twin-base:<version>. Skipped when that tag already exists.
set -euo pipefail
tag="fabric-twin-base:${1:?usage: base.sh VERSION}"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag exists"; exit 0
fi
root=$(mktemp -d /tmp/fabric-twin-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" >/dev/null
tar -C "$root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$tag"
echo "built $tag"
