#!/usr/bin/env bash
# bench/compare.sh: lockrun against util-linux flock(1) on the rows of issue 7.
#
#   bench/compare.sh [--quick] [--only ROWS] [--dir DIR] [--strict]
#
#   LOCKRUN=path    lockrun binary (default: the one install.sh builds and
#                   installs, which the Debian package ships too:
#                   `LOCKRUN_BUILD_ONLY=1 ./install.sh`)
#   LOCKRUN_ARGS=.. extra lockrun options, split on spaces (e.g. --no-record)
#   --quick         fewer runs (a smoke test, about 10 s; a full run takes about 45 s)
#   --only ROWS     comma list of: overhead,exec,handoff,contention,waiters,rss
#   --dir DIR       where the lock files go (default: a new temp dir in $TMPDIR)
#   --strict        exit 1 when a goal is missed, not only on a broken run
#
# Needs bash >= 5, hyperfine, flock (util-linux), coreutils and awk; chpst
# (runit) is the peer of the -F row when installed, else `flock -F`.
# Exit status: 0 measured (goals may have been missed, see the table);
# 1 a correctness check failed (lost update, early waiter, missing record) or,
# with --strict, a goal was missed; 2 cannot run (missing tool, build failed,
# a wait timed out).
set -euo pipefail

QUICK=0 ONLY="overhead,exec,handoff,contention,waiters,rss" LOCKDIR="" STRICT=0
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --only) ONLY=${2:?--only needs a list}; shift 2 ;;
    --dir) LOCKDIR=${2:?--dir needs a directory}; shift 2 ;;
    --strict) STRICT=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "compare.sh: unknown argument $1" >&2; usage 2 ;;
  esac
done

die() { echo "compare.sh: $*" >&2; exit 2; }
[ "${BASH_VERSINFO[0]}" -ge 5 ] || die "needs bash >= 5 (for EPOCHREALTIME)"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---------------------------------------------------------------- tools
for t in hyperfine flock awk sort timeout stat mkfifo date; do
  command -v "$t" >/dev/null 2>&1 || die "$t not found: install it (Debian: apt-get install hyperfine util-linux coreutils gawk)"
done
[ -r /proc/locks ] || die "/proc/locks is not readable (Linux with /proc needed)"
if [ -z "${LOCKRUN:-}" ]; then
  # The build users get from the README's install command (a no-op when up
  # to date): install.sh decides which, and says where it is.
  command -v cargo >/dev/null 2>&1 || die "no cargo to build lockrun with; set LOCKRUN=/path/to/lockrun"
  echo "# building lockrun (LOCKRUN_BUILD_ONLY=1 ./install.sh)" >&2
  LOCKRUN=$(LOCKRUN_BUILD_ONLY=1 "$ROOT/install.sh") || die "install.sh could not build lockrun"
  [ -n "$LOCKRUN" ] || die "install.sh named no lockrun binary"
fi
[ -x "$LOCKRUN" ] || die "LOCKRUN=$LOCKRUN is not an executable file"
LOCKRUN=$(cd "$(dirname "$LOCKRUN")" && pwd)/$(basename "$LOCKRUN")
read -r -a EXTRA <<<"${LOCKRUN_ARGS:-}"
# The floor (bench/floors/floor_run.c: open, flock, vfork+exec, wait and
# nothing else), when a C compiler can build it: each row then also says
# how far lockrun is above the least a tool could do.
FLOORS=$("$ROOT/bench/floors/build.sh" 2>/dev/null) || FLOORS=""
HAVE_FLOOR=0; [ -n "$FLOORS" ] && [ -x "$FLOORS/floor_run" ] && HAVE_FLOOR=1
HAVE_CHPST=0; command -v chpst >/dev/null 2>&1 && HAVE_CHPST=1

