#!/usr/bin/env bash
# bench/postgres.sh: acquire + run `true` + release on a loopback PostgreSQL,
# lockrun beside psql taking the same advisory lock
# (`psql -c "SELECT pg_advisory_lock(hashtextextended('bench', 0))"`, which
# connects, locks and disconnects), and lockrun on a file for scale; then
# handoff latency: a holder exits, how long until the queued waiter's
# command starts.
#
#   bench/postgres.sh [--runs N] [--quick]
#
#   --quick         a smoke test in well under 2 minutes: 15 runs and 6
#                   handoffs per tool unless --runs or HANDOFFS say otherwise
#
#   LOCKRUN=path    lockrun binary with PostgreSQL lock URLs (default: built
#                   here with `cargo build --release --features postgres`
#                   into target/postgres/<host tuple>/release/)
#   HANDOFFS=N      handoff repetitions per tool (default 25)
#   LOCKRUN_BEFORE=path  another lockrun binary (an older build) measured in
#                   the same handoff rounds, interleaved with the others, so
#                   that a before/after comparison sees the same load
#   SLOTS=N         also measure the handoff with --slots N (default 2; 0: no)
#
# Starts its own PostgreSQL (initdb into a temp dir, as user nobody when run
# as root) on a free loopback port, and stops it at the end. Needs bash >=
# 5, hyperfine and Debian's postgresql package (apt-get install hyperfine
# postgresql). Exit status: 0 measured; 2 cannot run.
set -euo pipefail

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_args "$@"
die() { echo "postgres.sh: $*" >&2; exit 2; }
command -v hyperfine >/dev/null 2>&1 || die "hyperfine not found (Debian: apt-get install hyperfine)"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$PGBIN/postgres" ] || die "PostgreSQL not found (Debian: apt-get install postgresql)"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${LOCKRUN:-}" ]; then
  LOCKRUN=$(cd "$ROOT" && CARGO_TARGET_DIR=$ROOT/target/postgres cargo build --release --locked --quiet --features postgres \
    --bin lockrun --message-format=json-render-diagnostics \
    | sed -n 's/.*"executable":"\([^"]*\/lockrun\)".*/\1/p' | tail -1) || die "build failed"
  [ -n "$LOCKRUN" ] || die "cargo build named no lockrun binary"
fi
[ -x "$LOCKRUN" ] || die "LOCKRUN=$LOCKRUN is not executable"
# The floors (bench/floors/README.md): `floor-run`, the like-for-like one,
# takes its turn in the hyperfine table and the handoff rounds.
floor=$(build_floor postgres floor-postgres)

free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  die "no free port"
}
dir=$(mktemp -d)
as_server=()
if [ "$(id -u)" = 0 ]; then
  chown 65534:65534 "$dir"
  as_server=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
"${as_server[@]}" "$PGBIN/initdb" -U postgres -A trust --no-sync -D "$dir/data" >/dev/null || die "initdb failed"
port=$(free_port)
"${as_server[@]}" "$PGBIN/postgres" -D "$dir/data" -p "$port" -k "$dir" \
  -c listen_addresses=127.0.0.1 -c fsync=off >"$dir/log" 2>&1 &
pg_pid=$!
trap 'kill -INT "$pg_pid" 2>/dev/null || true; wait "$pg_pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 200); do "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" && break; sleep 0.05; done
"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" || die "PostgreSQL did not start (log: $dir/log)"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres PGSSLMODE=disable
PSQL=("$PGBIN/psql" -X -q -At)
CONNINFO="host=$PGHOST port=$PGPORT user=$PGUSER dbname=$PGDATABASE"
echo "# PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), loopback TCP, $RUNS runs each; $(nproc) CPUs"
floor_row=()
[ -z "$floor" ] || floor_row=(-n "floor-run bench true" "$floor '$CONNINFO' --run bench -- true")
hyperfine -N --warmup 10 --runs "$RUNS" --style basic --export-markdown "$dir/table.md" \
  -n "lockrun postgres:///#bench true" "$LOCKRUN postgres:///#bench true" \
  -n "psql -c pg_advisory_lock (baseline)" "${PSQL[*]} -c \"SELECT pg_advisory_lock(hashtextextended('bench', 0))\"" \
  -n "lockrun FILE true (for scale)" "$LOCKRUN $dir/bench.lock true" "${floor_row[@]}" >/dev/null
cat "$dir/table.md"

