#!/usr/bin/env python3
"""What a starved TCP flow costs in the emulation: measured episodes of strict priority, as JSON.

    sudo python bench/starvation.py [--durations 0.1,0.2,0.3,0.5,1,2] [--episodes 3] [--rate 5]

Flows go into one host port of a one-leaf fabric with the testbed's classes, FIFOs and transport: low flows
(class 1, ``--low-flows`` of them sharing its FIFO) send throughout, in bulk or as answered messages with pauses
(``--message``, a ring step's pattern), and a high flow (class 7) sends in bursts of D seconds with pauses between
them. During a burst the low flows are left their class floor (1% of the port); what the twin needs to know is
what that costs TCP beyond the bytes it could not send (twin/model.py, ``rto_s`` and ``rto_backoff``). Per burst
(means over the low flows):

* ``starved_s``: from the high flow's first to its last arrival at the receiver (its burst as the port saw it);
* ``lag_s``: the time a low flow lost beyond the bandwidth the burst took. In bulk: AFTER_S seconds minus what
  it received in the AFTER_S seconds from the burst's end, in seconds of its rate alone (measured before the
  first burst). In messages: the sum over the messages the burst touched of (measured duration - the fluid
  model's, at the rate a message has alone before the first burst and at the measured floor during the burst).
  A flow that only lost its share goes on at once (a lag near 0); one that waits for a retransmission timer
  loses the wait, and the slow start after it;
* ``silence_s``: the longest time without an arrival of the low flow in those AFTER_S seconds;
* ``timeouts_per_flow``: retransmission timeouts of the low flows' host in the episode (TcpExt TCPTimeouts)
  per low flow, and the largest exponential backoff a low socket reached;
* ``twin_lag_s``, ``twin_timeouts``: what the twin's calibrated rule charges for a starvation of that length
  (a flow starved for ``rto_s`` times out, and resumes only at its timers, ``rto_s`` x (2^k - 1) after the onset).

Sent only between the benchmark's own hosts (namespaces it creates). Prints the JSON; ``--out`` also writes it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=True)


from core.fabric import FabricSpec
from core.model import FlowKey
from testbed.fabric import Testbed
from twin.model import calibrated

from analysis.starvation import (BadInput, burst_bounds, floats, fluid_end, longest_silence, probe_at,
                                 rate_between, twin_rule, value_at)
from bench import print_json

WARMUP_S = 2.0          # the low flow alone first: out of slow start, its RTO settled
AFTER_S = 1.5           # the low flow's loss after a burst is taken over this long (less than every pause)


def bursts(plan, high, sender):
    """(burst length, onset, offset) of every burst of the high flow that reached the receiver."""
    periods = [p for p in sender["periods"] if p[1] and p[1] > p[0]]
    for (duration, gap), (a, b) in zip(plan, periods):
        bounds = burst_bounds(high["timeline"], a - 0.01, b + gap / 2)
        if bounds is not None:
            yield (duration, *bounds)


def first_burst(sender) -> float:
    return next(a for a, b in sender["periods"] if b and b > a)


def tcp_figures(low, onset: float, end: float) -> dict:
    """The low socket's timeouts (its host's), largest backoff and RTO before the burst, from its probe."""
    probe = low["probe"]
    return {"timeouts": probe_at(probe, end, "timeouts") - probe_at(probe, onset - 0.001, "timeouts"),
            "max_backoff": max([s["backoff"] for s in probe if onset <= s["t"] <= end], default=0),
            "rto_before_s": probe_at(probe, onset - 0.001, "rto_us") / 1e6}


def analyse(plan, high, low, sender, rate_mbps: float, rto_s: float):
    rate = rate_mbps * 1e6 / 8
    episodes = []
    first = low["timeline"][0][0]
    # The low flow alone, out of slow start: the rate it goes on at when nothing stops it.
    alone = rate_between(low["timeline"], first + 0.5, first_burst(sender) - 0.05)
    for duration, onset, offset in bursts(plan, high, sender):
        end = offset + AFTER_S
        starved = offset - onset
        twin_lag, twin_timeouts = twin_rule(starved, rto_s)
        episodes.append({
            "burst_s": duration, "starved_s": starved,
            "low_share_while_starved": rate_between(low["timeline"], onset + 0.05, offset) / rate,
            "lag_s": AFTER_S - (value_at(low["timeline"], end) - value_at(low["timeline"], offset)) / alone,
            "silence_s": longest_silence(low["timeline"], offset, end),
            **tcp_figures(low, onset, end),
            "twin_lag_s": twin_lag, "twin_timeouts": twin_timeouts})
    return episodes, alone / rate


def analyse_messages(plan, high, low, sender, rate_mbps: float, rto_s: float, message: int):
    """Per burst: the time the low flow's messages lost beyond what the fluid model gives them."""
    rate = rate_mbps * 1e6 / 8
    msgs = low["messages"]
    before = [b - a for a, b in msgs if b < first_burst(sender) - 0.05]
    base = statistics.median(before)               # a message alone: its bytes and a round trip
    # Its rate alone, round trip included: so that a message the bursts did not touch is predicted exactly.
    alone = message / base
    episodes = []
    for duration, onset, offset in bursts(plan, high, sender):
        end = offset + AFTER_S
        floor = rate_between(low["timeline"], onset + 0.05, offset) if low.get("timeline") else 0.0
        lost, twin_lost, twin_timeouts, hit = 0.0, 0.0, 0, 0
        for start, stop in msgs:
            predicted = fluid_end(start, message, alone, floor, onset, offset)
            if predicted < onset or start > end:
                continue
            hit += 1
            lost += (stop - start) - (predicted - start)
            if start < offset:
                lag, k = twin_rule(offset - max(start, onset), rto_s)
                twin_lost += lag
                twin_timeouts += k
        episodes.append({
            "burst_s": duration, "starved_s": offset - onset, "messages": hit,
            "low_share_while_starved": floor / rate, "lag_s": lost,
            "silence_s": longest_silence(low["timeline"], offset, end),
            **tcp_figures(low, onset, end),
            "twin_lag_s": twin_lost, "twin_timeouts": twin_timeouts})
    return episodes, base


