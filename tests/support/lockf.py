# A POSIX (fcntl/lockf) lock user, to check lockrun's --fcntl locks against:
#   lockf.py PATH try START LENGTH   prints "free" or "busy" (exclusive, no wait)
#   lockf.py PATH hold START LENGTH  takes it, prints "ready", holds until a line on stdin
import fcntl
import os
import sys

path, action, start, length = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
if action == "try":
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
        print("free")
    except OSError:
        print("busy")
else:
    fcntl.lockf(fd, fcntl.LOCK_EX, length, start)
    print("ready", flush=True)
    sys.stdin.readline()