# ---------------------------------------------------------------- handoff
# A holder runs `read; date +%s%N` under the lock, fed through a FIFO; a
# waiter queues behind it (seen in pg_locks: a session not granted), then
# the holder is released and the waiter's command stamps the clock.
HANDOFFS=${HANDOFFS:-25}
waiting() { "${PSQL[@]}" -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"; }
handoff_once() { # $1 = lockrun|before|slots|psql, $2 = lock name; prints waiter - holder in µs
  local tool=$1 name=$2 fifo=$dir/fifo.$RANDOM hold_out=$dir/hold.$RANDOM wait_out=$dir/wait.$RANDOM
  mkfifo "$fifo"
  local lock="SELECT pg_advisory_lock(hashtextextended('$name', 0))"
  local run=("$LOCKRUN" "postgres:///#$name")
  case $tool in
    before) run=("$LOCKRUN_BEFORE" "postgres:///#$name") ;;
    slots) run=("$LOCKRUN" --slots "$SLOTS" "postgres:///#$name") ;;
    # The like-for-like floor (bench/floors/README.md): lock, run, unlock.
    floor-run) run=("$floor" "$CONNINFO" --run "$name" --) ;;
  esac
  if [ "$tool" != psql ]; then
    # With --slots N, N-1 other holders keep the other slots full, so that
    # the waiter must wait for the measured holder's slot.
    local others=()
    if [ "$tool" = slots ]; then
      mkfifo "$fifo.o"
      for _ in $(seq $((SLOTS - 1))); do
        "${run[@]}" sh -c "read _ <'$fifo.o'" &
        others+=($!)
      done
    fi
    "${run[@]}" sh -c "read _ <'$fifo'; date +%s%N" >"$hold_out" &
  else
    "${PSQL[@]}" -c "$lock" -c "\\! sh -c \"read _ <'$fifo'; date +%s%N\"" >"$hold_out" &
  fi
  local holder=$!
  local want=1; [ "$tool" = slots ] && want=$SLOTS
  for _ in $(seq 400); do
    [ "$("${PSQL[@]}" -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1")" -ge "$want" ] && break
    sleep 0.01
  done
  if [ "$tool" != psql ]; then
    "${run[@]}" date +%s%N >"$wait_out" &
  else
    "${PSQL[@]}" -c "$lock" -c "\\! date +%s%N" >"$wait_out" &
  fi
  local waiter=$!
  if [ "$tool" = slots ]; then
    # The head holds the queue key (the plain lock's) while it sleeps.
    queued() { "${PSQL[@]}" -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('$name', 0)"; }
    for _ in $(seq 400); do [ "$(queued)" -ge 1 ] && break; sleep 0.01; done
    [ "$(queued)" -ge 1 ] || die "the $tool waiter never queued"
  else
    for _ in $(seq 400); do [ "$(waiting)" -ge 1 ] && break; sleep 0.01; done
    [ "$(waiting)" -ge 1 ] || die "the $tool waiter never queued"
  fi
  echo go >"$fifo"
  timeout 20 tail --pid="$waiter" -f /dev/null || die "the $tool waiter did not finish"
  if [ "$tool" = slots ]; then
    for _ in "${others[@]}"; do echo go >"$fifo.o"; done
    wait "${others[@]}" || true
    rm -f "$fifo.o"
  fi
  wait "$holder" "$waiter" || true
  local h w; h=$(grep -E '^[0-9]+$' "$hold_out" | tail -1); w=$(grep -E '^[0-9]+$' "$wait_out" | tail -1)
  rm -f "$fifo" "$hold_out" "$wait_out"
  echo $(( (w - h) / 1000 ))
}
SLOTS=${SLOTS:-2}
tools=(lockrun psql)
[ -n "${LOCKRUN_BEFORE:-}" ] && tools+=(before)
[ "$SLOTS" -ge 2 ] && tools+=(slots)
[ -n "$floor" ] && tools+=(floor-run)
echo
echo "# handoff: holder exits -> waiter's command starts, $HANDOFFS reps each, tools interleaved (ms)"
echo "# lockrun: $LOCKRUN${LOCKRUN_BEFORE:+; before: $LOCKRUN_BEFORE}; slots: --slots $SLOTS, the other slots held"
printf '%-10s %8s %8s %8s\n' tool p50 p90 max
for i in $(seq "$HANDOFFS"); do
  for tool in "${tools[@]}"; do
    handoff_once "$tool" "handoff-$tool-$i" >>"$dir/samples.$tool"
  done
done
for tool in "${tools[@]}"; do
  sort -n "$dir/samples.$tool" | awk -v t="$tool" '{a[NR]=$1} END {
    printf "%-10s %8.2f %8.2f %8.2f\n", t, a[int((NR+1)/2)]/1000, a[int(NR*0.9+0.5)]/1000, a[NR]/1000 }'
done

# The floor (bench/floors/README.md): PostgreSQL's own release -> wake-up,
# one session's pg_advisory_unlock to another's pg_advisory_lock returning.
if [ -n "$floor" ]; then
  last=$("$floor" "$CONNINFO" "$HANDOFFS" | tail -1)
  echo "$last" | awk '{
    printf "%-10s %8.2f %8.2f %8s  (the floor: unlock -> lock returns; one round trip %.2f)\n", "floor", $2/1000, $4/1000, "-", $6/1000 }'
  # Issue 34's goals, against the like-for-like floor.
  floor_goals lockrun "$dir/samples.lockrun" "$dir/samples.floor-run"
  run_goal lockrun "$(table_mean "$dir/table.md" "lockrun postgres:///#bench true")" \
    "$(table_mean "$dir/table.md" "floor-run bench true")" "$(echo "$last" | awk '{ print $6 }')"
else
  echo "# floor: examples/floor-postgres.rs did not build"
fi
