#!/usr/bin/env python3
"""What a live class change costs a TCP flow in the emulation: measured raises out of a busy class, as JSON.

    sudo python bench/class_change.py [--transport tcp] [--before 0.05,0.15,0.5] [--episodes 3]

A policy that changes a live flow's class (flux-v1 raises an operation's flows as it grows urgent) moves the
flow's next packets into another queue while its earlier ones still wait in the old one. The twin's
``class_change_s`` is what that costs; this benchmark measures it. Two flows go into one host port of a one-leaf
fabric with the testbed's classes, FIFOs and the chosen transport profile: the flow under test sends in bulk
(or in answered messages, ``--message``, as a ring's steps do) in ``--old-class`` throughout, and a busy flow
in ``--busy-class`` (above it) sends in bursts, each leaving the tested flow its class floor. ``--before``
seconds into a burst the controller raises the tested flow to ``--new-class`` (above the busy one): from then
on the fluid model gives it the whole port, while its packets already in the old FIFO wait behind the busy
class. After the burst it goes back to its old class (nothing else is sending then, so that move strands
nothing). Each raise is also made once with no burst (``idle`` episodes): the flow's own packets are then all
that is in the way.

Per raise (from the switch's confirmation of the new rule, over ``--window`` seconds):

* ``lag_s``: the window minus what the flow received in it, in seconds of its rate alone (measured before the
  first burst): the time it lost beyond what the fluid model charges (0 if it took the port at once);
* ``silence_s``: the longest time without an arrival in the window;
* ``timeouts``, ``retransmits``: the sender's retransmission timeouts (its namespace's) and retransmitted
  segments from the burst's start to the window's end; ``max_backoff``: the largest exponential backoff;
* ``twin_lag_s``: what the calibrated twin charges the same flow: for a raise out of the busy class,
  ``class_change_s``; with ``class_change_strands`` that only for a bulk flow (more follows its stranded
  packets), and for a message no longer than what it can have in flight (its tail is stranded) the time the
  rest of it takes at the class floor or its timer (``rto_s``, at least the profile's minimum RTO), whichever
  is shorter; or the starvation rule's remaining timer if the time starved before the raise reached it,
  whichever is longer; nothing for a raise out of an idle class.

Sent only between the benchmark's own hosts (namespaces it creates). Prints the JSON; ``--out`` also writes it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=True)


from core.fabric import FabricSpec
from core.model import FlowKey
from testbed.fabric import Testbed
from core.transport import DEFAULT_PROFILE, PROFILES, TCP_PAYLOAD
from twin.model import calibrated
# The reading of testbed.traffic's timelines and probes, and the twin's starvation rule, as bench_starvation has them.
from analysis.starvation import BadInput, floats, longest_silence, probe_at, twin_rule, value_at
from bench import print_json

WARMUP_S = 2.0      # the tested flow alone first: out of slow start, its rate alone measured
REST_S = 2.5        # after each episode, before the next burst: the flow back to its rate alone
START_DELAY_S = 1.5  # from launching the flows to the busy flow's schedule (processes started, connected)


def twin_lag(before_s: float, busy: bool, rto_s: float, tail, floor_rate: float, class_change_s: float) -> float:
    """The twin's charge for a raise after ``before_s`` starved (twin/engine.py, ``_change_live_class``): a flow
    raised out of a busy class loses ``class_change_s`` if more follows its stranded bytes (``tail`` None), or
    waits until its ``tail`` bytes drain at ``floor_rate`` or its timer fires, whichever is first; and it waits
    for a timer its starvation earned (rto_s x (2^k - 1) from the onset) if that is later. A flow raised out of
    an idle class goes on at once."""
    if not busy:
        return 0.0
    earned = twin_rule(before_s, rto_s)[0]
    if tail is None:
        return max(earned, class_change_s)
    # What is left of the message at the raise: it went on at the floor while starved.
    drain = max(tail - floor_rate * before_s, 0.0) / floor_rate if floor_rate > 0 else math.inf
    return max(earned, min(drain, rto_s))


def plan_episodes(befores, episodes: int, idle: bool):
    """(before_s, busy) of every episode, interleaved so that slow drifts of the machine hit every kind alike."""
    kinds = [(b, True) for b in befores] + ([(befores[0], False)] if idle else [])
    return [kind for _ in range(episodes) for kind in kinds]


def measure(plan, a) -> dict:
    """Run both flows and raise the tested one at the planned moments; returns the flows' reports and the raises'
    wall times (``--raw`` keeps them)."""
    periods = [(before + a.hold if busy else 0.0, before + a.hold + REST_S) for before, busy in plan]
    schedule = [0.0, WARMUP_S] + [x for burst, period in periods for x in (burst, period - burst)]
    total = START_DELAY_S + sum(schedule) + 1.0
    spec = FabricSpec(spines=1, leaves=1, hosts_per_leaf=3, host_rate_mbps=a.rate, fabric_rate_mbps=a.rate)
    sys.stderr.write(f"bench/class_change.py: {len(plan)} raises, {total:.0f} s of traffic ({a.transport})\n")
    with tempfile.TemporaryDirectory(prefix="flux-bench-class-change-") as out_dir, \
            Testbed(spec, out_dir, transport=a.transport) as tb:
        h1, h2, h3 = tb.layout.hosts[:3]
        busy = FlowKey(h1.ip, h3.ip, 41001, 5101)
        tested = FlowKey(h2.ip, h3.ip, 41002, 5102)
        tb.pin(busy, a.busy_class)
        tb.pin(tested, a.old_class)
        start_at = time.time() + START_DELAY_S
        messages = ["--message", str(a.message), "--idle", f"{a.idle:g}"] if a.message else []
        send_args = {tested: ["--probe"] + messages,
                     busy: ["--schedule", ",".join(f"{x:g}" for x in schedule), "--sndbuf", "16384",
                            "--start-at", f"{start_at:.4f}"]}
        result = {}

        def run_flows():
            try:
                result["reports"] = tb.bulk_flows([busy, tested], total, 0.0, timeline=True, send_args=send_args,
                                                  ack_every={tested: a.message} if a.message else None)
            except Exception as exc:  # reported by the main thread, which owns the fabric
                result["error"] = exc

        flows = threading.Thread(target=run_flows, daemon=True)
        flows.start()
        raises = []
        onset = start_at + WARMUP_S
        for (before, busy_episode), (burst, period) in zip(plan, periods):
            time.sleep(max(0.0, onset + before - time.time()))
            asked = time.time()
            tb.pin(tested, a.new_class)
            raises.append({"before_s": before, "busy": busy_episode, "onset": onset, "asked": asked,
                           "confirmed": time.time()})
            time.sleep(max(0.0, onset + before + a.hold + 0.5 - time.time()))
            tb.pin(tested, a.old_class)
            onset += period
        flows.join(total + 90)
        if "error" in result:
            raise result["error"]
        if "reports" not in result:
            raise RuntimeError("the flows did not report")
        settings = {"rate_mbps": a.rate, "old_class": a.old_class, "busy_class": a.busy_class,
                    "new_class": a.new_class, "hold_s": a.hold, "window_s": a.window,
                    "message_bytes": a.message or None, "idle_s": a.idle if a.message else None,
                    "class_floor": tb.class_floor, "queue_ms": tb.queue_ms, "transport": tb.transport.to_dict(),
                    "datapath": tb.datapath}
    return {"plan": plan, "settings": settings, "reports": result["reports"], "raises": raises}


def analyse(raw, rto_s: float, tail, class_change_s: float):
    settings = raw["settings"]
    (_, _), (rx, tx) = raw["reports"]
    timeline, probe = rx["timeline"], tx["probe"]
    first_onset = raw["raises"][0]["onset"]
    first = timeline[0][0]
    alone = (value_at(timeline, first_onset - 0.05) - value_at(timeline, first + 0.5)) / \
        max(first_onset - 0.05 - first - 0.5, 1e-9)
    window = settings["window_s"]
    floor_rate = settings["class_floor"] * settings["rate_mbps"] * 1e6 / 8
    episodes = []
    for r in raw["raises"]:
        t0, t1 = r["confirmed"], r["confirmed"] + window
        start = r["onset"] - 0.001
        received = value_at(timeline, t1) - value_at(timeline, t0)
        episodes.append({
            "before_s": r["before_s"], "busy": r["busy"], "rule_s": r["confirmed"] - r["asked"],
            "lag_s": window - received / alone,
            "silence_s": longest_silence(timeline, t0, t1),
            "timeouts": probe_at(probe, t1, "timeouts") - probe_at(probe, start, "timeouts"),
            "retransmits": probe_at(probe, t1, "total_retrans") - probe_at(probe, start, "total_retrans"),
            "max_backoff": max([s["backoff"] for s in probe if r["onset"] <= s["t"] <= t1], default=0),
            "twin_lag_s": twin_lag(r["before_s"], r["busy"], rto_s, tail, floor_rate, class_change_s)})
    return episodes, alone


def summarise(episodes):
    out = []
    for kind in sorted({(e["before_s"], e["busy"]) for e in episodes}, key=lambda k: (not k[1], k[0])):
        group = [e for e in episodes if (e["before_s"], e["busy"]) == kind]
        lags = [e["lag_s"] for e in group]
        out.append({"before_s": kind[0], "busy": kind[1], "episodes": len(group),
                    "lag_s_median": statistics.median(lags), "lag_s_min": min(lags), "lag_s_max": max(lags),
                    "silence_s_max": max(e["silence_s"] for e in group),
                    "timeouts_mean": statistics.mean(e["timeouts"] for e in group),
                    "retransmits_mean": statistics.mean(e["retransmits"] for e in group),
                    "twin_lag_s": statistics.mean(e["twin_lag_s"] for e in group)})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", choices=list(PROFILES), default=DEFAULT_PROFILE,
                   help="the hosts' TCP and the class FIFOs, as testbed/run.py's --transport")
    p.add_argument("--before", default="0.05,0.15,0.5",
                   help="seconds the tested flow spends behind the busy class before each raise")
    p.add_argument("--episodes", type=int, default=3, help="raises of each kind")
    p.add_argument("--no-idle", action="store_true", help="leave out the raises with no busy flow")
    p.add_argument("--hold", type=float, default=1.5, help="seconds the busy flow goes on after each raise")
    p.add_argument("--window", type=float, default=1.0, help="seconds after each raise over which its cost is taken")
    p.add_argument("--message", type=int, default=0, metavar="BYTES",
                   help="the tested flow sends messages of this size, each answered by the receiver, with --idle "
                        "between them (a ring step's pattern: after a raise, the stranded packets can be a "
                        "message's tail, with nothing sent behind them); 0: it sends in bulk")
    p.add_argument("--idle", type=float, default=0.0, help="seconds between the tested flow's messages")
    p.add_argument("--rate", type=float, default=5.0, help="host link rate, Mbit/s (the suite's 5)")
    p.add_argument("--old-class", type=int, default=1, help="the tested flow's class before a raise (0-6)")
    p.add_argument("--busy-class", type=int, default=3, help="the busy flow's class (above the old one)")
    p.add_argument("--new-class", type=int, default=5, help="the tested flow's class after a raise (above the busy)")
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--raw", help="write the flows' own reports (arrival timeline, TCP samples) here")
    p.add_argument("--from-raw", metavar="FILE", help="analyse a --raw file again instead of measuring")
    a = p.parse_args(argv)
    try:
        befores = floats(a.before, "--before")
        if a.episodes < 1 or a.rate <= 0 or a.hold <= 0 or not 0 < a.window <= a.hold or a.message < 0 \
                or a.idle < 0:
            raise BadInput("--episodes must be >= 1, --rate and --hold > 0, --window in (0, --hold], --message "
                           "and --idle >= 0")
        if not 0 <= a.old_class < a.busy_class < a.new_class <= 6:
            raise BadInput("classes must satisfy 0 <= --old-class < --busy-class < --new-class <= 6 "
                           "(class 7 carries the ACKs)")
        if a.from_raw and not os.path.isfile(a.from_raw):
            raise BadInput(f"--from-raw: no such file {a.from_raw}")
    except BadInput as exc:
        sys.stderr.write(f"bench/class_change.py: {exc}\n")
        return 2
    t0 = time.time()
    if a.from_raw:
        with open(a.from_raw) as f:
            raw = json.load(f)
    else:
        if os.geteuid() != 0:
            sys.stderr.write("bench/class_change.py: must run as root (it builds a Mininet fabric)\n")
            return 2
        raw = measure(plan_episodes(befores, a.episodes, not a.no_idle), a)
        raw["command"] = " ".join(["bench/class_change.py"] + (argv if argv is not None else sys.argv[1:]))
        if a.raw:
            with open(a.raw, "w") as f:
                json.dump(raw, f)
    transport = raw["settings"]["transport"]
    model = calibrated()
    # The twin's timer under this profile: its rto_s, at least the profile's minimum RTO (twin.fifo_settings).
    rto_s = max(model.rto_s, (transport.get("rto_min_ms") or 0) / 1000)
    # What the twin strands: the flow's window (the profile's clamp) or its FIFO's length; a message no longer
    # than that is all tail (nothing follows it), a bulk flow none.
    settings = raw["settings"]
    in_flight = min((transport.get("window_packets") or math.inf) * TCP_PAYLOAD,
                    settings["queue_ms"] / 1000 * settings["rate_mbps"] * 1e6 / 8)
    message = settings.get("message_bytes") or math.inf
    tail = message if model.class_change_strands and message <= in_flight else None
    class_change_s = model.class_change_s
    episodes, alone = analyse(raw, rto_s, tail, class_change_s)
    command = " ".join(["bench/class_change.py"] + (argv if argv is not None else sys.argv[1:]))
    result = {"command": raw.get("command", command), "analysed_by": command,
              **raw["settings"], "alone_share": alone / (raw["settings"]["rate_mbps"] * 1e6 / 8),
              # The window the receiver advertised (the lossless profile bounds it): the largest the sender saw.
              "snd_wnd_max": max((s.get("snd_wnd", 0) for s in raw["reports"][1][1]["probe"]), default=None),
              "twin_rto_s": rto_s, "twin_tail_bytes": tail, "twin_class_change_s": class_change_s,
              "wall_s": time.time() - t0,
              "summary": summarise(episodes), "episodes": episodes}
    print_json(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