def combine(per_flow):
    """One record per burst from every low flow's: lags, shares and the twin's charges per flow (mean), the
    longest silence, and the host's timeouts (counted once: every low flow reads the same counter)."""
    out = []
    for records in zip(*per_flow):
        n = len(records)
        first = records[0]
        out.append(dict(first, **{
            "low_share_while_starved": sum(r["low_share_while_starved"] for r in records),
            "lag_s": statistics.mean(r["lag_s"] for r in records),
            "silence_s": max(r["silence_s"] for r in records),
            "timeouts_per_flow": first["timeouts"] / n,
            "max_backoff": max(r["max_backoff"] for r in records),
            "twin_lag_s": statistics.mean(r["twin_lag_s"] for r in records),
            "twin_timeouts": statistics.mean(r["twin_timeouts"] for r in records)}))
    return out


def summarise(episodes):
    out = []
    for burst in sorted({e["burst_s"] for e in episodes}):
        group = [e for e in episodes if e["burst_s"] == burst]
        lags = [e["lag_s"] for e in group]
        out.append({"burst_s": burst, "episodes": len(group),
                    "starved_s": statistics.mean(e["starved_s"] for e in group),
                    "lag_s_mean": statistics.mean(lags), "lag_s_max": max(lags),
                    "silence_s_max": max(e["silence_s"] for e in group),
                    "timeouts_per_flow_mean": statistics.mean(e["timeouts_per_flow"] for e in group),
                    "twin_lag_s": statistics.mean(e["twin_lag_s"] for e in group),
                    "twin_timeouts": statistics.mean(e["twin_timeouts"] for e in group)})
    return out


