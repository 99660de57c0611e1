#!/usr/bin/env bash
# bench/list.sh: `lockrun list`, `holder` and `check` on a host with many
# other locks (issue 34 item 4, issue 31), beside lslocks(8).
#
#   bench/list.sh [--counts LIST] [--reps N] [--quick]
#
#   LOCKRUN=path   lockrun binary (default: the one `cargo build --release` builds)
#   BEFORE=path    a second binary measured in the same run (e.g. an older
#                  build), its columns beside LOCKRUN's
#   --counts LIST  how many other locks, comma list (default 0,1,1000,10000)
#   --reps N       runs per figure; the median is printed (default 5)
#   --quick        a smoke test in well under 2 minutes: counts 0,1,1000,
#                  1 run per figure, BEFORE's list once (unless given)
#   BEFORE_REPS=N  runs of each of BEFORE's figures (default: --reps): a
#                  build from before issue 34 takes minutes for a 1024-slot
#                  `check` beside 5,000 locks
#   BEFORE_LIST_REPS=N  runs of BEFORE's `list` (default: BEFORE_REPS): a
#                  build that inspects each row on its own takes minutes a run
#
# For each count, one helper process (python3) takes that many flock(2)
# locks on files of its own, one descriptor each, and holds them. Beside
# them, one lock held by `lockrun -- sh -c 'read x'` (its holder and its
# command) and one 1024-slot `--slots` lock with nothing held. Timed, each
# the median of N runs, in milliseconds:
#   list      `lockrun list` (every lock on the host)
#   holder    `lockrun holder` on the held lock
#   check     `lockrun check` on the held lock
#   slots     `lockrun check` on the 1024-slot lock
#   lslocks   `lslocks` (util-linux), where installed
# Correctness on the way: `list` must show the held lock's row as held,
# and as many rows as the kernel's table has files; `check` must say 0.
#
# Needs bash >= 5 (EPOCHREALTIME), python3, awk. Exit status: 0 measured;
# 1 a wrong answer; 2 cannot run.
set -euo pipefail

COUNTS= REPS= SLOTS=1024 QUICK=
while [ $# -gt 0 ]; do
  case "$1" in
    --counts) COUNTS=${2:?}; shift 2 ;;
    --reps) REPS=${2:?}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "list.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { echo "list.sh: $*" >&2; exit 2; }
# 10,000 locks take minutes on a busy host (lslocks alone): not in a smoke test.
if [ -n "$QUICK" ]; then COUNTS=${COUNTS:-0,1,1000} REPS=${REPS:-1} BEFORE_LIST_REPS=${BEFORE_LIST_REPS:-1}; fi
COUNTS=${COUNTS:-0,1,1000,10000} REPS=${REPS:-5}
[ "${BASH_VERSINFO[0]}" -ge 5 ] || die "needs bash >= 5 (for EPOCHREALTIME)"
for t in python3 awk mkfifo; do
  command -v "$t" >/dev/null 2>&1 || die "$t not found"
done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${LOCKRUN:-}" ]; then
  echo "# building lockrun (cargo build --release --locked)" >&2
  LOCKRUN=$(cd "$ROOT" && cargo build --release --locked --quiet --bin lockrun --message-format=json-render-diagnostics \
    | sed -n 's/.*"executable":"\([^"]*\/lockrun\)".*/\1/p' | tail -1) || die "cargo build --release failed"
