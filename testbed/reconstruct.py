"""GPU idle time reconstructed from the controller's flow counters alone, and its error against the truth.

An operator sees only the network. The controller polls one byte counter per data flow (the per-flow ingress
rule of rank r's flow for bucket b) every ``poll_interval_s``. From those series and the jobs' profiles (which
the scheduler also has), but never from the workers' logs, we estimate per job:

* operation boundaries: a flow is idle between its operations (the next operation on a bucket cannot start
  before the next iteration's backward pass), so runs of polls in which its counter grew are its operations.
  When the runs do not number the iterations (idle gaps shorter than the polling interval), the counter is cut
  by volume instead: each operation moves the same V_b bytes, so operation k spans the crossings of k x V_b and
  (k+1) x V_b. A start is placed where the first busy interval's bytes would begin at the flow's typical rate,
  and an end where the last busy interval's bytes would end at it, so neither is biased towards a poll. The
  typical rate is measured in intervals busy on both sides (most likely busy throughout);
* iteration time: bucket 0 is launched at the same point of every iteration (right after the backward pass of
  the last layers), so the spacing of bucket 0's operation starts is the iteration time (every other bucket's
  too: the median over all flows is used);
* GPU idle per iteration = iteration time - C, where C is the profile's compute time per iteration (forward +
  backward, scaled); utilisation = C / iteration time;
* communication time per iteration: from bucket 0's start to the end of the iteration's last operation. Its
  boundaries do not cancel, so it is only known to within a polling interval or two.

Errors of single boundaries (up to one polling interval) cancel in the mean iteration time (a telescoping sum),
which is why the mean idle time is accurate even at coarse polling; the per-iteration error is also reported.
Each flow's mean is off by less than (the sum of the polling intervals holding its first and last start) /
(N - 1), which ``reconstruct_job`` reports as ``iteration_time_error_bound_s``. A read is only as fresh as the
switch made it: Open vSwitch brings a rule's counters up to date about every 0.5 s (its revalidators,
``flow_counter_refresh_s`` in the run's summary), so a boundary is known to within the longer of the two; at
0.1 s polling the counters say no more than at 0.5 s. ``analyse_run`` also re-runs the
estimate on the same counters thinned to 2, 5 and 10 x the polling interval (keeping the final read) to show how
the error grows with it.

Counters are read as OVS reports them: reads of 2^64-1 (a counter being deleted) are dropped, and a counter that
goes down was reset and is stitched back. A flow gives no estimate rather than a wrong one when it cannot be
segmented: fewer than two reads, traffic before the first read, no more than a handshake in all, a reset (which
may have lost bytes) where the volume cut is needed, less than 95% of its operations' payload (a run that stopped
early: cut into the planned number of volumes it would give too many, too short operations; a shortfall within
that margin, such as one operation in twenty, is not detected). A job with no flow left, or whose error bound
is over half its estimate (a poll as long as the run), gets ``{"error": ...}``.
"""
from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from core.config import DEFAULT_POLL_INTERVAL_S
from core.model import JobSpec
from core.ring import ring_bytes_per_rank
from experiment.results import JobSummary, RunFolder, RunSummary, Series

HANDSHAKE_BYTES = 1024  # SYN, SYN-ACK's ACK and the ring's 8-byte hello, with headers, stay below this
MAX_COUNTER = 2 ** 64 - 1  # what Open vSwitch reports for a counter it cannot read (a rule or port being deleted)
# A complete flow carries more than its operations' payload (framing and headers add to it); the margin is for
# bytes a counter reset lost.
MIN_PAYLOAD_FRACTION = 0.95
# An estimate whose error bound exceeds this fraction of itself says little, e.g. a poll as long as the run.
MAX_RELATIVE_BOUND = 0.5


def thin(series: Series, factor: int) -> Series:
    """Every ``factor``-th sample: the same counters as if polled ``factor`` times less often, plus the last read.

    The final counters are known at any polling interval (they are read when the run ends); without them a
    thinned series can stop before the last operations did, and their missing bytes would shift every cut of
    the counter into equal volumes and make a complete flow look short."""
    if factor <= 1 or len(series) < 2:
        return series
    out = series[::factor]
    if (len(series) - 1) % factor:
        out.append(series[-1])
    return out


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


