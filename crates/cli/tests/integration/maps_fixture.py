"""A process with the memory mappings the maps tests compare against /proc/PID/maps and pmap.

Usage: maps_fixture.py DIR [many N] [churn] [threads N]
  DIR        a scratch directory for the files it maps (some are deleted while mapped)
  many N     also split one region into at least N mappings (alternating protections)
  churn      keep mapping and unmapping a page in a loop (a map that changes during a dump)
  threads N  also start N threads that wait forever (each with its own stack mapping)
Other arguments are ignored (tests pass odd bytes to see command lines escaped).
Prints "ready" once everything is mapped, then sleeps (or churns) until killed.
"""
import ctypes
import mmap
import os
import sys
import threading

from tdtest import (MAP_ANONYMOUS, MAP_NORESERVE, MAP_PRIVATE, PAGE, PROT_NONE, PROT_READ,
                    PROT_WRITE, libc, map_pieces)

# prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, addr, len, name) passes a pointer last.
prctl = ctypes.CDLL(None, use_errno=True).prctl
prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_char_p]

d = sys.argv[1]
keep = []


def map_file(name, size, deleted):
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(b"x" * size)
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, size, mmap.MAP_SHARED)
    m[0:1] = b"y"  # touch: Rss
    os.close(fd)
    if deleted:
        os.unlink(path)
    keep.append(m)


map_file("plain file", 3 * PAGE, False)
map_file("deleted-file", 2 * PAGE, True)
map_file("new\nline name", PAGE, False)
# Bytes pmap shows as '?': a tab and a UTF-8 letter.
map_file("tab\there \u00e9", PAGE, False)
# Shared anonymous memory (shows as /dev/zero (deleted)), a memfd, a private anonymous region
# with a guard page in the middle, and a huge PROT_NONE reservation.
keep.append(mmap.mmap(-1, 4 * PAGE, mmap.MAP_SHARED))
mfd = os.memfd_create("fixture-memfd")
os.ftruncate(mfd, 2 * PAGE)
keep.append(mmap.mmap(mfd, 2 * PAGE, mmap.MAP_SHARED))
a = libc.mmap(None, 8 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
ctypes.memset(a, 1, 8 * PAGE)
libc.mprotect(a + 4 * PAGE, PAGE, PROT_NONE)
libc.mmap(None, 1 << 30, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
# A named anonymous region, where the kernel has CONFIG_ANON_VMA_NAME.
n = libc.mmap(None, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
prctl(0x53564D41, 0, n, 2 * PAGE, b"fixture region")
# A name with a '/', which pmap takes for a path.
n = libc.mmap(None, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
prctl(0x53564D41, 0, n, PAGE, b"fixture/slash")
# A SysV shared memory segment, removed at once: it lives while attached.
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0, 3 * PAGE, 0o1600)
assert shmid >= 0, ctypes.get_errno()
assert libc.shmat(shmid, None, 0) not in (None, ctypes.c_void_p(-1).value)
libc.shmctl(shmid, 0, None)

if len(sys.argv) > 3 and sys.argv[2] == "many":
    # At least N mappings: N/2 readable pages between N/2 inaccessible ones.
    map_pieces((int(sys.argv[3]) + 1) // 2)

if "threads" in sys.argv[2:]:
    ev = threading.Event()
    for _ in range(int(sys.argv[sys.argv.index("threads") + 1])):
        threading.Thread(target=ev.wait, daemon=True).start()

print("ready", flush=True)
if "churn" in sys.argv[2:]:
    while True:
        p = libc.mmap(None, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        libc.munmap(p, PAGE)
else:
    sys.stdin.read()