fi
[ -x "$LOCKRUN" ] || die "LOCKRUN=$LOCKRUN is not an executable file"
[ -z "${BEFORE:-}" ] || [ -x "$BEFORE" ] || die "BEFORE=$BEFORE is not an executable file"
MAX=$(echo "$COUNTS" | tr , '\n' | sort -n | tail -1)
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((MAX + 64)) ]; then
  ulimit -n $((MAX + 64)) 2>/dev/null || die "needs $((MAX + 64)) descriptors in one process (ulimit -n is $(ulimit -n))"
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/lockrun-list-bench.XXXXXX") || die "cannot create a temp dir"
cleanup() { jobs -p | xargs -r kill -9 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
trap 'exit 2' INT TERM

# The helper: N files, each opened and flock(2)ed, held until stdin closes.
cat >"$W/hold.py" <<'PY'
import fcntl, os, sys
n, d = int(sys.argv[1]), sys.argv[2]
os.makedirs(d, exist_ok=True)
fds = []
for i in range(n):
    fd = os.open(os.path.join(d, "f%d" % i), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    fds.append(fd)
print("ready", flush=True)
sys.stdin.read()
PY

# The held lock, and the 1024-slot lock (written by one run that holds no
# slot afterwards).
HELD=$W/held.lock SLOTTED=$W/slotted.lock
mkfifo "$W/held.in"
"$LOCKRUN" "$HELD" -- sh -c 'echo ready; read x' <"$W/held.in" >"$W/held.out" &
exec 7>"$W/held.in"
for _ in $(seq 100); do grep -q ready "$W/held.out" 2>/dev/null && break; sleep 0.05; done
grep -q ready "$W/held.out" || die "the held lock's holder did not start"
"$LOCKRUN" --slots "$SLOTS" "$SLOTTED" true || die "cannot make the $SLOTS-slot lock"

median() { sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else printf "%.1f", a[int((NR + 1) / 2)] }'; }
# time_ms CMD...: the median wall time of REPS runs, in ms, output discarded.
time_ms() {
  local i t0 t1 reps=$REPS
  if [ "$1" = --reps ]; then reps=$2; shift 2; fi
  for ((i = 0; i < reps; i++)); do
    t0=$EPOCHREALTIME
    "$@" >/dev/null 2>&1 || true
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }'
  done | median
}

WRONG=0
verify() { # verify BIN COUNT: list's rows and check's answer
  local bin=$1 count=$2 rows
  "$bin" check -q "$HELD" || { echo "list.sh: $bin check says the held lock is not held" >&2; WRONG=1; }
  [ "$bin" = "$LOCKRUN" ] || return 0   # BEFORE's list is slow: timed, not checked
  "$bin" list >"$W/rows" || { echo "list.sh: $bin list failed" >&2; WRONG=1; }
  grep -q "^$HELD[: ].*held" "$W/rows" || { echo "list.sh: $bin list has no held row for $HELD" >&2; WRONG=1; }
  rows=$(grep -c "^$W/many$count/" "$W/rows" || true)
  [ "$rows" = "$count" ] || { echo "list.sh: $bin list shows $rows of the helper's $count locks" >&2; WRONG=1; }
}

echo "# $(uname -sr), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
printf '%-8s' locks
for bin in ${BEFORE:+before} after; do printf ' %10s %10s %10s %10s' "list.$bin" "holder" "check" "slots"; done
command -v lslocks >/dev/null && printf ' %10s' lslocks
printf '   (ms, median of %s)\n' "$REPS"
for count in ${COUNTS//,/ }; do
  mkfifo "$W/hold$count.in"
  python3 "$W/hold.py" "$count" "$W/many$count" <"$W/hold$count.in" >"$W/hold$count.out" &
  exec 8>"$W/hold$count.in"
  for _ in $(seq 600); do grep -q ready "$W/hold$count.out" 2>/dev/null && break; sleep 0.05; done
  grep -q ready "$W/hold$count.out" || die "the helper did not take $count locks"
  printf '%-8s' "$count"
  for bin in ${BEFORE:+"$BEFORE"} "$LOCKRUN"; do
    verify "$bin" "$count"
    reps=$REPS list_reps=$REPS
    [ "$bin" = "$LOCKRUN" ] || { reps=${BEFORE_REPS:-$REPS}; list_reps=${BEFORE_LIST_REPS:-$reps}; }
    printf ' %10s %10s %10s %10s' \
      "$(time_ms --reps "$list_reps" "$bin" list)" "$(time_ms --reps "$reps" "$bin" holder "$HELD")" \
      "$(time_ms --reps "$reps" "$bin" check "$HELD")" "$(time_ms --reps "$reps" "$bin" check "$SLOTTED")"
  done
  command -v lslocks >/dev/null && printf ' %10s' "$(time_ms lslocks)"
  printf '\n'
  exec 8>&-
  wait "$(jobs -p | tail -1)" 2>/dev/null || true
  rm -rf "$W/many$count"
done
exec 7>&-
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
exit "$WRONG"
