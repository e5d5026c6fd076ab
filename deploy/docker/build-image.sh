#!/usr/bin/env bash
# `make image`: build the minibroker image (deploy/Dockerfile) with the legacy builder.
#
# The base: $MINIBROKER_BASE_IMAGE when set; else python:3.11-slim-bookworm when it is
# present or can be pulled; else the offline Debian base (deploy/docker/build-offline-base.sh,
# built once and kept as minibroker-base:bookworm).
#
# The context is the project's files only (git's tracked and untracked-but-not-ignored
# files, sent as a tar on stdin) plus the host's extra CA certificates, copied into
# deploy/docker/extra-ca/: no .venv, no data, no caches, and so no .dockerignore needed.
#
# Environment: MINIBROKER_IMAGE (default minibroker:latest), MINIBROKER_BASE_IMAGE,
# MINIBROKER_IMAGE_EXTRAS (pyproject extras to install too, e.g. "dev").
set -euo pipefail

cd "$(dirname "$0")/../.."
image="${MINIBROKER_IMAGE:-minibroker:latest}"
registry_base="python:3.11-slim-bookworm"
offline_base="minibroker-base:bookworm"

die() { echo "make image: $*" >&2; exit 1; }

docker info >/dev/null 2>&1 || die "no Docker engine answers (is dockerd running, may you use it?)"

base="${MINIBROKER_BASE_IMAGE:-}"
if [ -z "$base" ]; then
    if docker image inspect "$registry_base" >/dev/null 2>&1; then
        base="$registry_base"
    elif timeout 300 docker pull -q "$registry_base" >/dev/null 2>&1; then
        base="$registry_base"
    else
        echo "make image: $registry_base cannot be pulled; using the offline Debian base $offline_base" >&2
        if ! docker image inspect "$offline_base" >/dev/null 2>&1; then
            deploy/docker/build-offline-base.sh "$offline_base"
        fi
        base="$offline_base"
    fi
fi

# The host's extra CA certificates (a TLS-intercepting proxy's, a company's): pip in the
# image needs them exactly when pip on the host does. Replaced on every build.
ca_dir=deploy/docker/extra-ca
find "$ca_dir" -maxdepth 1 -name '*.crt' -delete
for crt in /usr/local/share/ca-certificates/*.crt; do
    [ -f "$crt" ] && cp "$crt" "$ca_dir/"
done

start=$SECONDS
build=(docker build --network host --force-rm --pull=false
    --build-arg "BASE_IMAGE=$base" --build-arg "EXTRAS=${MINIBROKER_IMAGE_EXTRAS:-}"
    -f deploy/Dockerfile -t "$image")
echo "make image: building $image from $base" >&2
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Files that exist (a deleted but still tracked file is skipped), then the certificates.
    { git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done
      find "$ca_dir" -maxdepth 1 -name '*.crt' -print0
    } | tar --null -T - -c -f - | "${build[@]}" -
else
    "${build[@]}" .
fi
echo "make image: $image built in $((SECONDS - start)) s" >&2
# Earlier builds of ours that this one replaced (untagged now): their layers, not the cache.
docker image prune -f --filter label=io.minibroker.image=1 >/dev/null || true
