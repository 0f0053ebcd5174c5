#!/usr/bin/env python3
"""What a scheduler could at best reach on a scenario: each job alone, and all of them within the links' capacity.

    python scripts/bounds.py --scenario workloads/scenarios/headline.yaml [--engine fluid] [-- RUNNER FLAGS]
    sudo python scripts/bounds.py --scenario ... --engine emulation -- --host-rate 5 --fabric-rate 5
    sudo python scripts/bounds.py --scenario ... --engine emulation --schedulers ecmp --keep DIR -- ...

No network scheduler can make a job faster than it runs with the fabric to itself under the best order of its
own operations, so each job's utilisation alone, U_bound_j, bounds what any policy reaches for it, and their
GPU-weighted mean bounds the cluster. The order inside a job matters even alone (sending the first-needed
layers first shortens the stall at the start of the forward pass), so every job runs alone under each of
``--schedulers`` and keeps the best. The
scenario is resolved once as the runner would (placement, time scale, the packets budget); then every job runs
by itself with its hosts given explicitly and the time scale pinned to the full scenario's (under ``auto`` a
single job would get another one). Prints JSON: per job U_bound and its run, and the cluster bound. A result is
worth quoting with its scenario's bound and the fraction of the attainable gain, (U - U_ecmp) / (U_bound -
U_ecmp).

In the fluid engine the jobs run under the ``physical`` model (twin/model.py: the calibrated model's measured
terms, its fitted delays off), the optimistic end of the twin, unless the runner flags name a ``--twin-model``:
a bound must not be lowered by a delay that was fitted on links shared with other jobs. They run in the ring model
the whole scenario takes (``--twin-ring-model auto`` picks by the GPUs simulated together, and one job alone is
fewer), unless the runner flags name one.

Beside it, the capacity-aware bound (analysis/bounds.py): the most the jobs can reach together when every
route's cut (each host's link, each leaf's and pod's uplinks and downlinks) carries at most its rate, with each
job at most its solo bound; it shows whether the room the solo bound leaves is real. Both are in the JSON:
``cluster_u_bound`` (solo) and ``cluster_u_capacity_bound`` with ``capacity`` (each job's share and the cuts that
bind).

The runs go to a temporary folder, or with ``--keep DIR`` to ``DIR/<job>-<scheduler>/`` (results folders like any
run's: research/fit_twin.py fits the twin's per-step latency on emulation runs of one job alone).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile


import yaml

from analysis.bounds import capacity_bound
from analysis.schedulers import folder_label, scheduler_classes
from cli import run as runner
from experiment.results import RunFolder
from workloads.profiles import available_profiles

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py")]


def with_capacity(result: dict, scenario_path: str) -> dict:
    """This command's JSON ``result`` with the capacity-aware bound added (None where a job has no solo bound),
    for the scenario at ``scenario_path`` resolved with the result's runner flags."""
    args = runner.build_parser().parse_args(["--scenario", scenario_path, *result.get("runner_flags", [])])
    plan = runner.validate(args)
    solo = {name: job.get("u_bound") for name, job in result["jobs"].items()}
    capacity = None
    if solo and all(u is not None for u in solo.values()):
        capacity = capacity_bound(plan.layout, plan.jobs, solo)
    return dict(result, capacity=capacity,
                cluster_u_capacity_bound=None if capacity is None else capacity["cluster_u_bound"])


