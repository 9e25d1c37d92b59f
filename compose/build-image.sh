#!/usr/bin/env bash
# Builds the `flitnet:latest` container image (see docs/compose.md):
#   1. switchd, hostd and flitctl as statically linked glibc binaries
#      (RUSTFLAGS=-C target-feature=+crt-static, explicit --target so that
#      build scripts and proc macros stay dynamic host binaries);
#   2. checks with `file` and `ldd` that they really are static, since the
#      image is FROM scratch and has no dynamic loader;
#   3. copies them with compose/Dockerfile into a fresh build context,
#      without debug info (the release profile keeps line tables for
#      profiling on the host; in the image it would triple the size), and
#      runs `docker build`; prints the image size.
#
# Usage: compose/build-image.sh [IMAGE]      (default flitnet:latest)
# Environment: CARGO_BUILD_JOBS, CARGO (default cargo), DOCKER (default docker),
#   PROFILE (default release; the compose test uses `image-test`, the release
#   profile without LTO, which builds several times faster and is plenty for a
#   functional test).
# On a shared machine: nice -n 10 env CARGO_BUILD_JOBS=1 compose/build-image.sh
set -euo pipefail

IMAGE=${1:-flitnet:latest}
TARGET=x86_64-unknown-linux-gnu
BINS=(switchd hostd flitctl)
CARGO=${CARGO:-cargo}
DOCKER=${DOCKER:-docker}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROFILE=${PROFILE:-release}
OUT="$ROOT/target/$TARGET/$PROFILE"
CONTEXT="$ROOT/target/flitnet-image"

die() { echo "build-image: $*" >&2; exit 1; }
for tool in "$CARGO" "$DOCKER" file ldd strip; do
    command -v "$tool" >/dev/null || die "$tool is not installed"
done

started=$(date +%s)
echo "build-image: building ${BINS[*]} (static, $TARGET, profile $PROFILE) into $OUT"
if [ "$PROFILE" = release ]; then
    echo "build-image: fat LTO in a target directory of its own: nothing of 'cargo build --release' is reused;" \
         "minutes (about 8 on 2 cores from scratch); PROFILE=image-test builds without LTO, several times faster"
fi
pkgs=()
for b in "${BINS[@]}"; do pkgs+=(-p "$b"); done
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    "$CARGO" build --profile "$PROFILE" --target "$TARGET" "${pkgs[@]}" --bins

rm -rf "$CONTEXT"
mkdir -p "$CONTEXT"
for b in "${BINS[@]}"; do
    bin="$OUT/$b"
    [ -x "$bin" ] || die "$bin was not built (does the workspace have a '$b' binary?)"
    kind=$(file -b "$bin")
    case "$kind" in
        *"statically linked"* | *"static-pie linked"*) ;;
        *) die "$b is not statically linked: $kind" ;;
    esac
    # ldd exits non-zero on static binaries; only its words matter here.
    deps=$(ldd "$bin" 2>&1 || true)
    case "$deps" in
        *"not a dynamic executable"* | *"statically linked"*) ;;
        *) die "$b needs shared libraries, it would not start FROM scratch:
$deps" ;;
    esac
    strip --strip-debug -o "$CONTEXT/$b" "$bin"
    printf 'build-image: %-8s %6s KiB  %s\n' "$b" "$(( $(stat -c %s "$CONTEXT/$b") / 1024 ))" "${kind%%,*}"
done
cp "$ROOT/compose/Dockerfile" "$CONTEXT/Dockerfile"

echo "build-image: docker build -t $IMAGE"
"$DOCKER" build -t "$IMAGE" "$CONTEXT"
size=$("$DOCKER" image inspect -f '{{.Size}}' "$IMAGE")
echo "build-image: $IMAGE is $size bytes ($(( size / 1024 / 1024 )) MiB), built in $(( $(date +%s) - started )) s"
