"""Crux's correction factor k_j as the paper defines it (SIGCOMM 2024, section 4.2): a pairwise comparison with
the job that generates the most network traffic.

The reference job r (most bytes per second when alone) has k_r = 1. For every other job j, the two jobs are
run against each other on one shared link under both strict orders (r first, then j first), and the link time
each job's data receives is measured over the same horizon. Putting j first gains j some link time (Delta_j)
and costs r some (Delta_r). The two orders are worth the same exactly when the GPU work they unlock is the same,
I_j * Delta_j = I_r * Delta_r; the priority P = k * I must then be equal too, which gives

    k_j = Delta_j / Delta_r                                     (the paper's Figure 11 example: 3 s / 2 s = 1.5)

so that P_j > P_r exactly when j first unlocks more GPU work than r first. Iteration length and overlap enter
through the comparison, which is the paper's point: a job whose communication hides behind its computation
gains little from going first, a short-iteration job gains more rounds.

The comparison model (ours; the paper gives the rule, not a model): job x repeats iterations of ``compute_s``
GPU-seconds per GPU; its ``comm_s`` link-seconds of data (Crux's isolated bottleneck time t_x) become ready once
the forward pass and the backward pass of bucket 0 are done (DDP starts sending then), and the next iteration
starts when both the computation and the communication are done. The link serves the higher job whenever it
has data ready (preemptive strict priority) and the other one otherwise. Both jobs start together; the horizon
is ``HORIZON_ITERATIONS`` iterations of the longer-iteration job alone. Pure, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence, Tuple

from core.model import JobSpec

#: The comparison lasts this many iterations of the slower job alone.
HORIZON_ITERATIONS = 30
#: k_j when j going first costs the reference job nothing (it may always go first) and when it gains j nothing.
K_MAX, K_MIN = 1e6, 1e-6


@dataclass(frozen=True)
class IterationShape:
    """What the pairwise comparison knows of a job: computation per iteration, when its data is ready, and the
    link time that data needs alone."""

    compute_s: float
    ready_s: float
    comm_s: float

    @property
    def alone_s(self) -> float:
        """Iteration time alone: computation, or data ready plus its transfer, whichever ends later."""
        return max(self.compute_s, self.ready_s + self.comm_s)


def iteration_shape(job: JobSpec, comm_s: float) -> IterationShape:
    buckets = job.model.buckets
    ready = job.model.forward_s + (buckets[0].backward_s if buckets else job.model.backward_s)
    return IterationShape(job.model.compute_s, min(ready, job.model.compute_s), comm_s)


def link_time(shapes: Sequence[IterationShape], first: int, horizon_s: float) -> List[float]:
    """Link-seconds each of two jobs transmits in [0, horizon_s] when job ``first`` has strict priority."""
    n = len(shapes)
    start = [0.0] * n                       # start of the current iteration
    remaining = [s.comm_s for s in shapes]  # link-seconds of the current iteration still to send
    sent = [0.0] * n
    now = 0.0
    order = [first] + [i for i in range(n) if i != first]
    while now < horizon_s:
        for i, s in enumerate(shapes):      # iterations whose computation and communication are both done
            if remaining[i] <= 0.0 and now >= start[i] + s.compute_s:
                start[i], remaining[i] = now, s.comm_s
        ready = [remaining[i] > 0.0 and now >= start[i] + shapes[i].ready_s for i in range(n)]
        served = next((i for i in order if ready[i]), None)
        events = [horizon_s]
        for i, s in enumerate(shapes):
            if remaining[i] > 0.0 and not ready[i]:
                events.append(start[i] + s.ready_s)
            if remaining[i] <= 0.0:
                events.append(start[i] + s.compute_s)
        if served is not None:
            events.append(now + remaining[served])
        step = max(min(e for e in events if e > now) - now, 0.0) if any(e > now for e in events) else 0.0
        if step <= 0.0:
            break
        if served is not None:
            amount = min(step, remaining[served])
            sent[served] += amount
            remaining[served] -= amount
            if remaining[served] <= 1e-9 * shapes[served].comm_s:   # its finish event: rounding must not strand it
                remaining[served] = 0.0
        now += step
    return sent


def pairwise_factor(job: IterationShape, reference: IterationShape) -> float:
    """k of ``job`` against the reference job (whose k is 1): link time gained by going first over the link
    time that costs the reference job, over the same horizon. k does not depend on the time unit, so both jobs
    are measured in units of the longer iteration (the horizon is then HORIZON_ITERATIONS, whatever the scale)."""
    unit = max(job.alone_s, reference.alone_s)
    if unit <= 0.0:
        return 1.0
    shapes = [IterationShape(s.compute_s / unit, s.ready_s / unit, s.comm_s / unit) for s in (job, reference)]
    horizon = float(HORIZON_ITERATIONS)
    job_first, reference_first = link_time(shapes, 0, horizon), link_time(shapes, 1, horizon)
    gained = job_first[0] - reference_first[0]
    lost = reference_first[1] - job_first[1]
    tolerance = 1e-9 * horizon
    if lost <= tolerance:
        return K_MAX if gained > tolerance else 1.0   # going first costs the reference nothing
    return min(max(gained / lost, K_MIN), K_MAX)


def traffic_rate(job: JobSpec, shape: IterationShape, bytes_per_rank: float) -> float:
    """Bytes per second the job puts on the network when alone: the paper's 'most network traffic'."""
    return job.workers * bytes_per_rank / shape.alone_s if shape.alone_s > 0 else 0.0


def pairwise_factors(jobs: Sequence[JobSpec], comm_s: Mapping[int, float],
                     bytes_per_rank: Mapping[int, float]) -> Tuple[int, Dict[int, float]]:
    """(reference job, k_j of every job with network traffic): the reference is the job with the most bytes
    per second alone (ties: the lower index)."""
    shapes = {j.index: iteration_shape(j, comm_s[j.index]) for j in jobs if comm_s.get(j.index, 0.0) > 0.0}
    if not shapes:
        return -1, {}
    by_index = {j.index: j for j in jobs}
    reference = min(shapes, key=lambda i: (-traffic_rate(by_index[i], shapes[i], bytes_per_rank[i]), i))
    return reference, {i: 1.0 if i == reference else pairwise_factor(s, shapes[reference])
                       for i, s in shapes.items()}
