"""GPU idle time reconstructed from the controller's flow counters alone, and its error against the truth.

An operator sees only the network. The controller polls one byte counter per data flow (the per-flow ingress
rule of rank r's flow for bucket b) every ``poll_interval_s``. From those series and the jobs' profiles (which
the scheduler also has), but never from the workers' logs, we estimate per job:

* operation boundaries: each operation on bucket b moves V_b bytes through rank r's flow (the same every
  iteration; estimated as the final counter divided by the number of operations). Operation k of the flow
  starts when the cumulative counter first exceeds k x V_b and ends when it reaches (k+1) x V_b; crossing times
  are interpolated linearly between polls, and a start is placed where the first interval's bytes would begin at
  the flow's typical rate (so a start is not biased towards the earlier poll);
* iteration time: bucket 0 is launched at the same point of every iteration (right after the backward pass of
  the last layers), so the spacing of bucket 0's operation starts is the iteration time;
* GPU idle per iteration = iteration time - C, where C is the profile's compute time per iteration (forward +
  backward, scaled); utilisation = C / iteration time;
* communication time per iteration: from bucket 0's start to the end of the iteration's last operation.

Errors of single boundaries (up to one polling interval) cancel in the mean iteration time (a telescoping sum),
which is why the mean idle time is accurate even at coarse polling; the per-iteration error is also reported.
``analyse_run`` also re-runs the estimate on the same counters thinned to 2, 5 and 10 x the polling interval to
show how the error grows with it.
"""
from __future__ import annotations

import csv
import json
import os
import statistics
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

from workloads.model import JobSpec

Series = List[Tuple[float, int]]


def load_flow_series(path: str) -> Dict[Tuple[int, int, int], Series]:
    """(job, bucket, rank) -> [(time, cumulative bytes)] of the forward direction of each data flow."""
    series: Dict[Tuple[int, int, int], Series] = defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["reverse"] != "0":
                continue
            series[(int(row["job"]), int(row["bucket"]), int(row["rank"]))].append(
                (float(row["time"]), int(row["bytes"])))
    for pts in series.values():
        pts.sort()
    return series


def thin(series: Series, factor: int) -> Series:
    """Every ``factor``-th sample: the same counters as if polled ``factor`` times less often."""
    return series[::factor] if factor > 1 else series


def _crossing(series: Series, level: float) -> Optional[Tuple[int, float]]:
    """Index of the first sample with counter > level, and the interpolated crossing time."""
    for i, (t, b) in enumerate(series):
        if b > level:
            if i == 0:
                return i, t
            t0, b0 = series[i - 1]
            return i, t0 + (t - t0) * (level - b0) / max(b - b0, 1)
    return None


def operation_intervals(series: Series, operations: int) -> List[Tuple[float, float]]:
    """(start, end) of each of ``operations`` equal-volume operations seen in one flow's counter series."""
    if not series or operations < 1 or series[-1][1] <= 0:
        return []
    volume = series[-1][1] / operations
    # The flow's typical sending rate: median of the non-idle polling intervals.
    rates = [(b1 - b0) / (t1 - t0) for (t0, b0), (t1, b1) in zip(series, series[1:]) if b1 > b0 and t1 > t0]
    rate = statistics.median(rates) if rates else None
    out = []
    for k in range(operations):
        start = _crossing(series, k * volume + 0.001 * volume)
        end = _crossing(series, (k + 1) * volume - 0.001 * volume)
        if start is None or end is None:
            break
        i, t_start = start
        if i > 0 and rate:
            # Place the start so that the bytes counted in the first busy interval were sent at the typical rate.
            t_prev, b_prev = series[i - 1]
            t_i, b_i = series[i]
            sent = b_i - max(b_prev, k * volume)
            t_start = max(t_prev, t_i - sent / rate)
        out.append((t_start, end[1]))
    return out


