#!/usr/bin/env bash
# Build benchfleet's images with podman: the leader and the CPU follower (deploy/images/Dockerfile), and the stand-ins
# a cluster without registry access needs (Redis from Debian, the embedded PerfDB).
#
#   scripts/build_images.sh [TAG]        TAG defaults to the package version
#
# BASE (environment) is the Debian bookworm image they build FROM: debian:bookworm-slim where a registry is reachable;
# unset here, the debootstrapped base of ../shared/k8s (`cluster.sh build-base`, cached by podman). Images are tagged
# localhost/benchfleet-{leader,follower,redis,perfdb}:TAG. pip's cache of this machine is lent to the builds (a
# volume, not a layer), so a rebuild downloads nothing it already has.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
TAG="${1:-$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)}"
KIT="${K8S_KIT:-$(cd .. && pwd)/shared/k8s}"

command -v podman >/dev/null 2>&1 || bash "$KIT/cluster.sh" deps >&2   # podman, runc (the kit's Debian packages)
if [ -z "${BASE:-}" ]; then
    BASE=localhost/k8s-kit/bookworm-minbase:latest
    podman image exists "$BASE" || bash "$KIT/cluster.sh" build-base >&2
fi
bash scripts/vendor_web.sh >&2
mkdir -p "${PIP_CACHE_DIR:-$HOME/.cache/pip}"
build() {  # build TAG FILE [TARGET]
    local started=$SECONDS
    podman build -q --build-arg "BASE=$BASE" -v "${PIP_CACHE_DIR:-$HOME/.cache/pip}:/root/.cache/pip" \
        -f "$2" ${3:+--target "$3"} -t "$1" . >/dev/null
    echo "build_images: $1 in $((SECONDS - started)) s, $(podman image inspect --format '{{.Size}}' "$1" | numfmt --to=iec)" >&2
}
build "localhost/benchfleet-leader:$TAG" deploy/images/Dockerfile leader
build "localhost/benchfleet-follower:$TAG" deploy/images/Dockerfile follower
build "localhost/benchfleet-redis:$TAG" deploy/images/redis.Dockerfile
build "localhost/benchfleet-perfdb:$TAG" deploy/images/perfdb.Dockerfile
echo "$TAG"
