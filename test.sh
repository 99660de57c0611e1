#!/usr/bin/env bash
# test.sh: the whole test suite (`cargo test --locked --all-features`), with
# its test binaries run side by side instead of one after another.
#
#   ./test.sh [ARGS...]     ARGS go to every test binary (a name filter,
#                           `--skip NAME`, `--nocapture`)
#
#   LOCKRUN_TEST_JOBS=N     test binaries at once (default 3)
#   LOCKRUN_TEST_REQUIRE_ALL=1   a test whose tool or server is missing fails
#                           instead of printing SKIPPED (CI sets it)
#   RUST_TEST_THREADS=N     tests at once within each binary (default: see
#                           below)
#
# Why not plain `cargo test`: it runs the test binaries in turn, each with
# one test per CPU at a time, and most of the suite's wall time is waiting,
# not computing: a lease running out on purpose, a server stopped and
# started, a holder killed and its lock freed. In turn, the waits add up
# (4.5 min on a 2-core machine); side by side, the longest binary sets the
# time. Each test still runs exactly as under `cargo test`, which remains a
# correct (slower) way to run the same tests.
#
# The output: one line per binary as it ends, its whole output when it
# fails, every SKIPPED line at the end, and a last line with the tally.
# Exit status: 0 when every binary passed, 1 otherwise, 2 when the build
# failed.
set -uo pipefail

# One binary, run by xargs below: its output kept aside, one line printed.
if [[ ${1-} == --one ]]; then
  exe=$2 out=$3
  shift 3
  log=$(basename "$exe")
  name=${log%-*}
  # Tests that load the whole host's lock table (tests/conditions.rs: churn
  # beside a thousand locks; tests/list.rs: ten thousand) and those whose
  # every `holder` call walks it and every process's descriptors
  # (tests/holder_check.rs, tests/robustness.rs: 3 s alone, 71 s beside
  # conditions) take turns. The lock is flock(1)'s, on a file of this run;
  # the test binary does not inherit its descriptor.
  exec {hostwide}>"$out/host-wide.lock"
  case $name in
    conditions | list | holder_check | robustness) flock "$hostwide" ;;
  esac
  # The time printed is the binary's own, from after its turn came.
  start=$SECONDS
  # Binaries whose tests mostly wait (a lease running out, a server
  # stopped and started) run more of them at once than the harness's one
  # per CPU: tests/etcd.rs took 30 s with 8 and 80 s with 2.
  threads=${RUST_TEST_THREADS-}
  case $name in
    etcd | postgres | redis | scenarios) threads=${threads:-8} ;;
  esac
  if [[ -n $threads ]]; then
    RUST_TEST_THREADS=$threads "$exe" "$@" >"$out/$log.log" 2>&1 {hostwide}>&-
  else
    "$exe" "$@" >"$out/$log.log" 2>&1 {hostwide}>&-
  fi
  status=$?
  passed=$(sed -n 's/^test result: .* \([0-9]*\) passed.*/\1/p' "$out/$log.log" | tail -1)
  if [[ $status -eq 0 ]]; then
    printf 'ok      %-16s %4s passed  %4d s\n' "$name" "${passed:-0}" $((SECONDS - start))
  else
    printf 'FAILED  %-16s (status %d, %d s): its output follows\n' "$name" "$status" $((SECONDS - start))
    sed 's/^/  | /' "$out/$log.log"
    : >"$out/$log.failed"
  fi
  exit 0
fi

cd "$(dirname "$0")" || exit 2
self="$PWD/$(basename "$0")"
jobs=${LOCKRUN_TEST_JOBS:-3}
out=$(mktemp -d "${TMPDIR:-/tmp}/lockrun-test-run.XXXXXX") || exit 2
trap 'rm -rf "$out"' EXIT

# Build everything first (the lockrun binary the tests spawn too), with
# cargo's progress and errors as `cargo test` prints them; its JSON lines
# name the test executables.
if ! cargo test --locked --all-features --no-run --message-format=json-render-diagnostics >"$out/build.json"; then
  echo "test.sh: the build failed (cargo's errors above)" >&2
  exit 2
fi
# Test harnesses only (`"test":true`): the lockrun binary and the examples
# are built for the tests but are not tests.
mapfile -t exes < <(grep '"test":true' "$out/build.json" | grep -o '"executable":"[^"]*"' |
  sed 's/^"executable":"//; s/"$//' | sort -u)
if [[ ${#exes[@]} -eq 0 ]]; then
  echo "test.sh: cargo built no test executable" >&2
  exit 2
fi

# Longest first, so that the slowest binaries start at once and the short
# ones fill the other lanes; those that wait their turn behind
# tests/conditions.rs last, so that they do not hold a lane meanwhile
# (CONTRIBUTING.md, "The slow ones").
first=(conditions etcd redis postgres record_data properties scenarios)
last=(holder_check robustness list)
named() { for e in "${exes[@]}"; do [[ $(basename "$e") == "$1"-* ]] && echo "$e"; done; }
sorted=()
for n in "${first[@]}"; do mapfile -t -O "${#sorted[@]}" sorted < <(named "$n"); done
tail=()
for n in "${last[@]}"; do mapfile -t -O "${#tail[@]}" tail < <(named "$n"); done
for e in "${exes[@]}"; do
  case " ${sorted[*]} ${tail[*]} " in *" $e "*) continue ;; esac
  sorted+=("$e")
done
sorted+=("${tail[@]}")

echo "test.sh: ${#sorted[@]} test binaries, $jobs at a time"
start=$SECONDS
# xargs in the foreground: each binary inherits this shell's signal
# dispositions (a job started with `&` here would start with SIGINT and
# SIGQUIT ignored, and the signal tests would fail), and a Ctrl-C reaches
# them all.
printf '%s\0' "${sorted[@]}" | xargs -0 -P "$jobs" -I{} "$self" --one {} "$out" "$@"

grep -h -- '\*\*\* SKIPPED' "$out"/*.log 2>/dev/null | sort -u
failed=$(find "$out" -name '*.failed' | wc -l)
total=$(cat "$out"/*.log | sed -n 's/^test result: .* \([0-9]*\) passed.*/\1/p' | awk '{s += $1} END {print s + 0}')
if [[ $failed -eq 0 ]]; then
  echo "test.sh: all ${#sorted[@]} test binaries passed ($total tests) in $((SECONDS - start)) s"
  exit 0
fi
echo "test.sh: $failed of ${#sorted[@]} test binaries FAILED ($total tests passed) in $((SECONDS - start)) s"
exit 1
