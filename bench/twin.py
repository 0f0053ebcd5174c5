#!/usr/bin/env python3
"""Scaling benchmark of the flow-level twin: wall time and peak memory per cluster size and scheduler.

    python bench/twin.py [--sizes 16,64,256,1024,4096] [--schedulers ecmp,crux,flux] [--figure FILE]
                                 [--ring-model auto|steps|pipelined] [--overflow-pieces N]
                                 [--twin-set TERM=VALUE ...]

Each run is its own process (so that its peak resident memory is its own), on one core, with the calibrated
model and ``ring_model="auto"`` (every ring step simulated up to 128 GPUs, whole rings above; ``--ring-model``
forces one, to compare the two on one size; ``--overflow-pieces`` the number of pieces in which a pipelined
ring pays its overflow timeouts, ``twin.rings.OVERFLOW_PIECES``; ``--twin-set`` a model term over the calibrated
model's, as testbed/run.py's). Sizes and their scenarios:

* 16: the headline scenario on the shipped 2 x 4 x 4 leaf-spine;
* 64, 256: G/16 tenants of 16 workers (the four shipped models in turn), random placement, on G/32 leaves of 32
  hosts (at least 2 leaves) and one spine per 128 GPUs (at least 2);
* 1024: workloads/scenarios/scale-1024.yaml on 8 spines, 32 leaves of 32 hosts;
* 4096: 64 tenants of 64 workers on 16 spines, 64 leaves of 64 hosts.

Target (docs/twin-log.md, Scale): 1,024 GPUs in at most 60 s for each of ecmp, crux and flux. Prints JSON: one
record per run (wall_s of the whole run including set-up, sim_s simulated, peak_rss_mb, cluster utilisation) and, with
``--figure``, a log-log plot of wall time against GPUs.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)


MODELS = ("resnet50", "vgg16", "bert_large", "gpt2_xl")
ITERATIONS = {"resnet50": 8, "vgg16": 6, "bert_large": 5, "gpt2_xl": 2}


def setup(gpus: int):
    """(FabricSpec, scenario file or dict) of one size (see the module docstring)."""
    from core.fabric import FabricSpec
    if gpus == 16:
        return FabricSpec(2, 4, 4, 10.0, 10.0), os.path.join(PROJECT_DIR, "workloads", "scenarios", "headline.yaml")
    if gpus == 1024:
        return FabricSpec(8, 32, 32, 10.0, 10.0), os.path.join(PROJECT_DIR, "workloads", "scenarios", "scale-1024.yaml")
    if gpus == 4096:
        spec, ring = FabricSpec(16, 64, 64, 10.0, 10.0), 64
    else:
        leaves = max(2, gpus // 32)
        spec, ring = FabricSpec(max(2, gpus // 128), leaves, gpus // leaves, 10.0, 10.0), 16
    jobs = [{"name": f"t{i:02d}", "model": MODELS[i % 4], "workers": ring, "iterations": ITERATIONS[MODELS[i % 4]]}
            for i in range(gpus // ring)]
    return spec, {"name": f"bench-{gpus}", "max_buckets": 4, "placement": {"policy": "random", "seed": 1},
                  "jobs": jobs}


def one(gpus: int, scheduler: str, ring_model: str = "auto", overflow_pieces: int | None = None,
        model_overrides: tuple = ()) -> dict:
    """Run one size under one scheduler in this process."""
    import twin
    import twin.engine
    if overflow_pieces is not None:
        twin.rings.OVERFLOW_PIECES = overflow_pieces
    from core.fabric import FabricLayout
    from workloads.scenario import scenario_from_dict
    t0 = time.perf_counter()
    spec, scenario = setup(gpus)
    if isinstance(scenario, dict):
        spec.validate(max_hosts=twin.MAX_HOSTS)
        layout = FabricLayout.from_spec(spec)
        parsed = scenario_from_dict(scenario, source=scenario["name"])
        jobs = parsed.resolve(layout.host_tuples(), spec.host_rate_mbps).jobs
    else:
        resolved = twin.prepare(scenario, spec)
        layout, jobs = resolved.layout, resolved.jobs
    model = twin.parse_model_overrides(model_overrides)
    r = twin.simulate(layout, jobs, scheduler, {}, model, "strict", 0.01, 1, ring_model=ring_model)
    wall = time.perf_counter() - t0
    return {"gpus": gpus, "scheduler": scheduler, "jobs": len(jobs), "ring_model": r.ring_model,
            "overflow_pieces": twin.rings.OVERFLOW_PIECES, "model_overrides": list(model_overrides),
            "wall_s": round(wall, 3), "sim_wall_s": round(r.wall_s, 3), "sim_s": round(r.sim_time_s, 3),
            "completed": r.completed, "recomputes": r.recomputes, "decide_calls": r.decide_calls,
            "cluster_gpu_utilization": twin.summarize(jobs, r)["cluster"]["gpu_utilization"],
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="16,64,256,1024,4096")
    p.add_argument("--schedulers", default="ecmp,crux,flux")
    p.add_argument("--figure", default=None, help="write a PNG of wall time against GPUs")
    p.add_argument("--ring-model", default="auto", choices=("auto", "steps", "pipelined"))
    p.add_argument("--overflow-pieces", type=int, default=None, metavar="N",
                   help="pieces in which a pipelined ring pays its overflow timeouts (default: the engine's 8)")
    p.add_argument("--twin-set", action="append", default=[], metavar="TERM=VALUE",
                   help="repeatable: one model term over the calibrated model's (twin/model.py), e.g. "
                        "--twin-set queue_backlog=0")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # "GPUS:SCHEDULER": run in this process
    args = p.parse_args(argv)
    if args.overflow_pieces is not None and args.overflow_pieces < 1:
        p.error("--overflow-pieces must be at least 1")
    from twin.model import parse_model_overrides
    try:
        parse_model_overrides(args.twin_set)
    except ValueError as e:
        p.error(str(e))
    if args.one:
        gpus, scheduler = args.one.split(":")
        print(json.dumps(one(int(gpus), scheduler, args.ring_model, args.overflow_pieces, tuple(args.twin_set))))
        return 0
    records = []
    for gpus in (int(s) for s in args.sizes.split(",")):
        for scheduler in args.schedulers.split(","):
            command = [sys.executable, os.path.abspath(__file__), "--one", f"{gpus}:{scheduler}",
                       "--ring-model", args.ring_model]
            if args.overflow_pieces is not None:
                command += ["--overflow-pieces", str(args.overflow_pieces)]
            for item in args.twin_set:
                command += ["--twin-set", item]
            out = subprocess.run(command, capture_output=True, text=True)
            if out.returncode != 0:
                records.append({"gpus": gpus, "scheduler": scheduler, "error": out.stderr.strip()[-500:]})
            else:
                records.append(json.loads(out.stdout.strip().splitlines()[-1]))
            sys.stderr.write(json.dumps(records[-1]) + "\n")
    target = [r for r in records if r.get("gpus") == 1024]
    result = {"command": " ".join(["bench/twin.py"] + (argv if argv is not None else sys.argv[1:])),
              "runs": records,
              "target_1024_within_60s": all(r.get("wall_s", 1e9) <= 60 for r in target) if target else None}
    if args.figure:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        for scheduler in args.schedulers.split(","):
            pts = [(r["gpus"], r["wall_s"]) for r in records if r.get("scheduler") == scheduler and "wall_s" in r]
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=scheduler)
        ax.axhline(60, color="grey", ls="--", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs")
        ax.set_ylabel("wall time (s, one core)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.figure, dpi=120)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
