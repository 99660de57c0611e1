#!/usr/bin/env bash
# bench/slots.sh: `lockrun --slots 4` beside GNU sem (parallel) and a loop of
# `flock -n` over 4 files (issue 14).
#
#   bench/slots.sh [--jobs N] [--reps N] [--rounds N] [--tools LIST] [--quick]
#
#   LOCKRUN=path   lockrun binary (default: the one `cargo build --release` builds)
#   BEFORE=path    another lockrun binary (an older build) measured beside it,
#                  interleaved: tools `before` (--slots) and `plain-before`
#   --jobs N       jobs in the throughput row (default 200)
#   --reps N       handoffs measured per tool (default 20)
#   --rounds N     throughput rounds per tool, tools in turn (default 1;
#                  the median is printed)
#   --quick        a smoke test in well under 2 minutes: 50 jobs, 6
#                  handoffs, no sem unless --tools names it
#   --tools LIST   comma list of: lockrun,floor,sem,flockloop (default all;
#                  floor is bench/floors/floor_slots.c, the least a tool with
#                  lockrun's guarantees could do, built with cc). sem
#                  starts a Perl interpreter per job and polls while it
#                  waits: 200 of them load a small machine for minutes, so
#                  on a shared one give it fewer jobs in a run of its own.
#
# Throughput: N jobs (`true`) started at once, at most 4 running: the time
# until all have run, and jobs per second.
# Handoff: 4 slots held, one waiter; a holder's command exits: the time from
# just before that exit to the waiter's command starting (p50, p90), for
# each tool and for a plain `lockrun` lock (one holder, one waiter).
#
# Needs bash >= 5, flock (util-linux), sem (Debian: parallel), awk, mkfifo.
# Exit status: 0 measured; 2 cannot run.
set -euo pipefail

JOBS= REPS= ROUNDS=1 SLOTS=4 TOOLS=
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS=${2:?}; shift 2 ;;
    --reps) REPS=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --tools) TOOLS=${2:?}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "slots.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { echo "slots.sh: $*" >&2; exit 2; }
if [ -n "${QUICK:-}" ]; then
  JOBS=${JOBS:-50} REPS=${REPS:-6}
  TOOLS=${TOOLS:-lockrun,floor,flockloop}
fi
JOBS=${JOBS:-200} REPS=${REPS:-20}
TOOLS=${TOOLS:-lockrun,floor,sem,flockloop}
[ -z "${BEFORE:-}" ] || [ -x "$BEFORE" ] || die "BEFORE=$BEFORE is not an executable file"
[ -z "${BEFORE:-}" ] || [[ ",$TOOLS," == *,before,* ]] || TOOLS=$TOOLS,before
[ "${BASH_VERSINFO[0]}" -ge 5 ] || die "needs bash >= 5 (for EPOCHREALTIME)"
for t in flock awk mkfifo timeout $([[ ",$TOOLS," == *,sem,* ]] && echo sem); do
  command -v "$t" >/dev/null 2>&1 || die "$t not found (Debian: apt-get install util-linux parallel gawk coreutils)"
done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ ",$TOOLS," == *,floor,* ]]; then
  FLOORS=$("$ROOT/bench/floors/build.sh") || die "cannot build bench/floors (a C compiler is needed for the floor)"
fi
if [ -z "${LOCKRUN:-}" ]; then
  echo "# building lockrun (cargo build --release --locked)" >&2
  LOCKRUN=$(cd "$ROOT" && cargo build --release --locked --quiet --bin lockrun --message-format=json-render-diagnostics \
    | sed -n 's/.*"executable":"\([^"]*\/lockrun\)".*/\1/p' | tail -1) || die "cargo build --release failed"
fi
[ -x "$LOCKRUN" ] || die "LOCKRUN=$LOCKRUN is not an executable file"

W=$(mktemp -d "${TMPDIR:-/tmp}/lockrun-slots-bench.XXXXXX") || die "cannot create a temp dir"
export HOME=$W   # sem keeps its semaphores under ~/.parallel
mkdir -p "$W/.parallel"
touch "$W/.parallel/will-cite"
cleanup() { jobs -p | xargs -r kill -9 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
trap 'exit 2' INT TERM

# The N-file loop: try each file without waiting, back off, try again, as
# scripts do it (and portalocker's BoundedSemaphore, every 0.25 s; here
# every 10 ms, to give it its best throughput).
cat >"$W/flockloop" <<'EOF'
#!/bin/sh
# flockloop DIR N COMMAND...
dir=$1 n=$2; shift 2
while :; do
  i=1
  while [ "$i" -le "$n" ]; do
    flock -n "$dir/f.$i" "$@" && exit 0
    [ $? -eq 1 ] || exit 1
    i=$((i + 1))
  done
  sleep 0.01
done
EOF
chmod +x "$W/flockloop"

# Runs one job under TOOL: `run TOOL COMMAND...`.
run() {
  local tool=$1; shift
  case "$tool" in
    lockrun) "$LOCKRUN" --slots "$SLOTS" "$W/L" -- "$@" ;;
    plain) "$LOCKRUN" "$W/P" -- "$@" ;;
    before) "$BEFORE" --slots "$SLOTS" "$W/B" -- "$@" ;;
    plain-before) "$BEFORE" "$W/PB" -- "$@" ;;
    sem) sem --fg -q --id bench -j "$SLOTS" "$@" ;;
    flockloop) "$W/flockloop" "$W" "$SLOTS" "$@" ;;
    floor) "$FLOORS/floor_slots" "$SLOTS" "$W/FL" "$@" ;;
  esac
}

