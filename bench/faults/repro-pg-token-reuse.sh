#!/bin/sh
# Repro of a lockrun defect found by the fault harness (pg, server-kill
# run): after a PostgreSQL crash the next holder can get the same fencing
# token as the holder before the crash (744, then 744 again).
#
# Why: LOCKRUN_FENCING_TOKEN is txid_current() in the statement that takes
# the lock. That transaction writes no WAL but its commit record, and
# PostgreSQL then commits asynchronously (RecordTransactionCommit flushes
# only when the transaction wrote WAL before its commit): the commit record
# sits in WAL buffers until the WAL writer (wal_writer_delay, 200 ms by
# default) writes it. A crash before that loses it; recovery sets the next
# xid from the WAL, and the same xid is handed out again. synchronous_commit
# and fsync do not change it. Here wal_writer_delay = 10s makes the window
# certain; with the default it is about 200 ms after each acquisition.
#   sudo bench/faults/repro-pg-token-reuse.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
lockrun=${LOCKRUN:-$here/../../target/release/lockrun}
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
d=$(mktemp -d)
chmod 755 "$d"
mkdir "$d/pg" && chown postgres:postgres "$d/pg" && chmod 700 "$d/pg"
runuser -u postgres -- "$bin/initdb" -D "$d/pg" -A trust -U postgres >/dev/null
cat >>"$d/pg/postgresql.auto.conf" <<CONF
listen_addresses = '127.0.0.1'
port = 25499
unix_socket_directories = '$d/pg'
wal_writer_delay = 10s
CONF
pg() { runuser -u postgres -- "$bin/pg_ctl" -D "$d/pg" -l "$d/pg/log" -w "$@" >/dev/null; }
pg start
trap 'pg -m immediate stop 2>/dev/null; rm -rf "$d"' EXIT
url="postgres://postgres@127.0.0.1:25499/postgres#tok"
"$lockrun" "$url" -- sh -c 'echo "holder 1: token $LOCKRUN_FENCING_TOKEN"' 
"$lockrun" "$url" -- sh -c 'echo "holder 2: token $LOCKRUN_FENCING_TOKEN"; sleep 5' &
sleep 1
# the server crashes (every process SIGKILLed) while holder 2 holds
pm=$(head -1 "$d/pg/postmaster.pid")
kill -KILL $pm $(ps -o pid= --ppid $pm)
wait || true
sleep 1
# (the killed postmaster may stay a zombie under a PID 1 that does not reap:
# remove its lock file as a reboot would)
rm -f "$d/pg/postmaster.pid" "$d"/pg/.s.PGSQL.*.lock
pg start || { tail -5 "$d/pg/log"; exit 1; }
"$lockrun" "$url" -- sh -c 'echo "holder 3: token $LOCKRUN_FENCING_TOKEN (must be larger than holder 2s)"'
