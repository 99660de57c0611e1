#!/bin/sh
# Repro of a lockrun defect found by the fault harness (etcd, loss20 run):
# lockrun exits 76 "the lock key ... was gone from etcd when the command
# ended" although the command ran to its end with the lock held.
#
# Why: the release transaction (delete our key if its create revision is
# ours, store the last record) goes through Inner::call, which gives the
# first member only its share of the release deadline (2 s / 3 members =
# 667 ms at --ttl 4s) and then sends the same transaction to the next
# member. When the first member applied it but answered late, the second
# one finds the key gone (the compare fails) and lockrun reads that as a
# lock lost before the release: exit 76 for a command that ended with 0.
#
# Here: 3 etcd members on loopback in a private namespace; the first
# endpoint goes through the harness's delay proxy (600 ms each way, a 1.2 s
# round trip, under the 1.5 s a member may take for an ordinary call).
#   sudo bench/faults/repro-release-76.sh [RUNS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
lockrun=${LOCKRUN:-$here/../../target/release/lockrun}
runs=${1:-5}
ns=lrf-repro
d=$(mktemp -d)
ip netns add $ns
trap 'kill $(cat $d/pids) 2>/dev/null; sleep 0.5; ip netns del $ns; rm -rf $d' EXIT
ip netns exec $ns ip link set lo up
cluster=m1=http://127.0.0.1:2380,m2=http://127.0.0.1:2382,m3=http://127.0.0.1:2384
for m in 1 2 3; do
    c=$((2377 + 2 * m)); p=$((c + 1))
    ip netns exec $ns etcd --name m$m --data-dir $d/m$m --log-level error \
        --listen-client-urls http://127.0.0.1:$c --advertise-client-urls http://127.0.0.1:$c \
        --listen-peer-urls http://127.0.0.1:$p --initial-advertise-peer-urls http://127.0.0.1:$p \
        --initial-cluster $cluster --initial-cluster-state new >$d/m$m.log 2>&1 &
    echo $! >>$d/pids
done
ip netns exec $ns /usr/bin/python3 "$here/faults.py" proxy --delay-ms 600 --max-seconds 3600 \
    12379=127.0.0.1:2379 &
echo $! >>$d/pids
sleep 4
url=etcd://127.0.0.1:12379,127.0.0.1:2381,127.0.0.1:2383/repro
n76=0
i=0
while [ $i -lt "$runs" ]; do
    rc=0
    ip netns exec $ns "$lockrun" --ttl 4s "$url" -- true 2>>$d/err || rc=$?
    echo "run $((i + 1)): exit $rc"
    [ $rc -eq 76 ] && n76=$((n76 + 1))
    i=$((i + 1))
done
echo "$n76 of $runs runs of 'lockrun --ttl 4s $url -- true' exited 76"
grep -m1 'lost the lock' $d/err || true