def reconstruct_job(job: JobSpec, series: Dict[Tuple[int, int, int], Series], thin_factor: int = 1) -> dict:
    """Counter-only estimate of one job's iteration time, idle time and utilisation."""
    compute = job.model.compute_s
    periods, comm = [], []
    starts_by_rank = {}
    for rank in range(job.workers):
        per_bucket = {}
        for b in range(len(job.model.buckets)):
            s = thin(series.get((job.index, b, rank), []), thin_factor)
            per_bucket[b] = operation_intervals(s, job.iterations)
        first = per_bucket.get(0, [])
        starts = [s for s, _ in first]
        starts_by_rank[rank] = starts
        periods += [b - a for a, b in zip(starts, starts[1:])]
        for k, start in enumerate(starts):
            ends = [iv[k][1] for iv in per_bucket.values() if len(iv) > k]
            if ends:
                comm.append(max(ends) - start)
    if not periods:
        return {"error": "no complete operations in the flow counters"}
    # Mean period per rank from its first and last start: the interior boundary errors cancel.
    mean_periods = [(st[-1] - st[0]) / (len(st) - 1) for st in starts_by_rank.values() if len(st) > 1]
    iteration = statistics.mean(mean_periods)
    idle = max(iteration - compute, 0.0)
    return {
        "iteration_time_mean_s": iteration,
        "iteration_time_p50_s": statistics.median(periods),
        "idle_per_iteration_s": idle,
        "gpu_utilization": min(compute / iteration, 1.0) if iteration > 0 else None,
        "comm_time_per_iteration_s": statistics.mean(comm) if comm else None,
        "compute_per_iteration_s": compute,
        "iterations_seen": 1 + min(len(st) - 1 for st in starts_by_rank.values()),
    }


def true_idle_per_iteration(job_summary: dict, compute_s: float) -> Optional[float]:
    """The workers' own idle time per iteration (ground truth), from workloads/truth.py's summary."""
    if job_summary.get("idle_per_iteration_s") is not None:
        return job_summary["idle_per_iteration_s"]
    mean = job_summary.get("iteration_time_mean_s")
    return None if mean is None else max(mean - compute_s, 0.0)


def analyse_run(out: str, summary: dict, thin_factors: Sequence[int] = (1, 2, 5, 10)) -> dict:
    """Reconstruct every job of a finished run and compare with the workers' truth.

    Adds ``gpu_utilization_reconstructed`` and ``reconstruction`` to each job of ``summary['jobs']`` and returns
    ``{"reconstruction": {...}}`` with the error per job, overall, and versus the polling interval."""
    path = os.path.join(out, "flow_stats.csv")
    if not os.path.exists(path):
        return {"reconstruction": {"error": "no flow_stats.csv"}}
    with open(os.path.join(out, "controller.json")) as f:
        jobs = [JobSpec.from_dict(j) for j in json.load(f)["jobs"]]
    series = load_flow_series(path)
    poll = summary.get("config", {}).get("poll_interval_s", 0.1)
    by_name = {j["name"]: j for j in summary.get("jobs", [])}
    result = {"method": "bucket-0 operation starts from per-flow byte counters; idle = period - profile compute",
              "poll_interval_s": poll, "by_poll_interval": []}
    for factor in thin_factors:
        errors = []
        per_job = {}
        for job in jobs:
            rec = reconstruct_job(job, series, factor)
            truth = by_name.get(job.name, {})
            true_idle = true_idle_per_iteration(truth, job.model.compute_s)
            true_iter = truth.get("iteration_time_mean_s")
            entry = dict(rec)
            if "error" not in rec and true_idle is not None and true_iter:
                entry["true_idle_per_iteration_s"] = true_idle
                entry["idle_error_s"] = rec["idle_per_iteration_s"] - true_idle
                entry["idle_abs_error_frac_of_iteration"] = abs(entry["idle_error_s"]) / true_iter
                errors.append(entry["idle_abs_error_frac_of_iteration"])
            per_job[job.name] = entry
        row = {"poll_interval_s": poll * factor,
               "idle_mae_frac_of_iteration": statistics.mean(errors) if errors else None,
               "idle_max_err_frac_of_iteration": max(errors) if errors else None, "jobs": per_job}
        result["by_poll_interval"].append(row)
        if factor == 1:
            result["jobs"] = per_job
            result["idle_mae_frac_of_iteration"] = row["idle_mae_frac_of_iteration"]
            for name, entry in per_job.items():
                if name in by_name:
                    by_name[name]["gpu_utilization_reconstructed"] = entry.get("gpu_utilization")
                    by_name[name]["idle_per_iteration_reconstructed_s"] = entry.get("idle_per_iteration_s")
    gpus = sum(j.workers for j in jobs)
    recs = [(j.workers, by_name.get(j.name, {}).get("gpu_utilization_reconstructed")) for j in jobs]
    if gpus and all(u is not None for _, u in recs):
        summary.setdefault("cluster", {})["gpu_utilization_reconstructed"] = sum(w * u for w, u in recs) / gpus
    return {"reconstruction": result}
