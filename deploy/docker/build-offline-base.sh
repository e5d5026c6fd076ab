#!/usr/bin/env bash
# Build a Debian bookworm base image without a container registry (docs/design.md).
#
#   deploy/docker/build-offline-base.sh [IMAGE]      (default: minibroker-base:bookworm)
#
# debootstrap --variant=minbase from the Debian mirror this host's apt uses, with python3,
# python3-venv and ca-certificates, then `docker import`. The image's apt sources are the
# host's Debian sources (bookworm, bookworm-updates, bookworm-security), so `apt-get
# install` in the Dockerfile reaches the same mirrors. Needs root (debootstrap); installs
# debootstrap with apt-get when it is missing.
#
# Environment:
#   MINIBROKER_DEBIAN_MIRROR   the mirror to bootstrap from (default: the host's apt source
#                              for bookworm, else http://deb.debian.org/debian)
#   MINIBROKER_DEBIAN_SUITE    default bookworm
set -euo pipefail

image="${1:-minibroker-base:bookworm}"
suite="${MINIBROKER_DEBIAN_SUITE:-bookworm}"

die() { echo "build-offline-base: $*" >&2; exit 1; }

if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; \
else die "debootstrap needs root (or sudo)"; fi

# The host's Debian repositories as "URI SUITE COMPONENT" lines, from apt's own view of its
# sources (whatever file format or file they are configured in).
host_sources() {
    apt-cache policy 2>/dev/null | awk -v suite="$suite" '
        $1 ~ /^[0-9]+$/ && $2 ~ /^https?:\/\// { uri = $2; split($3, sc, "/"); next }
        uri != "" && /release/ && /o=Debian/ {
            if (sc[1] == suite || sc[1] == suite "-updates" || sc[1] == suite "-security")
                print uri, sc[1], sc[2]
            uri = ""
        }' | sort -u
}

sources="$(host_sources || true)"
mirror="${MINIBROKER_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
    mirror="$(awk -v suite="$suite" '$2 == suite { print $1; exit }' <<<"$sources")"
    mirror="${mirror:-http://deb.debian.org/debian}"
fi
if [ -z "$sources" ]; then
    sources="$mirror $suite main"
fi

if ! command -v debootstrap >/dev/null; then
    echo "build-offline-base: installing debootstrap" >&2
    $sudo apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends debootstrap >/dev/null
fi

rootfs="$(mktemp -d "${TMPDIR:-/tmp}/minibroker-rootfs.XXXXXX")"
cleanup() { $sudo rm -rf --one-file-system "$rootfs"; }
trap cleanup EXIT

echo "build-offline-base: debootstrap --variant=minbase $suite from $mirror" >&2
start=$SECONDS
if ! $sudo debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
    tail -n 30 "$rootfs.log" >&2
    rm -f "$rootfs.log"
    die "debootstrap failed (full log above)"
fi
rm -f "$rootfs.log"

# The host's Debian sources, in the one-line format; nothing else of the host's apt setup
# (third-party repositories would need keyrings the image does not have).
awk '{ printf "deb %s %s %s\n", $1, $2, $3 }' <<<"$sources" | $sudo tee "$rootfs/etc/apt/sources.list" >/dev/null
# apt settings about fetching (e.g. Acquire::Check-Valid-Until for a snapshot mirror).
for conf in /etc/apt/apt.conf.d/*; do
    [ -f "$conf" ] && grep -q '^[[:space:]]*Acquire::' "$conf" && $sudo cp "$conf" "$rootfs/etc/apt/apt.conf.d/"
done
# Keep the image small: no downloaded .debs, no package lists (the Dockerfile updates).
$sudo rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/var/log/*.log "$rootfs"/tmp/* "$rootfs"/root/.cache
echo "build-offline-base: debootstrap took $((SECONDS - start)) s; importing as $image" >&2

$sudo tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    --message "minibroker offline base: debootstrap --variant=minbase $suite" \
    - "$image" >/dev/null
echo "build-offline-base: $image built in $((SECONDS - start)) s" >&2
