#!/usr/bin/env bash
# bench/all.sh: every benchmark in one sitting, so that a before/after
# table compares figures taken under the same load (issue 34's check):
# compare.sh (after, before, after, before), slots-handoff.sh, slots.sh,
# list.sh, etcd.sh, postgres.sh and redis.sh, each with its floor and best
# peer, an older build beside where BEFORE is given.
#
#   bench/all.sh [--quick] [--only GROUPS] [--out DIR]
#
#   LOCKRUN=path       the default build (file locks), as compare.sh takes it
#   LOCKRUN_URLS=path  a build with etcd, postgres and redis (for the URL scripts)
#   BEFORE=path        an older default build, beside LOCKRUN
#   BEFORE_URLS=path   an older build with lock URLs, beside LOCKRUN_URLS
#                      (a build without redis is left out of redis.sh)
#   --quick            every script's --quick (a smoke test of this script)
#   --only GROUPS      a comma list of: compare, slots, list, etcd, postgres,
#                      redis (a sitting for the rows a change can move)
#   --out DIR          where each script's output goes (default: a temp dir)
#
# Unset, LOCKRUN and LOCKRUN_URLS are what each script builds by default.
# Prints each script's output as it goes, then the goal lines of all of
# them together. Run it on a quiet machine: the load is printed before and
# after each script. Exit status: 0 every script ran; 1 one failed (its
# output says why).
set -uo pipefail

QUICK=() OUT= ONLY=
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick); shift ;;
    --only) ONLY=${2:?--only needs a list}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2 ;;
  esac
done
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
failed=0
# want GROUP: whether --only (or its absence) takes GROUP's steps.
want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
# step NAME ENV... -- SCRIPT ARGS...: runs one script with the given
# environment, its output shown and kept in $OUT/NAME.txt.
step() {
  local name=$1; shift
  local env=()
  while [ "$1" != -- ]; do env+=("$1"); shift; done
  shift
  echo
  echo "=== $name ($(date -u +%H:%M:%S) UTC, load $(load))"
  if ! env "${env[@]}" "$@" 2>&1 | tee "$OUT/$name.txt"; then
    echo "=== $name FAILED (output: $OUT/$name.txt)"
    failed=1
  fi
}
file_env=() url_env=()
[ -z "${LOCKRUN:-}" ] || file_env+=("LOCKRUN=$LOCKRUN")
[ -z "${LOCKRUN_URLS:-}" ] || url_env+=("LOCKRUN=$LOCKRUN_URLS")
before_url_env=()
[ -z "${BEFORE_URLS:-}" ] || before_url_env+=("LOCKRUN_BEFORE=$BEFORE_URLS")

echo "# bench/all.sh: $(uname -sr), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%M:%SZ); output in $OUT"
echo "# LOCKRUN=${LOCKRUN:-default} LOCKRUN_URLS=${LOCKRUN_URLS:-default} BEFORE=${BEFORE:-none} BEFORE_URLS=${BEFORE_URLS:-none}"
# compare.sh takes one binary: after and before take turns, twice.
if want compare; then
  step compare.after "${file_env[@]}" -- "$BENCH/compare.sh" "${QUICK[@]}"
  [ -z "${BEFORE:-}" ] || step compare.before "LOCKRUN=$BEFORE" -- "$BENCH/compare.sh" "${QUICK[@]}"
  step compare.after2 "${file_env[@]}" -- "$BENCH/compare.sh" "${QUICK[@]}"
  [ -z "${BEFORE:-}" ] || step compare.before2 "LOCKRUN=$BEFORE" -- "$BENCH/compare.sh" "${QUICK[@]}"
fi
if want slots; then
  step slots-handoff "${file_env[@]}" ${BEFORE:+"BEFORE=$BEFORE"} -- "$BENCH/slots-handoff.sh" "${QUICK[@]}"
  step slots "${file_env[@]}" ${BEFORE:+"BEFORE=$BEFORE"} -- "$BENCH/slots.sh" --tools lockrun,floor,flockloop "${QUICK[@]}"
fi
# An older build's inspection can take minutes a figure with thousands of
# locks: it runs once a figure, up to 5,000 other locks; 10,000 is
# measured for LOCKRUN alone.
if ! want list; then
  :
elif [ -n "${BEFORE:-}" ] && [ ${#QUICK[@]} -eq 0 ]; then
  step list "${file_env[@]}" "BEFORE=$BEFORE" BEFORE_REPS=1 -- "$BENCH/list.sh" --counts 0,1,1000,5000
  # env -u: list.sh would find BEFORE in the environment all.sh got.
  step list.10000 -u BEFORE "${file_env[@]}" -- "$BENCH/list.sh" --counts 10000
else
  step list "${file_env[@]}" ${BEFORE:+"BEFORE=$BEFORE"} -- "$BENCH/list.sh" "${QUICK[@]}"
fi
! want etcd || step etcd "${url_env[@]}" "${before_url_env[@]}" -- "$BENCH/etcd.sh" "${QUICK[@]}"
! want postgres || step postgres "${url_env[@]}" "${before_url_env[@]}" -- "$BENCH/postgres.sh" "${QUICK[@]}"
! want redis || step redis "${url_env[@]}" -- "$BENCH/redis.sh" "${QUICK[@]}"
echo
echo "=== the goal lines ($(date -u +%H:%M:%S) UTC, load $(load))"
# compare.sh's rows with a verdict, and the URL scripts' goal lines.
grep -H -E '(\| (pass|FAIL) *$|goals missed|floor-run:|÷)' "$OUT"/*.txt | sed "s|^$OUT/||"
exit "$failed"