# Prints the jobs per second of one throughput round.
throughput_once() {
  local tool=$1 t0 t1 i
  t0=$EPOCHREALTIME
  for ((i = 0; i < JOBS; i++)); do run "$tool" true & done
  wait
  t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" -v n="$JOBS" 'BEGIN { printf "%.1f %.3f\n", n / (b - a), b - a }'
}

# One handoff: `holders` holders wait on their gates; a waiter queues;
# holder 1 is let go. Prints the gap in microseconds.
handoff_once() {
  local tool=$1 holders=$2 i
  rm -f "$W"/gate* "$W"/released "$W"/started "$W"/ready*
  for ((i = 1; i <= holders; i++)); do
    mkfifo "$W/gate$i"
    run "$tool" bash -c ': > "$3"; read x < "$1"; printf "%s\n" "$EPOCHREALTIME" > "$2"' \
      _ "$W/gate$i" "$W/released.$i" "$W/ready$i" &
  done
  for ((i = 1; i <= holders; i++)); do
    timeout 20 bash -c 'until [ -e "$1" ]; do sleep 0.005; done' _ "$W/ready$i" || die "$tool: holder $i never ran"
  done
  run "$tool" bash -c 'printf "%s\n" "$EPOCHREALTIME" > "$1"' _ "$W/started" &
  local waiter=$!
  sleep 0.3   # the waiter settles into its wait (sem and the loop back off)
  echo go >"$W/gate1"
  timeout 20 bash -c 'until [ -s "$1" ]; do sleep 0.005; done' _ "$W/started" || die "$tool: the waiter never ran"
  for ((i = 2; i <= holders; i++)); do echo go >"$W/gate$i"; done
  wait
  awk -v a="$(cat "$W/released.1")" -v b="$(cat "$W/started")" 'BEGIN { printf "%d\n", (b - a) * 1e6 }'
}

echo "# lockrun: $LOCKRUN${BEFORE:+; before: $BEFORE}"
echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
IFS=, read -r -a CHOSEN <<<"$TOOLS"
for tool in "${CHOSEN[@]}"; do
  case "$tool" in lockrun|before|sem|flockloop|floor) ;; *) die "unknown tool $tool" ;; esac
done
# Throughput: round by round, each tool in turn; the median round.
for ((r = 0; r < ROUNDS; r++)); do
  for tool in "${CHOSEN[@]}"; do throughput_once "$tool" >>"$W/thru.$tool"; done
done
for tool in "${CHOSEN[@]}"; do
  sort -n "$W/thru.$tool" | awk -v t="$tool" -v n="$JOBS" -v s="$SLOTS" '{ v[NR] = $1; w[NR] = $2 }
    END { m = int((NR + 1) / 2); printf "%-12s %4d jobs through %d slots: %6.2f s, %6.1f jobs/s (median of %d)\n", t, n, s, w[m], v[m], NR }'
done
# Handoff: round by round, each row in turn (a plain one-slot lockrun
# handoff beside, for the ratio), so that the load falls on every row alike.
rows=()
[[ ",$TOOLS," == *,lockrun,* ]] && rows+=(plain:1)
[[ ",$TOOLS," == *,before,* ]] && rows+=(plain-before:1)
for tool in "${CHOSEN[@]}"; do rows+=("$tool:$SLOTS"); done
for ((r = 0; r < REPS; r++)); do
  for row in "${rows[@]}"; do handoff_once "${row%:*}" "${row#*:}" >>"$W/handoff.${row%:*}"; done
done
for row in "${rows[@]}"; do
  sort -n "$W/handoff.${row%:*}" | awk -v t="${row%:*}" -v h="${row#*:}" '
    { v[NR] = $1 }
    END { printf "%-12s handoff with %d holder(s): p50 %7.0f us, p90 %7.0f us (%d runs)\n", t, h, v[int(NR * 0.5) + 1], v[int(NR * 0.9) + (NR >= 10 ? 0 : 1)], NR }'
done
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