W=$(mktemp -d "${TMPDIR:-/tmp}/lockrun-bench.XXXXXX") || die "cannot create a temp dir"
BGPIDS=()
cleanup() {
  local p s
  # Kill only what is still our own unreaped child: a pid reaped earlier may
  # belong to someone else by now.
  for p in "${BGPIDS[@]}"; do
    { read -r s < "/proc/$p/stat"; } 2>/dev/null || continue
    s=${s##*) }; s=${s#* }
    [ "${s%% *}" = "$$" ] && kill "$p" 2>/dev/null
  done
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
LD=${LOCKDIR:-$W}
[ -d "$LD" ] && [ -w "$LD" ] || die "--dir $LD is not a writable directory"
LD=$(mktemp -d "$LD/locks.XXXXXX")
[ -n "$LOCKDIR" ] && trap 'cleanup; rm -rf "$LD"' EXIT

if [ "$QUICK" = 1 ]; then
  RUNS=100 WARM=10 ROUNDS=1 HREPS=10 ITERS=50 K=50 DREPS=1 CREPS=1 RREPS=1
else
  # 4 rounds of 250, order reversed every other round: a burst of noise on
  # this shared machine then hits both tools, not one.
  RUNS=250 WARM=50 ROUNDS=4 HREPS=40 ITERS=200 K=200 DREPS=3 CREPS=5 RREPS=3
fi
PROCS=4
ERRORS=0 MISSED=0
ROWS=()    # "measure|lockrun|peer|ratio|goal|result"

# ---------------------------------------------------------------- helpers
now_us() { echo "${EPOCHREALTIME/[.,]/}"; }

# wait_until SECONDS WHAT CMD...: poll CMD every 5 ms, fail after SECONDS.
wait_until() {
  local limit=$1 what=$2; shift 2
  local deadline=$(( $(now_us) + limit * 1000000 ))
  until "$@"; do
    [ "$(now_us)" -lt "$deadline" ] || { echo "compare.sh: timed out after ${limit}s waiting for $what" >&2; return 1; }
    sleep 0.005
  done
}

# alive PID: exists and is not a zombie.
alive() {
  local s
  { read -r s < "/proc/$1/stat"; } 2>/dev/null || return 1
  s=${s##*) }
  [ "${s:0:1}" != Z ]
}

# wait_pids SECONDS PID...: reap them all; kill them and fail after SECONDS.
wait_pids() {
  local limit=$1; shift
  local deadline=$(( $(now_us) + limit * 1000000 )) p rc=0
  for p in "$@"; do
    while alive "$p"; do
      if [ "$(now_us)" -ge "$deadline" ]; then
        echo "compare.sh: processes still running after ${limit}s; killing them" >&2
        kill "$@" 2>/dev/null || true
        rc=1; break 2
      fi
      sleep 0.02
    done
  done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
  return $rc
}

# Kernel waiters blocked on inode $1 (lines with "->" in /proc/locks).
blocked() { awk -v ino="$1" '$2 == "->" && $3 == "FLOCK" { n = split($7, a, ":"); if (a[n] == ino) c++ } END { print c + 0 }' /proc/locks; }
blocked_at_least() { [ "$(blocked "$1")" -ge "$2" ]; }
has_line() { [ -s "$1" ] && grep -q "^$2\$" "$1"; }

# argv of "run CMD under the lock $2" for tool $1, into the array T.
tool() {
  case $1 in
    lockrun) T=("$LOCKRUN" "${EXTRA[@]}" "$2" --) ;;
    lockrun-F) T=("$LOCKRUN" "${EXTRA[@]}" -F "$2" --) ;;
    flock) T=(flock "$2") ;;
    flock-F) T=(flock -F "$2") ;;
    chpst) T=(chpst -l "$2") ;;
    floor) T=("$FLOORS/floor_run" "$2") ;;
    *) die "unknown tool $1" ;;
  esac
}

