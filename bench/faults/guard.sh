#!/bin/sh
# A fenced resource in a few lines: accept a write only if its fencing token
# is not lower than the highest token this resource has accepted.
#
#   guard.sh DIR TOKEN DATA...
#
# DIR/max holds the highest token accepted so far, DIR/accepted the writes
# that landed (TOKEN DATA), DIR/rejected the ones refused. The check and the
# write happen under one flock(1) on DIR/lock, so two writers cannot both
# pass the check against the same old maximum. Exit 0 written, 1 refused.
#
# In a job run by lockrun:  guard.sh /srv/res "$LOCKRUN_FENCING_TOKEN" "line"
# The same rule as an SQL resource:
#   UPDATE res SET fence = $T, data = ... WHERE id = 1 AND fence <= $T
# (0 rows updated: a newer holder has written; stop).
dir=$1
tok=$2
shift 2
exec 9>>"$dir/lock"
flock 9
max=$(cat "$dir/max" 2>/dev/null)
max=${max:-0}
if [ "$tok" -lt "$max" ]; then
    echo "$tok $max $*" >>"$dir/rejected"
    exit 1
fi
[ "$tok" -gt "$max" ] && echo "$tok" >"$dir/max"
echo "$tok $*" >>"$dir/accepted"
exit 0
