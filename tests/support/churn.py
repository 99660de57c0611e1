# Makes /proc/locks longer than a page and keeps it moving, as a busy
# machine does: holds STATIC flock(2) locks on files in DIR, prints
# "ready", then takes and releases CHURN more in a loop until stdin closes
# or a line arrives. Every lock taken goes in at the head of the kernel's
# list, so a reader of the table that needs several read(2) calls sees
# entries shift between them.
#   churn.py DIR STATIC CHURN
import fcntl
import os
import select
import sys

directory, static, churn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held = []
for i in range(static):
    f = open(os.path.join(directory, f"static{i}"), "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    held.append(f)
moving = [open(os.path.join(directory, f"churn{i}"), "w") for i in range(churn)]
print("ready", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    for f in moving:
        fcntl.flock(f, fcntl.LOCK_EX)
    for f in moving:
        fcntl.flock(f, fcntl.LOCK_UN)
