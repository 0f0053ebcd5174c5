#!/usr/bin/env python3
"""Benchmark the controller's reaction to operation events: latency and sustained flow-mod rate.

    sudo python bench/controller.py [--events 400] [--rate 100] [--load]

Brings up the default 16-host fabric with the ``flux`` scheduler and a synthetic set of jobs (no workers run),
then plays operation events into the controller's event socket exactly as workers send them: for each
operation a ``launch`` (with bytes and deadline), later a ``wait`` for some, then ``done``. Every event that
changes a decision makes the controller rewrite ingress rules and confirm them with a barrier; the controller
logs trigger -> barrier-reply latency per change (reactions.csv). With ``--load``, bulk TCP flows keep every
host link busy meanwhile, so OVS forwards packets while it takes the flow-mods.

A second phase measures the flow-mod rate the controller sustains: it pins ``--burst`` flows back to back, each
waiting for its barrier, and reports flow-mods per second.

Prints one JSON object: median / p99 reaction latency (ms), event delivery latency, flow-mods per second.
Targets on the project's 2-core machines: median <= 5 ms, p99 <= 20 ms.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import socket
import statistics
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=True)


from core.config import DEFAULT_POLL_INTERVAL_S
from core.fabric import FabricLayout, FabricSpec
from core.model import Bucket, FlowKey, JobSpec, ModelProfile, OperationEvent
from core.stats import percentile
from testbed.fabric import Testbed


def synthetic_jobs(layout: FabricLayout, jobs: int = 4, workers: int = 4, buckets: int = 6):
    hosts = list(layout.hosts)
    out = []
    for j in range(jobs):
        placed = [hosts[(j + r * jobs) % len(hosts)] for r in range(workers)]
        model = ModelProfile(f"synthetic{j}", "none", 1,
                             tuple(Bucket(b, 200_000 * (j + 1), 0.02, 0.04) for b in range(buckets)))
        out.append(JobSpec(j, f"job{j}", model, workers, 100, hosts=tuple(h.name for h in placed),
                           addresses=tuple(h.ip for h in placed)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=400, help="operations to play (each 2-3 events)")
    p.add_argument("--rate", type=float, default=25.0,
                   help="operations launched per second (25: about the event rate of the headline scenario)")
    p.add_argument("--burst", type=int, default=200, help="pins in the flow-mod rate phase")
    p.add_argument("--load", action="store_true", help="bulk TCP traffic on the fabric meanwhile")
    p.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_INTERVAL_S,
                   help="controller counter polling interval, s")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        sys.stderr.write("bench/controller.py: must run as root\n")
        return 2
    rng = random.Random(a.seed)
    spec = FabricSpec()
    layout = FabricLayout.from_spec(spec)
    jobs = synthetic_jobs(layout)
    out = tempfile.mkdtemp(prefix="flux-bench-ctl-")
    result = {"scheduler": "flux", "fabric": vars(spec), "events_planned": a.events, "rate_per_s": a.rate,
              "load": a.load}
    result["poll_interval_s"] = a.poll_interval
    with Testbed(spec, out, scheduler="flux", jobs=jobs, poll_interval_s=a.poll_interval) as tb:
        senders = []
        if a.load:
            py = [sys.executable, "-m", "testbed.traffic"]
            dur = a.events / a.rate + 10
            for i, h in enumerate(layout.hosts):
                dst = layout.hosts[(i + spec.hosts_per_leaf) % len(layout.hosts)]
                senders.append(tb.host_popen(dst.name, py + ["serve", "--bind", dst.ip, "--port", str(6000 + i),
                                                             "--duration", str(dur)],
                                             stdout=open(os.devnull, "w")))
            time.sleep(0.5)
            for i, h in enumerate(layout.hosts):
                dst = layout.hosts[(i + spec.hosts_per_leaf) % len(layout.hosts)]
                senders.append(tb.host_popen(h.name, py + ["send", "--bind", h.ip, "--sport", str(46000 + i),
                                                           "--dst", dst.ip, "--port", str(6000 + i),
                                                           "--duration", str(dur)], stdout=open(os.devnull, "w")))
            time.sleep(2)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        live = []
        t_next = time.time()
        for i in range(a.events):
            job = rng.choice(jobs)
            it, b = i, rng.randrange(len(job.model.buckets))
            now = time.time()
            for r in range(job.workers):
                ev = OperationEvent("launch", job.index, r, it, b, now, nbytes=job.model.buckets[b].nbytes,
                                    needed_at=now + rng.uniform(0.05, 1.0))
                sock.sendto(json.dumps(ev.to_dict()).encode(), tb.events_socket)
            live.append((job, it, b))
            if rng.random() < 0.3:
                sock.sendto(json.dumps(OperationEvent("wait", job.index, 0, it, b, time.time()).to_dict())
                            .encode(), tb.events_socket)
            while len(live) > 12:
                dj, di, db = live.pop(0)
                for r in range(dj.workers):
                    sock.sendto(json.dumps(OperationEvent("done", dj.index, r, di, db, time.time()).to_dict())
                                .encode(), tb.events_socket)
            t_next += 1.0 / a.rate
            time.sleep(max(0.0, t_next - time.time()))
        time.sleep(1.0)
        stats = tb.controller_stats()
        # Phase 2: back-to-back pins, each confirmed by barrier.
        t0 = time.time()
        mods = 0
        for i in range(a.burst):
            src, dst = layout.hosts[i % 4], layout.hosts[4 + i % 4]
            reply = tb.pin(FlowKey(src.ip, dst.ip, 50000 + i % 500, 7000), i % 8, path=i % spec.spines)
            mods += reply["flowmods"]
        elapsed = time.time() - t0
        for proc in senders:
            proc.terminate()
        for proc in senders:
            proc.wait(10)
    with open(os.path.join(out, "reactions.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["trigger"] == "event"]
    lat = [1e3 * float(r["latency_s"]) for r in rows]
    with open(os.path.join(out, "events.csv")) as f:
        ev_lat = [1e3 * (float(r["received"]) - float(r["sent"])) for r in csv.DictReader(f)]
    result.update({
        "reactions": len(lat),
        "flowmods_per_reaction_mean": statistics.mean(int(r["flowmods"]) for r in rows) if rows else None,
        "reaction_latency_ms_median": statistics.median(lat) if lat else None,
        "reaction_latency_ms_p99": percentile(lat, 99),
        "event_delivery_ms_median": statistics.median(ev_lat) if ev_lat else None,
        "event_delivery_ms_p99": percentile(ev_lat, 99),
        "class_changes_per_s": stats.get("flowmods_per_s"),
        "pinned_flowmods_per_s_sequential": mods / elapsed,
        "pin_latency_ms_mean": 1e3 * elapsed / a.burst,
        "targets_met": bool(lat) and statistics.median(lat) <= 5 and percentile(lat, 99) <= 20,
        "out_dir": out,
    })
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
