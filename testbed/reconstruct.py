"""GPU idle time reconstructed from the controller's flow counters alone, and its error against the truth.

An operator sees only the network. The controller polls one byte counter per data flow (the per-flow ingress
rule of rank r's flow for bucket b) every ``poll_interval_s``. From those series and the jobs' profiles (which
the scheduler also has), but never from the workers' logs, we estimate per job:

* operation boundaries: a flow is idle between its operations (the next operation on a bucket cannot start
  before the next iteration's backward pass), so runs of polls in which its counter grew are its operations.
  When the runs do not number the iterations (idle gaps shorter than the polling interval), the counter is cut
  by volume instead: each operation moves the same V_b bytes, so operation k spans the crossings of k x V_b and
  (k+1) x V_b (interpolated between polls). A start is placed where the first busy interval's bytes would
  begin at the flow's typical rate, so it is not biased towards the earlier poll;
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

from core.model import JobSpec

Series = List[Tuple[float, int]]
HANDSHAKE_BYTES = 1024  # SYN, SYN-ACK's ACK and the ring's 8-byte hello, with headers, stay below this


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


def _bursts(series: Series, noise_bytes: int = 200) -> List[Tuple[int, int]]:
    """(first, last) sample indices of each run of polls in which the counter grew, runs split by idle polls.

    Increments below ``noise_bytes`` (a lone ACK or FIN) do not start a burst."""
    bursts, first = [], None
    for i in range(1, len(series)):
        grew = series[i][1] - series[i - 1][1] > (0 if first is not None else noise_bytes)
        if grew and first is None:
            first = i
        elif not grew and first is not None:
            bursts.append((first, i - 1))
            first = None
    if first is not None:
        bursts.append((first, len(series) - 1))
    return bursts


def operation_intervals(series: Series, operations: int, min_spacing_s: float = 0.0) -> List[Tuple[float, float]]:
    """(start, end) of each of ``operations`` equal-volume operations seen in one flow's counter series."""
    if not series or operations < 1 or series[-1][1] <= 0:
        return []
    # Connection set-up (SYN, handshake) happens long before the first operation and is a few hundred bytes:
    # count from the last sample still within that, or the first operation would seem to start at connect time.
    rough = series[-1][1] / operations
    base_limit = min(HANDSHAKE_BYTES, 0.25 * rough)
    base_index = max((i for i, (_, b) in enumerate(series) if b <= base_limit), default=None)
    base = series[base_index][1] if base_index is not None else 0
    series = series[base_index:] if base_index is not None else series
    volume = (series[-1][1] - base) / operations
    # Typical sending rate: median over polling intervals in which the flow moved bytes.
    rates = [(b1 - b0) / (t1 - t0) for (t0, b0), (t1, b1) in zip(series, series[1:]) if b1 > b0 and t1 > t0]
    rate = statistics.median(rates) if rates else None
    bursts = []
    for first, last in _bursts(series):
        # Operations of one flow start at least an iteration (>= the compute time) apart: a burst that starts
        # sooner is the same operation, paused for longer than a polling interval.
        if bursts and series[first][0] - series[bursts[-1][0]][0] < 0.5 * min_spacing_s:
            bursts[-1] = (bursts[-1][0], last)
        else:
            bursts.append((first, last))
    if len(bursts) == operations:
        out = []
        for first, last in bursts:
            t_prev, b_prev = series[first - 1]
            t_i, b_i = series[first]
            start = max(t_prev, t_i - (b_i - b_prev) / rate) if rate else t_prev
            out.append((start, series[last][0]))
        return out
    out = []
    for k in range(operations):
        start = _crossing(series, base + k * volume + 0.001 * volume)
        end = _crossing(series, base + (k + 1) * volume - 0.001 * volume)
        if start is None or end is None:
            break
        i, t_start = start
        if i > 0 and rate:
            # Place the start so that the bytes counted in the first busy interval were sent at the typical rate.
            t_prev, b_prev = series[i - 1]
            t_i, b_i = series[i]
            sent = b_i - max(b_prev, base + k * volume)
            t_start = max(t_prev, t_i - sent / rate)
        out.append((t_start, end[1]))
    return out


def reconstruct_job(job: JobSpec, series: Dict[Tuple[int, int, int], Series], thin_factor: int = 1) -> dict:
    """Counter-only estimate of one job's iteration time, idle time and utilisation.

    Every bucket of every rank gives one estimate of the mean iteration time (the spacing of its operation
    starts, first to last); the median of those is robust to a flow whose counter was hard to segment."""
    compute = job.model.compute_s
    spans, periods, comm = [], [], []
    first_starts = None
    per_rank_ends = []
    for rank in range(job.workers):
        per_bucket = {}
        for b in range(len(job.model.buckets)):
            s = thin(series.get((job.index, b, rank), []), thin_factor)
            iv = operation_intervals(s, job.iterations, compute)
            per_bucket[b] = iv
            starts = [a for a, _ in iv]
            if len(starts) == job.iterations and len(starts) > 1:
                spans.append((starts[-1] - starts[0]) / (len(starts) - 1))
                periods += [y - x for x, y in zip(starts, starts[1:])]
        first = per_bucket.get(0, [])
        for k, (start, _) in enumerate(first):
            ends = [iv[k][1] for iv in per_bucket.values() if len(iv) > k]
            comm.append(max(ends) - start)
        per_rank_ends.append(len(first))
    if not spans:
        return {"error": "no complete operation sequence in the flow counters"}
    iteration = statistics.median(spans)
    idle = max(iteration - compute, 0.0)
    return {
        "iteration_time_mean_s": iteration,
        "iteration_time_p50_s": statistics.median(periods),
        "idle_per_iteration_s": idle,
        "gpu_utilization": min(compute / iteration, 1.0) if iteration > 0 else None,
        "comm_time_per_iteration_s": statistics.mean(comm) if comm else None,
        "compute_per_iteration_s": compute,
        "estimates": len(spans),
    }


def true_idle_per_iteration(job_summary: dict, compute_s: float) -> Optional[float]:
    """The workers' own GPU idle time per iteration (ground truth, mean over ranks), from workloads/truth.py.

    idle_s / iterations: what the GPUs really lost. (The slowest rank's iteration time minus the compute time
    would overstate it: the maximum over skewed ranks is longer than any one GPU's iteration.)"""
    if job_summary.get("idle_s") is not None and job_summary.get("iterations"):
        return job_summary["idle_s"] / job_summary["iterations"]
    mean = job_summary.get("iteration_time_mean_s")
    return None if mean is None else max(mean - compute_s, 0.0)


def true_iteration_time(job_summary: dict) -> Optional[float]:
    """Mean iteration time of one GPU (wall / iterations, mean over ranks)."""
    if job_summary.get("wall_s") and job_summary.get("iterations"):
        return job_summary["wall_s"] / job_summary["iterations"]
    return job_summary.get("iteration_time_mean_s")


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
            true_iter = true_iteration_time(truth)
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
