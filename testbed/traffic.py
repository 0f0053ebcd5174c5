"""Bulk TCP traffic for checks and benchmarks: a sender with a fixed 5-tuple and a receiver that reports goodput.

iperf3 is not used because its control connection and its client port cannot both be pinned, and a flow must
have a known 5-tuple to be given a class. Run inside Mininet hosts::

    python -m testbed.traffic serve --bind 10.0.0.3 --port 5001 --duration 5    # prints one JSON line
    python -m testbed.traffic send --bind 10.0.0.1 --sport 40001 --dst 10.0.0.3 --port 5001 --duration 5

The receiver reports the bytes received and the goodput over the interval after a warm-up (default 1 s), when
TCP has left slow start and the priority classes have settled.

Neither side can hang: every socket has a timeout, and each process ends itself (SIGALRM) a minute after its
planned duration, even if its host's namespace disappeared under it.
"""
from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time

CHUNK = 64 * 1024
IO_TIMEOUT_S = 5.0
OVERRUN_S = 60  # a process still alive this long after its planned end is stuck: SIGALRM ends it


def serve(bind: str, port: int, duration: float, warmup: float) -> dict:
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((bind, port))
    lsock.listen(1)
    lsock.settimeout(duration + 30)
    conn, peer = lsock.accept()
    conn.settimeout(IO_TIMEOUT_S)
    start = time.monotonic()
    total = measured = 0
    buf = bytearray(CHUNK)
    measure_from = start + warmup
    measure_until = start + duration
    while True:
        try:
            n = conn.recv_into(buf)
        except socket.timeout:
            break
        if n == 0:
            break
        now = time.monotonic()
        total += n
        if measure_from <= now <= measure_until:
            measured += n
        if now > measure_until:
            break
    conn.close()
    lsock.close()
    window = max(duration - warmup, 1e-9)
    return {"peer": peer[0], "peer_port": peer[1], "bytes": total, "measured_bytes": measured,
            "window_s": window, "goodput_mbps": measured * 8 / window / 1e6}


def send(bind: str, sport: int, dst: str, port: int, duration: float) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind, sport))
    sock.settimeout(IO_TIMEOUT_S)
    deadline = time.monotonic() + 10
    while True:
        try:
            sock.connect((dst, port))
            break
        except (ConnectionRefusedError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    payload = b"\0" * CHUNK
    sent = 0
    end = time.monotonic() + duration + 0.5
    sock.settimeout(IO_TIMEOUT_S)  # a receiver that stopped reading (or vanished) ends the sender
    try:
        while time.monotonic() < end:
            sent += sock.send(payload)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    sock.close()
    return {"bytes": sent}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="receive one connection and print its goodput as JSON")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--duration", type=float, default=5.0)
    s.add_argument("--warmup", type=float, default=1.0)
    c = sub.add_parser("send", help="send as fast as TCP allows for --duration seconds")
    c.add_argument("--bind", required=True)
    c.add_argument("--sport", type=int, required=True)
    c.add_argument("--dst", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--duration", type=float, default=5.0)
    a = p.parse_args(argv)
    signal.alarm(int(a.duration + 30 + OVERRUN_S))
    if a.cmd == "serve":
        out = serve(a.bind, a.port, a.duration, a.warmup)
    else:
        out = send(a.bind, a.sport, a.dst, a.port, a.duration)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
