#!/usr/bin/env bash
# bench/builds.sh: the static build (`cargo build-static`) against the plain,
# dynamically linked one (`cargo build --release`): binary size, start-up
# (`lockrun --version`), an uncontended `lockrun L true`, and memory.
#
#   bench/builds.sh [--runs N] [--quick]   (default 300 runs per command per round, 4 rounds;
#                                          --quick: 30, a smoke test once both are built)
#
#   STATIC=path DYNAMIC=path   take these binaries instead of building them
#
# hyperfine -N (no shell), four rounds with the order reversed every other
# round, medians over all runs. Peak RSS (VmHWM) of the lockrun process while
# it holds the lock (`lockrun L sleep 3`, 3 times) and ru_maxrss of
# `lockrun --version` (/usr/bin/time -f %M). Needs bash, hyperfine, python3,
# file and GNU time. Exit status: 0 measured, 2 cannot run.
set -euo pipefail
RUNS=
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
    --quick) RUNS=${RUNS:-30}; shift ;;
    *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2 ;;
  esac
done
RUNS=${RUNS:-300}
die() { echo "builds.sh: $*" >&2; exit 2; }
for t in hyperfine python3 file /usr/bin/time; do command -v "$t" >/dev/null 2>&1 || die "$t not found (Debian: apt-get install hyperfine python3 file time)"; done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
built() { # cargo args... -> path of the lockrun binary cargo built
  (cd "$ROOT" && cargo "$@" --quiet --bin lockrun --message-format=json-render-diagnostics \
    | sed -n 's/.*"executable":"\([^"]*\/lockrun\)".*/\1/p' | tail -1)
}
S=${STATIC:-$(built build-static)} || die "cargo build-static failed"
D=${DYNAMIC:-$(built build --release --locked)} || die "cargo build --release failed"
[ -x "$S" ] && [ -x "$D" ] || die "no binaries ($S, $D)"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT

echo "# $(date -u +%FT%TZ), $(uname -srm), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $(hyperfine --version)"
echo "# static:  $S ($(stat -c %s "$S") bytes; $(file -b "$S" | cut -d, -f1-2,4))"
echo "# dynamic: $D ($(stat -c %s "$D") bytes; $(file -b "$D" | cut -d, -f1-2,4))"
for r in 1 2 3 4; do
  if [ $((r % 2)) = 1 ]; then a=$S b=$D na=static nb=dynamic; else a=$D b=$S na=dynamic nb=static; fi
  hyperfine -N --style none --warmup 50 --runs "$RUNS" --export-json "$W/v$r.json" \
    -n "$na --version" "$a --version" -n "$nb --version" "$b --version" >/dev/null 2>&1
  hyperfine -N --style none --warmup 50 --runs "$RUNS" --export-json "$W/t$r.json" \
    -n "$na L true" "$a $W/$na.lock true" -n "$nb L true" "$b $W/$nb.lock true" >/dev/null 2>&1
done
python3 - "$W" <<'PY'
import glob, json, statistics as st, sys
res = {}
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    for r in json.load(open(f))["results"]:
        e = res.setdefault(r["command"], {"all": [], "rounds": []})
        e["all"] += r["times"]
        e["rounds"].append(st.median(r["times"]))
for k in sorted(res):
    a, rr = res[k]["all"], res[k]["rounds"]
    print(f"{k:18s} median {st.median(a)*1e6:6.0f} µs   round medians {min(rr)*1e6:.0f}–{max(rr)*1e6:.0f} µs   n={len(a)}")
PY
for n in static dynamic; do
  b=$S; [ $n = dynamic ] && b=$D
  hwm=()
  for _ in 1 2 3; do
    "$b" "$W/rss-$n.lock" sleep 3 & p=$!
    c=
    for _ in $(seq 300); do
      # cat, not read: this /proc file's offsets count children, not bytes.
      c=$(cat "/proc/$p/task/$p/children" 2>/dev/null || true); c=${c%% *}
      [ -n "$c" ] && [ "$(cat "/proc/$c/comm" 2>/dev/null)" = sleep ] && break
      sleep 0.01
    done
    [ -n "$c" ] || die "no sleep under $b"
    hwm+=("$(awk '/^VmHWM/ { print $2 }' "/proc/$p/status")")
    kill "$c"; wait "$p" || true
  done
  echo "$n: VmHWM while holding ${hwm[*]} KiB; ru_maxrss of --version $(/usr/bin/time -f %M "$b" --version 2>&1 >/dev/null) KiB"
done
