#!/usr/bin/env python3
"""What faults cost: time to reroute, iterations lost and the utilisation dip, per scheduler.

    sudo python bench/faults.py [--schedulers ecmp,bytescheduler,crux,flux] [--iterations 12] [--at 4]

For each scheduler, the default scenario (two jobs of four workers on the default 2-spine leaf-spine) runs once
without faults and once with each of:

* ``link``: the leaf-spine link lf1-sp1 down at ``--at`` s and up again ``--down-for`` s later;
* ``spine``: spine sp1 down at ``--at`` s (for the rest of the run);
* ``controller``: the scheduler controller killed at ``--at`` s (the runner restarts it).

Measured per run: the time from each fault to the controller's confirmed reroute (the last switch's barrier
reply after the rules for the links that are left were sent) or to the restarted controller having all switches
back; the iterations lost (the extra wall time of each job over the fault-free run, in units of its fault-free
median iteration); the slowest iteration against the fault-free median (the dip); and the cluster GPU
utilisation against the fault-free run. Every job's all-reduce sums are checked by its workers. Prints one JSON
document.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=True)


from experiment.results import RunFolder

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py")]
SCENARIO = os.path.join(PROJECT_DIR, "workloads", "scenarios", "default.yaml")


def conditions(at: float, down_for: float) -> dict:
    return {
        "none": [],
        "link": [f"link lf1-sp1 down at {at:g}", f"link lf1-sp1 up at {at + down_for:g}"],
        "spine": [f"switch sp1 down at {at:g}"],
        "controller": [f"controller scheduler kill at {at:g}"],
    }


def run_one(scheduler: str, name: str, faults, iterations: int, seed: int, work: str) -> dict:
    out = os.path.join(work, f"{scheduler}-{name}")
    cmd = RUN + ["--scheduler", scheduler, "--scenario", SCENARIO, "--iterations", str(iterations),
                 "--seed", str(seed), "--skip-checks", "--out", out, "-q"]
    for fault in faults:
        cmd += ["--fault", fault]
    r = subprocess.run(cmd, capture_output=True, text=True)
    record = {"scheduler": scheduler, "condition": name, "faults": faults, "exit_code": r.returncode}
    folder = RunFolder(out)
    summary = folder.summary()
    if summary is None:
        record["error"] = (r.stderr.strip().splitlines() or ["no summary"])[-1]
        return record
    record.update(ok=summary.ok, error=summary.error, faithful=summary.faithful,
                  cluster_gpu_utilization=summary.cluster.get("gpu_utilization"),
                  check_failures=sum(j.get("check_failures") or 0 for j in summary.jobs))
    record["iteration_times"] = {j.name: folder.iteration_times(j.name) for j in summary.jobs}
    record["wall_s"] = {j.name: j.get("wall_s") for j in summary.jobs}
    applied = {f["fault"]: f for f in summary.extra.get("faults") or []}
    recovery = []
    for change in summary.controller.get("fabric_changes") or []:
        done = change["time"] + change["latency_s"]
        # The fault this change answers: the latest one applied before it.
        before = [f for f in applied.values() if f.get("applied_at") and f["applied_at"] <= change["time"]]
        if before:
            fault = max(before, key=lambda f: f["applied_at"])
            recovery.append({"fault": fault["fault"], "links_down": change["links_down"],
                             "reroute_s": done - fault["applied_at"], "flowmods": change["flowmods"]})
    for restart in summary.controller.get("restarts") or []:
        kills = [f for f in applied.values() if f["fault"].startswith(f"controller {restart['role']}")]
        start = kills[0]["applied_at"] if kills else restart["detected_at"]
        recovery.append({"fault": kills[0]["fault"] if kills else restart["reason"],
                         "detected_after_s": restart["detected_at"] - start,
                         "recovered_after_s": restart["recovered_at"] - start})
    record["recovery"] = recovery
    return record


def compare(record: dict, baseline: dict) -> None:
    """Iterations lost and the dip of each job against the fault-free run of the same scheduler."""
    per_job = {}
    for job, times in (record.get("iteration_times") or {}).items():
        base = (baseline.get("iteration_times") or {}).get(job)
        if not times or not base:
            continue
        median = statistics.median(base)
        extra = (record["wall_s"].get(job) or 0) - (baseline["wall_s"].get(job) or 0)
        per_job[job] = {"iterations_lost": extra / median, "slowest_iteration_over_median": max(times) / median}
    record["jobs"] = per_job
    if record.get("cluster_gpu_utilization") is not None and baseline.get("cluster_gpu_utilization"):
        record["cluster_utilization_change"] = (record["cluster_gpu_utilization"]
                                                - baseline["cluster_gpu_utilization"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedulers", default="ecmp,bytescheduler,crux,flux", help="comma-separated schedulers")
    p.add_argument("--iterations", type=int, default=12, help="iterations per job")
    p.add_argument("--at", type=float, default=4.0, help="seconds into the workload when the fault happens")
    p.add_argument("--down-for", type=float, default=6.0, help="seconds the link stays down")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        sys.stderr.write("bench/faults.py: must run as root (it runs the testbed)\n")
        return 2
    if args.iterations < 2 or args.at < 0 or args.down_for <= 0:
        sys.stderr.write("bench/faults.py: --iterations >= 2, --at >= 0 and --down-for > 0\n")
        return 2
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as work:
        for scheduler in [s for s in args.schedulers.split(",") if s]:
            baseline = None
            for name, faults in conditions(args.at, args.down_for).items():
                record = run_one(scheduler, name, faults, args.iterations, args.seed, work)
                if name == "none":
                    baseline = record
                elif baseline is not None:
                    compare(record, baseline)
                runs.append(record)
                times = [round(r.get("reroute_s", r.get("recovered_after_s", -1)), 3)
                         for r in record.get("recovery", [])]
                sys.stderr.write(f"{scheduler} / {name}: exit {record['exit_code']}, recovery after {times} s\n")
    for record in runs:
        record.pop("iteration_times", None)  # (kept until every condition was compared with its baseline)
    faulted = [r for r in runs if r["condition"] != "none"]
    reroutes = [x["reroute_s"] for r in faulted for x in r.get("recovery", []) if "reroute_s" in x]
    all_done = all(r.get("ok") and r.get("check_failures") == 0 for r in runs)
    print(json.dumps({
        "command": " ".join(sys.argv), "scenario": "default", "iterations": args.iterations,
        "all_jobs_completed_correctly": all_done,
        "max_reroute_s": max(reroutes) if reroutes else None,
        "runs": runs}, indent=2))
    return 0 if all_done else 1


if __name__ == "__main__":
    sys.exit(main())
