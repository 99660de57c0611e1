#!/usr/bin/python3
"""lockrun fault harness (issue 29): servers and clients in their own network
namespaces, one fault at a time, and a checker of what the clients logged.

Python 3 standard library only. Run as root on Linux (ip netns, veth, a
bridge). See docs/RELIABILITY.md and bench/faults/README.md.

  faults.py suite --backend etcd --faults cut,pause --reps 1   # run, check, table
  faults.py check RUNDIR                                       # check one run again
  faults.py down                                               # remove namespaces, servers

Network: a hub namespace lrf-hub with bridge br0 (10.203.0.0/24: clients,
servers' client ports, the harness at .1) and br1 (10.203.1.0/24: etcd peer
traffic only). Every other node is a namespace with a veth into the hub. A
cut takes the node's port off the bridge (`ip link set h-NODE nomaster`):
its packets are silently dropped, as in a partition, and its carrier stays
up. An etcd member partitioned from the majority loses only br1: the clients
still reach it. The kernel here has no netem, so latency and loss are made
by a queueing TCP proxy in the client's namespace (proxy mode below).
All addresses are inside namespaces this harness creates.
"""

import argparse
import json
import shutil
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict, deque

HERE = os.path.dirname(os.path.abspath(__file__))
NET0 = "10.203.0."
NET1 = "10.203.1."
HUB = "lrf-hub"
ETCD_MEMBERS = ["e1", "e2", "e3"]
ETCD_IP = {"e1": 11, "e2": 12, "e3": 13}
PG_IP = 20
# Redis: a primary and its replica (each may become the other after a
# failover) and one Sentinel, each in its own namespace
REDIS_NODES = ["r1", "r2"]
REDIS_IP = {"r1": 31, "r2": 32}
SENTINEL_IP = 35
SENTINEL_MASTER = "lrfm"
CLIENT_IP0 = 101
PG_BIN = None
STATE_FILE = "/tmp/lrf-state.json"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def sh(cmd, check=True, quiet=False, **kw):
    if not quiet and os.environ.get("LRF_VERBOSE"):
        print("+", cmd if isinstance(cmd, str) else " ".join(cmd), file=sys.stderr)
    r = subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def nsx(ns, cmd):
    return ["ip", "netns", "exec", "lrf-" + ns] + cmd


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- network

def add_node(name, ip0, ip1=None):
    ns = "lrf-" + name
    sh(["ip", "netns", "add", ns])
    sh(nsx(name, ["ip", "link", "set", "lo", "up"]))
    for dev, hdev, br, ip in (("eth0", "h-" + name, "br0", NET0 + str(ip0)),
                              ("eth1", "p-" + name, "br1", NET1 + str(ip1) if ip1 else None)):
        if ip is None:
            continue
        tmp = "t" + hdev
        sh(["ip", "link", "add", tmp, "type", "veth", "peer", "name", hdev])
        sh(["ip", "link", "set", tmp, "netns", ns])
        sh(["ip", "link", "set", hdev, "netns", HUB])
        sh(nsx(name, ["ip", "link", "set", tmp, "name", dev]))
        sh(nsx(name, ["ip", "addr", "add", ip + "/24", "dev", dev]))
        sh(nsx(name, ["ip", "link", "set", dev, "up"]))
        sh(nsx("hub", ["ip", "link", "set", hdev, "master", br, "up"]))


def net_up(nclients):
    net_down()
    sh(["ip", "netns", "add", HUB])
    sh(nsx("hub", ["ip", "link", "set", "lo", "up"]))
    for br in ("br0", "br1"):
        sh(nsx("hub", ["ip", "link", "add", br, "type", "bridge"]))
        sh(nsx("hub", ["ip", "link", "set", br, "up"]))
    sh(nsx("hub", ["ip", "addr", "add", NET0 + "1/24", "dev", "br0"]))
    for m in ETCD_MEMBERS:
        add_node(m, ETCD_IP[m], ETCD_IP[m])
    add_node("pg", PG_IP)
    for n in REDIS_NODES:
        add_node(n, REDIS_IP[n])
    add_node("s1", SENTINEL_IP)
    for i in range(1, nclients + 1):
        add_node(f"c{i}", CLIENT_IP0 + i - 1)


def net_down():
    r = sh(["ip", "netns", "list"], check=False)
    for line in r.stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if ns.startswith("lrf-"):
            # processes left in it would keep it: end only ours (state file)
            sh(["ip", "netns", "del", ns], check=False)


def cut(node, on=True, bridge="br0"):
    hdev = ("h-" if bridge == "br0" else "p-") + node
    if on:
        sh(nsx("hub", ["ip", "link", "set", hdev, "nomaster"]))
    else:
        sh(nsx("hub", ["ip", "link", "set", hdev, "master", bridge]))


# ---------------------------------------------------------------- servers