def measure(plan, a) -> dict:
    """Run the two flows on a one-leaf fabric and return their reports (``--raw`` keeps them)."""
    schedule = [0.0, WARMUP_S] + [x for d, gap in plan for x in (d, gap)]
    total = sum(schedule)
    spec = FabricSpec(spines=1, leaves=1, hosts_per_leaf=3, host_rate_mbps=a.rate, fabric_rate_mbps=a.rate)
    sys.stderr.write(f"bench/starvation.py: {len(plan)} bursts, {total:.0f} s of traffic\n")
    # The fabric's run folder (controller logs) is of no use once the flows have reported: nothing is left.
    with tempfile.TemporaryDirectory(prefix="flux-bench-starvation-") as out_dir, Testbed(spec, out_dir) as tb:
        h1, h2, h3 = tb.layout.hosts[:3]
        high = FlowKey(h1.ip, h3.ip, 41001, 5101)
        # The low flows share one sender host, so its namespace's timeout counter is theirs alone.
        lows = [FlowKey(h2.ip, h3.ip, 41002 + i, 5102 + i) for i in range(a.low_flows)]
        tb.pin(high, 7)
        for low in lows:
            tb.pin(low, a.low_class)
        messages = ["--message", str(a.message), "--idle", f"{a.idle:g}"] if a.message else []
        send_args = {low: ["--probe"] + messages for low in lows}
        send_args[high] = ["--schedule", ",".join(f"{x:g}" for x in schedule), "--sndbuf", "16384"]
        reports = tb.bulk_flows([high] + lows, total, 0.0, timeline=True,
                                ack_every={low: a.message for low in lows}, send_args=send_args)
        settings = {"rate_mbps": a.rate, "low_class": a.low_class, "low_flows": a.low_flows,
                    "class_floor": tb.class_floor,
                    "queue_ms": tb.queue_ms, "transport": tb.transport.name, "datapath": tb.datapath,
                    "message_bytes": a.message or None, "idle_s": a.idle if a.message else None}
    return {"plan": plan, "settings": settings, "reports": reports}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--durations", default="0.1,0.2,0.3,0.5,1,2", help="burst lengths of the high flow, seconds")
    p.add_argument("--episodes", type=int, default=3, help="bursts of each length")
    p.add_argument("--pause", type=float, default=3.0, help="seconds between bursts (plus the burst's length)")
    p.add_argument("--rate", type=float, default=5.0, help="host link rate, Mbit/s (the suite's 5)")
    p.add_argument("--low-class", type=int, default=1, help="class of the starved flows (0-6)")
    p.add_argument("--low-flows", type=int, default=1,
                   help="low flows sharing that class (a job's ranks and buckets share their class's FIFO)")
    p.add_argument("--message", type=int, default=0, metavar="BYTES",
                   help="the low flow sends messages of this size, each answered by the receiver, with --idle "
                        "between them (a ring step's pattern); 0: it sends in bulk")
    p.add_argument("--idle", type=float, default=0.05, help="seconds between the low flow's messages")
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--raw", help="write the flows' own reports (arrival timelines, TCP samples) here")
    p.add_argument("--from-raw", metavar="FILE", help="analyse a --raw file again instead of measuring")
    a = p.parse_args(argv)
    try:
        durations = floats(a.durations, "--durations")
        if a.episodes < 1 or a.pause <= 0 or a.rate <= 0 or not 0 <= a.low_class <= 6 or a.message < 0 \
                or not 1 <= a.low_flows <= 32:
            raise BadInput("--episodes must be >= 1, --pause and --rate > 0, --low-class 0-6, --message >= 0, "
                           "--low-flows 1-32")
        if a.from_raw and not os.path.isfile(a.from_raw):
            raise BadInput(f"--from-raw: no such file {a.from_raw}")
    except BadInput as exc:
        sys.stderr.write(f"bench/starvation.py: {exc}\n")
        return 2
    plan = [(d, max(a.pause, AFTER_S + 0.5) + d) for d in durations for _ in range(a.episodes)]
    t0 = time.time()
    if a.from_raw:
        with open(a.from_raw) as f:
            raw = json.load(f)
    else:
        if os.geteuid() != 0:
            sys.stderr.write("bench/starvation.py: must run as root (it builds a Mininet fabric)\n")
            return 2
        raw = measure(plan, a)
        if a.raw:
            with open(a.raw, "w") as f:
                json.dump(raw, f)
    plan, settings = [tuple(x) for x in raw["plan"]], raw["settings"]
    (high_rx, high_tx), lows = raw["reports"][0], raw["reports"][1:]
    rto_s = calibrated().rto_s
    message = settings.get("message_bytes") or 0
    per_flow, reference = [], []
    for low_rx, low_tx in lows:
        low_rx["probe"] = low_tx["probe"]
        low_rx["messages"] = low_tx.get("messages")
        if message:
            episodes, ref = analyse_messages(plan, high_rx, low_rx, high_tx, settings["rate_mbps"], rto_s, message)
        else:
            episodes, ref = analyse(plan, high_rx, low_rx, high_tx, settings["rate_mbps"], rto_s)
        per_flow.append(episodes)
        reference.append(ref)
    episodes = combine(per_flow)
    result = {"command": " ".join(["bench/starvation.py"] + (argv if argv is not None else sys.argv[1:])),
              **settings, "high_class": 7,
              "message_alone_s" if message else "low_alone_share": statistics.mean(reference),
              "twin_rto_s": rto_s, "wall_s": time.time() - t0,
              "summary": summarise(episodes), "episodes": episodes}
    print_json(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