def _clean(series: Series) -> Tuple[Series, bool]:
    """The counter without unreadable samples and with resets stitched, and whether it was reset.

    Open vSwitch reports 2^64-1 for a counter it cannot read (a rule or port being deleted): such a sample says
    nothing about the flow. A counter that goes down was reset (its rule was re-installed) and counts again from
    zero: adding the last value read before the reset keeps it cumulative and keeps which polls saw bytes, but
    whatever was sent between that read and the reset is lost, so the flow's byte volume is no longer known."""
    out: Series = []
    offset, prev, reset = 0, None, False
    for t, b in series:
        if b < 0 or b >= MAX_COUNTER:
            continue
        if prev is not None and b < prev:
            reset = True
            offset += prev
        prev = b
        out.append((t, b + offset))
    return out, reset


def _typical_rate(series: Series) -> Optional[float]:
    """The flow's typical sending rate: median over polling intervals busy on both sides (so most likely busy
    throughout), else the largest over busy intervals.

    Not the median over all busy intervals: when operations last only a poll or two, almost every busy interval
    is busy for part of its length only, and that median is a fraction of the rate at which bytes were sent."""
    rates = [(b1 - b0) / (t1 - t0) if b1 > b0 and t1 > t0 else None
             for (t0, b0), (t1, b1) in zip(series, series[1:])]
    inner = [r for before, r, after in zip(rates, rates[1:], rates[2:]) if before and r and after]
    if inner:
        return statistics.median(inner)
    busy = [r for r in rates if r]
    return max(busy) if busy else None


class Unsegmentable(ValueError):
    """A flow's counter series cannot be cut into its operations; the message says why."""


def _segment(series: Series, operations: int, min_spacing_s: float = 0.0) -> List[Tuple[float, float, float]]:
    """``operation_intervals`` with, for each operation, the length of the polling interval holding its start
    (the start's estimate and its true value both lie in that interval). Unsegmentable when it cannot be cut."""
    series, reset = _clean(series)
    if len(series) < 2 or operations < 1:
        raise Unsegmentable(f"{len(series)} readable counter samples")
    if series[-1][1] <= 0:
        raise Unsegmentable("no bytes counted")
    # Connection set-up (SYN, handshake) happens long before the first operation and is a few hundred bytes:
    # count from the last sample still within that, or the first operation would seem to start at connect time.
    # Half an operation also bounds it: a set-up is less than half of the smallest operation (a bucket at the
    # 1 KiB floor of workloads/scaling.py moves 1.1 KB per rank with two workers), while a quarter of that
    # (276 bytes) is less than a set-up of four packets (288 bytes).
    rough = series[-1][1] / operations
    base_limit = min(HANDSHAKE_BYTES, 0.5 * rough)
    base_index = max((i for i, (_, b) in enumerate(series) if b <= base_limit), default=None)
    if base_index is None:
        # Already past the handshake at the first read: the first operation started before polling did, and its
        # start (hence the whole sequence's) is unknown.
        raise Unsegmentable(f"traffic before the first read ({series[0][1]} bytes at it)")
    series = series[base_index:]
    base = series[0][1]
    if series[-1][1] - base <= HANDSHAKE_BYTES:
        # No more than a connection's set-up in all: the flow carried no operations (a job that never ran). Cut
        # into ``operations`` volumes anyway, those few hundred bytes would give operations milliseconds apart.
        raise Unsegmentable(f"no more than a connection's set-up ({series[-1][1] - base} bytes)")
    volume = (series[-1][1] - base) / operations
    rate = _typical_rate(series)
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
            # Symmetrically, the end is where the last busy interval's bytes would end at the typical rate (not
            # the read after it, which would make every operation half a polling interval too long on average).
            t_before, b_before = series[last - 1]
            t_last, b_last = series[last]
            end = min(t_last, max(t_before, start) + (b_last - b_before) / rate) if rate else t_last
            out.append((start, end, t_i - t_prev))
        return out
    if reset:
        # Cutting by volume needs every byte of the flow, and a reset may have lost some.
        raise Unsegmentable(f"{len(bursts)} bursts for {operations} operations after a counter reset")
    out = []
    for k in range(operations):
        # series[0] holds the base, so every crossing is at an index >= 1, with a read before it.
        low = base + k * volume
        start = _crossing(series, low + 0.001 * volume)
        end = _crossing(series, low + volume - 0.001 * volume)
        if start is None or end is None:
            break
        (i, t_start), (j, t_end) = start, end
        t_prev, b_prev = series[i - 1]
        t_i, b_i = series[i]
        if rate:
            # Place the start so that the bytes counted in the first busy interval were sent at the typical rate,
            # and the end where the operation's last bytes were sent at that rate.
            t_start = max(t_prev, t_i - (b_i - max(b_prev, low)) / rate)
            t_before, b_before = series[j - 1]
            t_end = min(series[j][0], max(t_before, t_start) + (low + volume - max(b_before, low)) / rate)
        out.append((t_start, t_end, t_i - t_prev))
    return out