class Servers:
    def __init__(self, base):
        self.base = base
        self.etcd = {}  # member -> Popen
        self.pg_dir = os.path.join(base, "pg")
        self.redis = {}  # node -> Popen
        self.sentinel = None

    # Redis: r1 starts as the primary, r2 as its replica, s1 watches them.
    # The primary persists every write (appendonly yes, appendfsync
    # always: what the guide asks for a token that survives a restart);
    # each node has a config file, which Sentinel rewrites when it turns a
    # node into a replica, so a restarted node comes back in its new role.
    def redis_conf(self, n):
        return os.path.join(self.base, f"redis-{n}", "redis.conf")

    def redis_init(self, n):
        d = os.path.join(self.base, f"redis-{n}")
        os.makedirs(d, exist_ok=True)
        ip = NET0 + str(REDIS_IP[n])
        conf = (f"port 6379\nbind {ip}\nprotected-mode no\ndir {d}\nsave \"\"\n"
                "appendonly yes\nappendfsync always\nenable-debug-command yes\n")
        if n != "r1":
            conf += f"replicaof {NET0}{REDIS_IP['r1']} 6379\n"
        with open(self.redis_conf(n), "w") as f:
            f.write(conf)

    def redis_start(self, n):
        out = open(os.path.join(self.base, f"redis-{n}.log"), "ab")
        self.redis[n] = subprocess.Popen(nsx(n, ["redis-server", self.redis_conf(n)]), stdout=out,
                                         stderr=out, start_new_session=True)

    def rcli(self, ip, port, *args, timeout=5):
        return sh(nsx("hub", ["redis-cli", "-h", ip, "-p", str(port)] + list(args)),
                  check=False, timeout=timeout, quiet=True).stdout.strip()

    def redis_primary(self):
        """The node Sentinel names as the primary now."""
        out = self.rcli(NET0 + str(SENTINEL_IP), 26379, "SENTINEL", "get-master-addr-by-name",
                        SENTINEL_MASTER).split()
        return next((n for n in REDIS_NODES if out and out[0] == NET0 + str(REDIS_IP[n])), None)

    def redis_role(self, n):
        return self.rcli(NET0 + str(REDIS_IP[n]), 6379, "ROLE").split("\n")[0]

    def redis_healthy(self):
        p = self.redis_primary()
        if not p or self.redis_role(p) != "master":
            return False
        r = next(x for x in REDIS_NODES if x != p)
        info = self.rcli(NET0 + str(REDIS_IP[r]), 6379, "INFO", "replication")
        seen = self.rcli(NET0 + str(SENTINEL_IP), 26379, "SENTINEL", "replicas", SENTINEL_MASTER)
        return ("master_link_status:up" in info and f"{NET0}{REDIS_IP[r]}" in seen
                and "s_down" not in seen and "disconnected" not in seen)

    def redis_up(self):
        for n in REDIS_NODES:
            self.redis_init(n)
            self.redis_start(n)
        d = os.path.join(self.base, "sentinel")
        os.makedirs(d, exist_ok=True)
        conf = os.path.join(d, "sentinel.conf")
        with open(conf, "w") as f:
            # down after 3 s: a failover takes about 4-5 s from the kill
            f.write(f"port 26379\nbind {NET0}{SENTINEL_IP}\nprotected-mode no\ndir {d}\n"
                    f"sentinel monitor {SENTINEL_MASTER} {NET0}{REDIS_IP['r1']} 6379 1\n"
                    f"sentinel down-after-milliseconds {SENTINEL_MASTER} 3000\n"
                    f"sentinel failover-timeout {SENTINEL_MASTER} 10000\n")
        out = open(os.path.join(self.base, "sentinel.log"), "ab")
        self.sentinel = subprocess.Popen(nsx("s1", ["redis-sentinel", conf]), stdout=out, stderr=out,
                                         start_new_session=True)
        self.wait(self.redis_healthy, 60, "redis primary, replica and sentinel")

    def redis_ensure(self):
        for n, p in list(self.redis.items()):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
            else:
                self.redis_start(n)
        self.wait(self.redis_healthy, 90, "redis healthy again")

    # etcd
    def etcd_cmd(self, m, state="new"):
        cluster = ",".join(f"{x}=http://{NET1}{ETCD_IP[x]}:2380" for x in ETCD_MEMBERS)
        ip0 = NET0 + str(ETCD_IP[m])
        return nsx(m, ["etcd", "--name", m, "--data-dir", os.path.join(self.base, "etcd-" + m),
                       "--listen-client-urls", f"http://{ip0}:2379",
                       "--advertise-client-urls", f"http://{ip0}:2379",
                       "--listen-peer-urls", f"http://{NET1}{ETCD_IP[m]}:2380",
                       "--initial-advertise-peer-urls", f"http://{NET1}{ETCD_IP[m]}:2380",
                       "--initial-cluster", cluster, "--initial-cluster-state", state,
                       "--initial-cluster-token", "lrf", "--log-level", "warn"])

    def etcd_start(self, m):
        out = open(os.path.join(self.base, f"etcd-{m}.log"), "ab")
        self.etcd[m] = subprocess.Popen(self.etcd_cmd(m), stdout=out, stderr=out,
                                        start_new_session=True)

    def etcd_pid(self, m):
        # ip netns exec execs etcd in place: the Popen pid is etcd's
        return self.etcd[m].pid

    def etcd_endpoints(self):
        return ",".join(f"{NET0}{ETCD_IP[m]}:2379" for m in ETCD_MEMBERS)

    def etcdctl(self, *args, timeout=10):
        return sh(nsx("hub", ["etcdctl", "--endpoints", self.etcd_endpoints(),
                              "--command-timeout=3s"] + list(args)),
                  check=False, timeout=timeout, env=dict(os.environ, ETCDCTL_API="3"))

    def etcd_healthy(self):
        r = self.etcdctl("endpoint", "health")
        return r.returncode == 0 and (r.stdout + r.stderr).count("is healthy") == 3

    def etcd_up(self):
        for m in ETCD_MEMBERS:
            self.etcd_start(m)
        self.wait(self.etcd_healthy, 60, "etcd cluster healthy")

    def etcd_leader(self):
        r = self.etcdctl("endpoint", "status", "-w", "json")
        try:
            for st in json.loads(r.stdout):
                h = st["Status"]["header"]
                if st["Status"]["leader"] == h["member_id"]:
                    ep = st["Endpoint"]
                    for m in ETCD_MEMBERS:
                        if f"{NET0}{ETCD_IP[m]}:" in ep:
                            return m
        except (ValueError, KeyError, TypeError):
            pass
        return None

    def etcd_restart_dead(self):
        for m, p in self.etcd.items():
            if p.poll() is not None:
                self.etcd_start(m)
        self.wait(self.etcd_healthy, 60, "etcd healthy again")

    # PostgreSQL
    def pg_ctl(self, *args):
        return sh(nsx("pg", ["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "pg_ctl"),
                             "-D", self.pg_dir, "-l", os.path.join(self.base, "pg.log")] + list(args)),
                  check=False, timeout=120)

    def pg_init(self):
        os.makedirs(self.pg_dir, exist_ok=True)
        sh(["chown", "postgres:postgres", self.pg_dir])
        os.chmod(self.pg_dir, 0o700)
        lf = os.path.join(self.base, "pg.log")
        open(lf, "a").close()
        sh(["chown", "postgres:postgres", lf])
        sh(["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "initdb"), "-D", self.pg_dir,
            "-A", "trust", "-U", "postgres", "--no-sync"])
        with open(os.path.join(self.pg_dir, "postgresql.auto.conf"), "a") as f:
            f.write(f"listen_addresses = '{NET0}{PG_IP}'\nunix_socket_directories = '{self.pg_dir}'\n"
                    "fsync = off\nmax_connections = 60\nlog_min_messages = warning\n")
        with open(os.path.join(self.pg_dir, "pg_hba.conf"), "a") as f:
            f.write("host all all 10.203.0.0/24 trust\n")

    def pg_start(self):
        r = self.pg_ctl("-w", "-t", "60", "start")
        if r.returncode != 0:
            raise RuntimeError("pg_ctl start: " + r.stdout + r.stderr)

    def pg_pids(self):
        try:
            with open(os.path.join(self.pg_dir, "postmaster.pid")) as f:
                pm = int(f.readline())
        except (OSError, ValueError):
            return []
        return [pm] + descendants(pm)

    def psql(self, sql):
        return sh(nsx("hub", [os.path.join(PG_BIN, "psql"), "-X", "-A", "-t", "-h", NET0 + str(PG_IP),
                              "-U", "postgres", "-d", "postgres", "-c", sql]), check=False, timeout=20)

    def pg_healthy(self):
        return self.psql("select 1").stdout.strip() == "1"

    def pg_up(self):
        self.pg_init()
        self.pg_start()
        self.wait(self.pg_healthy, 60, "postgres up")

    def pg_ensure(self):
        if not self.pg_healthy():
            for p in self.pg_pids():
                try:
                    os.kill(p, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            time.sleep(1)
            if not self.pg_healthy():
                self.pg_start()
            self.wait(self.pg_healthy, 60, "postgres up again")

    def wait(self, pred, timeout, what):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if pred():
                    return
            except Exception:
                pass
            time.sleep(0.5)
        raise RuntimeError("timed out waiting for " + what)

    def stop_all(self):
        for p in list(self.redis.values()) + ([self.sentinel] if self.sentinel else []):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
        for m, p in self.etcd.items():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
        for p in self.etcd.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if os.path.exists(os.path.join(self.pg_dir, "postmaster.pid")):
            for p in self.pg_pids():
                try:
                    os.kill(p, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            self.pg_ctl("-m", "immediate", "stop")


def descendants(pid):
    kids = defaultdict(list)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
            kids[ppid].append(int(d))
        except (OSError, ValueError):
            pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for k in kids.get(p, []):
            out.append(k)
            todo.append(k)
    return out


def work_processes():
    """Pids of work.sh commands alive now (exact argv: sh .../work.sh)."""
    want = ["sh", os.path.join(HERE, "work.sh")]
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")[:-1]
            except OSError:
                continue
            if argv == want:
                out.append(int(d))
    return out


def signal_all(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------- delay proxy

def proxy_main(args):
    """Runs in a client's namespace: listen on 127.0.0.1:LPORT for each
    LPORT=HOST:PORT, forward with a one-way delay of --delay-ms each way and,
    with --loss, each chunk lost with that probability: TCP would resend it
    after an RTO (200 ms, doubling while losses follow each other), so the
    chunk and all after it (in-order delivery) are held back by that RTO."""
    delay = args.delay_ms / 1000.0
    jitter = args.jitter_ms / 1000.0

    def pump(src, dst):
        q = deque()
        cv = threading.Condition()
        done = [False]

        def writer():
            while True:
                with cv:
                    while not q and not done[0]:
                        cv.wait()
                    if not q and done[0]:
                        break
                    at, data = q.popleft()
                now = time.time()
                if at > now:
                    time.sleep(at - now)
                try:
                    dst.sendall(data)
                except OSError:
                    break
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        threading.Thread(target=writer, daemon=True).start()
        last = 0.0
        rto = 0.2
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                with cv:
                    done[0] = True
                    cv.notify()
                return
            at = time.time() + delay + random.uniform(0, jitter)
            if args.loss and random.random() < args.loss:
                at += rto
                rto = min(rto * 2, 3.0)
            else:
                rto = 0.2
            at = max(at, last)
            last = at
            with cv:
                q.append((at, data))
                cv.notify()

    def serve(lport, host, port):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", lport))
        ls.listen(64)
        while True:
            c, _ = ls.accept()
            try:
                u = socket.create_connection((host, port), timeout=5)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=pump, args=(c, u), daemon=True).start()
            threading.Thread(target=pump, args=(u, c), daemon=True).start()

    for spec in args.map:
        lport, hp = spec.split("=")
        host, port = hp.rsplit(":", 1)
        threading.Thread(target=serve, args=(int(lport), host, int(port)), daemon=True).start()
    deadline = time.time() + args.max_seconds
    while time.time() < deadline:
        time.sleep(1)


# ---------------------------------------------------------------- client loop

def client_main(a):
    """Loop lockrun until the stop file exists (bounded by --max-seconds)."""
    env = dict(os.environ, LRF_CLIENT=a.id, LRF_LOG=a.log, LRF_TICKS=str(a.ticks),
               LRF_TICK=str(a.tick), LRF_FENCE_DIR=a.fence_dir,
               LRF_GUARD=os.path.join(HERE, "guard.sh") if a.fence_dir else "")
    runs = open(a.runs, "a")
    deadline = time.time() + a.max_seconds
    rnd = random.Random(a.id)
    while time.time() < deadline and not os.path.exists(a.stop):
        cmd = [a.lockrun] + a.lockrun_args + [a.url, "--", "sh", os.path.join(HERE, "work.sh")]
        t0 = time.time()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with open(a.pidfile + ".tmp", "w") as f:
            f.write(str(p.pid))
        os.rename(a.pidfile + ".tmp", a.pidfile)
        err = p.stderr.read().decode(errors="replace")
        rc = p.wait()
        t1 = time.time()
        runs.write(json.dumps({"client": a.id, "lockrun_pid": p.pid, "t0": t0, "t1": t1,
                               "rc": rc, "stderr": err[-2000:]}) + "\n")
        runs.flush()
        time.sleep(rnd.uniform(0.05, 0.3))


# ---------------------------------------------------------------- faults

# Each fault: what it does, how long, and what the guide allows under it.
#  loss_ok: the lock may be lost (76 is right, not a false kill)
#  overlap_ok: the guide documents an unavoidable overlap (then it is
#              reported but does not fail CI; the fenced write must still
#              be clean)
FAULTS = {
    "etcd": {
        "cut": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=12),
        "pause": dict(loss_ok=True, overlap_ok=True, ttl=4, hold=12),
        "leader-stop": dict(loss_ok=True, overlap_ok=False, ttl=8, hold=14),   # 3.4: leader revokes on resume
        # longer than the lease: etcd 3.4's resumed leader may revoke live
        # leases (etcd-io/etcd#12528); lockrun must notice at once
        "leader-stop-long": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=12, stop=1.5),
        "leader-kill": dict(loss_ok=False, overlap_ok=False, ttl=8, hold=14),
        "member-stop": dict(loss_ok=False, overlap_ok=False, ttl=8, hold=14),
        "partition": dict(loss_ok=False, overlap_ok=False, ttl=8, hold=20, idle_max=3),
        "revoke": dict(loss_ok=True, overlap_ok=False, ttl=8, hold=6),
        "latency500": dict(loss_ok=False, overlap_ok=False, ttl=10, proxy=(250, 0)),
        "latency2000": dict(loss_ok=False, overlap_ok=False, ttl=30, proxy=(1000, 0)),
        "loss20": dict(loss_ok=False, overlap_ok=False, ttl=10, proxy=(20, 0.2)),
    },
    "pg": {
        "cut": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=12),
        "pause": dict(loss_ok=False, overlap_ok=False, ttl=4, hold=12),
        "server-stop": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=8),
        "server-kill": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=6),
        "restart": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=6),
        "terminate": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=6),
        "latency500": dict(loss_ok=False, overlap_ok=False, ttl=10, proxy=(250, 0)),
        "latency2000": dict(loss_ok=False, overlap_ok=False, ttl=30, proxy=(1000, 0)),
        "loss20": dict(loss_ok=False, overlap_ok=False, ttl=10, proxy=(20, 0.2)),
    },
    # Redis through Sentinel (redis+sentinel://). Sentinel calls the
    # primary down after 3 s, so a stop longer than that is a failover too.
    "redis": {
        "cut": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=12),
        # the holder's lockrun, watchdog and command stopped past the TTL:
        # the key expires, the next holder runs, the resumed command runs
        # on until its lockrun stops it (the documented window, as etcd's)
        "client-pause": dict(loss_ok=True, overlap_ok=True, ttl=4, hold=12),
        # SIGSTOP of the primary for 2xTTL: Sentinel fails over meanwhile
        "pause": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=12),
        # SIGKILL of the primary, started again at once (its AOF, fsynced
        # always, keeps the counter): no failover
        "restart": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=8),
        # SIGKILL of the primary, Sentinel promotes the replica, the old
        # primary started again 8 s later (it comes back as a replica)
        "failover": dict(loss_ok=True, overlap_ok=False, ttl=4, hold=8),
        # SENTINEL FAILOVER: the primary demoted and the replica promoted
        # while both run: nothing is lost, so no 76
        "sentinel-failover": dict(loss_ok=False, overlap_ok=False, ttl=4, hold=8),
        # Latency and loss on the link to the primary (the clients' own
        # proxy, so redis:// to the primary straight, not through Sentinel,
        # which would hand out the primary's real address)
        "latency500": dict(loss_ok=False, overlap_ok=False, ttl=10, proxy=(250, 0)),
        "latency2000": dict(loss_ok=False, overlap_ok=False, ttl=30, proxy=(1000, 0)),
        "loss20": dict(loss_ok=False, overlap_ok=False, ttl=10, proxy=(20, 0.2)),
    },
}

