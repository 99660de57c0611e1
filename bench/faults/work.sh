#!/bin/sh
# The command each fault-harness client runs under lockrun.
# It logs its start, then LRF_TICKS writes (one every LRF_TICK seconds),
# then its end, to $LRF_LOG (lines: KIND CLIENT TOKEN PID PPID SEQ TIME).
# Every write also goes through the fencing guard ($LRF_GUARD), which keeps
# the resource $LRF_FENCE_DIR and refuses a token lower than the highest it
# has accepted. The plain W lines in $LRF_LOG are the same write unfenced.
tok=${LOCKRUN_FENCING_TOKEN:-0}
log=$LRF_LOG
# SIGTERM (lockrun stopping the command) is logged, then the command exits
# at once as it would without the trap: K marks when the stop arrived
trap 'echo "K $LRF_CLIENT $tok $$ $PPID TERM $(date +%s.%N)" >>"$log"; exit 143' TERM
echo "S $LRF_CLIENT $tok $$ $PPID 0 $(date +%s.%N)" >>"$log"
i=0
while [ "$i" -lt "$LRF_TICKS" ]; do
    t=$(date +%s.%N)
    echo "W $LRF_CLIENT $tok $$ $PPID $i $t" >>"$log"
    if [ -n "$LRF_GUARD" ]; then
        "$LRF_GUARD" "$LRF_FENCE_DIR" "$tok" "$LRF_CLIENT $$ $i $t" || true
    fi
    sleep "$LRF_TICK"
    i=$((i + 1))
done
echo "E $LRF_CLIENT $tok $$ $PPID $i $(date +%s.%N)" >>"$log"