def operation_intervals(series: Series, operations: int, min_spacing_s: float = 0.0) -> List[Tuple[float, float]]:
    """(start, end) of each of ``operations`` equal-volume operations seen in one flow's counter series.

    Empty when the series cannot be segmented: fewer than two readable samples, traffic before the first read,
    no more than a connection's set-up in all, or a counter reset where cutting by volume is needed."""
    try:
        return [(start, end) for start, end, _ in _segment(series, operations, min_spacing_s)]
    except Unsegmentable:
        return []


def _carried(series: Series) -> int:
    """Bytes a flow's counter grew by over the series (resets stitched, unreadable samples dropped)."""
    series, _ = _clean(series)
    return series[-1][1] - series[0][1] if series else 0


def reconstruct_job(job: JobSpec, series: Dict[Tuple[int, int, int], Series], thin_factor: int = 1,
                    counter_refresh_s: float = 0.0) -> dict:
    """Counter-only estimate of one job's iteration time, idle time and utilisation.

    Every bucket of every rank gives one estimate of the mean iteration time (the spacing of its operation
    starts, first to last); the median of those is robust to a flow whose counter was hard to segment. A flow
    gives no estimate when its counter cannot be segmented (see ``operation_intervals``) or when it carried less
    than the payload of the job's operations. With no estimate left, or an error bound over half the estimate,
    the result is ``{"error": ...}``: never a number that only looks like one.

    ``iteration_time_error_bound_s`` bounds the error of the mean iteration time (and so of the idle time) from the
    polling intervals that hold the first and the last operation start, or ``counter_refresh_s`` (how old a read
    can be) where that is longer, assuming the operations were told apart correctly; it does not cover how the
    mean start spacing differs from the workers' wall time per iteration."""
    compute = job.model.compute_s
    spans, bounds, periods, comm = [], [], [], []
    rejected = {}  # why each flow that gave no estimate gave none, for the error message
    for rank in range(job.workers):
        per_bucket = {}
        for bucket in job.model.buckets:
            flow = f"bucket {bucket.index} rank {rank}"
            s = thin(series.get((job.index, bucket.index, rank), []), thin_factor)
            # Every operation moves at least the ring's payload on every rank's flow (framing and headers add to
            # it). A flow that carried clearly less did not carry all the operations (a run killed or out of
            # time): cut into ``iterations`` equal volumes it would give too many, too short operations.
            payload = job.iterations * ring_bytes_per_rank(bucket.nbytes, job.workers)
            carried = _carried(s)
            if carried < MIN_PAYLOAD_FRACTION * payload:
                rejected[flow] = f"carried {carried} of its operations' {payload} bytes"
                continue
            try:
                iv = _segment(s, job.iterations, compute)
            except Unsegmentable as e:
                rejected[flow] = str(e)
                continue
            if len(iv) != job.iterations or len(iv) < 2:
                rejected[flow] = f"{len(iv)} of {job.iterations} operations found"
                continue
            starts = [a for a, _, _ in iv]
            span = (starts[-1] - starts[0]) / (len(starts) - 1)
            if span <= 0:
                rejected[flow] = "operations that do not follow each other"
                continue
            spans.append(span)
            # Each start is off by less than the polling interval that holds it, and the boundaries in between
            # cancel in the mean (a telescoping sum).
            bounds.append((max(iv[0][2], counter_refresh_s) + max(iv[-1][2], counter_refresh_s)) / (len(starts) - 1))
            periods += [y - x for x, y in zip(starts, starts[1:])]
            per_bucket[bucket.index] = iv
        for k, (start, _, _) in enumerate(per_bucket.get(0, [])):
            comm.append(max(iv[k][1] for iv in per_bucket.values()) - start)
    if not spans:
        # Name a few flows' reasons: the message must say which condition failed, not only that one did.
        why = "; ".join(f"{flow}: {reason}" for flow, reason in list(rejected.items())[:3])
        more = f" (and {len(rejected) - 3} more)" if len(rejected) > 3 else ""
        return {"error": f"no complete operation sequence in the flow counters ({why}{more})"}
    iteration = statistics.median(spans)
    # Every flow's estimate is within its bound of the truth, so their median is within the largest bound. Judged
    # for the job, not per flow: a per-flow test would keep the flows whose spans came out long.
    bound = max(bounds)
    if bound > MAX_RELATIVE_BOUND * iteration:
        return {"error": f"polling too coarse for {job.iterations} iterations: the iteration time "
                         f"({iteration:.3f} s) is only known to within {bound:.3f} s"}
    idle = max(iteration - compute, 0.0)
    return {
        "iteration_time_mean_s": iteration,
        "iteration_time_p50_s": statistics.median(periods),
        "iteration_time_error_bound_s": bound,
        "idle_per_iteration_s": idle,
        "gpu_utilization": min(compute / iteration, 1.0),
        "comm_time_per_iteration_s": statistics.mean(comm) if comm else None,
        "compute_per_iteration_s": compute,
        "estimates": len(spans),
    }


