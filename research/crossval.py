#!/usr/bin/env python3
"""Cross-validation of the flow-level twin against the emulation: every shipped scenario under every scheduler.

Question: Does the twin agree with the emulation on every shipped top-level scenario under every scheduler (flat
emulation sweeps)?
Answer: The first cross-validation, superseded by the suite's (cli/suite.py --compare); two of its measurements
still describe the model: charging every live class change a stall moved flux-v1 on the headline from 0.837 to
0.805-0.774, and the ideal model gave ecmp 0.801, crux 0.846, flux 0.851.
Cited in: docs/twin-log.md, Earlier cross-validations (superseded).

    python research/crossval.py results/headline results/same-model [--out results/crossval] [--seeds 1,2,3]

The twin runs every shipped scenario (workloads/scenarios/*.yaml except scale-*) under every scheduler, with
the calibrated model and Open vSwitch's hash (the switches' own ECMP paths, the same for every seed), once per
seed. The
emulation's figures are read from the folders given (recursively: run folders with summary.json, or sweep
tables summary.csv); this script never starts an emulation unless given ``--run-emulation``, which runs the
missing combinations through scripts/sweep.py (root, one at a time). Where an emulation run recorded its jobs
(summary.json), the twin runs exactly those jobs (placement, scaling, buckets) on that run's fabric; otherwise
(sweep tables only, or no run) it resolves the scenario today at ``--host-rate`` / ``--fabric-rate``.

Writes ``crossval.csv`` (one row per scenario, scheduler and job, plus a cluster row), ``crossval.md`` (the
table of docs/twin-log.md) and ``crossval.png`` into ``--out``, and prints the markdown table.
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from collections import defaultdict
from statistics import mean

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import builds_fabric, set_up
    set_up(__file__, fabric=builds_fabric("research", sys.argv[1:], "crossval"))


from core.fabric import FabricSpec
from experiment.results import CLUSTER, RunFolder, read_summary_csv
import twin
from workloads.scenario import SCENARIO_DIR

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCHEDULERS = ("ecmp", "bytescheduler", "crux", "flux")
CLUSTER_BOUND, JOB_BOUND = 0.03, 0.05


def shipped_scenarios():
    return sorted(p for p in SCENARIO_DIR.glob("*.yaml") if not p.stem.startswith("scale-"))


def emulation_figures(folders):
    """(scenario, scheduler) -> list of runs {seed, cluster, jobs{name: util}, timeouts, fabric}."""
    found = defaultdict(list)
    seen = set()
    for top in folders:
        for root, _dirs, files in os.walk(top):
            if "summary.json" in files:
                s = RunFolder(root).summary()
                if not s or not s.ok or s.engine != "emulation" or s.faithful is False:
                    continue
                name = (s.config.get("scenario") or {}).get("name")
                key = (name, s.config.get("scheduler"), s.seed)
                seen.add(key)
                found[key[:2]].append({"seed": s.seed, "cluster": s.cluster.get("gpu_utilization"),
                                       "jobs": {j.name: j.gpu_utilization for j in s.jobs},
                                       "timeouts": (s.fidelity.get("tcp") or {}).get("timeouts"),
                                       "config": s.config})
        for root, _dirs, files in os.walk(top):
            if "summary.csv" not in files:
                continue
            rows, _axes = read_summary_csv(os.path.join(root, "summary.csv"))
            runs = defaultdict(dict)
            for row in rows:
                if row.get("ok") != "True" or row.get("faithful") == "False":
                    continue
                runs[(row["scenario"], row["scheduler"], int(row["seed"]))][row["job"]] = float(row["gpu_utilization"])
            for key, jobs in runs.items():
                if key in seen or CLUSTER not in jobs:
                    continue
                seen.add(key)
                found[key[:2]].append({"seed": key[2], "cluster": jobs.pop(CLUSTER), "jobs": jobs,
                                       "timeouts": None, "config": None})
    return found


def twin_figures(resolved, scheduler, seeds, class_floor, config=None):
    """The twin's figures per seed; ``config`` (a recorded run's) sizes the class FIFOs as that run did."""
    out = []
    for seed in seeds:
        r = twin.simulate(resolved.layout, resolved.jobs, scheduler, {}, "calibrated", "strict", class_floor,
                          seed, **twin.fifo_settings(config or {}))
        f = twin.summarize(resolved.jobs, r)
        out.append({"seed": seed, "cluster": f["cluster"]["gpu_utilization"],
                    "jobs": {j["name"]: j["gpu_utilization"] for j in f["jobs"]}, "timeouts": sum(r.timeouts.values()),
                    "wall_s": r.wall_s})
    return out


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="*", help="folders with finished emulation runs or sweep tables")
    p.add_argument("--out", default=os.path.join(PROJECT_DIR, "results", "crossval"))
    p.add_argument("--seeds", default="1,2,3", help="twin seeds where the emulation has none")
    p.add_argument("--host-rate", type=float, default=5.0)
    p.add_argument("--fabric-rate", type=float, default=5.0)
    p.add_argument("--class-floor", type=float, default=0.01)
    p.add_argument("--run-emulation", action="store_true",
                   help="run the missing emulations first with scripts/sweep.py (root; one at a time)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.run_emulation:
        sweep_out = os.path.join(args.out, "emulation")
        subprocess.run([sys.executable, os.path.join(PROJECT_DIR, "scripts", "sweep.py"), "--schedulers",
                        ",".join(SCHEDULERS), "--scenarios", ",".join(str(s) for s in shipped_scenarios()),
                        "--seeds", args.seeds, f"--extra-args=--host-rate {args.host_rate:g} --fabric-rate "
                        f"{args.fabric_rate:g}", "--out", sweep_out], check=False)
        args.folders.append(sweep_out)
    emu = emulation_figures(args.folders)
    os.makedirs(args.out, exist_ok=True)
    rows, table = [], []
    for scenario in shipped_scenarios():
        for scheduler in SCHEDULERS:
            runs = emu.get((scenario.stem, scheduler), [])
            # The jobs exactly as the emulation ran them when it recorded them (scaling and coarsening change
            # between versions of the scenario code); otherwise the scenario as resolved today.
            config = next((r["config"] for r in runs if r["config"]), None)
            spec = FabricSpec(host_rate_mbps=args.host_rate, fabric_rate_mbps=args.fabric_rate)
            resolved = twin.prepare_recorded(config) if config else twin.prepare(str(scenario), spec)
            floor = float(config.get("class_floor", args.class_floor)) if config else args.class_floor
            tw = twin_figures(resolved, scheduler, sorted({r["seed"] for r in runs}) or seeds, floor, config)
            e_cluster = mean(r["cluster"] for r in runs) if runs else None
            t_cluster = mean(r["cluster"] for r in tw)
            e_to = [r["timeouts"] for r in runs if r["timeouts"] is not None]
            job_names = list(tw[0]["jobs"])
            worst = None
            for name in job_names:
                t_job = mean(r["jobs"][name] for r in tw)
                e_vals = [r["jobs"][name] for r in runs if name in r["jobs"]]
                e_job = mean(e_vals) if e_vals else None
                d = None if e_job is None else t_job - e_job
                if d is not None and (worst is None or abs(d) > abs(worst[1])):
                    worst = (name, d)
                rows.append({"scenario": scenario.stem, "scheduler": scheduler, "job": name, "emulation": e_job,
                             "twin": t_job, "twin_min": min(r["jobs"][name] for r in tw),
                             "twin_max": max(r["jobs"][name] for r in tw), "diff": d, "emulation_runs": len(runs)})
            diff = None if e_cluster is None else t_cluster - e_cluster
            rows.append({"scenario": scenario.stem, "scheduler": scheduler, "job": CLUSTER, "emulation": e_cluster,
                         "twin": t_cluster, "twin_min": min(r["cluster"] for r in tw),
                         "twin_max": max(r["cluster"] for r in tw), "diff": diff, "emulation_runs": len(runs),
                         "emulation_timeouts": mean(e_to) if e_to else None,
                         "twin_timeouts": mean(r["timeouts"] for r in tw)})
            flag = ""
            if diff is not None and (abs(diff) > CLUSTER_BOUND or (worst and abs(worst[1]) > JOB_BOUND)):
                flag = " **out of bounds**"
            table.append(f"| {scenario.stem} | {scheduler} | {len(runs)} | {fmt(e_cluster)} | {fmt(t_cluster)} "
                         f"({fmt(min(r['cluster'] for r in tw))}-{fmt(max(r['cluster'] for r in tw))}) | "
                         f"{fmt(diff, '+.3f')} | {worst[0] + ' ' + fmt(worst[1], '+.3f') if worst else '-'} | "
                         f"{fmt(mean(e_to) if e_to else None, '.0f')} | "
                         f"{fmt(mean(r['timeouts'] for r in tw), '.0f')} |{flag}")
    with open(os.path.join(args.out, "crossval.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["scenario", "scheduler", "job", "emulation", "twin", "twin_min", "twin_max",
                                          "diff", "emulation_runs", "emulation_timeouts", "twin_timeouts"])
        w.writeheader()
        w.writerows(rows)
    head = ("| scenario | scheduler | emulation runs | emulation cluster | twin cluster (seeds min-max) | diff | "
            "largest per-job diff | emulation timeouts | twin timeouts |\n|---|---|---|---|---|---|---|---|---|")
    md = head + "\n" + "\n".join(table) + "\n"
    with open(os.path.join(args.out, "crossval.md"), "w") as f:
        f.write(md)
    plot(rows, os.path.join(args.out, "crossval.png"))
    print(md)
    return 0


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cluster = [r for r in rows if r["job"] == CLUSTER]
    scenarios = sorted({r["scenario"] for r in cluster})
    fig, axes = plt.subplots(1, len(scenarios), figsize=(3.2 * len(scenarios), 3.2), sharey=True)
    for ax, sc in zip(axes if len(scenarios) > 1 else [axes], scenarios):
        sub = [r for r in cluster if r["scenario"] == sc]
        xs = range(len(sub))
        ax.bar([x - 0.2 for x in xs], [r["emulation"] or 0 for r in sub], 0.4, label="emulation")
        ax.bar([x + 0.2 for x in xs], [r["twin"] for r in sub], 0.4, label="twin (calibrated)",
               yerr=[[r["twin"] - r["twin_min"] for r in sub], [r["twin_max"] - r["twin"] for r in sub]])
        ax.set_xticks(list(xs), [r["scheduler"] for r in sub], rotation=30)
        ax.set_title(sc)
        ax.set_ylim(0.5, 1.0)
    (axes[0] if len(scenarios) > 1 else axes).set_ylabel("cluster GPU utilisation")
    (axes[0] if len(scenarios) > 1 else axes).legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
