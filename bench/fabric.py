#!/usr/bin/env python3
"""Benchmark the emulated fabric and print the figures as JSON.

    sudo python bench/fabric.py [--duration 5]

* single-flow goodput / configured rate at 10 and 100 Mbit/s (host-to-host across a spine);
* the top class's share of a congested port against a lower class (two senders into one 10 Mbit/s host port,
  classes 7 and 1), and the port's total utilisation;
* a ring all-reduce of 1 MB over 4 workers on 10 Mbit/s links against the analytic 2(N-1)/N x S / B;
* build, start (until the controller confirmed every switch's rules) and stop times of 16- and 64-host fabrics.

Targets: goodput >= 0.94 of the configured rate; top class >= 0.90 of the port.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=True)


from core.fabric import FabricSpec
from core.ring import ring_time_s
from testbed.fabric import Testbed
from experiment.results import RunFolder


def allreduce_vs_analytic(size: int = 1_000_000, workers: int = 4, rate_mbps: float = 10.0) -> dict:
    """Median time of a ring all-reduce (one bucket, no compute, 3 iterations) against 2(N-1)/N x S / B."""
    from core.fabric import FabricLayout
    from core.model import Bucket, JobSpec, ModelProfile
    from testbed import jobs as training

    spec = FabricSpec(spines=1, leaves=1, hosts_per_leaf=workers, host_rate_mbps=rate_mbps)
    hosts = FabricLayout.from_spec(spec).hosts[:workers]
    model = ModelProfile("one-bucket", "none", 1, (Bucket(0, size, 0.001, 0.001),))
    job = JobSpec(0, "ring", model, workers, 3, semantics="wait_all", hosts=tuple(h.name for h in hosts),
                  addresses=tuple(h.ip for h in hosts))
    out = tempfile.mkdtemp(prefix="flux-bench-fabric-")
    with Testbed(spec, out, jobs=[job]) as tb:
        res = training.run_jobs(tb, [job], RunFolder(out), seed=1, time_limit_s=120, progress=False)
    analytic = ring_time_s(size, workers, rate_mbps * 1e6)
    measured = res["jobs"][0]["op_time_p50_s"]
    ratio = measured / analytic
    return {"bytes": size, "workers": workers, "rate_mbps": rate_mbps, "analytic_s": analytic,
            "measured_p50_s": measured, "ratio": ratio, "target": 1.10, "met": ratio <= 1.10}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per traffic measurement")
    p.add_argument("--rates", default="10,100", help="link rates (Mbit/s) for the single-flow goodput")
    p.add_argument("--sizes", default="16,64", help="host counts for the build/start/stop timings")
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        sys.stderr.write("bench/fabric.py: must run as root\n")
        return 2
    result = {"goodput": [], "priority": None, "allreduce": None, "lifecycle": []}
    for rate in (float(r) for r in a.rates.split(",")):
        spec = FabricSpec(spines=2, leaves=2, hosts_per_leaf=2, host_rate_mbps=rate, fabric_rate_mbps=rate)
        with Testbed(spec, tempfile.mkdtemp(prefix="flux-bench-fabric-")) as tb:
            res = tb.single_flow(duration=a.duration, cross_leaf=True)
        result["goodput"].append({"rate_mbps": rate, "goodput_mbps": res["goodput_mbps"],
                                  "fraction": res["fraction"], "target": 0.94, "met": res["fraction"] >= 0.94})
    spec = FabricSpec(spines=2, leaves=2, hosts_per_leaf=3, host_rate_mbps=10, fabric_rate_mbps=10)
    with Testbed(spec, tempfile.mkdtemp(prefix="flux-bench-fabric-")) as tb:
        res = tb.priority_pair(high_class=7, low_class=1, duration=a.duration)
    result["priority"] = {"rate_mbps": 10, "high_class": 7, "low_class": 1,
                          "high_mbps": res["high"]["goodput_mbps"], "low_mbps": res["low"]["goodput_mbps"],
                          "high_share": res["high_share"], "port_utilisation": res["port_utilisation"],
                          "target": 0.90, "met": res["high_share"] >= 0.90}
    result["allreduce"] = allreduce_vs_analytic()
    for hosts in (int(n) for n in a.sizes.split(",")):
        per_leaf = 4 if hosts <= 16 else 8
        spec = FabricSpec(spines=2 if hosts <= 16 else 4, leaves=hosts // per_leaf, hosts_per_leaf=per_leaf)
        tb = Testbed(spec, tempfile.mkdtemp(prefix="flux-bench-fabric-"))
        t0 = time.time()
        try:
            tb.start()
        finally:
            tb.stop()
        result["lifecycle"].append({"hosts": hosts, "spines": spec.spines, "leaves": spec.leaves,
                                    "build_s": tb.timings.get("build_s"), "start_s": tb.timings.get("start_s"),
                                    "stop_s": tb.timings.get("stop_s"), "total_s": time.time() - t0,
                                    "datapath": tb.datapath})
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