# The window the guide allows two holders in, beyond the fault's own:
# signal delivery and the command's exit on SIGTERM (work.sh exits at
# once) plus one write tick of measurement slack.
WINDOW_MS = 250


def current_holder(logf):
    """The client whose command started last and has not ended (or None)."""
    open_ = {}
    try:
        with open(logf) as f:
            for line in f:
                p = line.split()
                if len(p) < 7:
                    continue
                key = (p[1], p[3])
                if p[0] == "S":
                    open_[key] = float(p[6])
                elif p[0] == "E":
                    open_.pop(key, None)
    except OSError:
        return None
    if not open_:
        return None
    (client, pid), t = max(open_.items(), key=lambda kv: kv[1])
    if time.time() - t > 20:
        return None
    return client, int(pid), t


def run_one(srv, backend, fault, rep, a, variant):
    spec = dict(FAULTS[backend][fault])
    ttl = a.ttl or spec["ttl"]
    rid = f"{backend}-{fault}-{variant}-{rep}"
    d = os.path.join(a.out, rid)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d, exist_ok=True)
    fence = os.path.join(d, "fence")
    os.makedirs(fence, exist_ok=True)
    logf, runsf, stop = os.path.join(d, "log"), os.path.join(d, "runs.jsonl"), os.path.join(d, "stop")
    name = f"lrf{int(time.time())}{rep}{fault.replace('-', '')}"
    proxy = spec.get("proxy")
    clients, proxies = [], []
    endpoints = [f"{NET0}{ETCD_IP[m]}:2379" for m in ETCD_MEMBERS]
    lockrun = a.lockrun
    if variant == "nolock":
        lockrun = os.path.join(HERE, "broken", "nolock.py")
    elif variant == "clocktoken":
        lockrun = os.path.join(HERE, "broken", "clocktoken.py")
    elif variant == "nokill":
        lockrun = os.path.join(HERE, "broken", "nokill.py")
    largs = ["--ttl", f"{ttl}s", "-w", "120", "--kill-grace", "1s"]
    # how long each command holds: through the fault and past the TTL where
    # the fault is about the holder, short (many hand-overs) otherwise
    hold = a.hold or spec.get("hold", 2.0)
    ticks = max(3, int(hold / a.tick))
    for i in range(1, a.clients + 1):
        c = f"c{i}"
        if proxy:
            if backend == "etcd":
                mp = [f"{23790 + k}={ep}" for k, ep in enumerate(endpoints, 1)]
                targets = [f"127.0.0.1:{23790 + k}" for k in range(1, 4)]
            elif backend == "redis":
                # the primary as Sentinel names it now (a failover run
                # before this one may have moved it)
                primary = srv.redis_primary() or "r1"
                mp = [f"16379={NET0}{REDIS_IP[primary]}:6379"]
            else:
                mp = [f"25432={NET0}{PG_IP}:5432"]
            pp = subprocess.Popen(nsx(c, [PYTHON, __file__, "proxy", "--delay-ms", str(proxy[0]),
                                          "--loss", str(proxy[1]), "--max-seconds", str(a.seconds + 300)] + mp),
                                  stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, f"proxy-{c}.err"), "w"))
            proxies.append(pp)
        if backend == "etcd":
            eps = targets if proxy else endpoints
            url = "etcd://" + ",".join(eps) + "/lrf/" + name
        elif backend == "redis" and proxy:
            url = f"redis://127.0.0.1:16379#{name}"
        elif backend == "redis":
            url = f"redis+sentinel://{NET0}{SENTINEL_IP}:26379/{SENTINEL_MASTER}#{name}"
        else:
            host = "127.0.0.1:25432" if proxy else f"{NET0}{PG_IP}:5432"
            url = f"postgres://postgres@{host}/postgres#{name}"
        clients.append((c, url))
    if proxy:
        time.sleep(0.5)
    cps = []
    for c, url in clients:
        cmd = nsx(c, [PYTHON, __file__, "client", "--id", c, "--url", url, "--lockrun", lockrun,
                      "--log", logf, "--runs", runsf, "--stop", stop, "--pidfile", os.path.join(d, c + ".pid"),
                      "--ticks", str(ticks), "--tick", str(a.tick), "--fence-dir", fence,
                      "--max-seconds", str(a.seconds + 240), "--"] + largs)
        cps.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                    stderr=open(os.path.join(d, f"client-{c}.err"), "w")))
    events = []

    def ev(kind, **kw):
        e = dict(kind=kind, t=time.time(), **kw)
        events.append(e)
        log(f"{rid}: {kind} {kw}")

    ev("start", ttl=ttl, clients=a.clients, variant=variant)
    time.sleep(a.warmup)
    # inject when a holder has just started, so that it holds through the fault
    holder = None
    end = time.time() + 30
    while time.time() < end:
        holder = current_holder(logf)
        if holder and time.time() - holder[2] < 0.4:
            break
        time.sleep(0.05)
    hc = holder[0] if holder else "c1"
    fault_len = a.fault_seconds or max(2.0 * ttl, 6)
    try:
        if proxy or fault == "none":
            ev("fault", fault=fault, target="all clients (proxy)" if proxy else "none")
            time.sleep(a.seconds)
            ev("heal")
        elif fault == "cut":
            ev("fault", fault=fault, target=hc)
            cut(hc, True)
            time.sleep(fault_len)
            cut(hc, False)
            ev("heal")
        elif backend == "redis" and fault == "pause":
            node = srv.redis_primary() or "r1"
            pid = srv.redis[node].pid
            ev("fault", fault=fault, target=node)
            os.kill(pid, signal.SIGSTOP)
            time.sleep(fault_len)
            os.kill(pid, signal.SIGCONT)
            ev("heal")
        elif backend == "redis" and fault in ("restart", "failover", "sentinel-failover"):
            node = srv.redis_primary() or "r1"
            ev("fault", fault=fault, target=node)
            if fault == "sentinel-failover":
                srv.rcli(NET0 + str(SENTINEL_IP), 26379, "SENTINEL", "FAILOVER", SENTINEL_MASTER)
            else:
                srv.redis[node].kill()
                srv.redis[node].wait()
                if fault == "failover":
                    other = next(x for x in REDIS_NODES if x != node)
                    srv.wait(lambda: srv.redis_primary() == other, 30, "sentinel to promote " + other)
                    ev("promoted", node=other)
                    time.sleep(3)
                srv.redis_start(node)
            ev("heal")
        elif fault in ("pause", "client-pause"):
            lp = int(open(os.path.join(d, hc + ".pid")).read())
            pids = [lp] + descendants(lp)
            ev("fault", fault=fault, target=hc, pids=pids)
            signal_all(pids, signal.SIGSTOP)
            time.sleep(fault_len)
            signal_all(pids + descendants(lp), signal.SIGCONT)
            ev("heal")
        elif fault in ("leader-stop", "leader-stop-long", "leader-kill", "member-stop"):
            leader = srv.etcd_leader() or "e1"
            m = leader if fault.startswith("leader") else next(x for x in ETCD_MEMBERS if x != leader)
            pid = srv.etcd_pid(m)
            ev("fault", fault=fault, target=m)
            if fault.endswith("kill"):
                os.kill(pid, signal.SIGKILL)
                srv.etcd[m].wait()
                time.sleep(5)
                srv.etcd_start(m)
            else:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(a.stop_seconds or spec.get("stop", 0.6) * ttl)
                os.kill(pid, signal.SIGCONT)
            ev("heal")
        elif fault == "partition":
            # the member every client names first (they talk to it) is cut
            # off from the other two, not from the clients
            m = "e1"
            ev("fault", fault=fault, target=m, leader=srv.etcd_leader())
            cut(m, True, "br1")
            time.sleep(fault_len)
            cut(m, False, "br1")
            ev("heal")
        elif fault == "revoke":
            r = srv.etcdctl("get", "--prefix", f"lrf/{name}/", "--keys-only", "-w", "json")
            kvs = json.loads(r.stdout).get("kvs", [])
            import base64
            kvs.sort(key=lambda kv: int(kv.get("create_revision", 0)))
            key = base64.b64decode(kvs[0]["key"]).decode() if kvs else ""
            lease = key.rsplit("/", 1)[-1]
            ev("fault", fault=fault, target=key)
            srv.etcdctl("lease", "revoke", lease)
            ev("heal")
        elif fault in ("server-stop", "server-kill"):
            pids = srv.pg_pids()
            ev("fault", fault=fault, target="postgres", pids=len(pids))
            if fault == "server-stop":
                signal_all(pids, signal.SIGSTOP)
                time.sleep(fault_len)
                signal_all(srv.pg_pids(), signal.SIGCONT)
            else:
                signal_all(pids, signal.SIGKILL)
                time.sleep(2)
                # the killed postmaster may stay a zombie (PID 1 here does
                # not reap): its lock files go, as a reboot would take them
                for f in ["postmaster.pid"] + [x for x in os.listdir(srv.pg_dir) if x.endswith(".lock")]:
                    try:
                        os.unlink(os.path.join(srv.pg_dir, f))
                    except OSError:
                        pass
                srv.pg_start()
            ev("heal")
        elif fault == "restart":
            ev("fault", fault=fault, target="postgres")
            srv.pg_ctl("-w", "-m", "fast", "restart")
            ev("heal")
        elif fault == "terminate":
            ev("fault", fault=fault, target="holder's session")
            srv.psql("select pg_terminate_backend(l.pid) from pg_locks l where l.locktype='advisory'"
                     " and l.granted and l.pid <> pg_backend_pid()")
            ev("heal")
        else:
            raise SystemExit("unknown fault " + fault)
        time.sleep(a.recovery or max(ttl * 1.5, 8))
    finally:
        ev("stop")
        open(stop, "w").close()
        # drain: holders finish their command; waiters are ended with
        # SIGINT (a wait ends at once: 130), so the run does not go on
        # for every queued hold
        wait_end = time.time() + ticks * a.tick * 1.5 + 2 * ttl + 60
        while time.time() < wait_end and any(p.poll() is None for p in cps):
            work = set(work_processes())
            for c, _ in clients:
                try:
                    lp = int(open(os.path.join(d, c + ".pid")).read())
                except (OSError, ValueError):
                    continue
                if os.path.exists(f"/proc/{lp}") and not work & set(descendants(lp)):
                    # SIGINT: the nokill variant's lockrun ignores SIGTERM
                    signal_all([lp], signal.SIGINT)
            time.sleep(0.3)
        for p in cps:
            if p.poll() is None:
                p.kill()
        # commands still alive now (their lockrun gone) are left running
        time.sleep(0.5)
        left = work_processes()
        ev("end", left_running=left)
        signal_all(left, signal.SIGKILL)
        for p in proxies:
            p.kill()
        with open(os.path.join(d, "events.json"), "w") as f:
            json.dump(dict(backend=backend, fault=fault, variant=variant, ttl=ttl,
                           spec=spec, events=events), f, indent=1)
        if backend == "etcd":
            for p in srv.etcd.values():
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
            srv.etcd_restart_dead()
        elif backend == "redis":
            srv.redis_ensure()
        else:
            srv.pg_ensure()
    return check_run(d)


