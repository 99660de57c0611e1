#!/usr/bin/env bash
# bench/etcd.sh: acquire + run `true` + release on a loopback etcd, lockrun
# beside `etcdctl lock NAME true` (and lockrun on a file, for scale), over
# plain HTTP/2 and over TLS; then handoff latency: a holder exits, how long
# until the queued waiter's command starts (also with --slots 1, where
# the binary has slots on lock URLs).
#
#   bench/etcd.sh [--runs N] [--quick]
#
#   --quick         a smoke test in well under 2 minutes: 15 runs and 6
#                   handoffs per tool unless --runs or HANDOFFS say otherwise
#
#   LOCKRUN=path    lockrun binary with lock URLs (default: built here with
#                   `cargo build-static --features etcd` into
#                   target/etcd/<host tuple>/release/)
#   HANDOFFS=N      handoff repetitions per tool (default 25)
#   LOCKRUN_BEFORE=path  another lockrun binary (an older build, with etcd)
#                   measured beside LOCKRUN: in the hyperfine table, and in
#                   the same handoff rounds (tool `before`), so that a
#                   before/after comparison sees the same load
#
# Starts its own etcd on free loopback ports with a temp data dir, and stops
# it at the end; the TLS certificates are made with openssl. Needs bash >= 5,
# hyperfine, etcd, etcdctl and openssl (Debian: apt-get install hyperfine
# etcd-server etcd-client openssl).
# Exit status: 0 measured; 2 cannot run.
set -euo pipefail

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_args "$@"
die() { echo "etcd.sh: $*" >&2; exit 2; }
for t in hyperfine etcd etcdctl openssl; do
  command -v "$t" >/dev/null 2>&1 || die "$t not found (Debian: apt-get install hyperfine etcd-server etcd-client openssl)"
done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${LOCKRUN:-}" ]; then
  # Ask cargo where it put the binary (target/etcd/<host tuple>/release:
  # the static build, as install.sh builds it).
  LOCKRUN=$(cd "$ROOT" && CARGO_TARGET_DIR=$ROOT/target/etcd cargo build-static --quiet --features etcd \
    --bin lockrun --message-format=json-render-diagnostics \
    | sed -n 's/.*"executable":"\([^"]*\/lockrun\)".*/\1/p' | tail -1) || die "build failed"
  [ -n "$LOCKRUN" ] || die "cargo build named no lockrun binary"
fi
[ -x "$LOCKRUN" ] || die "LOCKRUN=$LOCKRUN is not executable"
# The floors (bench/floors/README.md): `floor-run`, the like-for-like one,
# takes its turn in the hyperfine table and the handoff rounds.
floor=$(build_floor etcd floor-etcd)

free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  die "no free port"
}
dir=$(mktemp -d)
client=$(free_port) tls=$(free_port) peer=$(free_port)
# A CA and a server certificate for 127.0.0.1 (P-256, as production
# set-ups usually have).
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 1 -subj /CN=bench-ca 2>/dev/null
openssl req "${ec[@]}" -keyout "$dir/server.key" -out "$dir/server.csr" -subj /CN=bench 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$dir/ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
  -out "$dir/server.pem" -days 1 -extfile "$dir/ext" 2>/dev/null || die "openssl failed"
# One etcd, two client listeners: plain on $client, TLS on $tls.
etcd --name bench --data-dir "$dir/data" \
  --listen-client-urls "http://127.0.0.1:$client,https://127.0.0.1:$tls" \
  --advertise-client-urls "http://127.0.0.1:$client" \
  --cert-file "$dir/server.pem" --key-file "$dir/server.key" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "bench=http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
# `|| true`: under set -e a killed etcd's status (143) would end the trap
# before the clean-up and become the script's exit status.
trap 'kill "$etcd_pid" 2>/dev/null || true; wait "$etcd_pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
ready=0
for _ in $(seq 200); do
  # `check` exits 1 (free) once etcd answers, 69 while it cannot be reached.
  rc=0; "$LOCKRUN" check -q "etcd://127.0.0.1:$client/ready" || rc=$?
  [ "$rc" -eq 1 ] && { ready=1; break; }
  sleep 0.05
