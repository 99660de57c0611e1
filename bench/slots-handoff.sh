#!/usr/bin/env bash
# bench/slots-handoff.sh: the --slots handoff alone, finer than slots.sh's:
# the waiter's command is `date +%s%N`, not a bash (whose start-up, 2-4 ms
# on the project's VM, is most of slots.sh's handoff rows), and the rows
# take turns round by round: a plain lockrun handoff (one holder), the
# `--slots 4` one (4 holders, one waiter), the C floor
# (bench/floors/floor_slots.c), and BEFORE's two rows when it is given.
#
#   LOCKRUN=path [BEFORE=path] bench/slots-handoff.sh [REPS] [--quick]
#
# Prints p50 and p90 of holder's last stamp -> waiter's command's stamp, in
# microseconds. On a shared machine run it as `chrt -f 10 bench/...` so that
# the rows measure lockrun rather than the other load. Exit status: 0
# measured; 2 cannot run.
set -euo pipefail
REPS=30
for a in "$@"; do case $a in --quick) REPS=6 ;; [0-9]*) REPS=$a ;; *) echo "slots-handoff.sh: unknown argument $a" >&2; exit 2 ;; esac; done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ -x "${LOCKRUN:-}" ] || { echo "slots-handoff.sh: LOCKRUN=path to a lockrun binary" >&2; exit 2; }
[ -z "${BEFORE:-}" ] || [ -x "$BEFORE" ] || { echo "slots-handoff.sh: BEFORE=$BEFORE is not executable" >&2; exit 2; }
FLOORS=$("$ROOT/bench/floors/build.sh") || { echo "slots-handoff.sh: cannot build bench/floors" >&2; exit 2; }
W=$(mktemp -d); trap 'jobs -p | xargs -r kill -9 2>/dev/null || true; rm -rf "$W"' EXIT
run() { local t=$1; shift; case $t in
  slots) "$LOCKRUN" --slots 4 "$W/A" -- "$@" ;; before) "$BEFORE" --slots 4 "$W/B" -- "$@" ;;
  plain) "$LOCKRUN" "$W/P" -- "$@" ;; plain-before) "$BEFORE" "$W/PB" -- "$@" ;;
  floor) "$FLOORS/floor_slots" 4 "$W/FL" "$@" ;; esac; }
once() { local t=$1 h=$2 i
  rm -f "$W"/g* "$W"/r* "$W/s"
  for ((i = 1; i <= h; i++)); do
    mkfifo "$W/g$i"
    run "$t" sh -c ": > $W/r$i.ready; read x < $W/g$i; date +%s%N > $W/r$i" &
  done
  for ((i = 1; i <= h; i++)); do until [ -e "$W/r$i.ready" ]; do sleep 0.005; done; done
  run "$t" date +%s%N >"$W/s" &
  sleep 0.3   # the waiter settles into its wait
  echo go >"$W/g1"
  until [ -s "$W/s" ]; do sleep 0.005; done
  for ((i = 2; i <= h; i++)); do echo go >"$W/g$i"; done
  wait
  echo $(( ($(cat "$W/s") - $(cat "$W/r1")) / 1000 ))
}
rows=(plain:1 slots:4 floor:4)
[ -z "${BEFORE:-}" ] || rows+=(plain-before:1 before:4)
echo "# $LOCKRUN${BEFORE:+; before: $BEFORE}; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < REPS; r++)); do
  for row in "${rows[@]}"; do once "${row%:*}" "${row#*:}" >>"$W/out.${row%:*}"; done
done
for row in "${rows[@]}"; do
  sort -n "$W/out.${row%:*}" | awk -v t="${row%:*}" '{ v[NR] = $1 }
    END { printf "%-13s p50 %6d us  p90 %6d us  (n=%d)\n", t, v[int(NR * 0.5) + 1], v[int(NR * 0.9) + (NR >= 10 ? 0 : 1)], NR }'
done
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
