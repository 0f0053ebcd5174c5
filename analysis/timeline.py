"""Operation timelines: every rank's launch, last byte and done of every operation (job, iteration, bucket), from
an emulation run's worker logs or from the twin's replay of the same run (research/op_timeline.py,
research/phase_overlap.py)."""
from __future__ import annotations

import glob
import json
import math
import os
from typing import Dict, Mapping, Tuple

OpKey = Tuple[str, int, int]                  # job name, iteration, bucket

Times = Dict[OpKey, Dict[int, Tuple[float, float, float]]]   # -> rank -> (launch, last_byte, done)


class BadInput(Exception):
    pass


def emulation_ops(run_dir: str) -> Times:
    """Every rank's (launch, last byte, done) of every operation, from the workers' logs of a run."""
    ops: Times = {}
    paths = sorted(glob.glob(os.path.join(run_dir, "workers", "*.jsonl")))
    if not paths:
        raise BadInput(f"{run_dir}: no workers/*.jsonl (an emulation run folder keeps its workers' logs)")
    for path in paths:
        job, rank = None, None
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("type") == "header":
                    job, rank = rec["job"], int(rec["rank"])
                elif rec.get("type") == "op" and job is not None:
                    ops.setdefault((job, int(rec["iteration"]), int(rec["bucket"])), {})[rank] = (
                        float(rec["launch"]), float(rec["last_byte"]), float(rec["done"]))
    return ops


def twin_ops(config: Mapping, model: str = "calibrated") -> Tuple[Times, Dict[str, float]]:
    """The twin's replay of a recorded run: every rank's (launch, nan, done), and each job's GPU utilisation."""
    import twin
    jobs, result = twin.replay_recorded(config, model, trace_ops=True)
    names = {j.index: j.name for j in jobs}
    ops: Times = {}
    for (job, iteration, bucket), ranks in result.op_trace.items():
        ops[(names[job], iteration, bucket)] = {r: (t[0], math.nan, t[1]) for r, t in ranks.items()}
    utils = {j["name"]: j["gpu_utilization"] for j in twin.summarize(jobs, result)["jobs"]}
    return ops, utils