done
[ "$ready" = 1 ] || die "etcd did not answer within 10s (log: $dir/etcd.log)"

export ETCDCTL_API=3
# lockrun and etcdctl read the same variables; only the endpoint differs.
unset ETCDCTL_ENDPOINTS ETCDCTL_CACERT ETCDCTL_CERT ETCDCTL_KEY ETCDCTL_USER ETCDCTL_PASSWORD
unset LOCKRUN_ETCD_ENDPOINTS LOCKRUN_ETCD_CACERT LOCKRUN_ETCD_CERT LOCKRUN_ETCD_KEY LOCKRUN_ETCD_USER LOCKRUN_ETCD_PASSWORD
ca=$dir/ca.pem
before_row=()
[ -z "${LOCKRUN_BEFORE:-}" ] || before_row=(-n "before: lockrun etcd://.../bench true" "$LOCKRUN_BEFORE etcd://127.0.0.1:$client/bench true")
echo "# etcd $(etcd --version | head -1 | awk '{print $3}'), loopback, $RUNS runs each; $(nproc) CPUs"
floor_row=()
[ -z "$floor" ] || floor_row=(-n "floor-run bench true" "$floor 127.0.0.1:$client --run bench -- true")
hyperfine -N --warmup 10 --runs "$RUNS" --style basic --export-markdown "$dir/table.md" \
  -n "lockrun etcd://.../bench true" "$LOCKRUN etcd://127.0.0.1:$client/bench true" \
  -n "etcdctl lock bench true" "etcdctl --endpoints 127.0.0.1:$client lock bench true" \
  -n "lockrun --cacert CA etcd://.../bench true (TLS)" "$LOCKRUN --cacert $ca etcd://127.0.0.1:$tls/bench true" \
  -n "etcdctl --cacert CA lock bench true (TLS)" "etcdctl --cacert $ca --endpoints https://127.0.0.1:$tls lock bench true" \
  -n "lockrun FILE true (for scale)" "$LOCKRUN $dir/bench.lock true" "${before_row[@]}" "${floor_row[@]}" >/dev/null
cat "$dir/table.md"

