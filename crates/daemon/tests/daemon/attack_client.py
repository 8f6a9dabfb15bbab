"""Clients of taskdiagd that misbehave, for the attack tests; run as an unprivileged user.

Usage: attack_client.py MODE ARGS...
  maps N                          map N one-page mappings, alternately readable and not (so that
                                  they do not merge), then wait
  trickle SOCKET REQ CONNS CHUNK PERIOD
                                  CONNS connections each send REQ and read CHUNK bytes every
                                  PERIOD seconds; a connection the daemon closes is opened again
                                  and asks again
  greedy SOCKET REQ CONNS         CONNS connections send REQ again and again and read each answer
                                  as fast as it comes
  hold SOCKET REQ CONNS [reopen]  open CONNS connections one after another, each answered once
                                  (REQ) and then left idle; with reopen, open again those the
                                  daemon closes
  setuid SOCKET REQ CONNS PROGRAM
                                  processes of this user execute the set-user-ID PROGRAM again
                                  and again (each first runs as the user for a random moment)
                                  while CONNS connections send REQ (BASE and VMA) again and
                                  again; counts answers that name PROGRAM in a memory map (leaks)
REQ is a request in hex. Each mode prints one line starting "ready" once its load is in place,
runs until its standard input closes, then prints one line of counts (key=value) and exits.
"""
import select
import socket
import struct
import sys
import threading
import time

import tdtest

HEADER = 16
DONE = 3
stop = threading.Event()
counts = {}
lock = threading.Lock()


def count(key, n=1):
    with lock:
        counts[key] = counts.get(key, 0) + n


def watch_stdin():
    sys.stdin.read()
    stop.set()


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
    return s


def read_exact(s, n):
    b = bytearray()
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError("closed")
        b += chunk
    return bytes(b)


def read_response(s):
    """Reads one response through its DONE; returns (bytes, DONE error)."""
    total = 0
    while True:
        h = read_exact(s, HEADER)
        length, kind = struct.unpack_from("=IH", h)
        body = read_exact(s, length - HEADER)
        total += length
        if kind == DONE:
            return total, struct.unpack_from("=i", body)[0]


def maps(n):
    tdtest.map_pieces(n)
    print("ready", flush=True)
    sys.stdin.read()
    print("done", flush=True)


def trickle(path, req, chunk, period):
    while not stop.is_set():
        try:
            s = connect(path)
            s.sendall(req)
            count("requests")
        except OSError:
            count("connect_failed")
            time.sleep(0.1)
            continue
        while not stop.is_set():
            try:
                b = s.recv(chunk)
            except OSError:
                b = b""
            if not b:
                count("closed_by_daemon")
                break
            count("bytes", len(b))
            stop.wait(period)
        s.close()


def greedy(path, req):
    s = None
    while not stop.is_set():
        try:
            if s is None:
                s = connect(path)
            s.sendall(req)
            n, err = read_response(s)
            count("bytes", n)
            count("answers" if err == 0 else "errors")
        except (OSError, EOFError):
            count("reconnects")
            s = None
            time.sleep(0.05)


def open_answered(path, req):
    """A connection answered once; None if the daemon refused it."""
    try:
        s = connect(path)
        s.sendall(req)
        _, err = read_response(s)
    except (OSError, EOFError):
        count("failed")
        return None
    if err != 0:
        count("refused")
        s.close()
        return None
    count("opened")
    return s


def hold(path, req, conns, reopen):
    held = {}
    poller = select.poll()

    def keep(s):
        held[s.fileno()] = s
        poller.register(s, select.POLLIN)

    for s in (open_answered(path, req) for _ in range(conns)):
        if s is not None:
            keep(s)
    print("ready opened=%d" % len(held), flush=True)
    while not stop.is_set():
        # An idle connection hears from the daemon only when it is closed.
        for fd, _ in poller.poll(200):
            s = held.pop(fd)
            poller.unregister(fd)
            try:
                s.recv(4096)
            except OSError:
                pass
            count("closed_by_daemon")
            s.close()
            if reopen:
                t = open_answered(path, req)
                if t is not None:
                    keep(t)
    count("held_at_end", len(held))


def setuid_execs(program):
    tdtest.setuid_execs(program, lambda: not stop.is_set(), 4, counted=lambda n: count("execs", n))


def setuid_reader(path, req, program):
    """Asks REQ (BASE, PATHS and VMA: the program's path can only be in a memory map's name or
    an executable link's)."""
    s = None
    name = program.encode()
    while not stop.is_set():
        try:
            if s is None:
                s = connect(path)
            s.sendall(req)
            b = bytearray()
            while True:
                # The whole answer, to look for the name.
                h = read_exact(s, HEADER)
                ln, ty = struct.unpack_from("=IH", h)
                b += h + read_exact(s, ln - HEADER)
                if ty == DONE:
                    break
            count("answers")
            if name in b:
                count("leaks")
        except (OSError, EOFError):
            count("reconnects")
            s = None
            time.sleep(0.05)


def main():
    mode = sys.argv[1]
    if mode == "maps":
        return maps(int(sys.argv[2]))
    path, req, conns = sys.argv[2], bytes.fromhex(sys.argv[3]), int(sys.argv[4])
    threading.Thread(target=watch_stdin, daemon=True).start()
    if mode == "hold":
        hold(path, req, conns, len(sys.argv) > 5 and sys.argv[5] == "reopen")
    else:
        if mode == "trickle":
            args = (path, req, int(sys.argv[5]), float(sys.argv[6]))
            target = trickle
        elif mode == "setuid":
            args = (path, req, sys.argv[5])
            target = setuid_reader
            threading.Thread(target=setuid_execs, args=(sys.argv[5],), daemon=True).start()
        else:
            args = (path, req)
            target = greedy
        threads = [threading.Thread(target=target, args=args, daemon=True) for _ in range(conns)]
        for t in threads:
            t.start()
        print("ready", flush=True)
        stop.wait()
        for t in threads:
            t.join(timeout=5)
    with lock:
        print(" ".join("%s=%d" % kv for kv in sorted(counts.items())), flush=True)


main()