# ---------------------------------------------------------------- checker

def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def check_run(d):
    meta = json.load(open(os.path.join(d, "events.json")))
    ttl, spec = meta["ttl"], meta["spec"]
    evs = {e["kind"]: e for e in meta["events"]}
    t_fault = evs.get("fault", {}).get("t")
    t_heal = evs.get("heal", {}).get("t", t_fault)
    cmds = {}
    order = []  # W lines in append order: (token, t, key)
    for line in open(os.path.join(d, "log")):
        p = line.split()
        if len(p) < 7:
            continue
        kind, client, tok, pid, _ppid, _seq, t = p[:7]
        key = (client, pid)
        tok, t = int(tok), float(t)
        c = cmds.setdefault(key, dict(client=client, pid=pid, token=tok, start=None, last=None, end=None, writes=[]))
        if kind == "S":
            c["start"] = t
        elif kind == "W":
            c["writes"].append(t)
            order.append((tok, t, key))
        elif kind == "E":
            c["end"] = t
        elif kind == "K":
            c["killed"] = t
            continue  # stopped, not active: the overlap counts activity
        c["last"] = t if c["last"] is None else max(c["last"], t)
    runs = [json.loads(x) for x in open(os.path.join(d, "runs.jsonl"))] if os.path.exists(os.path.join(d, "runs.jsonl")) else []
    # match each command to its lockrun run: same client, started in [t0, t1]
    by_client = defaultdict(list)
    for r in runs:
        by_client[r["client"]].append(r)
    for c in cmds.values():
        for r in by_client[c["client"]]:
            if c["start"] is not None and r["t0"] <= c["start"] <= r["t1"] + 0.01:
                c["run"] = r
                r["cmd"] = c
                break
    inst = sorted((c for c in cmds.values() if c["start"] is not None), key=lambda c: c["start"])
    # overlaps: each command active from its start to its last line
    overlaps = []
    for i, a_ in enumerate(inst):
        for b in inst[i + 1:]:
            if b["start"] >= a_["last"]:
                continue
            overlaps.append(dict(a=f"{a_['client']}/{a_['token']}", b=f"{b['client']}/{b['token']}",
                                 ms=round((min(a_["last"], b["last"]) - b["start"]) * 1000, 1),
                                 at=round(b["start"] - (t_fault or b["start"]), 3)))
    # tokens strictly increasing in start order
    bad_tokens, hi = [], None
    for c in inst:
        if hi is not None and c["token"] <= hi:
            bad_tokens.append(dict(client=c["client"], token=c["token"], after=hi))
        hi = c["token"] if hi is None else max(hi, c["token"])
    # writes that landed after the resource had taken a higher token
    stale_unfenced, hi = 0, None
    for tok, t, key in order:
        if hi is not None and tok < hi:
            stale_unfenced += 1
        hi = tok if hi is None else max(hi, tok)
    stale_fenced, rejected, hi = 0, 0, None
    fd = os.path.join(d, "fence")
    if os.path.exists(os.path.join(fd, "accepted")):
        for line in open(os.path.join(fd, "accepted")):
            tok = int(line.split()[0])
            if hi is not None and tok < hi:
                stale_fenced += 1
            hi = tok if hi is None else max(hi, tok)
    if os.path.exists(os.path.join(fd, "rejected")):
        rejected = sum(1 for _ in open(os.path.join(fd, "rejected")))
    # lost locks, kills, left running
    rcs = defaultdict(int)
    exit_ms, kill_ms, after76, false_kills, unclear, messages = [], [], [], [], [], defaultdict(int)
    t_stop = evs.get("stop", {}).get("t", float("inf"))
    for r in runs:
        if r["t1"] >= t_stop and r["rc"] in (130, -2, 143, -15):
            rcs["drained"] += 1  # a waiter ended by the harness at the end
            continue
        rcs[r["rc"]] += 1
        err = r["stderr"].strip()
        first = next((l for l in err.splitlines() if l.startswith("lockrun:")), "")
        if r["rc"] != 0:
            if not first:
                unclear.append(dict(client=r["client"], rc=r["rc"], stderr=err[-300:]))
            else:
                messages[f"{r['rc']}: " + short(first)] += 1
        if r["rc"] == 76:
            c = r.get("cmd")
            if c and c["last"] > r["t1"] + 0.05:
                after76.append(round((c["last"] - r["t1"]) * 1000, 1))
            in_fault = t_fault is not None and r["t0"] <= t_heal + 1 and r["t1"] >= t_fault
            if t_fault is not None and r["t1"] >= t_fault and in_fault:
                exit_ms.append(round((r["t1"] - t_fault) * 1000))
                # the command's stop: its SIGTERM (K line), else its last line
                if c:
                    kill_ms.append(round(((c.get("killed") or c["last"]) - t_fault) * 1000))
            if not spec.get("loss_ok") or not in_fault:
                if not (spec.get("loss_ok") and in_fault):
                    false_kills.append(dict(client=r["client"], at=round(r["t1"] - (t_fault or r["t1"]), 3),
                                            msg=short(first)))
    left = evs.get("end", {}).get("left_running", [])
    # The lock idle while a lockrun waited for it (issue 29 item 7: a
    # waiter watching a partitioned member sat blind 10-13 s): gaps between
    # the commands' activity that some lockrun waited through, from before
    # the gap began to after it ended. A silent holder (paused, cut off)
    # makes such a gap too, so only faults that set idle_max fail on it.
    idle, busy_until = [], None
    for c in inst:
        if busy_until is not None and c["start"] > busy_until:
            g0, g1 = busy_until, c["start"]
            waited = any(r["t0"] < g0 and ((r.get("cmd") or {}).get("start") or r["t1"]) >= g1 for r in runs)
            if waited:
                idle.append(round((g1 - g0) * 1000))
        busy_until = c["last"] if busy_until is None else max(busy_until, c["last"])
    idle_max = max(idle, default=0)
    max_ov = max((o["ms"] for o in overlaps), default=0.0)
    beyond = [o for o in overlaps if o["ms"] > WINDOW_MS]
    res = dict(run=os.path.basename(d), backend=meta["backend"], fault=meta["fault"], variant=meta["variant"],
               ttl=ttl, commands=len(inst), lockruns=len(runs), rc=dict(rcs),
               overlaps=len(overlaps), overlap_max_ms=max_ov, overlaps_beyond_window=len(beyond),
               overlap_detail=overlaps[:5], tokens_out_of_order=len(bad_tokens), token_detail=bad_tokens[:5],
               stale_writes_unfenced=stale_unfenced, stale_writes_fenced=stale_fenced, guard_rejected=rejected,
               ran_after_76=len(after76), ran_after_76_max_ms=max(after76, default=0),
               exit_ms=exit_ms, exit_max_ms=max(exit_ms, default=None),
               kill_ms=kill_ms, kill_p50_ms=pct(kill_ms, 0.5), kill_max_ms=max(kill_ms, default=None),
               false_kills=len(false_kills), false_kill_detail=false_kills[:5],
               unclear_failures=len(unclear), unclear_detail=unclear[:3], left_running=len(left),
               idle_with_waiter_max_ms=idle_max, messages=dict(messages))
    fails = []
    if beyond and not spec.get("overlap_ok"):
        fails.append(f"{len(beyond)} overlap(s) beyond {WINDOW_MS} ms (max {max_ov} ms)")
    if bad_tokens:
        fails.append(f"{len(bad_tokens)} token(s) out of start order")
    if after76 or left:
        fails.append(f"command ran on after 76 ({len(after76)}) / left running ({len(left)})")
    if stale_fenced:
        fails.append(f"{stale_fenced} stale write(s) through the guard")
    if false_kills:
        fails.append(f"{len(false_kills)} false kill(s)")
    if unclear:
        fails.append(f"{len(unclear)} failure(s) without a clear message")
    if spec.get("idle_max") and idle_max > spec["idle_max"] * 1000:
        fails.append(f"the lock sat free {idle_max} ms with a lockrun waiting (beyond {spec['idle_max']} s)")
    if not inst:
        fails.append("no command ran")
    res["fails"] = fails
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    return res


