#!/usr/bin/env python3
"""How much the jobs' communication phases overlap in an emulation run and in the twin's replay of it; JSON.

Question: How much do the jobs' communication phases overlap in an emulation run and in the twin's replay of it?
Answer: Less in the emulation: under lossless ECMP on same-model 2.9-3.2 jobs communicate while one does against
the twin's 3.6-3.8, and all at once 17-27% of the time against 59%; the emulation's jobs fall out of step and take
turns, max-min sharing keeps the twin's in step.
Cited in: docs/twin-log.md, Under the lossless profile; docs/findings.md, The twin against the emulation.

    python research/phase_overlap.py RUN_DIR [--models calibrated,ideal] [--step 0.005] [--out FILE.json]

RUN_DIR is an emulation run folder with its workers' logs (``workers/*.jsonl``), as for research/op_timeline.py,
whose readers this uses: a job communicates from the first rank's launch of an operation to the last rank's done.
For each engine (the emulation, then the twin replaying the run's recorded config with each model named):

* ``concurrent_jobs``: per job, how many jobs communicate (itself included) on average while it does;
* ``communicating``: per job, the fraction of the run it spends communicating;
* ``time_with_k_jobs``: the fraction of the run during which k = 0, 1, ... jobs communicate at once.

Jobs whose phases stay in step share the fabric at every phase and all compute at once; jobs whose phases drift
apart take turns. Max-min sharing slows equal jobs equally, which keeps them in step, so a difference here says
whether the twin misses how the emulation's jobs interleave (docs/twin-log.md). Reads only: needs no root.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Mapping, Tuple

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)


import numpy as np

from analysis.timeline import BadInput, Times, emulation_ops, twin_ops

Intervals = Dict[str, List[Tuple[float, float]]]


def job_intervals(ops: Times) -> Intervals:
    """Each job's operations as (first launch, last done) over its ranks."""
    out: Intervals = {}
    for (job, _iteration, _bucket), ranks in ops.items():
        out.setdefault(job, []).append((min(t[0] for t in ranks.values()), max(t[2] for t in ranks.values())))
    return out


def overlap(intervals: Intervals, step_s: float = 0.005) -> dict:
    """The three measures (module docstring), sampled every ``step_s`` from the first launch to the last done."""
    start = min(lo for spans in intervals.values() for lo, _hi in spans)
    end = max(hi for spans in intervals.values() for _lo, hi in spans)
    grid = np.arange(start, end, step_s)
    busy = {}
    for job, spans in intervals.items():
        mask = np.zeros(grid.size, dtype=bool)
        for lo, hi in spans:
            mask |= (grid >= lo) & (grid < hi)
        busy[job] = mask
    count = np.sum([m.astype(int) for m in busy.values()], axis=0)
    return {"concurrent_jobs": {job: float(count[m].mean()) if m.any() else 0.0 for job, m in busy.items()},
            "communicating": {job: float(m.mean()) for job, m in busy.items()},
            "time_with_k_jobs": [float((count == k).mean()) for k in range(len(busy) + 1)]}


def measure(run_dir: str, models: List[str], step_s: float) -> dict:
    config_path = os.path.join(run_dir, "config.json")
    if not os.path.exists(config_path):
        raise BadInput(f"{run_dir}: no config.json (not a run folder)")
    with open(config_path) as f:
        config = json.load(f)
    if config.get("engine", "emulation") != "emulation":
        raise BadInput(f"{run_dir}: a {config['engine']} run; give an emulation run folder")
    engines: Mapping[str, Times] = {"emulation": emulation_ops(run_dir)}
    for model in models:
        engines[f"twin ({model})"] = twin_ops(config, model)[0]
    return {"run": run_dir, "step_s": step_s,
            "engines": {name: overlap(job_intervals(ops), step_s) for name, ops in engines.items()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="an emulation run folder with workers/*.jsonl")
    p.add_argument("--models", default="calibrated,ideal",
                   help="twin models to replay the run with, comma-separated (default: %(default)s)")
    p.add_argument("--step", type=float, default=0.005, help="sampling step in seconds (default: %(default)s)")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    if args.step <= 0:
        sys.stderr.write("phase_overlap.py: --step must be positive\n")
        return 2
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    from twin.model import resolve_model
    for model in models:
        try:
            resolve_model(model)
        except ValueError as exc:
            sys.stderr.write(f"phase_overlap.py: --models: {exc}\n")
            return 2
    try:
        result = measure(args.run_dir, models, args.step)
    except BadInput as exc:
        sys.stderr.write(f"phase_overlap.py: {exc}\n")
        return 2
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
