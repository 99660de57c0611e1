#!/usr/bin/python3
"""Broken variant for the harness: kill on loss disabled, in effect. The
real lockrun takes the lock, but its command ignores SIGTERM (ignored on
entry, which a shell cannot trap back) and --kill-grace is 60 s, longer
than any hold: after a lost lock the command runs on beside the next
holder. The checker must find overlaps and stale unfenced writes (and the
guard must keep the resource clean). Usage as lockrun."""
import os
import signal
import sys

args = sys.argv[1:]
i = args.index("--")
real = os.environ["LRF_REAL_LOCKRUN"]
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the command
os.execv(real, [real] + args[:i] + ["--kill-grace", "60s", "--"] + args[i + 1:])