def short(msg):
    import re
    m = re.sub(r"\d+(\.\d+)?\s*(ms|s)\b", "N\\2", msg)
    m = re.sub(r"lrf\d+\w*", "NAME", m)
    m = re.sub(r"\b\d+\b", "N", m)
    return m[:220]


# ---------------------------------------------------------------- suite

def table(results):
    hdr = ("backend", "fault", "variant", "ttl", "cmds", "lockruns", "rc 76", "rc 69", "overlaps", "max ms",
           "tok order", "stale unf.", "stale fenced", "rejected", "after 76", "stop p50/max ms", "76 exit max ms",
           "false kills", "unclear", "idle ms", "verdict")
    rows = [hdr]
    for r in results:
        rows.append((r["backend"], r["fault"], r["variant"], f"{r['ttl']}s", r["commands"], r["lockruns"],
                     r["rc"].get("76", r["rc"].get(76, 0)), r["rc"].get("69", r["rc"].get(69, 0)),
                     r["overlaps"], r["overlap_max_ms"], r["tokens_out_of_order"], r["stale_writes_unfenced"],
                     r["stale_writes_fenced"], r["guard_rejected"], r["ran_after_76"],
                     f"{r['kill_p50_ms']}/{r['kill_max_ms']}" if r["kill_ms"] else "-",
                     r.get("exit_max_ms") if r.get("exit_ms") else "-",
                     r["false_kills"], r["unclear_failures"], r.get("idle_with_waiter_max_ms", "-"),
                     "ok" if not r["fails"] else "FAIL: " + "; ".join(r["fails"])))
    out = []
    for i, row in enumerate(rows):
        out.append("| " + " | ".join(str(x) for x in row) + " |")
        if i == 0:
            out.append("|" + "---|" * len(row))
    return "\n".join(out)