# stats: numbers on stdin -> "p50 p90 min max n" (p50 averages the middle pair).
stats() {
  sort -g | awk '{ v[++n] = $1 } END {
    if (n == 0) { print "nan nan nan nan 0"; exit }
    p50 = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    i = int(0.9 * n); if (i < 0.9 * n) i++; if (i < 1) i = 1
    print p50, v[i], v[1], v[n], n }'
}
field() { echo "$1" | awk -v i="$2" '{ print $i }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
fmt() { awk -v a="$1" -v d="${2:-3}" 'BEGIN { printf "%.*f", d, a }'; }

row() { ROWS+=("$1|$2|$3|$4|$5|$6"); [ "$6" = FAIL ] && MISSED=$((MISSED + 1)); return 0; }
verdict() { if "$@"; then echo pass; else echo FAIL; fi; }
broken() { echo "compare.sh: CHECK FAILED: $*" >&2; ERRORS=$((ERRORS + 1)); }

# hyperfine_times JSON...: "name time_ms" for every run in the exports.
hyperfine_times() {
  awk '/"command":/ { name = $0; sub(/.*"command": *"/, "", name); sub(/",? *$/, "", name) }
       /"times": *\[/ { on = 1; next }
       on && /\]/ { on = 0; next }
       on { v = $1; sub(/,$/, "", v); printf "%s %.6f\n", name, v * 1000 }' "$@"
}

# bench_overhead ID NAME=TOOL...: hyperfine -N, ROUNDS rounds (order reversed
# in the second), each tool on its own lock file; sets MED[name] (ms).
declare -A MED RR
bench_overhead() {
  local id=$1; shift
  local spec names=() cmds=() r json
  for spec in "$@"; do
    local name=${spec%%=*} t=${spec#*=}
    if [ "$t" = true ]; then
      cmds+=("true")
    else
      tool "$t" "$LD/$id-$name.lock"
      cmds+=("$(printf "'%s' " "${T[@]}")true")
    fi
    names+=("$name")
  done
  for ((r = 1; r <= ROUNDS; r++)); do
    local args=() i n=${#names[@]}
    for ((i = 0; i < n; i++)); do
      local j=$(( r % 2 ? i : n - 1 - i ))
      args+=(-n "${names[j]}" "${cmds[j]}")
    done
    json=$W/$id.$r.json
    timeout 300 hyperfine -N --style none --warmup "$WARM" --runs "$RUNS" \
      --export-json "$json" "${args[@]}" >"$W/$id.$r.log" 2>&1 \
      || { cat "$W/$id.$r.log" >&2; die "hyperfine failed for $id"; }
    for name in "${names[@]}"; do
      RR[$name.$r]=$(hyperfine_times "$json" | awk -v n="$name" '$1 == n { print $2 }' | stats | cut -d' ' -f1)
    done
  done
  for name in "${names[@]}"; do
    MED[$name]=$(hyperfine_times "$W/$id".*.json | awk -v n="$name" '$1 == n { print $2 }' | stats | cut -d' ' -f1)
  done
}
round_ratios() { # a b -> "r1/r2" ratios of per-round medians
  local r out=""
  for ((r = 1; r <= ROUNDS; r++)); do out+="${out:+/}$(ratio "${RR[$1.$r]}" "${RR[$2.$r]}")"; done
  echo "$out"
}

# ---------------------------------------------------------------- header
fstype=$(stat -f -c %T "$LD")
command -v findmnt >/dev/null 2>&1 && fstype="$fstype ($(findmnt -n -o FSTYPE,SOURCE -T "$LD" | tr -s ' ' ' '))"
echo "# lockrun vs flock(1): $(date -u +%FT%TZ) on $(uname -srm), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# lock dir $LD: $fstype"
echo "# lockrun: $LOCKRUN ($("$LOCKRUN" --version 2>/dev/null || echo '?'))${EXTRA[*]:+ with ${EXTRA[*]}}"
echo "# $(flock --version 2>&1 | head -1); $(hyperfine --version); chpst: $([ $HAVE_CHPST = 1 ] && command -v chpst || echo 'not installed')"
echo "# runs: overhead ${ROUNDS}x${RUNS} (warmup $WARM), handoff $HREPS, contention ${PROCS}x${ITERS} x$CREPS, waiters K=$K x$DREPS, rss x$RREPS"

want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# ---------------------------------------------------------------- (a) overhead
if want overhead; then
  echo "# overhead: uncontended TOOL L true" >&2
  if [ $HAVE_FLOOR = 1 ]; then
    bench_overhead overhead lockrun=lockrun flock=flock floor=floor true=true
  else
    bench_overhead overhead lockrun=lockrun flock=flock true=true
  fi
  rec=$(cat "$LD/overhead-lockrun.lock")
  case " ${EXTRA[*]} " in *" --no-record "*) rec='"released_at":"-","exit":{"code":0}' ;; esac
  case $rec in
    *'"released_at":'*'"exit":{"code":0}'*) ;;
    *) broken "lockrun's record after 'lockrun L -- true' is not a completed record: $rec" ;;
  esac
  r=$(ratio "${MED[lockrun]}" "${MED[flock]}")
  row "uncontended L true, median ms (rounds $(round_ratios lockrun flock))" \
    "$(fmt "${MED[lockrun]}")" "$(fmt "${MED[flock]}")" "$r" "<= 1.00" "$(verdict le "$r" 1.0)"
  row "  (true alone, median ms; net = median - this)" \
    "net $(fmt "$(awk -v a="${MED[lockrun]}" -v b="${MED[true]}" 'BEGIN{print a-b}')")" \
    "net $(fmt "$(awk -v a="${MED[flock]}" -v b="${MED[true]}" 'BEGIN{print a-b}')")" \
    "$(ratio "$(awk -v a="${MED[lockrun]}" -v b="${MED[true]}" 'BEGIN{print a-b}')" "$(awk -v a="${MED[flock]}" -v b="${MED[true]}" 'BEGIN{print a-b}')")" \
    "true=$(fmt "${MED[true]}")" "info"
  if [ $HAVE_FLOOR = 1 ]; then
    r=$(ratio "${MED[lockrun]}" "${MED[floor]}")
    row "  vs the floor (floor_run L true), median ms" "$(fmt "${MED[lockrun]}")" \
      "floor $(fmt "${MED[floor]}")" "$r" "info" "info"
  fi
