"""Ground truth of a run: what the workers' own logs say about iteration times and GPU utilisation.

Input: the JSON Lines logs written by ``workloads.worker`` (schema in its module docstring), one per rank.
Definitions (the same for every job and scheduler, so results compare):

* a rank's *run span* is from the start of its first iteration to the end of its last; *wall* is its length;
* *busy* is the sum of the rank's compute intervals (clipped to the span), *idle* = wall - busy; *wait* is the
  part of idle the worker attributed to waiting for a named all-reduce (the rest is scheduling noise);
* a job's ``gpu_utilization`` is the mean over its ranks of busy / wall;
* the time of iteration k is the **maximum over ranks** of that rank's duration of iteration k: the ring
  couples the ranks, so the job advances at the pace of its slowest worker (the rank mean is reported too);
  mean / p50 / p99 are over iterations, skipping the first ``warmup`` ones (percentiles interpolate linearly);
* an operation's communication time is from the first rank's launch to the last rank's done;
* ``cluster_utilization`` weights each job's utilisation by its number of GPUs (workers).

Usage: ``python -m workloads.truth LOG [LOG ...] [--warmup K]`` prints the job summary as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from core.stats import percentile


@dataclass
class WorkerLog:
    """The records of one worker's log, by type."""

    path: str
    header: dict = field(default_factory=dict)
    computes: List[dict] = field(default_factory=list)
    ops: List[dict] = field(default_factory=list)
    waits: List[dict] = field(default_factory=list)
    iterations: List[dict] = field(default_factory=list)
    summary: Optional[dict] = None
    errors: List[dict] = field(default_factory=list)
    bad_lines: int = 0

    @property
    def rank(self) -> int:
        return int(self.header.get("rank", -1))


_KINDS = {"compute": "computes", "op": "ops", "wait": "waits", "iteration": "iterations", "error": "errors"}


def read_log(path: str) -> WorkerLog:
    """Parse one worker log. A truncated last line (a killed worker) is counted in ``bad_lines``, not fatal."""
    log = WorkerLog(path=str(path))
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                log.bad_lines += 1
                continue
            kind = rec.get("type")
            if kind == "header":
                log.header = rec
            elif kind == "summary":
                log.summary = rec
            elif kind in _KINDS:
                getattr(log, _KINDS[kind]).append(rec)
    return log


def _percentile(values: Sequence[float], q: float) -> float:
    """core.stats.percentile, NaN when there is nothing (the summaries' convention for a missing figure)."""
    p = percentile(values, q)
    return float("nan") if p is None else float(p)


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def summarize_rank(log: WorkerLog) -> dict:
    """Busy, idle and wait time of one rank over its run span."""
    its = sorted(log.iterations, key=lambda r: r["iteration"])
    if not its:
        return {"rank": log.rank, "iterations": 0, "start": float("nan"), "end": float("nan"), "wall_s": 0.0,
                "busy_s": 0.0, "idle_s": 0.0, "wait_s": 0.0, "gpu_utilization": float("nan"), "bytes_sent": 0}
    start, end = its[0]["start"], its[-1]["end"]

    def clipped(records: Iterable[dict]) -> float:
        return sum(max(0.0, min(r["end"], end) - max(r["start"], start)) for r in records)

    wall = end - start
    busy = clipped(log.computes)
    return {
        "rank": log.rank, "iterations": len(its), "start": start, "end": end, "wall_s": wall, "busy_s": busy,
        "idle_s": wall - busy, "wait_s": clipped(log.waits),
        "gpu_utilization": busy / wall if wall > 0 else float("nan"),
        "bytes_sent": sum(int(o.get("bytes_sent", 0)) for o in log.ops),
    }


def _durations_by_iteration(logs: Sequence[WorkerLog]) -> Dict[int, List[float]]:
    """Iteration k -> its duration on every rank, for the iterations every logged rank completed."""
    per_iter: Dict[int, List[float]] = defaultdict(list)
    for lg in logs:
        for rec in lg.iterations:
            per_iter[int(rec["iteration"])].append(rec["end"] - rec["start"])
    return {k: v for k, v in per_iter.items() if len(v) == len(logs)}


def iteration_durations(logs: Sequence[WorkerLog]) -> List[float]:
    """A job's iteration times: per iteration that all its logged ranks completed, the slowest rank's duration
    (the job moves at the pace of its slowest GPU), in iteration order."""
    per_iter = _durations_by_iteration(logs)
    return [max(per_iter[k]) for k in sorted(per_iter)]


