#!/usr/bin/env bash
# `make images`: the base, switch and host images, tagged with the project version.
# Docker's layer cache rebuilds only what changed; a rebuilt image's predecessor is removed.
set -euo pipefail
version="${1:?usage: build.sh VERSION PYTHON}"
python="${2:?usage: build.sh VERSION PYTHON}"
cd "$(dirname "$0")/.."

previous="$(docker images -q "fabric-twin-switch:$version") $(docker images -q "fabric-twin-host:$version")"

bash images/base.sh "$version"
# The switch's frr user takes the host's ids: the configs bound in belong to the host's frr.
docker build -q --build-arg VERSION="$version" \
  --build-arg FRR_UID="$(id -u frr)" --build-arg FRR_GID="$(id -g frr)" \
  -t "fabric-twin-switch:$version" images/switch
rm -rf build/wheels
"$python" -m pip wheel -q --wheel-dir build/wheels/deps .
mkdir -p build/wheels/project && mv build/wheels/deps/fabric_twin-*.whl build/wheels/project/
# The source digest labels the host image; the docker runtime refuses an image of other code.
docker build -q --build-arg VERSION="$version" --build-arg SOURCE="$("$python" -m twin.lab.runtime.images digest)" \
  -f images/host/Dockerfile -t "fabric-twin-host:$version" .

dangling=" $(docker images -q --filter dangling=true | tr '\n' ' ') "
for id in $previous; do
  if [[ "$dangling" == *" $id "* ]]; then
    docker rmi "$id" >/dev/null 2>&1 || true  # still used by a container: leave it
  fi
done