fi

# ---------------------------------------------------------------- (b) -F
if want exec; then
  echo "# exec: lockrun -F vs chpst -l" >&2
  if [ $HAVE_CHPST = 1 ]; then peer=chpst; label="chpst -l"; else peer=flock-F; label="flock -F (no chpst)"; fi
  bench_overhead exec lockrun-F=lockrun-F peer=$peer
  r=$(ratio "${MED[lockrun-F]}" "${MED[peer]}")
  row "-F L true vs $label, median ms (rounds $(round_ratios lockrun-F peer))" \
    "$(fmt "${MED[lockrun-F]}")" "$(fmt "${MED[peer]}")" "$r" "<= 1.00" "$(verdict le "$r" 1.0)"
fi

# ---------------------------------------------------------------- (c) handoff
# Holder: TOOL L sh -c 'echo R; read _; exec date +%s%N', its stdin a FIFO.
# Once R is out (lock held) the waiter TOOL L date +%s%N starts; when
# /proc/locks shows it blocked ("->"), a newline lets the holder stamp and
# exit. latency = waiter's stamp - holder's stamp (includes the holder tool's
# own teardown, the wake-up, the waiter's fork/exec and date's start).
handoff_rep() { # tool lockfile -> prints latency in ms, or fails
  local L=$2 fd hpid wpid h w ino
  tool "$1" "$L"
  ino=$(stat -c %i "$L")
  : >"$W/h.out"; : >"$W/w.out"
  exec {fd}<>"$W/fifo"
  "${T[@]}" sh -c 'echo R; read -r _; exec date +%s%N' <&"$fd" >"$W/h.out" 2>>"$W/err" &
  hpid=$!; BGPIDS+=("$hpid")
  wait_until 10 "the holder" has_line "$W/h.out" R || { exec {fd}>&-; return 1; }
  "${T[@]}" date +%s%N >"$W/w.out" 2>>"$W/err" {fd}>&- </dev/null &
  wpid=$!; BGPIDS+=("$wpid")
  wait_until 10 "the waiter to block" blocked_at_least "$ino" 1 || { exec {fd}>&-; return 1; }
  echo >&"$fd"
  exec {fd}>&-
  wait_pids 10 "$hpid" "$wpid" || return 1
  h=$(sed -n 2p "$W/h.out"); w=$(cat "$W/w.out")
  [ -n "$h" ] && [ -n "$w" ] || { echo "compare.sh: missing stamp (holder '$h', waiter '$w')" >&2; return 1; }
  [ "$w" -gt "$h" ] || { broken "$1: waiter ran before the holder released ($w <= $h)"; return 1; }
  awk -v a="$w" -v b="$h" 'BEGIN { printf "%.4f\n", (a - b) / 1e6 }'
}
if want handoff; then
  echo "# handoff: $HREPS reps per tool" >&2
  mkfifo "$W/fifo"
  # calibration: the same probe chain with no lock (date exits, sh wakes, date starts)
  for ((i = 0; i < HREPS; i++)); do
    sh -c 'date +%s%N; exec date +%s%N' | awk 'NR == 1 { a = $1 } NR == 2 { printf "%.4f\n", ($1 - a) / 1e6 }'
  done >"$W/cal.ms"
  cal=$(stats <"$W/cal.ms")
  declare -A HS
  HTOOLS=(lockrun flock); [ $HAVE_FLOOR = 1 ] && HTOOLS+=(floor)
  for t in "${HTOOLS[@]}"; do
    L=$LD/handoff-$t.lock; : >"$L"; : >"$W/handoff-$t.ms"
  done
  for ((i = 0; i < HREPS; i++)); do
    for t in "${HTOOLS[@]}"; do   # interleaved, so drift hits all alike
      handoff_rep "$t" "$LD/handoff-$t.lock" >>"$W/handoff-$t.ms" || die "handoff run $i of $t failed"
    done
  done
  for t in "${HTOOLS[@]}"; do HS[$t]=$(stats <"$W/handoff-$t.ms"); done
  c50=$(field "$cal" 1)
  net() { awk -v a="$1" -v b="$c50" 'BEGIN { print a - b }'; }
  l50=$(field "${HS[lockrun]}" 1) f50=$(field "${HS[flock]}" 1)
  l90=$(field "${HS[lockrun]}" 2) f90=$(field "${HS[flock]}" 2)
  r=$(ratio "$l50" "$f50")
  row "handoff p50 ms, raw (n=$HREPS)" "$(fmt "$l50")" "$(fmt "$f50")" "$r" "<= 1.00" "$(verdict le "$r" 1.0)"
  row "handoff p90 ms, net of probe p50 $(fmt "$c50")" "$(fmt "$(net "$l90")")" "$(fmt "$(net "$f90")")" \
    "$(ratio "$(net "$l90")" "$(net "$f90")")" "< 1 ms" "$(verdict lt "$(net "$l90")" 1.0)"
  row "  (handoff raw p90 / max ms)" "$(fmt "$l90")/$(fmt "$(field "${HS[lockrun]}" 4)")" \
    "$(fmt "$f90")/$(fmt "$(field "${HS[flock]}" 4)")" "-" "-" "info"
  if [ $HAVE_FLOOR = 1 ]; then
    o50=$(field "${HS[floor]}" 1)
    row "  vs the floor (floor_run), handoff p50 ms" "$(fmt "$l50")" "floor $(fmt "$o50")" \
      "$(ratio "$l50" "$o50")" "info" "info"
  fi