def alone_scenarios(scenario_path: str, runner_flags) -> tuple:
    """(resolved full scenario, {job name: scenario dict of that job alone}) as the runner would resolve it."""
    args = runner.build_parser().parse_args(["--scenario", scenario_path, *runner_flags])
    resolved = runner.validate(args)
    full = resolved.scenario
    with open(scenario_path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    base = os.path.dirname(os.path.abspath(scenario_path))
    shipped = set(available_profiles())
    out = {}
    for job, spec in zip(resolved.jobs, data["jobs"]):
        item = dict(spec, hosts=list(job.hosts), start_offset_s=0.0)
        if item["model"] not in shipped:  # a profile file next to the scenario: keep it reachable from /tmp
            item["model"] = os.path.join(base, item["model"])
        alone = {k: v for k, v in data.items() if k not in ("jobs", "faults", "placement")}
        alone.update(name=f"{full.name}-{job.name}-alone", time_scale=full.scaling.time_scale, jobs=[item])
        out[job.name] = alone
    return resolved, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", required=True, help="scenario file")
    p.add_argument("--engine", choices=["fluid", "emulation"], default="fluid")
    p.add_argument("--schedulers", default="ecmp,bytescheduler,flux-v1",
                   help="policies of the lone runs, comma-separated; a job's bound is its best (default: %(default)s)")
    p.add_argument("--keep", default=None, metavar="DIR", help="keep each run's results folder under DIR")
    p.add_argument("runner_flags", nargs="*", help="fabric flags for testbed/run.py, after --")
    args = p.parse_args(argv)
    try:
        resolved, alone = alone_scenarios(args.scenario, args.runner_flags)
    except runner.BadInput as exc:
        sys.stderr.write(f"bounds.py: {exc}\n")
        return 2
    if args.engine == "emulation" and os.geteuid() != 0:
        sys.stderr.write("bounds.py: --engine emulation must run as root\n")
        return 2
    schedulers = [x for x in args.schedulers.split(",") if x]
    try:
        scheduler_classes(schedulers)
    except ValueError as exc:
        sys.stderr.write(f"bounds.py: --schedulers: {exc}\n")
        return 2
    jobs, gpus, weighted = {}, 0, 0.0
    with tempfile.TemporaryDirectory(prefix="bounds-") as tmp:
        work = os.path.abspath(args.keep) if args.keep else tmp
        os.makedirs(work, exist_ok=True)
        named = any(flag == "--twin-model" or flag.startswith("--twin-model=") for flag in args.runner_flags)
        model_flags = ["--twin-model", "physical"] if args.engine == "fluid" and not named else []
        ring_named = any(f == "--twin-ring-model" or f.startswith("--twin-ring-model=") for f in args.runner_flags)
        if args.engine == "fluid" and not ring_named:  # the lone runs in the whole scenario's ring model
            import twin
            model_flags += ["--twin-ring-model", twin.ring_model_for(resolved.jobs)]
        for spec in resolved.jobs:
            path = os.path.join(work, f"{spec.name}.yaml")
            with open(path, "w", encoding="utf-8") as f:
                yaml.safe_dump(alone[spec.name], f)
            by_scheduler, errors = {}, []
            for scheduler in schedulers:
                out = os.path.join(work, f"{spec.name}-{folder_label(scheduler)}")
                cmd = RUN + ["--engine", args.engine, "--scheduler", scheduler, "--scenario", path,
                             "--out", out, "-q", *model_flags, *args.runner_flags]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode == 2:
                    sys.stderr.write(f"bounds.py: {(r.stderr.strip().splitlines() or ['bad input'])[-1]}\n")
                    return 2
                summary = RunFolder(out).summary()
                job = summary.job(spec.name) if summary is not None else None
                util = job.gpu_utilization if job is not None else None
                by_scheduler[scheduler] = util
                if util is None:
                    errors.append(f"{scheduler}: " + (r.stderr.strip().splitlines() or ["no summary"])[-1])
                sys.stderr.write(f"{spec.name} alone ({scheduler}): {util}\n")
            utils = [u for u in by_scheduler.values() if u is not None]
            best = max(utils) if len(utils) == len(schedulers) else None
            jobs[spec.name] = {"u_bound": best, "by_scheduler": by_scheduler, "workers": spec.workers}
            if best is None:
                jobs[spec.name]["error"] = "; ".join(errors)
            else:
                gpus += spec.workers
                weighted += spec.workers * best
    complete = all(j["u_bound"] is not None for j in jobs.values())
    result = {"scenario": args.scenario, "engine": args.engine, "runner_flags": args.runner_flags,
              "time_scale": resolved.scenario.scaling.time_scale, "jobs": jobs,
              "cluster_u_bound": weighted / gpus if complete and gpus else None}
    print(json.dumps(with_capacity(result, args.scenario), indent=2))
    return 0 if complete else 1
