#!/usr/bin/env bash
# bench/redis.sh: acquire + run `true` + release on a loopback Redis, beside
# the floor: one `redis-cli SET NAME 1 NX PX 10000` (connect, one round
# trip, disconnect), and lockrun on a file for scale; then the handoff: a
# holder's command ends, how long until the waiting lockrun's command
# starts (woken by the release message).
#
#   bench/redis.sh [--runs N] [--quick]
#
#   --quick         a smoke test in well under 2 minutes: 15 runs and 6
#                   handoffs per tool unless --runs or HANDOFFS say otherwise
#
#   LOCKRUN=path    lockrun binary with Redis lock URLs (default: built
#                   here with `cargo build --release --features redis`
#                   into target/redis/<host tuple>/release/)
#   HANDOFFS=N      handoff repetitions (default 25)
#   FREDLOCK=path   the peer row: fredlock (PyPI), a RedLock lock-and-run
#                   CLI meant to replace flock(1) (default: `fredlock` on
#                   PATH; none, no peer rows). 0.1.3 runs only with
#                   pottery 2.0.1 and redis-py 3.5.3 (see bench/README.md):
#                   python3 -m venv /tmp/fl && /tmp/fl/bin/pip install
#                   fredlock==0.1.3 pottery==2.0.1 redis==3.5.3
#
# Starts its own redis-server on a free loopback port (nothing saved) and
# stops it at the end. Needs bash >= 5 and Debian's redis-server and
# redis-tools. Times are wall clock from `date +%s%N` around each run, so
# they include a fork and exec of the measured program. Exit status: 0
# measured; 2 cannot run.
set -euo pipefail

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_args "$@"
die() { echo "redis.sh: $*" >&2; exit 2; }
command -v redis-server >/dev/null 2>&1 || die "redis-server not found (Debian: apt-get install redis-server)"
command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found (Debian: apt-get install redis-tools)"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${LOCKRUN:-}" ]; then
  LOCKRUN=$(cd "$ROOT" && CARGO_TARGET_DIR=$ROOT/target/redis cargo build --release --locked --quiet --features redis \
    --bin lockrun --message-format=json-render-diagnostics \
    | sed -n 's/.*"executable":"\([^"]*\/lockrun\)".*/\1/p' | tail -1) || die "build failed"
  [ -n "$LOCKRUN" ] || die "cargo build named no lockrun binary"
fi
[ -x "$LOCKRUN" ] || die "LOCKRUN=$LOCKRUN is not executable"
# The floors (bench/floors/README.md): `floor-run`, the like-for-like one,
# takes its turn in the table and the handoff rounds.
floor=$(build_floor redis floor-redis)

free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  die "no free port"
}
dir=$(mktemp -d)
port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$dir"' EXIT
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 200); do [ "$(cli PING 2>/dev/null)" = PONG ] && break; sleep 0.02; done
[ "$(cli PING 2>/dev/null)" = PONG ] || die "redis-server did not start (log: $dir/log)"
url="redis://127.0.0.1:$port#bench"

# Prints p50, p90 and the mean of the ms it took to run "$@" $RUNS times.
measure() {
  local name=$1; shift
  for _ in $(seq 10); do "$@" >/dev/null; done
  : >"$dir/samples"
  for _ in $(seq "$RUNS"); do
    local t0 t1
    t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 )) >>"$dir/samples"
  done
  sort -n "$dir/samples" | awk -v n="$name" '{a[NR]=$1; s+=$1} END {
    printf "| %-44s | %7.2f | %7.2f | %7.2f |\n", n, a[int((NR+1)/2)]/1000, a[int(NR*0.9+0.5)]/1000, s/NR/1000 }' |
    tee -a "$dir/table"
}
echo "# Redis $(redis-server --version | awk '{print $3}' | sed 's/v=//'), loopback TCP, $RUNS runs each; $(nproc) CPUs; $LOCKRUN"
echo "| | p50 ms | p90 ms | mean ms |"
echo "|---|---:|---:|---:|"
measure "lockrun $url true" "$LOCKRUN" "$url" true
floor() { cli SET bench-floor 1 NX PX 10000 >/dev/null; cli DEL bench-floor >/dev/null; }
measure "redis-cli SET NX PX + redis-cli DEL" floor
measure "redis-cli SET NX PX alone" cli SET bench-one 1 NX PX 1
measure "lockrun FILE true (for scale)" "$LOCKRUN" "$dir/bench.lock" true
if [ -n "$floor" ]; then
  measure "floor-run (the floor: SET NX, run, DEL)" "$floor" "redis://127.0.0.1:$port" --run bench-run -- true
fi
FREDLOCK=${FREDLOCK:-$(command -v fredlock || true)}
# fredlock logs each step on stderr
fred() { "$FREDLOCK" -u "redis://127.0.0.1:$port" "$@" 2>/dev/null; }
if [ -n "$FREDLOCK" ]; then
  measure "fredlock --wait-timeout 0 run true (peer)" fred --name bench-fred --wait-timeout 0 run true
fi

