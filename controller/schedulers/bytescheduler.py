"""ByteScheduler-style intra-job priority: within a job, the buckets holding the first layers go first.

ByteScheduler (SOSP 2019), like P3 and TicTac, orders one job's communication by layer: the next forward pass
needs the first layers first, so their gradients should be sent first even though the backward pass produces
them last. Here a bucket is the unit of scheduling (the workload fixes bucket sizes, so ByteScheduler's tensor
partitioning and credit-based sending are not modelled); its priority class comes from its position only:

    linear:  class(b) = floor(6 * b / (B - 1) + 1/2)      (B = buckets of the job; B = 1 -> class 6)
    rank:    class(b) = max(0, 6 - (B - 1 - b))            (first-layer bucket 6, next 5, ..., the rest 0)

b = 0 holds the last layers (launched first), b = B - 1 the first layers, so class grows with b. ``linear``
spreads a job's buckets over the 7 data classes 0..6 (class 7 carries ACKs, core/classes.py); ``rank`` gives
the 6 most urgent buckets distinct classes and lets the others share class 0. Every job uses the same mapping
and nothing depends on other jobs: two jobs' buckets at the same relative position share a class whatever
their sizes or intensities (no inter-job awareness, which is what the multi-tenant policies improve on).
Paths are left to ECMP (path None).

Layer order does not change at run time, so the policy is static: ``decide`` returns rules for every flow of
every bucket of every job, and operation events are not needed.
"""
from __future__ import annotations

import math
from typing import Dict, Mapping, Optional, Sequence

from controller.schedulers.base import Scheduler
from controller.schedulers.compression import count_changes
from controller.schedulers.crux import check_placed
from core.classes import DATA_CLASSES
from core.fabric import FabricView
from core.model import Decision, FlowKey, JobSpec

MAPPINGS = ("linear", "rank")


def bucket_class(bucket: int, buckets: int, mapping: str = "linear") -> int:
    """Priority class of ``bucket`` in a job with ``buckets`` buckets (highest index = first layers = 6)."""
    top = DATA_CLASSES - 1
    if not 0 <= bucket < buckets:
        raise ValueError(f"bucket {bucket} outside 0..{buckets - 1}")
    if buckets == 1:
        return top
    if mapping == "linear":
        return int(math.floor(top * bucket / (buckets - 1) + 0.5))
    if mapping == "rank":
        return max(0, top - (buckets - 1 - bucket))
    raise ValueError(f"unknown mapping {mapping!r}; known: {', '.join(MAPPINGS)}")


class ByteScheduler(Scheduler):
    """Static layer-order priority inside each job, the same mapping for all jobs, hashed paths."""

    name = "bytescheduler"
    period_s = None
    reconcile_on = ()  # static: events never change a decision
    defaults = {
        "mapping": "linear",  # linear | rank: how bucket position maps to classes 0..6
    }

    def __init__(self, fabric: FabricView, jobs: Sequence[JobSpec], params: Optional[Mapping] = None):
        super().__init__(fabric, jobs, params)
        if self.params["mapping"] not in MAPPINGS:
            raise ValueError(f"mapping must be one of {', '.join(MAPPINGS)}, not {self.params['mapping']!r}")
        for job in self.jobs:
            check_placed(job)
        self.changes = 0
        self._last: Dict[FlowKey, Decision] = {}
        self._rules: Dict[FlowKey, Decision] = {}
        for job in self.jobs:
            if job.workers < 2:
                continue
            n = len(job.model.buckets)
            for bucket in range(n):
                decision = Decision(bucket_class(bucket, n, self.params["mapping"]), None)
                for flow in job.flows(bucket):
                    self._rules[flow] = decision

    def decide(self, now: float) -> Dict[FlowKey, Decision]:
        rules = dict(self._rules)
        self.changes += count_changes(self._last, rules)
        self._last = rules
        return rules