def suite_main(a):
    global PG_BIN
    os.makedirs(a.out, exist_ok=True)
    os.environ["LRF_REAL_LOCKRUN"] = a.lockrun
    backends = a.backend.split(",")
    pgv = sorted(os.listdir("/usr/lib/postgresql"))[-1] if os.path.isdir("/usr/lib/postgresql") else None
    PG_BIN = f"/usr/lib/postgresql/{pgv}/bin" if pgv else None
    base = os.path.join(a.out, "servers")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base, exist_ok=True)
    os.chmod(a.out, 0o755)
    os.chmod(base, 0o755)
    net_up(a.clients)
    srv = Servers(base)
    results = []
    try:
        if "etcd" in backends:
            srv.etcd_up()
        if "pg" in backends:
            srv.pg_up()
        if "redis" in backends:
            srv.redis_up()
        for b in backends:
            faults = list(FAULTS[b]) if a.faults == "all" else a.faults.split(",")
            for rep in range(1, a.reps + 1):
                for f in faults:
                    if f not in FAULTS[b] and f != "none":
                        continue
                    if f == "none":
                        FAULTS[b]["none"] = dict(loss_ok=False, overlap_ok=False, ttl=4)
                    r = run_one(srv, b, f, rep, a, a.variant)
                    results.append(r)
                    log(f"{r['run']}: {'ok' if not r['fails'] else 'FAIL ' + '; '.join(r['fails'])}")
    finally:
        srv.stop_all()
        net_down()
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    for b in backends:
        rb = [r for r in results if r["backend"] == b]
        if rb:
            print(f"\n{b} ({a.variant}):\n")
            print(table(rb))
    nfail = sum(1 for r in results if r["fails"])
    print(f"\n{len(results)} fault runs, {nfail} failed", flush=True)
    return 1 if nfail else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("suite")
    s.add_argument("--backend", default="etcd,pg")
    s.add_argument("--faults", default="all")
    s.add_argument("--reps", type=int, default=1)
    s.add_argument("--clients", type=int, default=3)
    s.add_argument("--ttl", type=int, default=0, help="override each fault's TTL")
    s.add_argument("--hold", type=float, default=0, help="override each fault's hold time (s)")
    s.add_argument("--tick", type=float, default=0.2)
    s.add_argument("--warmup", type=float, default=3)
    s.add_argument("--seconds", type=float, default=25, help="length of proxy (latency/loss) runs")
    s.add_argument("--fault-seconds", type=float, default=0)
    s.add_argument("--stop-seconds", type=float, default=0)
    s.add_argument("--recovery", type=float, default=0)
    s.add_argument("--variant", default="lockrun", choices=["lockrun", "nolock", "clocktoken", "nokill"])
    s.add_argument("--lockrun", default=os.path.join(HERE, "..", "..", "target", "release", "lockrun"))
    s.add_argument("--out", default="/tmp/lrf-out")
    c = sub.add_parser("client")
    for o in ("--id", "--url", "--lockrun", "--log", "--runs", "--stop", "--pidfile", "--fence-dir"):
        c.add_argument(o, required=o != "--fence-dir", default="")
    c.add_argument("--ticks", type=int, default=10)
    c.add_argument("--tick", type=float, default=0.15)
    c.add_argument("--max-seconds", type=float, default=600)
    c.add_argument("lockrun_args", nargs="*")
    p = sub.add_parser("proxy")
    p.add_argument("--delay-ms", type=float, default=0)
    p.add_argument("--jitter-ms", type=float, default=0)
    p.add_argument("--loss", type=float, default=0)
    p.add_argument("--max-seconds", type=float, default=600)
    p.add_argument("map", nargs="+")
    k = sub.add_parser("check")
    k.add_argument("dirs", nargs="+")
    sub.add_parser("down")
    a = ap.parse_args()
    if a.cmd == "suite":
        a.lockrun = os.path.abspath(a.lockrun)
        a.out = os.path.abspath(a.out)
        sys.exit(suite_main(a))
    elif a.cmd == "client":
        client_main(a)
    elif a.cmd == "proxy":
        proxy_main(a)
    elif a.cmd == "check":
        rs = [check_run(x) for x in a.dirs if os.path.exists(os.path.join(x, "events.json"))]
        print(table(rs))
        for r in rs:
            print(json.dumps(r, indent=1))
        sys.exit(1 if any(r["fails"] for r in rs) else 0)
    elif a.cmd == "down":
        net_down()


if __name__ == "__main__":
    main()