def true_idle_per_iteration(job_summary: JobSummary, compute_s: float) -> Optional[float]:
    """The workers' own GPU idle time per iteration (ground truth, mean over ranks), from workloads/truth.py.

    idle_s / iterations: what the GPUs really lost. (The slowest rank's iteration time minus the compute time
    would overstate it: the maximum over skewed ranks is longer than any one GPU's iteration.)"""
    if job_summary.get("idle_s") is not None and job_summary.get("iterations"):
        return job_summary.get("idle_s") / job_summary.get("iterations")
    mean = job_summary.get("iteration_time_mean_s")
    return None if mean is None else max(mean - compute_s, 0.0)


def true_iteration_time(job_summary: JobSummary) -> Optional[float]:
    """Mean iteration time of one GPU (wall / iterations, mean over ranks)."""
    if job_summary.get("wall_s") and job_summary.get("iterations"):
        return job_summary.get("wall_s") / job_summary.get("iterations")
    return job_summary.get("iteration_time_mean_s")


def analyse_run(folder: RunFolder, summary: RunSummary, thin_factors: Sequence[int] = (1, 2, 5, 10)) -> dict:
    """Reconstruct every job of a finished run from its counters and compare with the workers' truth.

    Returns the ``reconstruction`` section of the summary (``RunSummary.apply_reconstruction`` records it): the
    estimate and its error per job, overall, and versus the polling interval, and ``cluster_gpu_utilization``."""
    if not folder.has(RunFolder.FLOW_STATS):
        return {"error": f"no {RunFolder.FLOW_STATS}"}
    jobs = folder.jobs()
    series = folder.flow_series()
    poll = folder.poll_interval_s() or DEFAULT_POLL_INTERVAL_S
    # Recorded by the runner (testbed/ovs.py); runs that did not record it get bounds from the polling alone.
    refresh = summary.extra.get("flow_counter_refresh_s")
    result = {"method": "bucket-0 operation starts from per-flow byte counters; idle = period - profile compute",
              "poll_interval_s": poll, "flow_counter_refresh_s": refresh, "by_poll_interval": []}
    for factor in thin_factors:
        errors = []
        per_job = {}
        for job in jobs:
            rec = reconstruct_job(job, series, factor, refresh or 0.0)
            truth = summary.job(job.name) or JobSummary(job.name)
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
    gpus = sum(j.workers for j in jobs)
    utils = [(j.workers, (result.get("jobs") or {}).get(j.name, {}).get("gpu_utilization")) for j in jobs]
    if gpus and all(u is not None for _, u in utils):
        result["cluster_gpu_utilization"] = sum(w * u for w, u in utils) / gpus
    return result