# ---------------------------------------------------------------- handoff
# A holder runs `read; date +%s%N` under the lock, fed through a FIFO; a
# waiter subscribes behind it (PUBSUB NUMSUB on the release channel), then
# the holder is let go and the waiter's command stamps the clock.
HANDOFFS=${HANDOFFS:-25}
handoff_once() { # $1 = lockrun|floor-run, $2 = lock name; prints waiter - holder in µs
  local tool=$1 name=$2 fifo=$dir/fifo.$RANDOM hold_out=$dir/hold.$RANDOM wait_out=$dir/wait.$RANDOM
  local run=("$LOCKRUN" "redis://127.0.0.1:$port#$name") wait=(-w 30)
  # The like-for-like floor (bench/floors/README.md): subscribe, SET NX,
  # the command, DEL + PUBLISH; nothing else (it always waits).
  [ "$tool" = floor-run ] && run=("$floor" "redis://127.0.0.1:$port" --run "$name" --) wait=()
  mkfifo "$fifo"
  "${run[@]}" sh -c "read _ <'$fifo'; date +%s%N" >"$hold_out" &
  local holder=$!
  for _ in $(seq 400); do [ "$(cli EXISTS "$name")" = 1 ] && break; sleep 0.01; done
  if [ "$tool" = floor-run ]; then
    "${run[@]}" date +%s%N >"$wait_out" &
  else
    "${run[0]}" "${wait[@]}" "${run[@]:1}" date +%s%N >"$wait_out" &
  fi
  local waiter=$!
  for _ in $(seq 400); do
    [ "$(cli PUBSUB NUMSUB "$name:released" | tail -1)" -ge 1 ] && break
    sleep 0.01
  done
  echo go >"$fifo"
  wait "$holder" "$waiter" || true
  local h w; h=$(grep -E '^[0-9]+$' "$hold_out" | tail -1); w=$(grep -E '^[0-9]+$' "$wait_out" | tail -1)
  rm -f "$fifo" "$hold_out" "$wait_out"
  echo $(( (w - h) / 1000 ))
}
tools=(lockrun)
[ -n "$floor" ] && tools+=(floor-run)
for tool in "${tools[@]}"; do : >"$dir/samples.$tool"; done
# Round by round, each tool in turn: a load that comes and goes falls on
# every row alike.
for i in $(seq "$HANDOFFS"); do
  for tool in "${tools[@]}"; do handoff_once "$tool" "handoff-$tool-$i" >>"$dir/samples.$tool"; done
done
echo
echo "# handoff: holder's command ends -> waiter's command starts, $HANDOFFS reps each, interleaved (ms)"
for tool in "${tools[@]}"; do
  sort -n "$dir/samples.$tool" | awk -v t="$tool" '{a[NR]=$1} END {
    printf "%-10s p50 %.2f  p90 %.2f  max %.2f\n", t, a[int((NR+1)/2)]/1000, a[int(NR*0.9+0.5)]/1000, a[NR]/1000 }'
done
[ -n "$floor" ] && floor_goals lockrun "$dir/samples.lockrun" "$dir/samples.floor-run"

# The peer's handoff: fredlock's waiter polls (pottery's Redlock retries
# after a random sleep), so there is no subscription to wait for: the
# holder is let go once the waiter has been trying for 0.5 s.
fred_handoff_once() { # $1 = lock name; prints waiter - holder in µs
  local name=$1 fifo=$dir/fifo.$RANDOM hold_out=$dir/hold.$RANDOM wait_out=$dir/wait.$RANDOM
  mkfifo "$fifo"
  fred --name "$name" run -- sh -c "read _ <'$fifo'; date +%s%N" >"$hold_out" &
  local holder=$!
  for _ in $(seq 400); do [ "$(cli EXISTS "redlock:$name")" = 1 ] && break; sleep 0.01; done
  fred --name "$name" --wait-timeout 30 run -- date +%s%N >"$wait_out" &
  local waiter=$!
  sleep 0.5
  echo go >"$fifo"
  wait "$holder" "$waiter" || true
  local h w; h=$(grep -E '^[0-9]+$' "$hold_out" | tail -1); w=$(grep -E '^[0-9]+$' "$wait_out" | tail -1)
  rm -f "$fifo" "$hold_out" "$wait_out"
  echo $(( (w - h) / 1000 ))
}
if [ -n "$FREDLOCK" ]; then
  : >"$dir/fred-handoffs"
  for i in $(seq "$HANDOFFS"); do fred_handoff_once "fred-handoff-$i" >>"$dir/fred-handoffs"; done
  echo "# handoff, fredlock (peer), $HANDOFFS reps (ms)"
  sort -n "$dir/fred-handoffs" | awk '{a[NR]=$1} END {
    printf "p50 %.2f  p90 %.2f  max %.2f\n", a[int((NR+1)/2)]/1000, a[int(NR*0.9+0.5)]/1000, a[NR]/1000 }'
fi

# The floor (bench/floors/README.md): Redis's own release -> wake-up, a
# script's DEL + PUBLISH to a subscriber's message, nothing of lockrun.
if [ -n "$floor" ]; then
  echo "# handoff floor (DEL+PUBLISH -> subscriber), $HANDOFFS reps (ms)"
  last=$("$floor" "redis://127.0.0.1:$port" "$HANDOFFS" | tail -1)
  echo "$last" | awk '{ printf "p50 %.3f  p90 %.3f  (one round trip, PING: %.3f)\n", $2/1000, $4/1000, $6/1000 }'
  # Issue 34's goal for acquire + run + release, from the table's means.
  mean() { awk -F'|' -v a="$1" 'index($2, a) == 2 { print $5 + 0 }' "$dir/table"; }
  run_goal lockrun "$(mean "lockrun redis")" "$(mean "floor-run")" "$(echo "$last" | awk '{ print $6 }')"
else
  echo "# floor: examples/floor-redis.rs did not build"
fi
