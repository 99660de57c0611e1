# bench/lib.sh: what the lock URL benchmarks (etcd.sh, postgres.sh,
# redis.sh) share. Sourced, never run.

# Their options: --runs N and --quick; anything else prints the calling
# script's header comment and exits 2. Sets RUNS and, with --quick,
# HANDOFFS (unless the caller's environment set it).
bench_args() {
  RUNS= QUICK=
  while [ $# -gt 0 ]; do
    case "$1" in
      --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
      --quick) QUICK=1; shift ;;
      *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2 ;;
    esac
  done
  # A smoke test in well under 2 minutes (the server's start included):
  # few runs and handoffs, figures only good for "it works".
  if [ -n "$QUICK" ]; then RUNS=${RUNS:-15} HANDOFFS=${HANDOFFS:-6}; fi
  RUNS=${RUNS:-200}
}

# percentile FILE Q: the Q-quantile (0..1) of the numbers in FILE, one a line.
percentile() {
  sort -n "$1" | awk -v q="$2" '{ a[NR] = $1 } END { i = int(NR * q + 0.5); if (i < 1) i = 1; print a[i] }'
}

# floor_goals LABEL SAMPLES FLOOR_SAMPLES: issue 34's goals for a lock
# URL's handoff, lockrun's samples against the like-for-like floor's
# (`floor-run`, taken in the same rounds): p50 within 1.5x, p90 within 2x.
floor_goals() {
  awk -v l="$1" -v a="$(percentile "$2" 0.5)" -v b="$(percentile "$3" 0.5)" \
      -v c="$(percentile "$2" 0.9)" -v d="$(percentile "$3" 0.9)" \
    'BEGIN { printf "# %s / floor-run: p50 %.2f (goal <= 1.5), p90 %.2f (goal <= 2)\n", l, a / b, c / d }'
}

# build_floor FEATURE EXAMPLE: builds examples/EXAMPLE.rs (a floor, with
# the backend's feature: the client library lockrun uses) and prints its
# path; prints nothing when it does not build, and the script goes on
# without its floor rows.
build_floor() {
  local path
  path=$(cd "$ROOT" && cargo build --release --locked --quiet --features "$1" --example "$2" \
    --message-format=json-render-diagnostics | sed -n "s/.*\"executable\":\"\\([^\"]*$2\\)\".*/\\1/p" | tail -1) || path=
  [ -x "$path" ] && echo "$path"
  return 0
}

# run_goal LABEL MEAN FLOOR_MEAN RTT_US: issue 34's goal for acquire + run
# + release: lockrun's mean (ms) within 1.5x of the like-for-like floor's
# (`floor-run`: connect, lock, run, unlock) plus one round trip (the floor
# example's `rtt`, one plain request, in µs).
run_goal() {
  awk -v l="$1" -v x="$2" -v y="$3" -v r="$4" 'BEGIN { if (x && y)
    printf "# acquire + run + release: %s %.2f ms / (floor-run %.2f + one round trip %.2f) = %.2f (goal <= 1.5)\n",
      l, x, y, r / 1000, x / (y + r / 1000) }'
}

# table_mean TABLE ROW: ROW's mean (ms) in a hyperfine markdown table.
table_mean() {
  awk -F'|' -v a="\`$2\`" '{ name = $2; gsub(/^ +| +$/, "", name); split($3, m, " ") } name == a { print m[1] }' "$1"
}
