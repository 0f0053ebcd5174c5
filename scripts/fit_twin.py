#!/usr/bin/env python3
"""Fit the twin's artefact terms on finished ECMP emulation runs, and write twin/calibrated.json.

    python scripts/fit_twin.py results/headline/runs [more folders ...] [--out twin/calibrated.json]

Only ECMP runs are used (every flow in class 0 on a hashed path): whatever the fit absorbs is then about TCP and
the emulator, not about a policy, and the twin's agreement on the other policies stays a prediction. Each run
folder's config.json (or the copy in summary.json) gives the scenario, the fabric and the seed; the twin replays
the run on the switches' own ECMP paths (Open vSwitch's hash, twin/network.py) over the grid below, and the
terms minimising the squared error of the per-job GPU utilisation (workers' truth) are kept. ``goodput``
(0.956, measured by scripts/bench_fabric.py) and ``rto_s`` (Linux's minimum retransmission timeout, 0.2 s) are
physical and not fitted; ``step_latency_s`` and ``queue_delay_s`` are. Prints the fit as JSON.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PROJECT_DIR not in sys.path:
    sys.path.insert(0, PROJECT_DIR)

from testbed.bootstrap import ensure_env  # noqa: E402  (standard library only)

if __name__ == "__main__":
    # Set up what is missing and continue in .venv; the twin needs no fabric (crossval's --run-emulation does).
    ensure_env("fit_twin.py", needs_fabric=False)

from testbed.results import RunFolder  # noqa: E402
import twin  # noqa: E402
from twin.model import CALIBRATED_FILE, DEFAULT_CALIBRATION, IDEAL  # noqa: E402

STEP_LATENCY_S = (0.0, 0.002, 0.004, 0.006, 0.008)
QUEUE_DELAY_S = (0.0, 0.01, 0.02, 0.03, 0.045)


def ecmp_runs(folders):
    """(run folder, summary) of every finished ECMP emulation run under the given folders."""
    out = []
    for top in folders:
        for root, _dirs, files in os.walk(top):
            if "summary.json" not in files:
                continue
            summary = RunFolder(root).summary()
            if summary and summary.ok and summary.engine == "emulation" and summary.config.get("scheduler") == "ecmp":
                out.append((RunFolder(root), summary))
    return sorted(out, key=lambda x: x[0].path)


def replay(summary, params, ring_model="auto"):
    """The twin's per-job utilisation for one recorded run under ``params``."""
    cfg = summary.config
    resolved = twin.prepare_recorded(cfg)
    jobs = resolved["jobs"]
    r = twin.simulate(resolved["layout"], jobs, "ecmp", {}, params, cfg.get("class_mode", "strict"),
                      float(cfg.get("class_floor", 0.01)), int(summary.seed or 1), ring_model=ring_model)
    return {j["name"]: j["gpu_utilization"] for j in twin.summarize(jobs, r)["jobs"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="folders holding finished emulation runs (searched recursively)")
    p.add_argument("--out", default=CALIBRATED_FILE, help="where to write the fitted terms")
    p.add_argument("--ring-model", default="auto", choices=("auto", "steps", "pipelined"))
    args = p.parse_args(argv)
    runs = ecmp_runs(args.folders)
    if not runs:
        sys.stderr.write("fit_twin.py: no finished ECMP emulation runs found\n")
        return 2
    truth = [{j.name: j.gpu_utilization for j in s.jobs} for _f, s in runs]
    fixed = {"goodput": DEFAULT_CALIBRATION["goodput"], "rto_s": DEFAULT_CALIBRATION["rto_s"]}
    t0 = time.time()
    grid = []
    for step, queue in itertools.product(STEP_LATENCY_S, QUEUE_DELAY_S):
        params = IDEAL.with_(step_latency_s=step, queue_delay_s=queue, **fixed)
        err, n = 0.0, 0
        for (_f, s), true in zip(runs, truth):
            model = replay(s, params, args.ring_model)
            for name, u in true.items():
                err += (model[name] - u) ** 2
                n += 1
        grid.append({"step_latency_s": step, "queue_delay_s": queue, "rmse": (err / n) ** 0.5})
    best = min(grid, key=lambda g: g["rmse"])
    fit = {"params": dict(fixed, step_latency_s=best["step_latency_s"], queue_delay_s=best["queue_delay_s"]),
           "rmse_per_job": best["rmse"], "runs": [os.path.relpath(f.path, PROJECT_DIR) for f, _s in runs],
           "ring_model": args.ring_model,
           "grid": grid, "fit_wall_s": time.time() - t0,
           "command": " ".join(["scripts/fit_twin.py"] + (argv if argv is not None else sys.argv[1:]))}
    with open(args.out, "w") as f:
        json.dump(fit, f, indent=2)
    print(json.dumps({k: v for k, v in fit.items() if k != "grid"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
