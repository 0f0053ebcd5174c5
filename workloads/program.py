"""The DDP iteration program of one worker, as pure data: what the GPU does, in order, and when it needs results.

PyTorch DDP runs every iteration as:

* a forward pass through the layer groups in forward order, the highest bucket index first and bucket 0 last.
  Under semantics ``overlap`` each group's forward first waits for the all-reduce of its own bucket from the
  previous iteration; under ``wait_all`` the forward pass starts only once every bucket of the previous
  iteration is done;
* a backward pass, bucket 0 first; as soon as a bucket's backward compute is done its all-reduce is launched and
  overlaps the rest of the backward pass;
* after the last iteration, a wait for every outstanding all-reduce (the final optimizer step).

``IterationProgram.steps(iteration)`` lists one iteration as ``Step`` records (``wait``, ``compute``, ``launch``);
an executor runs them in order. ``workloads/worker.py`` runs them with threads, sleeps and real sockets; the
flow-level twin (``twin/engine.py``) runs the very same list in simulated time. A ``wait`` names a bucket: the
executor waits for the last all-reduce it launched on that bucket, if any is still running, and does nothing
otherwise.

``needed_offset(bucket, iteration)`` is the time from a bucket's launch to when this worker's GPU needs its
result if nothing else waits: the rest of the backward pass, plus (under ``overlap``, and not in the last
iteration) the forward compute of the groups that run before this bucket's group in the next forward pass. It
goes into every operation event as ``needed_at = launch + needed_offset``.

No threads, no clocks, no I/O: everything here is a function of the job's profile.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from core.model import SEMANTICS, Bucket, JobSpec

WAIT, COMPUTE, LAUNCH = "wait", "compute", "launch"
FORWARD, BACKWARD = "forward", "backward"


@dataclass(frozen=True)
class Step:
    """One thing the worker does: wait for a bucket's all-reduce, compute one layer group, or launch one."""

    kind: str           # WAIT, COMPUTE or LAUNCH
    bucket: int
    phase: str = ""     # FORWARD or BACKWARD for COMPUTE
    duration_s: float = 0.0


class IterationProgram:
    """The iteration program of one worker of ``job`` (every rank of a job runs the same program)."""

    def __init__(self, job: JobSpec):
        self.job = job
        self.buckets: List[Bucket] = sorted(job.model.buckets, key=lambda b: b.index)
        if [b.index for b in self.buckets] != list(range(len(self.buckets))):
            raise ValueError("bucket indices must be 0..B-1")
        if job.semantics not in SEMANTICS:
            raise ValueError(f"unknown semantics {job.semantics!r}")
        self.semantics = job.semantics
        self.iterations = job.iterations
        self.forward_order: List[Bucket] = list(reversed(self.buckets))
        # The sums run in the same order as they always have, so needed_at is bit for bit what workers sent.
        self.rest_backward: Dict[int, float] = {b.index: sum(x.backward_s for x in self.buckets if x.index > b.index)
                                                for b in self.buckets}
        self.forward_before: Dict[int, float] = {b.index: sum(x.forward_s for x in self.buckets if x.index > b.index)
                                                 for b in self.buckets}
        self._cache: Dict[bool, Tuple[Step, ...]] = {}

    def needed_offset(self, bucket: int, iteration: int) -> float:
        """Seconds from the launch of ``bucket`` in ``iteration`` to when the GPU needs its result."""
        offset = self.rest_backward[bucket]
        if self.semantics == "overlap" and iteration < self.iterations - 1:
            offset += self.forward_before[bucket]
        return offset

    def steps(self, iteration: int) -> Tuple[Step, ...]:
        """The steps of ``iteration`` in execution order (see the module docstring)."""
        last = iteration == self.iterations - 1
        if last not in self._cache:
            self._cache[last] = tuple(self._build(last))
        return self._cache[last]

    def _build(self, last: bool) -> List[Step]:
        out: List[Step] = []
        if self.semantics == "wait_all":
            out += [Step(WAIT, b.index) for b in self.forward_order]
        for b in self.forward_order:
            if self.semantics == "overlap":
                out.append(Step(WAIT, b.index))
            out.append(Step(COMPUTE, b.index, FORWARD, b.forward_s))
        for b in self.buckets:
            out.append(Step(COMPUTE, b.index, BACKWARD, b.backward_s))
            out.append(Step(LAUNCH, b.index))
        if last:
            out += [Step(WAIT, b.index) for b in self.forward_order]
        # Waits in iteration 0 find nothing launched and do nothing: every iteration but the last has one shape.
        return out

    @property
    def compute_s(self) -> float:
        """GPU time of one iteration with no waiting."""
        return sum(b.forward_s + b.backward_s for b in self.buckets)


def programs(jobs: Sequence[JobSpec]) -> Dict[int, IterationProgram]:
    """Job index -> its program."""
    return {j.index: IterationProgram(j) for j in jobs}
