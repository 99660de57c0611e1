#!/bin/sh
# Installs what the fault harness needs, if missing (Debian): etcd 3.4
# (etcd-server, etcd-client), PostgreSQL (postgresql), Redis (redis-server,
# redis-sentinel, redis-tools), iproute2, util-linux's
# flock, python3; then builds lockrun with every lock URL
# (cargo build --release --all-features) unless $LOCKRUN names a binary.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
need=""
command -v etcd >/dev/null 2>&1 || need="$need etcd-server"
command -v etcdctl >/dev/null 2>&1 || need="$need etcd-client"
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need="$need postgresql"
command -v redis-server >/dev/null 2>&1 || need="$need redis-server"
command -v redis-sentinel >/dev/null 2>&1 || need="$need redis-sentinel"
command -v redis-cli >/dev/null 2>&1 || need="$need redis-tools"
command -v ip >/dev/null 2>&1 || need="$need iproute2"
command -v flock >/dev/null 2>&1 || need="$need util-linux"
[ -x /usr/bin/python3 ] || need="$need python3"
command -v protoc >/dev/null 2>&1 || [ -n "${LOCKRUN:-}" ] || need="$need protobuf-compiler"
if [ -n "$need" ]; then
    echo "setup: apt-get install$need" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
    # Debian starts the packaged servers; the harness runs its own
    systemctl stop etcd postgresql redis-server redis-sentinel >/dev/null 2>&1 || service etcd stop >/dev/null 2>&1 || true
    service redis-server stop >/dev/null 2>&1 || true
    service redis-sentinel stop >/dev/null 2>&1 || true
    service postgresql stop >/dev/null 2>&1 || true
fi
if [ -z "${LOCKRUN:-}" ]; then
    (cd "$root" && cargo build --release --all-features --locked -q)
fi
