#!/usr/bin/python3
"""Broken variant for the harness: the real lockrun takes the lock, but the
command's fencing token comes from the client's clock (milliseconds), as a
token made without the server would. The clients' clocks disagree by a
second or two, as real hosts' can: c2 runs 5 s behind, c3 3 s ahead. The
checker must find tokens out of start order. Usage as lockrun."""
import os
import sys
import time

SKEW_MS = {"c1": 0, "c2": -5000, "c3": 3000}
if len(sys.argv) > 1 and sys.argv[1] == "--inner":
    cmd = sys.argv[2:]
    skew = SKEW_MS.get(os.environ.get("LRF_CLIENT", ""), 0)
    os.environ["LOCKRUN_FENCING_TOKEN"] = str(time.time_ns() // 1_000_000 + skew)
    os.execvp(cmd[0], cmd)
args = sys.argv[1:]
i = args.index("--")
real = os.environ["LRF_REAL_LOCKRUN"]
os.execv(real, [real] + args[:i + 1] + [sys.executable, os.path.abspath(__file__), "--inner"] + args[i + 1:])