fi

# ---------------------------------------------------------------- (d) contention
cat >"$W/worker.sh" <<'EOF'
# worker: $1 counter file, $2 iterations, then the tool's argv prefix
counter=$1 iters=$2; shift 2
ok=0
for ((i = 0; i < iters; i++)); do
  if "$@" sh -c 'n=$(cat "$0"); echo $((n + 1)) > "$0"' "$counter" </dev/null; then ok=$((ok + 1)); fi
done
echo "$ok"
EOF
contention_run() { # tool -> prints wall ms; checks the counter
  local t=$1 c=$W/counter L=$LD/contention-$1.lock k pids=() t0 t1 ok total=0
  tool "$t" "$L"
  echo 0 >"$c"
  t0=$(now_us)
  for ((k = 0; k < PROCS; k++)); do
    timeout --kill-after=5 120 bash "$W/worker.sh" "$c" "$ITERS" "${T[@]}" >"$W/ok.$k" 2>>"$W/err" &
    pids+=($!); BGPIDS+=($!)
  done
  wait_pids 130 "${pids[@]}" || die "contention workers of $t did not finish"
  t1=$(now_us)
  for ((k = 0; k < PROCS; k++)); do ok=$(cat "$W/ok.$k"); total=$((total + ${ok:-0})); done
  [ "$total" -eq $((PROCS * ITERS)) ] || broken "$t: only $total of $((PROCS * ITERS)) invocations succeeded"
  [ "$(cat "$c")" -eq "$total" ] || broken "$t: LOST UPDATES: counter $(cat "$c"), expected $total"
  echo "$(( (t1 - t0) / 1000 )) $(cat "$c")"
}
if want contention; then
  echo "# contention: $PROCS procs x $ITERS" >&2
  declare -A CW CC
  for ((i = 0; i < CREPS; i++)); do
    order="lockrun flock"; [ $((i % 2)) = 1 ] && order="flock lockrun"
    for t in $order; do
      contention_run "$t" >"$W/cont.out"
      out=$(cat "$W/cont.out")
      CW[$t]="${CW[$t]:-} ${out% *}"; CC[$t]=${out#* }
    done
  done
  lw=$(echo "${CW[lockrun]}" | tr ' ' '\n' | grep . | stats | cut -d' ' -f1)
  fw=$(echo "${CW[flock]}" | tr ' ' '\n' | grep . | stats | cut -d' ' -f1)
  r=$(ratio "$lw" "$fw")
  ok=pass; le "$r" 1.0 || ok=FAIL
  [ "${CC[lockrun]}" -eq $((PROCS * ITERS)) ] || ok=FAIL
  row "${PROCS}x${ITERS} contended counter, wall ms (median of $CREPS)" "$(fmt "$lw" 0) n=${CC[lockrun]}" \
    "$(fmt "$fw" 0) n=${CC[flock]}" "$r" "<= 1.00, n=$((PROCS * ITERS))" "$ok"
fi

# ---------------------------------------------------------------- (e) waiters
drain_run() { # tool -> prints drain ms
  local t=$1 L=$LD/waiters-$1.lock fd hpid pids=() i h last n ino early
  : >"$L"; ino=$(stat -c %i "$L")
  tool "$t" "$L"
  : >"$W/h.out"; : >"$W/drain.out"
  exec {fd}<>"$W/fifo"
  "${T[@]}" sh -c 'echo R; read -r _; exec date +%s%N' <&"$fd" >"$W/h.out" 2>>"$W/err" &
  hpid=$!; BGPIDS+=("$hpid")
  wait_until 10 "the holder" has_line "$W/h.out" R || die "waiters: holder of $t did not start"
  for ((i = 0; i < K; i++)); do
    "${T[@]}" date +%s%N >>"$W/drain.out" 2>>"$W/err" {fd}>&- </dev/null &
    pids+=($!); BGPIDS+=($!)
  done
  wait_until 60 "$K waiters to block" blocked_at_least "$ino" "$K" || die "waiters of $t never all blocked"
  echo >&"$fd"; exec {fd}>&-
  wait_pids 120 "$hpid" "${pids[@]}" || die "waiters of $t did not drain in 120 s"
  h=$(sed -n 2p "$W/h.out")
  n=$(grep -c . "$W/drain.out" || true)
  [ "$n" -eq "$K" ] || broken "$t: $n of $K waiters ran"
  early=$(awk -v h="$h" '$1 <= h { c++ } END { print c + 0 }' "$W/drain.out")
  [ "$early" -eq 0 ] || broken "$t: $early waiters ran before the release"
  last=$(sort -n "$W/drain.out" | tail -1)
  awk -v a="$last" -v b="$h" 'BEGIN { printf "%.3f\n", (a - b) / 1e6 }'
}
if want waiters; then
  echo "# waiters: K=$K, $DREPS reps" >&2
  [ -p "$W/fifo" ] || mkfifo "$W/fifo"
  : >"$W/drain-lockrun.ms"; : >"$W/drain-flock.ms"
  for ((i = 0; i < DREPS; i++)); do
    order="lockrun flock"; [ $((i % 2)) = 1 ] && order="flock lockrun"
    for t in $order; do drain_run "$t" >>"$W/drain-$t.ms"; done
  done
  ld=$(stats <"$W/drain-lockrun.ms" | cut -d' ' -f1); fd_=$(stats <"$W/drain-flock.ms" | cut -d' ' -f1)
  r=$(ratio "$ld" "$fd_")
  row "$K waiters drain ms (median of $DREPS; per waiter $(fmt "$(awk -v a="$ld" -v k="$K" 'BEGIN{print a/k}')")/$(fmt "$(awk -v a="$fd_" -v k="$K" 'BEGIN{print a/k}')"))" \
    "$(fmt "$ld" 1)" "$(fmt "$fd_" 1)" "$r" "<= 1.00" "$(verdict le "$r" 1.0)"
fi

# ---------------------------------------------------------------- (f) rss
child_is_sleep() { # pid -> true once its child has exec'd sleep
  local c comm
  if [ -r "/proc/$1/task/$1/children" ]; then
    read -r c _ < "/proc/$1/task/$1/children" || true
  else
    c=$(pgrep -P "$1" | head -1 || true)
  fi
  [ -n "${c:-}" ] && { read -r comm < "/proc/$c/comm"; } 2>/dev/null && [ "$comm" = sleep ] && CHILD=$c
}
rss_run() { # tool -> prints VmHWM kB of the tool process while it holds
  local pid hwm
  tool "$1" "$LD/rss-$1.lock"
  "${T[@]}" sleep 5 </dev/null 2>>"$W/err" &
  pid=$!; BGPIDS+=("$pid")
  wait_until 5 "$1's sleep" child_is_sleep "$pid" || die "rss: no sleep under $1"
  hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
  kill "$CHILD" 2>/dev/null || true
  wait_pids 10 "$pid" || true
  echo "$hwm"
}
if want rss; then
  echo "# rss: $RREPS reps" >&2
  : >"$W/rss-lockrun"; : >"$W/rss-flock"
  for ((i = 0; i < RREPS; i++)); do
    for t in lockrun flock; do rss_run "$t" >>"$W/rss-$t"; done
  done
  lr=$(stats <"$W/rss-lockrun" | cut -d' ' -f4); fr=$(stats <"$W/rss-flock" | cut -d' ' -f4)
  r=$(ratio "$lr" "$fr")
  row "peak RSS (VmHWM) while holding, KiB (max of $RREPS)" "$lr" "$fr" "$r" "<= 1.00" "$(verdict le "$r" 1.0)"
fi

# ---------------------------------------------------------------- table
echo
printf '%-62s | %-14s | %-14s | %-5s | %-16s | %s\n' measure lockrun "flock (peer)" ratio goal result
printf '%s\n' "$(printf '%.0s-' {1..130})"
for r in "${ROWS[@]}"; do
  IFS='|' read -r m a b c g v <<<"$r"
  printf '%-62s | %-14s | %-14s | %-5s | %-16s | %s\n' "$m" "$a" "$b" "$c" "$g" "$v"
done
if [ -s "$W/err" ]; then
  echo "# stderr of the tools (first lines):"; head -5 "$W/err" | sed 's/^/#   /'
fi
echo "# goals missed: $MISSED; broken checks: $ERRORS"
[ "$ERRORS" -eq 0 ] || exit 1
[ "$STRICT" = 1 ] && [ "$MISSED" -gt 0 ] && exit 1
exit 0
