#!/bin/sh
# The full fault run (issue 29), about 30-35 minutes on a 2-core machine:
# every fault of the three lock URL backends, twice, then the broken variants that
# show the checker failing (commands without a lock: overlaps; tokens from
# skewed clocks: out of order). Prints one table per backend and variant;
# docs/RELIABILITY.md has the figures of the last published run.
#
#   sudo bench/faults/run.sh             # REPS=2 OUT=/tmp/lrf-run by default
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
"$here/setup.sh"
lockrun=${LOCKRUN:-$root/target/release/lockrun}
out=${OUT:-/tmp/lrf-run}
reps=${REPS:-2}
rm -rf "$out"
status=0
py() { timeout 3000 /usr/bin/python3 "$here/faults.py" suite --lockrun "$lockrun" "$@" || status=1; }
py --out "$out/lockrun" --backend etcd,pg,redis --faults all --reps "$reps"
# broken variants: these are expected to FAIL
py --out "$out/nolock" --backend etcd,pg,redis --faults cut,none --variant nolock
py --out "$out/clocktoken" --backend etcd,pg,redis --faults none,cut --variant clocktoken
echo "full fault run done (lockrun status: see $out/lockrun/results.json)"
