#!/usr/bin/env bash
# Copies an image to other Docker engines without a registry:
# `docker save` here, `docker load` on each engine (docs/compose.md,
# "Several machines"). An engine is named as DOCKER_HOST names it:
#   unix:///run/other/docker.sock   a second engine on this machine
#   ssh://user@node-2               over ssh (the docker CLI on node-2 is used)
#   tcp://node-3:2376               a TLS-protected TCP endpoint (with DOCKER_TLS_VERIFY/DOCKER_CERT_PATH)
# The image is saved once and streamed to each engine in turn. A swarm
# started from it should name the image by the ID this prints
# (`flitctl compose --image sha256:…`, `docker stack deploy --resolve-image
# never`): a swarm node tries to pull a tag from a registry before it starts
# each task, and without registry access every attempt waits out a timeout.
#
# Usage: compose/push-image.sh IMAGE ENGINE...
# Environment: DOCKER (default docker).
set -euo pipefail

DOCKER=${DOCKER:-docker}
die() { echo "push-image: $*" >&2; exit 1; }
[ $# -ge 2 ] || die "usage: $0 IMAGE ENGINE... (ENGINE as in DOCKER_HOST: unix://..., ssh://user@host, tcp://host:port)"
IMAGE=$1
shift
command -v "$DOCKER" >/dev/null || die "$DOCKER is not installed"
id=$("$DOCKER" image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null) || die "no image $IMAGE here (compose/build-image.sh builds it)"

archive=$(mktemp "${TMPDIR:-/tmp}/flitnet-image.XXXXXX")
trap 'rm -f "$archive"' EXIT
"$DOCKER" save -o "$archive" "$IMAGE"
echo "push-image: $IMAGE ($id) saved, $(( $(stat -c %s "$archive") / 1024 )) KiB"
for engine in "$@"; do
    case "$engine" in
        unix://* | ssh://* | tcp://* | fd://* | npipe://*) ;;
        *) die "engine $engine: give it as DOCKER_HOST would (unix://, ssh://, tcp://)" ;;
    esac
    started=$(date +%s.%N)
    DOCKER_HOST=$engine "$DOCKER" load -q -i "$archive" >/dev/null ||
        die "docker load on $engine failed"
    got=$(DOCKER_HOST=$engine "$DOCKER" image inspect -f '{{.Id}}' "$IMAGE") ||
        die "$engine has no $IMAGE after docker load"
    [ "$got" = "$id" ] || die "$engine holds $IMAGE as $got, not $id"
    printf 'push-image: %s loaded on %s in %s s\n' "$IMAGE" "$engine" "$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
done
echo "push-image: on a swarm, name it by ID: flitctl compose --image $id"
