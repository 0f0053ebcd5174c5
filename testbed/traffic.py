"""Bulk TCP traffic for checks and benchmarks: a sender with a fixed 5-tuple and a receiver that reports goodput.

iperf3 is not used because its control connection and its client port cannot both be pinned, and a flow must
have a known 5-tuple to be given a class. Run inside Mininet hosts::

    python -m testbed.traffic serve --bind 10.0.0.3 --port 5001 --duration 5    # prints one JSON line
    python -m testbed.traffic send --bind 10.0.0.1 --sport 40001 --dst 10.0.0.3 --port 5001 --duration 5

The receiver reports the bytes received and the goodput over the interval after a warm-up (default 1 s), when
TCP has left slow start and the priority classes have settled. For bench/starvation.py the receiver can
also report when its bytes arrived (``--timeline``), the sender can alternate sending and pausing
(``--schedule``) or send messages that the receiver answers (``--message``, ``--ack-every``), and it can sample
its own TCP state every few milliseconds (``--probe``: the namespace's retransmission timeouts and the socket's
backoff, RTO and congestion window). For bench/class_change.py a sender's schedule can begin at a given
wall time (``--start-at``), so that another process can act at known moments of it, and the receiver can clamp
its window as the lossless transport profile's workers do (``--window-clamp``).

Neither side can hang: every socket has a timeout, and each process ends itself (SIGALRM) a minute after its
planned duration, even if its host's namespace disappeared under it.
"""
from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import sys
import threading
import time

from workloads.allreduce import clamp_listener, hold_clamp

CHUNK = 64 * 1024
IO_TIMEOUT_S = 5.0
OVERRUN_S = 60  # a process still alive this long after its planned end is stuck: SIGALRM ends it


TIMELINE_STEP_S = 0.002  # arrivals closer than this are merged into one point of the timeline


def serve(bind: str, port: int, duration: float, warmup: float, timeline: bool = False,
          ack_every: int = 0, window_clamp: int = 0) -> dict:
    """Receive one connection for ``duration`` seconds. ``ack_every``: answer one byte each time that many more
    bytes arrived (the sender's messages, ``send --message``). ``window_clamp``: the receive window's bound in
    bytes, held as workloads/allreduce.py holds it (``clamp_listener``, ``hold_clamp``)."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if window_clamp:
        clamp_listener(lsock, window_clamp)
    lsock.bind((bind, port))
    lsock.listen(1)
    lsock.settimeout(duration + 30)
    conn, peer = lsock.accept()
    # A sender that pauses (--schedule) is silent for seconds: only a timeline's receiver waits that long.
    conn.settimeout(IO_TIMEOUT_S if not timeline else duration + IO_TIMEOUT_S)
    start = time.monotonic()
    total = measured = 0
    buf = bytearray(CHUNK)
    measure_from = start + warmup
    measure_until = start + duration
    points = []  # (wall time, bytes so far): hosts share the machine's clock, so timelines compare across hosts
    while True:
        try:
            n = conn.recv_into(buf)
        except socket.timeout:
            break
        if n == 0:
            break
        now = time.monotonic()
        if window_clamp:
            hold_clamp(conn, window_clamp)
        before, total = total, total + n
        if ack_every and total // ack_every > before // ack_every:
            conn.sendall(b"\1" * (total // ack_every - before // ack_every))
        if timeline:
            wall = time.time()
            if points and wall - points[-1][0] < TIMELINE_STEP_S:
                points[-1] = (points[-1][0], total)
            else:
                points.append((wall, total))
        if measure_from <= now <= measure_until:
            measured += n
        if now > measure_until:
            break
    conn.close()
    lsock.close()
    window = max(duration - warmup, 1e-9)
    out = {"peer": peer[0], "peer_port": peer[1], "bytes": total, "measured_bytes": measured,
           "window_s": window, "goodput_mbps": measured * 8 / window / 1e6}
    if timeline:
        out["timeline"] = [(round(t, 4), b) for t, b in points]
    return out


# struct tcp_info (linux/tcp.h): 8 one-byte fields, then 32-bit ones; the ones read here, in order.
_TCP_INFO = struct.Struct("8B24I")
_TCP_INFO_FIELDS = {"ca_state": 1, "backoff": 4, "rto_us": 8, "rtt_us": 23, "cwnd": 26, "total_retrans": 31}
_SND_WND = struct.Struct("I")   # tcpi_snd_wnd: the window the peer advertised (Linux 5.4 and later)
_SND_WND_OFFSET = 228


def tcp_state(sock: socket.socket) -> dict:
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _SND_WND_OFFSET + _SND_WND.size)
    values = _TCP_INFO.unpack(raw[:_TCP_INFO.size])
    state = {name: values[i] for name, i in _TCP_INFO_FIELDS.items()}
    if len(raw) >= _SND_WND_OFFSET + _SND_WND.size:
        state["snd_wnd"] = _SND_WND.unpack_from(raw, _SND_WND_OFFSET)[0]
    return state


def namespace_timeouts() -> int:
    """TcpExt TCPTimeouts of this process's network namespace (each host is its own)."""
    with open("/proc/net/netstat") as f:
        lines = [line.split() for line in f if line.startswith("TcpExt:")]
    header, values = lines[0], lines[1]
    return int(values[header.index("TCPTimeouts")])


