#!/usr/bin/env bash
# A second Docker engine on this machine, as a stand-in for a second swarm
# node (docs/compose.md, "Several machines"; tests/swarm_two_nodes.rs):
# `dockerd` with its own data root, exec root, socket and pid file, inside a
# network namespace joined to this host by a veth pair, so that it has its
# own address (NODE_IP) and reaches the host's engine at HOST_IP the way
# another machine on the LAN would. dockerd is started with nsenter, not
# `ip netns exec`, which would remount /sys and hide the cgroup mounts
# ("Devices cgroup isn't mounted").
#
# Usage: compose/second-engine.sh start|stop
# Environment (defaults):
#   NAME=flitnet-node2       network namespace, state directory
#   VETH=fn2                 veth ends VETH-h (host) and VETH-n (namespace)
#   HOST_IP=10.250.0.1 NODE_IP=10.250.0.2 PREFIX=24
#   STATE=/var/tmp/$NAME     data root, exec root, socket, pid file, log
#   STORAGE=overlay2         storage driver (vfs where overlayfs is unavailable)
# `start` prints the engine's DOCKER_HOST (unix://$STATE/docker.sock).
# Root only (namespaces, veth, dockerd).
set -euo pipefail

NAME=${NAME:-flitnet-node2}
VETH=${VETH:-fn2}
HOST_IP=${HOST_IP:-10.250.0.1}
NODE_IP=${NODE_IP:-10.250.0.2}
PREFIX=${PREFIX:-24}
STATE=${STATE:-/var/tmp/$NAME}
STORAGE=${STORAGE:-overlay2}
SOCK="$STATE/docker.sock"
D2=(docker -H "unix://$SOCK")

die() { echo "second-engine: $*" >&2; exit 1; }

start() {
    for tool in ip nsenter dockerd docker; do
        command -v "$tool" >/dev/null || die "$tool is not installed"
    done
    [ "$(id -u)" = 0 ] || die "needs root (network namespace, veth pair, dockerd)"
    ip netns list | grep -qw "^$NAME" && die "network namespace $NAME exists already (stop it first)"
    ip link show "$VETH-h" >/dev/null 2>&1 && die "interface $VETH-h exists already"
    mkdir -p "$STATE/data" "$STATE/exec"
    ip netns add "$NAME"
    ip link add "$VETH-h" type veth peer name "$VETH-n"
    ip link set "$VETH-n" netns "$NAME"
    ip addr add "$HOST_IP/$PREFIX" dev "$VETH-h"
    ip link set "$VETH-h" up
    ip -n "$NAME" addr add "$NODE_IP/$PREFIX" dev "$VETH-n"
    ip -n "$NAME" link set "$VETH-n" up
    ip -n "$NAME" link set lo up
    ip -n "$NAME" route add default via "$HOST_IP"
    # Its own configuration file: the host's /etc/docker/daemon.json may
    # name the host's data root. STORAGE=vfs works on any backing
    # filesystem (slowly: every container copies the image).
    echo "{\"storage-driver\": \"$STORAGE\"}" >"$STATE/daemon.json"
    nsenter --net="/var/run/netns/$NAME" \
        dockerd --config-file "$STATE/daemon.json" \
        --data-root "$STATE/data" --exec-root "$STATE/exec" \
        --pidfile "$STATE/docker.pid" -H "unix://$SOCK" \
        >"$STATE/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 1 60); do
        if "${D2[@]}" version >/dev/null 2>&1; then
            echo "unix://$SOCK"
            return 0
        fi
        sleep 0.5
    done
    tail -5 "$STATE/dockerd.log" >&2 || true
    die "dockerd in $NAME did not answer on $SOCK within 30 s (log: $STATE/dockerd.log)"
}

stop() {
    if [ -S "$SOCK" ]; then
        "${D2[@]}" swarm leave --force >/dev/null 2>&1 || true
        ids=$("${D2[@]}" ps -aq 2>/dev/null || true)
        [ -z "$ids" ] || "${D2[@]}" rm -f $ids >/dev/null 2>&1 || true
    fi
    if [ -f "$STATE/docker.pid" ]; then
        pid=$(cat "$STATE/docker.pid")
        if kill -TERM "$pid" 2>/dev/null; then
            for _ in $(seq 1 60); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.25
            done
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    # Mounts dockerd left behind (network namespaces of its sandboxes).
    for m in $(grep -o " $STATE/[^ ]*" /proc/mounts | sort -r || true); do
        umount -l "$m" 2>/dev/null || true
    done
    ip netns del "$NAME" 2>/dev/null || true
    ip link del "$VETH-h" 2>/dev/null || true
    rm -rf "$STATE"
    ! ip netns list | grep -qw "^$NAME" || die "network namespace $NAME is still there"
    ! ip link show "$VETH-h" >/dev/null 2>&1 || die "interface $VETH-h is still there"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 start|stop" ;;
esac
