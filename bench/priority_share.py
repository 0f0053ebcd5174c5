#!/usr/bin/env python3
"""What a higher class keeps of a port when a lower class is backlogged behind it, measured, as JSON.

    sudo python bench/priority_share.py [--message 28960] [--idle 0.005] [--low-flows 1] [--rate 5]

Strict priority promises a higher class everything it asks for. A TCP flow sending ring steps (answered
messages with short pauses, ``--message`` and ``--idle``) does not ask for the port all the time: between its
messages and while its window opens, its FIFO is empty, and a backlogged lower class sends then. Each packet of
the lower class, once started, delays the next higher-class packet by up to one packet time (2.4 ms at 5
Mbit/s), and the lower class's traffic through the same port shapes the higher flow's round trips. The fluid twin
(twin/engine.py) serves the higher class first, at once and in full.

On a one-leaf fabric with the testbed's classes, FIFOs and transport: the high flow (class ``--high-class``)
sends messages for the whole run into one host port; the low flows (class ``--low-class``, bulk) start
``ALONE_S`` seconds later, into the same port. Reported:

* ``message_alone_s`` / ``message_shared_s``: the high flow's mean message time (send to answer) without and with
  the low flows, and their ratio (``slowdown``); the twin's ratio is 1;
* ``high_share`` / ``low_share``: each side's goodput while both send, as a share of the port's rate (``low_share``
  is what the twin gives the low flows: the rate minus what the high flow used).

Sent only between the benchmark's own hosts (namespaces it creates). Prints the JSON; ``--out`` also writes it.
"""
from __future__ import annotations

import argparse
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
from bench import print_json

ALONE_S = 4.0           # the high flow alone first
SETTLE_S = 1.0          # left out at the start of each phase (slow start, the low flows' start)


def message_times(messages, start: float, end: float):
    return [b - a for a, b in messages if a >= start and b <= end]


def analyse(report_high, report_lows, t0: float, shared_s: float, rate_mbps: float, message: int) -> dict:
    """Figures of one run from its senders' reports (message times are wall clock)."""
    (_high_rx, high_tx) = report_high
    messages = high_tx["messages"]
    alone = message_times(messages, t0 + SETTLE_S, t0 + ALONE_S)
    shared = message_times(messages, t0 + ALONE_S + SETTLE_S, t0 + ALONE_S + shared_s)
    if not alone or not shared:
        raise RuntimeError("the high flow completed no message in a phase: lengthen --shared")
    span = shared_s - SETTLE_S
    high_bytes = message * len(shared)
    port_bytes = rate_mbps * 1e6 / 8 * span
    low_bytes = sum(rx["measured_bytes"] for rx, _tx in report_lows)
    # The low receivers count from their warm-up (ALONE_S + SETTLE_S) to their end: the same span.
    return {"message_alone_s": statistics.mean(alone), "message_shared_s": statistics.mean(shared),
            "message_shared_p90_s": sorted(shared)[int(0.9 * (len(shared) - 1))],
            "slowdown": statistics.mean(shared) / statistics.mean(alone),
            "messages_alone": len(alone), "messages_shared": len(shared),
            "high_share": high_bytes / port_bytes, "low_share": low_bytes / port_bytes}


def measure(a) -> dict:
    spec = FabricSpec(spines=1, leaves=1, hosts_per_leaf=3, host_rate_mbps=a.rate, fabric_rate_mbps=a.rate)
    total = ALONE_S + a.shared
    sys.stderr.write(f"bench/priority_share.py: {total:.0f} s of traffic\n")
    with tempfile.TemporaryDirectory(prefix="flux-bench-priority-") as out_dir, Testbed(spec, out_dir) as tb:
        h1, h2, h3 = tb.layout.hosts[:3]
        high = FlowKey(h1.ip, h3.ip, 42001, 5201)
        lows = [FlowKey(h2.ip, h3.ip, 42002 + i, 5202 + i) for i in range(a.low_flows)]
        tb.pin(high, a.high_class)
        for low in lows:
            tb.pin(low, a.low_class)
        send_args = {high: ["--message", str(a.message), "--idle", f"{a.idle:g}"]}
        for low in lows:
            send_args[low] = ["--schedule", f"0,{ALONE_S:g},{a.shared:g}"]
        t0 = time.time()
        # Receivers count from ALONE_S + SETTLE_S: the low flows' goodput over the shared phase.
        reports = tb.bulk_flows([high] + lows, total, ALONE_S + SETTLE_S, timeline=False,
                                ack_every={high: a.message}, send_args=send_args)
        settings = {"rate_mbps": a.rate, "high_class": a.high_class, "low_class": a.low_class,
                    "low_flows": a.low_flows, "message_bytes": a.message, "idle_s": a.idle,
                    "class_floor": tb.class_floor, "queue_ms": tb.queue_ms, "transport": tb.transport.name,
                    "datapath": tb.datapath}
    # The senders start about 0.3 s after t0 (testbed/fabric.py lets the receivers listen first).
    start = min(m[0] for m in reports[0][1]["messages"]) if reports[0][1].get("messages") else t0
    return {"settings": settings, "figures": analyse(reports[0], reports[1:], start, a.shared, a.rate, a.message)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--message", type=int, default=28960, metavar="BYTES",
                   help="the high flow's message size (a ring step's chunk; 20 full packets by default)")
    p.add_argument("--idle", type=float, default=0.005, help="seconds between a message's answer and the next")
    p.add_argument("--low-flows", type=int, default=1, help="backlogged low flows (bulk)")
    p.add_argument("--high-class", type=int, default=6, help="class of the message flow (1-7)")
    p.add_argument("--low-class", type=int, default=1, help="class of the bulk flows (0-6, below --high-class)")
    p.add_argument("--shared", type=float, default=8.0, help="seconds both send")
    p.add_argument("--rate", type=float, default=5.0, help="host link rate, Mbit/s (the suite's 5)")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args(argv)
    if a.message < 1500 or a.idle < 0 or not 0 <= a.low_class < a.high_class <= 7 or not 0 <= a.low_flows <= 16 \
            or a.shared <= SETTLE_S + 1 or a.rate <= 0:
        sys.stderr.write("bench/priority_share.py: --message >= 1500, --idle >= 0, 0 <= --low-class < --high-class "
                         f"<= 7, --low-flows 0-16, --shared > {SETTLE_S + 1:g}, --rate > 0\n")
        return 2
    if os.geteuid() != 0:
        sys.stderr.write("bench/priority_share.py: must run as root (it builds a Mininet fabric)\n")
        return 2
    t0 = time.time()
    result = {"command": " ".join(["bench/priority_share.py"]
                                  + (argv if argv is not None else sys.argv[1:]))}
    result.update(measure(a))
    result["wall_s"] = time.time() - t0
    print_json(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