class Probe(threading.Thread):
    """Samples a socket's TCP state and its namespace's timeouts every ``interval_s`` until stopped."""

    def __init__(self, sock: socket.socket, interval_s: float = 0.005):
        super().__init__(daemon=True)
        self.sock, self.interval_s = sock, interval_s
        self.samples = []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                sample = tcp_state(self.sock)
            except OSError:
                break
            sample["t"] = round(time.time(), 4)
            sample["timeouts"] = namespace_timeouts()
            # Only changes are kept: the state is mostly constant between events.
            if not self.samples or any(sample[k] != self.samples[-1][k] for k in sample if k != "t"):
                self.samples.append(sample)
            self.done.wait(self.interval_s)


def send(bind: str, sport: int, dst: str, port: int, duration: float, schedule=(), probe: bool = False,
         sndbuf: int = 0, message: int = 0, idle: float = 0.0, start_at: float = 0.0) -> dict:
    """Send for ``duration`` seconds; with a ``schedule`` (seconds sending, seconds paused, ...) only in its
    sending periods, and for the schedule's length. With ``message``: send that many bytes, wait for the
    receiver's one-byte answer (``serve --ack-every``), pause ``idle`` seconds, and again (a ring step's
    pattern); each message's start and end are reported. ``start_at``: once connected, wait until this wall time
    before the schedule begins."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sndbuf:
        # A small send buffer makes a pause sharp: what the socket still holds is sent after the pause began.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
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
    payload = b"\0" * (min(CHUNK, sndbuf) if sndbuf else CHUNK)
    sent = 0
    # A starved flow may wait seconds for its timers: only a receiver gone for longer ends the sender.
    sock.settimeout(IO_TIMEOUT_S if not probe else 30.0)
    prober = Probe(sock) if probe else None
    if prober:
        prober.start()
    periods = []  # (start, end) wall times of the sending periods
    messages = []  # (start, end) wall times of each message, to the receiver's answer
    plan = list(schedule) or [duration + 0.5]
    if start_at:
        time.sleep(max(0.0, start_at - time.time()))
    try:
        if message:
            body, end = b"\0" * message, time.monotonic() + duration
            while time.monotonic() < end:
                start = time.time()
                sock.sendall(body)
                if not sock.recv(1):
                    break
                messages.append((round(start, 5), round(time.time(), 5)))
                sent += message
                time.sleep(idle)
            plan = []
        # Periods keep to the plan's own clock: a send blocked behind a higher class ends with its period
        # instead of pushing every later period back.
        edge = time.monotonic()
        for i, length in enumerate(plan):
            edge += length
            if i % 2:
                time.sleep(max(0.0, edge - time.monotonic()))
                continue
            periods.append([time.time(), None])
            while True:
                left = edge - time.monotonic()
                if left <= 0:
                    break
                sock.settimeout(left)
                try:
                    sent += sock.send(payload)
                except socket.timeout:
                    break
            periods[-1][1] = time.time()
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    if prober:
        prober.done.set()
        prober.join(1.0)
    sock.close()
    out = {"bytes": sent}
    if schedule:
        out["periods"] = [(round(a, 4), round(b, 4) if b else None) for a, b in periods]
    if prober:
        out["probe"] = prober.samples
    if message:
        out["messages"] = messages
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="receive one connection and print its goodput as JSON")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--duration", type=float, default=5.0)
    s.add_argument("--warmup", type=float, default=1.0)
    s.add_argument("--timeline", action="store_true", help="also report when the bytes arrived")
    s.add_argument("--ack-every", type=int, default=0, help="answer one byte per this many bytes received")
    s.add_argument("--window-clamp", type=int, default=0, help="TCP_WINDOW_CLAMP in bytes (0: none)")
    c = sub.add_parser("send", help="send as fast as TCP allows for --duration seconds")
    c.add_argument("--bind", required=True)
    c.add_argument("--sport", type=int, required=True)
    c.add_argument("--dst", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--duration", type=float, default=5.0)
    c.add_argument("--schedule", default="", help="seconds sending, seconds paused, ... (replaces --duration)")
    c.add_argument("--probe", action="store_true", help="sample the socket's TCP state and report it")
    c.add_argument("--sndbuf", type=int, default=0, help="SO_SNDBUF in bytes (0: the kernel's)")
    c.add_argument("--message", type=int, default=0, help="send messages of this many bytes, each answered")
    c.add_argument("--idle", type=float, default=0.0, help="seconds between a message's answer and the next")
    c.add_argument("--start-at", type=float, default=0.0, help="wall time (epoch seconds) to begin the schedule at")
    a = p.parse_args(argv)
    schedule = [float(x) for x in a.schedule.split(",") if x.strip()] if a.cmd == "send" else []
    if schedule:
        a.duration = sum(schedule)
    signal.alarm(int(a.duration + 30 + OVERRUN_S))
    if a.cmd == "serve":
        out = serve(a.bind, a.port, a.duration, a.warmup, a.timeline, a.ack_every, a.window_clamp)
    else:
        out = send(a.bind, a.sport, a.dst, a.port, a.duration, schedule, a.probe, a.sndbuf, a.message, a.idle,
                   a.start_at)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
