#!/bin/sh
# The bounded fault run for CI (issue 29): a few faults per lock URL backend
# (etcd 5, PostgreSQL 5, Redis 1), about 6 minutes on a 2-core machine. Exits non-zero on any overlap beyond
# the documented window, a token out of start order, a command left running
# after its lockrun exited 76, a stale write through the fencing guard, a
# false kill, or a failure without a clear message.
#
#   sudo bench/faults/ci.sh              # builds target/release/lockrun first
#   LOCKRUN=/path/to/lockrun bench/faults/ci.sh
#
# Needs root (network namespaces). Results: $LRF_OUT (default /tmp/lrf-ci).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
"$here/setup.sh"
lockrun=${LOCKRUN:-$root/target/release/lockrun}
out=${LRF_OUT:-/tmp/lrf-ci}
rm -rf "$out"
start=$(date +%s)
status=0
timeout 900 /usr/bin/python3 "$here/faults.py" suite --lockrun "$lockrun" --out "$out" \
    --backend etcd --faults cut,pause,revoke,leader-stop-long,loss20 || status=$?
timeout 900 /usr/bin/python3 "$here/faults.py" suite --lockrun "$lockrun" --out "$out" \
    --backend pg --faults cut,terminate,restart,pause,server-kill || status=$?
# Redis through Sentinel: the primary stopped for 2xTTL, past Sentinel's
# down-after, so the replica is promoted while a command holds and waiters
# wait, and the old primary comes back answering what it was sent (the run
# that found two defects; docs/RELIABILITY.md). One fault: the CI's fault
# step stays near 6 minutes.
timeout 600 /usr/bin/python3 "$here/faults.py" suite --lockrun "$lockrun" --out "$out" \
    --backend redis --faults pause || status=$?
echo "fault CI: $(( $(date +%s) - start )) s, status $status (results in $out)"
exit $status
