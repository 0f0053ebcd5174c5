#!/usr/bin/env python3
"""Rate invariance: do a scenario's results stay the same at every emulated link rate, and does the verdict know?

    sudo python scripts/bench_fidelity.py [--schedulers ecmp,bytescheduler,crux,flux] [--rates 2.5,5,10,20]
                                          [--seeds 1,2,3] [--transports tcp,lossless] [--scenario headline]

The scaling (workloads/scaling.py) promises the same utilisation at any emulated rate: every byte count grows
with the rate, so a transfer takes the same emulated time. What breaks the promise is the emulator: Open vSwitch
running out of CPU, TCP timeouts, packets lost in short queues. Each (transport, rate, scheduler, seed) runs the
scenario with ``--host-rate R --fabric-rate R``; the JSON printed has, per run, the cluster and per-job
utilisation, TCP timeouts and retransmissions (per job), class-FIFO drops, the smallest operation's packets per
hop, Open vSwitch's mean and peak CPU, the verdict and the wall time; per transport, the *capacity*: the highest
rate at which every scheduler's cluster utilisation (mean over seeds) stays within ``--band`` (0.02) of its
lowest-rate value, with every run at that rate and below judged faithful.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PROJECT_DIR not in sys.path:
    sys.path.insert(0, PROJECT_DIR)

from testbed.bootstrap import ensure_env  # noqa: E402  (standard library only)

if __name__ == "__main__":
    # Set up what is missing and continue in .venv (asking for --help needs no fabric).
    ensure_env("bench_fidelity.py", needs_fabric=not ({"-h", "--help"} & set(sys.argv[1:])))

from testbed.results import RunFolder  # noqa: E402

RUN = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py")]
SCENARIOS_DIR = os.path.join(PROJECT_DIR, "workloads", "scenarios")


def run_one(scenario: str, transport: str, rate: float, scheduler: str, seed: int, work: str,
            extra) -> dict:
    out = os.path.join(work, f"{transport}-{rate:g}-{scheduler}-s{seed}")
    cmd = RUN + ["--scheduler", scheduler, "--scenario", os.path.join(SCENARIOS_DIR, f"{scenario}.yaml"),
                 "--seed", str(seed), "--host-rate", f"{rate:g}", "--fabric-rate", f"{rate:g}",
                 "--transport", transport, "--skip-checks", "--out", out, "-q"] + list(extra)
    started = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    record = {"transport": transport, "rate_mbps": rate, "scheduler": scheduler, "seed": seed,
              "exit_code": r.returncode, "wall_s": time.time() - started}
    summary = RunFolder(out).summary()
    if summary is None:
        record["error"] = (r.stderr.strip().splitlines() or ["no summary"])[-1]
        return record
    f = summary.fidelity
    classes = f.get("classes") or {}
    record.update(
        ok=summary.ok, faithful=summary.faithful, warnings=f.get("warnings", []),
        cluster=summary.cluster.get("gpu_utilization"),
        jobs={j.name: j.gpu_utilization for j in summary.jobs},
        timeouts=(f.get("tcp") or {}).get("timeouts"),
        retrans_fraction=(f.get("tcp") or {}).get("retrans_fraction"),
        timeouts_by_job={name: t.get("timeouts") for name, t in (f.get("tcp_by_job") or {}).items()},
        drops=classes.get("dropped"),
        queueing_delay_ms={c: v.get("queueing_delay_ms_mean") for c, v in (classes.get("by_class") or {}).items()},
        min_packets_per_op=min((p["min"] for p in (f.get("packets_per_op") or {}).values()), default=None),
        ovs_cpu=f.get("ovs_vswitchd_cpu"), ovs_cpu_peak=f.get("ovs_vswitchd_cpu_peak"),
        time_scale=((summary.config.get("scenario") or {}).get("scaling") or {}).get("time_scale"))
    return record


def capacity(runs, transport: str, rates, schedulers, band: float):
    """Highest rate whose mean cluster utilisation stays within ``band`` of the lowest rate's for every scheduler,
    every run up to it being faithful (None if even the lowest rate fails)."""
    best = None
    base = {}
    for rate in sorted(rates):
        ok = True
        for scheduler in schedulers:
            rs = [r for r in runs if r["transport"] == transport and r["rate_mbps"] == rate
                  and r["scheduler"] == scheduler and r.get("cluster") is not None]
            if not rs or not all(r.get("faithful") for r in rs):
                ok = False
                break
            mean = statistics.mean(r["cluster"] for r in rs)
            base.setdefault(scheduler, mean)
            if abs(mean - base[scheduler]) > band:
                ok = False
                break
        if not ok:
            break
        best = rate
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedulers", default="ecmp,bytescheduler,crux,flux")
    p.add_argument("--rates", default="2.5,5,10,20", help="emulated link rates, Mbit/s (host and fabric)")
    p.add_argument("--seeds", default="1")
    p.add_argument("--transports", default="tcp,lossless")
    p.add_argument("--scenario", default="headline", help="a shipped scenario")
    p.add_argument("--band", type=float, default=0.02, help="allowed drift of the cluster utilisation")
    p.add_argument("extra", nargs="*", help="more runner flags, after --")
    args = p.parse_args(argv)
    try:
        rates = [float(x) for x in args.rates.split(",") if x]
        seeds = [int(x) for x in args.seeds.split(",") if x]
    except ValueError as exc:
        sys.stderr.write(f"bench_fidelity.py: {exc}\n")
        return 2
    schedulers = [s for s in args.schedulers.split(",") if s]
    transports = [t for t in args.transports.split(",") if t]
    if not os.path.isfile(os.path.join(SCENARIOS_DIR, f"{args.scenario}.yaml")):
        sys.stderr.write(f"bench_fidelity.py: no shipped scenario {args.scenario}\n")
        return 2
    if os.geteuid() != 0:
        sys.stderr.write("bench_fidelity.py: must run as root (it runs the testbed)\n")
        return 2
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as work:
        for transport in transports:
            for rate in rates:
                for seed in seeds:
                    for scheduler in schedulers:
                        record = run_one(args.scenario, transport, rate, scheduler, seed, work, args.extra)
                        runs.append(record)
                        sys.stderr.write(f"{transport} {rate:g} Mbit/s {scheduler} s{seed}: cluster "
                                         f"{record.get('cluster')}, timeouts {record.get('timeouts')}, drops "
                                         f"{record.get('drops')}, faithful {record.get('faithful')}, "
                                         f"{record['wall_s']:.0f} s\n")
    print(json.dumps({
        "command": " ".join(sys.argv), "scenario": args.scenario, "band": args.band,
        "capacity_mbps": {t: capacity(runs, t, rates, schedulers, args.band) for t in transports},
        "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
