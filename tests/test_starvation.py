"""The starvation benchmark's parts without root: testbed/traffic.py's timeline, schedule, probe and messages on
loopback, and bench/starvation.py's analysis (analysis/starvation.py) on hand-made timelines."""
import json
import math
import os
import socket
import subprocess
import sys

import pytest

from analysis import starvation
from bench import starvation as bench

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAFFIC = [sys.executable, "-m", "testbed.traffic"]


def free_ports(n):
    """n distinct free ports: all sockets held open together, or the kernel may hand out one port twice."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def pair(serve_args, send_args):
    port, sport = free_ports(2)
    server = subprocess.Popen(TRAFFIC + ["serve", "--bind", "127.0.0.1", "--port", str(port), "--warmup", "0"]
                              + serve_args, cwd=PROJECT_DIR, stdout=subprocess.PIPE, text=True)
    try:
        sender = subprocess.run(TRAFFIC + ["send", "--bind", "127.0.0.1", "--sport", str(sport), "--dst",
                                           "127.0.0.1", "--port", str(port)] + send_args,
                                cwd=PROJECT_DIR, capture_output=True, text=True, timeout=60)
        out, _ = server.communicate(timeout=60)
    finally:
        server.kill()
    assert sender.returncode == 0, sender.stderr
    return json.loads(out.splitlines()[-1]), json.loads(sender.stdout.splitlines()[-1])


def test_a_scheduled_sender_is_silent_in_its_pauses_and_the_timeline_shows_it():
    rx, tx = pair(["--duration", "1.6", "--timeline"], ["--schedule", "0.3,0.6,0.3", "--sndbuf", "16384"])
    (a1, b1), (a2, b2) = tx["periods"]
    assert b1 - a1 == pytest.approx(0.3, abs=0.05) and a2 - b1 == pytest.approx(0.6, abs=0.05)
    timeline = rx["timeline"]
    assert timeline[-1][1] == rx["bytes"] == tx["bytes"]
    # Nothing arrives in the middle of the pause (a small send buffer leaves no tail to drain).
    assert starvation.value_at(timeline, b1 + 0.1) == starvation.value_at(timeline, a2 - 0.05)
    assert starvation.value_at(timeline, b2) > starvation.value_at(timeline, a2)
    assert starvation.burst_bounds(timeline, a2 - 0.01, b2 + 0.2)[0] >= b1 + 0.1


def test_messages_are_answered_and_the_probe_reads_the_socket():
    rx, tx = pair(["--duration", "1.5", "--ack-every", "20000"],
                  ["--duration", "0.5", "--message", "20000", "--idle", "0.05", "--probe"])
    messages = tx["messages"]
    assert 3 <= len(messages) <= 11 and tx["bytes"] == 20000 * len(messages) == rx["bytes"]
    assert all(b > a for a, b in messages)
    assert all(b2 - b1 >= 0.05 for (_, b1), (_, b2) in zip(messages, messages[1:]))   # the idle time between
    probe = tx["probe"]
    assert probe and {"rto_us", "cwnd", "backoff", "timeouts", "t"} <= set(probe[0])
    assert probe[0]["rto_us"] >= 200_000 and probe[0]["cwnd"] >= 1


def test_the_twin_rule_matches_the_engine_s_timers():
    assert starvation.twin_rule(0.15, 0.2) == (0.0, 0)
    # Timers at 0.2, 0.6, 1.4, 3.0 s after the onset: the flow resumes at the first one after the starvation.
    assert starvation.twin_rule(0.3, 0.2) == (pytest.approx(0.3), 2)
    assert starvation.twin_rule(1.0, 0.2) == (pytest.approx(0.4), 3)
    assert starvation.twin_rule(2.0, 0.2) == (pytest.approx(1.0), 4)


def test_fluid_end_gives_the_floor_inside_the_burst_and_the_rate_outside():
    # 100 bytes at 100 B/s from t=0, a burst over [0.5, 1.5] leaving 10 B/s: 50 + 10 + 40 bytes -> 1.9 s.
    assert starvation.fluid_end(0.0, 100, 100.0, 10.0, 0.5, 1.5) == pytest.approx(1.9)
    assert starvation.fluid_end(2.0, 100, 100.0, 10.0, 0.5, 1.5) == pytest.approx(3.0)      # after the burst
    assert starvation.fluid_end(0.7, 5, 100.0, 10.0, 0.5, 1.5) == pytest.approx(1.2)        # inside it
    assert starvation.fluid_end(0.7, 5, 100.0, 0.0, 0.5, 1.5) == pytest.approx(1.55)        # nothing inside
    assert math.isinf(starvation.fluid_end(0.0, 5, 0.0, 0.0, 0.5, 1.5))


def synthetic(lag, floor=50.0, rate=1000.0, onset=3.0, offset=4.0, message=100):
    """A message flow (100 B at ``rate`` with 0.1 s idle) starved over [onset, offset] to ``floor`` B/s, whose
    message in flight at the offset ends ``lag`` s late (its last byte waits); the receiver's timeline every
    10 ms, the high flow's timeline and its sender's periods."""
    msgs, t = [], 0.0
    while t < 8.0:
        end = starvation.fluid_end(t, message, rate, floor, onset, offset)
        msgs.append((t, end, end + lag if t < offset <= end else end))
        t = msgs[-1][2] + 0.1

    def received(at):
        total = 0.0
        for start, fluid, _end in msgs:
            if at >= fluid:
                total += message
            elif at > start:   # part of the message, at the fluid rates
                lo, hi = 0.0, float(message)
                for _ in range(60):
                    mid = (lo + hi) / 2
                    early = starvation.fluid_end(start, mid, rate, floor, onset, offset) <= at
                    lo, hi = (mid, hi) if early else (lo, mid)
                total += lo
        return total

    receiver = [(k / 100, received(k / 100)) for k in range(801)]
    high = [(onset - 0.001, 0)] + [(onset + 0.001 * k, 100 * (k + 1)) for k in range(1001)]
    sender = {"periods": [[0.0, 0.0], [onset - 0.001, offset]]}
    low = {"messages": [(a, b) for a, _, b in msgs], "timeline": receiver,
           "probe": [{"t": 0.0, "timeouts": 0, "backoff": 0, "rto_us": 200000}]}
    return high, low, sender


@pytest.mark.parametrize("lag", [0.0, 0.3])
def test_message_analysis_recovers_a_known_lag(lag):
    high, low, sender = synthetic(lag)
    plan = [(1.0, 3.0)]
    (episode,), base = bench.analyse_messages(plan, {"timeline": high}, low, sender, 8e-3, 0.2, 100)
    assert base == pytest.approx(0.1)
    assert episode["starved_s"] == pytest.approx(1.0)
    assert episode["lag_s"] == pytest.approx(lag, abs=1e-6)
    # The twin's rule on the message starved for the whole burst: timers at 0.2, 0.6, 1.4 -> 0.4 s late, 3.
    assert episode["twin_lag_s"] == pytest.approx(0.4) and episode["twin_timeouts"] == 3
