#!/usr/bin/python3
"""Does `WAIT 1` after the acquire keep a Redis failover from repeating a
fencing token?  (issue 28 item 1)

On 127.0.0.1 only: a primary, and a replica that reads the replication
stream through the harness's delay proxy (faults.py proxy: DELAY ms each
way, as a replica in another zone would). Each round:

  1. lockrun takes the lock on the primary, its command prints
     $LOCKRUN_FENCING_TOKEN (T) and holds;
  2. the moment T is printed, the primary and the proxy get SIGKILL (the
     primary's host dies: what it had not yet sent to the replica is lost);
  3. the replica is promoted (REPLICAOF NO ONE, what Sentinel does);
  4. the promoted replica's counter C and lock key are read: the next
     holder gets C+1, so C+1 <= T is a repeated token, and a missing key
     means the lock is free there while the old holder's command runs.

Then a fresh replica is attached to the promoted one and the next round
runs the other way round. Rounds alternate LOCKRUN_REDIS_WAIT=0 (no WAIT)
and the default (WAIT 1 when replicas are connected). Also times
`lockrun URL true` against a primary with a direct replica and with the
delayed one, with and without WAIT.

  bench/faults/wait.py --rounds 20 --delay-ms 20 [--lockrun target/release/lockrun]
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


STARTED = []  # every process this script started, ended in main's finally


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cli(port, *args, timeout=5):
    r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port)] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    return r.stdout.strip()


def wait_for(pred, what, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(0.02)
    raise SystemExit("timed out waiting for " + what)


class Node:
    def __init__(self, base, extra=()):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(dir=base)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir] + list(extra),
            stdout=open(os.path.join(self.dir, "log"), "w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        STARTED.append(self.proc)
        wait_for(lambda: cli(self.port, "PING") == "PONG", "redis-server")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Proxy:
    def __init__(self, delay_ms, target):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "faults.py"), "proxy", "--delay-ms", str(delay_ms),
             "--max-seconds", "3600", f"{self.port}=127.0.0.1:{target}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        STARTED.append(self.proc)
        wait_for(lambda: socket.create_connection(("127.0.0.1", self.port), 0.2).close() is None,
                 "the proxy")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def attach(base, primary, delay_ms):
    """A new replica of `primary`, through a proxy when delay_ms > 0."""
    proxy = Proxy(delay_ms, primary.port) if delay_ms > 0 else None
    via = proxy.port if proxy else primary.port
    replica = Node(base, ["--replicaof", "127.0.0.1", str(via)])
    wait_for(lambda: "master_link_status:up" in cli(replica.port, "INFO", "replication"), "sync")
    # ROLE lists a replica only once the primary counts it online, and
    # only then does lockrun WAIT for it
    wait_for(lambda: str(replica.port) in cli(primary.port, "ROLE"), "replica online")
    return replica, proxy


def one_round(a, primary, replica, proxy, wait, n):
    env = dict(os.environ, LOCKRUN_REDIS_WAIT="1" if wait else "0")
    env.pop("REDISCLI_AUTH", None)
    url = f"redis://127.0.0.1:{primary.port}#wt"
    p = subprocess.Popen([a.lockrun, "--ttl", "3s", url, "--", "sh", "-c",
                          "echo $LOCKRUN_FENCING_TOKEN; exec sleep 30"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    # the primary's host dies right after the acquire
    primary.kill()
    if proxy:
        proxy.kill()
    token = int(line) if line.isdigit() else None
    cli(replica.port, "REPLICAOF", "NO", "ONE")
    counter = cli(replica.port, "GET", "wt:fencing")
    counter = int(counter) if counter.isdigit() else 0
    key = cli(replica.port, "EXISTS", "wt") == "1"
    # the old holder finds its lease gone on the (unreachable) primary: 76
    try:
        rc = p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    err = p.stderr.read()
    return dict(round=n, wait=wait, token=token, next=counter + 1, repeated=token is not None and counter + 1 <= token,
                key_on_replica=key, rc=rc, warned="acknowledged" in err)


def timing(a, base, delay_ms, reps):
    """p50/p90 of `lockrun URL true` with a replica, WAIT off and on."""
    primary = Node(base)
    replica, proxy = attach(base, primary, delay_ms)
    out = {}
    url = f"redis://127.0.0.1:{primary.port}#time"
    for wait in (False, True, False, True):
        env = dict(os.environ, LOCKRUN_REDIS_WAIT="1" if wait else "0")
        xs = []
        for _ in range(reps):
            t = time.perf_counter()
            subprocess.run([a.lockrun, url, "true"], env=env, check=True)
            xs.append((time.perf_counter() - t) * 1000)
        out.setdefault(wait, []).extend(xs)
    for n in (primary, replica):
        n.kill()
    if proxy:
        proxy.kill()
    res = {}
    for wait, xs in out.items():
        xs.sort()
        res[wait] = (statistics.median(xs), xs[int(0.9 * (len(xs) - 1))])
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20, help="rounds per variant")
    ap.add_argument("--delay-ms", type=float, default=20)
    ap.add_argument("--reps", type=int, default=40, help="timed runs per variant")
    ap.add_argument("--lockrun", default=os.path.join(ROOT, "target", "release", "lockrun"))
    a = ap.parse_args()
    a.lockrun = os.path.abspath(a.lockrun)
    base = tempfile.mkdtemp(prefix="lockrun-wait-")
    rows = []
    try:
        primary = Node(base)
        replica, proxy = attach(base, primary, a.delay_ms)
        for n in range(2 * a.rounds):
            r = one_round(a, primary, replica, proxy, wait=n % 2 == 1, n=n)
            rows.append(r)
            print(r, flush=True)
            primary = replica
            replica, proxy = attach(base, primary, a.delay_ms)
        for x in (primary, replica):
            x.kill()
        if proxy:
            proxy.kill()
        times = {d: timing(a, base, d, a.reps) for d in (0, a.delay_ms)}
    finally:
        for p in STARTED:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(base, ignore_errors=True)
    print(f"\nfailover right after the acquire, replica {a.delay_ms:g} ms away (one way), {a.rounds} rounds each:\n")
    print("| WAIT | rounds | tokens repeated | lock key missing on the promoted replica | warnings |")
    print("|---|---:|---:|---:|---:|")
    for wait in (False, True):
        rs = [r for r in rows if r["wait"] == wait]
        print(f"| {'WAIT 1 (default)' if wait else 'none (LOCKRUN_REDIS_WAIT=0)'} | {len(rs)} | "
              f"{sum(r['repeated'] for r in rs)} | {sum(not r['key_on_replica'] for r in rs)} | "
              f"{sum(r['warned'] for r in rs)} |")
    print(f"\n`lockrun URL true`, {2 * a.reps} runs each, ms:\n")
    print("| replica | WAIT | p50 | p90 |")
    print("|---|---|---:|---:|")
    for d, res in times.items():
        for wait in (False, True):
            p50, p90 = res[wait]
            print(f"| {'direct' if d == 0 else f'{d:g} ms away'} | {'yes' if wait else 'no'} | {p50:.2f} | {p90:.2f} |")


if __name__ == "__main__":
    main()
