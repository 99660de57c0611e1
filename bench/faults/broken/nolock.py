#!/usr/bin/python3
"""Broken variant for the harness: `lockrun`'s command line, but the command
runs with no lock at all, and its fencing token is the client's clock in
milliseconds. The checker must find overlaps (and the guard must keep the
resource clean). Usage as lockrun: nolock.py [OPTIONS] URL -- COMMAND..."""
import os
import sys
import time

args = sys.argv[1:]
cmd = args[args.index("--") + 1:]
os.environ["LOCKRUN_FENCING_TOKEN"] = str(time.time_ns() // 1_000_000)
os.execvp(cmd[0], cmd)