def summarize_job(log_paths: Sequence[str], warmup: int = 0) -> dict:
    """The job summary from the logs of its ranks (see the module docstring for the definitions)."""
    logs = sorted((read_log(p) for p in log_paths), key=lambda lg: lg.rank)
    if not logs:
        raise ValueError("no logs")
    header = logs[0].header
    ranks = [summarize_rank(lg) for lg in logs]

    per_iter = _durations_by_iteration(logs)
    complete = sorted(per_iter)
    kept = [k for k in complete if k >= warmup]
    it_max = [max(per_iter[k]) for k in kept]
    it_mean = [float(np.mean(per_iter[k])) for k in kept]

    # Operations: first launch to last done over ranks.
    ops: Dict[tuple, dict] = {}
    for lg in logs:
        for o in lg.ops:
            key = (int(o["iteration"]), int(o["bucket"]))
            agg = ops.setdefault(key, {"iteration": key[0], "bucket": key[1], "nbytes": o.get("nbytes", 0),
                                       "launch": o["launch"], "done": o["done"], "ranks": 0, "bytes_sent": 0})
            agg["launch"] = min(agg["launch"], o["launch"])
            agg["done"] = max(agg["done"], o["done"])
            agg["ranks"] += 1
            agg["bytes_sent"] += int(o.get("bytes_sent", 0))
    op_list = []
    for key in sorted(ops):
        agg = ops[key]
        agg["duration_s"] = agg["done"] - agg["launch"]
        op_list.append(agg)
    full_ops = [o for o in op_list if o["ranks"] == len(logs)]
    op_times = [o["duration_s"] for o in full_ops]
    by_bucket: Dict[int, List[float]] = defaultdict(list)
    for o in full_ops:
        by_bucket[o["bucket"]].append(o["duration_s"])

    failures = sum(1 for lg in logs for o in lg.ops if o.get("ok") is False)
    utils = [r["gpu_utilization"] for r in ranks if r["wall_s"] > 0]
    workers = int(header.get("workers", len(logs)))
    return {
        "job": header.get("job"), "job_index": header.get("job_index"), "model": header.get("model"),
        "semantics": header.get("semantics"), "workers": workers, "ranks_logged": len(logs),
        "complete": len(logs) == workers and all(lg.summary is not None for lg in logs),
        "iterations": len(complete), "warmup": warmup,
        "start": min(r["start"] for r in ranks), "end": max(r["end"] for r in ranks),
        "iteration_times_s": it_max,
        "iteration_time_mean_s": _mean(it_max), "iteration_time_p50_s": _percentile(it_max, 50),
        "iteration_time_p99_s": _percentile(it_max, 99), "iteration_time_rank_mean_s": _mean(it_mean),
        "wall_s": _mean([r["wall_s"] for r in ranks]), "busy_s": _mean([r["busy_s"] for r in ranks]),
        "idle_s": _mean([r["idle_s"] for r in ranks]), "wait_s": _mean([r["wait_s"] for r in ranks]),
        "gpu_busy_seconds": sum(r["busy_s"] for r in ranks),
        "gpu_utilization": _mean(utils),
        "op_time_mean_s": _mean(op_times), "op_time_p50_s": _percentile(op_times, 50),
        "op_time_p99_s": _percentile(op_times, 99),
        "op_time_by_bucket_s": {b: _mean(v) for b, v in sorted(by_bucket.items())},
        "ops": op_list,
        "bytes_sent": sum(r["bytes_sent"] for r in ranks),
        "check_failures": failures,
        # Operation events the workers could not hand to the controller (its socket queue was full): a scheduler
        # that reacts to events decided without them.
        "events_sent": sum(int((lg.summary or {}).get("events_sent", 0)) for lg in logs),
        "events_dropped": sum(int((lg.summary or {}).get("events_dropped", 0)) for lg in logs),
        "errors": [e.get("message", "") for lg in logs for e in lg.errors],
        "per_rank": ranks,
    }


def cluster_utilization(job_summaries: Sequence[dict]) -> float:
    """GPU utilisation of the cluster: the jobs' utilisations weighted by their numbers of GPUs (workers)."""
    pairs = [(s["gpu_utilization"], s["workers"]) for s in job_summaries
             if s.get("workers") and not np.isnan(s["gpu_utilization"])]
    total = sum(w for _, w in pairs)
    return sum(u * w for u, w in pairs) / total if total else float("nan")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description="Summarise one job's worker logs.")
    p.add_argument("logs", nargs="+")
    p.add_argument("--warmup", type=int, default=0, help="iterations to leave out of iteration-time statistics")
    p.add_argument("--with-ops", action="store_true", help="include the per-operation list")
    args = p.parse_args(argv)
    summary = summarize_job(args.logs, warmup=args.warmup)
    if not args.with_ops:
        summary.pop("ops")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