# ---------------------------------------------------------------- handoff
# A holder runs `read; date +%s%N` under the lock, fed through a FIFO; a
# waiter queues behind it (seen in etcd: two keys under NAME/), then the
# holder is released and the waiter's command stamps the clock.
HANDOFFS=${HANDOFFS:-25}
keys_under() { etcdctl --endpoints "127.0.0.1:$client" get --prefix "$1/" --keys-only | grep -c . || true; }
handoff_once() { # $1 = lockrun|etcdctl|lockrun-tls|etcdctl-tls|lockrun-slots, $2 = lock name; prints waiter - holder in µs
  local tool=$1 name=$2 fifo=$dir/fifo.$RANDOM hold_out=$dir/hold.$RANDOM wait_out=$dir/wait.$RANDOM
  mkfifo "$fifo"
  local run
  case $tool in
    lockrun) run=("$LOCKRUN" "etcd://127.0.0.1:$client/$name") ;;
    before) run=("$LOCKRUN_BEFORE" "etcd://127.0.0.1:$client/$name") ;;
    lockrun-tls) run=("$LOCKRUN" --cacert "$ca" "etcd://127.0.0.1:$tls/$name") ;;
    # One slot: the same queue, plus the slot machinery (the first in line
    # watches deletions under NAME/, and takes its slot number before its
    # command starts: one more write on the way).
    lockrun-slots) run=("$LOCKRUN" --slots 1 "etcd://127.0.0.1:$client/$name") ;;
    # The like-for-like floor (bench/floors/README.md): a key, a watch on
    # the key ahead, the command, the delete; nothing else.
    floor-run) run=("$floor" "127.0.0.1:$client" --run "$name" --) ;;
    etcdctl) run=(etcdctl --endpoints "127.0.0.1:$client" lock "$name" --) ;;
    etcdctl-tls) run=(etcdctl --cacert "$ca" --endpoints "https://127.0.0.1:$tls" lock "$name" --) ;;
  esac
  "${run[@]}" sh -c "read _ <'$fifo'; date +%s%N" >"$hold_out" &
  local holder=$!
  for _ in $(seq 400); do [ "$(keys_under "$name")" -ge 1 ] && break; sleep 0.01; done
  "${run[@]}" date +%s%N >"$wait_out" &
  local waiter=$!
  for _ in $(seq 400); do [ "$(keys_under "$name")" -ge 2 ] && break; sleep 0.01; done
  [ "$(keys_under "$name")" -ge 2 ] || die "the $tool waiter never queued"
  # The waiter has queued; give it a moment to be watching (a lockrun
  # waiter reads the key ahead and opens its watch after creating its key).
  sleep 0.05
  echo go >"$fifo"
  timeout 20 tail --pid="$waiter" -f /dev/null || die "the $tool waiter did not finish"
  wait "$holder" "$waiter" || true
  local h w; h=$(grep -E '^[0-9]+$' "$hold_out" | tail -1); w=$(grep -E '^[0-9]+$' "$wait_out" | tail -1)
  rm -f "$fifo" "$hold_out" "$wait_out"
  echo $(( (w - h) / 1000 ))
}
echo
echo "# handoff: holder exits -> waiter's command starts, $HANDOFFS reps each, tools interleaved (ms)"
echo "# lockrun: $LOCKRUN${LOCKRUN_BEFORE:+; before: $LOCKRUN_BEFORE}; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-12s %8s %8s %8s\n' tool p50 p90 max
tools=(lockrun etcdctl lockrun-tls etcdctl-tls)
[ -n "$floor" ] && tools+=(floor-run)
[ -n "${LOCKRUN_BEFORE:-}" ] && tools+=(before)
# A lockrun without --slots on lock URLs (before issue 14) is measured without it.
"$LOCKRUN" --slots 1 "etcd://127.0.0.1:$client/probe-slots" true 2>/dev/null && tools+=(lockrun-slots)
# Round by round, each tool in turn: a load that comes and goes falls on
# every row alike.
for i in $(seq "$HANDOFFS"); do
  for tool in "${tools[@]}"; do
    handoff_once "$tool" "handoff-$tool-$i" >>"$dir/samples.$tool"
  done
done
for tool in "${tools[@]}"; do
  sort -n "$dir/samples.$tool" | awk -v t="$tool" '{a[NR]=$1} END {
    printf "%-12s %8.2f %8.2f %8.2f\n", t, a[int((NR+1)/2)]/1000, a[int(NR*0.9+0.5)]/1000, a[NR]/1000 }'
done

# The floor (bench/floors/README.md): etcd's own release -> wake-up, one
# client's delete to another's watch event, with nothing of lockrun.
if [ -n "$floor" ]; then
  last=$("$floor" "127.0.0.1:$client" "$HANDOFFS" | tail -1)
  echo "$last" | awk '{
    printf "%-12s %8.2f %8.2f %8s  (the floor: delete -> watch event; one round trip %.2f)\n", "floor", $2/1000, $4/1000, "-", $6/1000 }'
  # Issue 34's goals, against the like-for-like floor.
  floor_goals lockrun "$dir/samples.lockrun" "$dir/samples.floor-run"
  run_goal lockrun "$(table_mean "$dir/table.md" "lockrun etcd://.../bench true")" \
    "$(table_mean "$dir/table.md" "floor-run bench true")" "$(echo "$last" | awk '{ print $6 }')"
else
  echo "# floor: examples/floor-etcd.rs did not build"
fi
