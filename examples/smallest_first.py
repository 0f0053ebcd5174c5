"""An example of a scheduler brought from outside the testbed: smallest job first.

Each job's flows get one class: the job that sends the fewest bytes per iteration gets the highest data class,
the next one the class below, and so on (jobs past the lowest class share it); paths stay hashed (ECMP). It
decides once, at the start, so it asks for no events.

Run it from this folder (or anywhere it is on the Python path)::

    cd examples && sudo python ../testbed/run.py --scheduler smallest_first:SmallestFirst
    cd examples && python ../testbed/run.py --engine fluid --scheduler smallest_first:SmallestFirst

docs/writing-a-scheduler.md walks through it.
"""
from __future__ import annotations

from typing import Dict

from controller.schedulers.base import Scheduler
from core.classes import DATA_CLASSES
from core.model import Decision, FlowKey


class SmallestFirst(Scheduler):
    """Jobs ranked by bytes per iteration, the smallest in the top data class."""

    name = "smallest-first"
    reconcile_on = ()                      # no event changes a decision: decide once
    defaults = {"top_class": DATA_CLASSES - 1}

    def __init__(self, fabric, jobs, params=None):
        super().__init__(fabric, jobs, params)
        top = int(self.params["top_class"])
        if not 0 <= top < DATA_CLASSES:
            raise ValueError(f"top_class must be a data class, 0..{DATA_CLASSES - 1} (got {top})")
        by_size = sorted(self.jobs, key=lambda j: (sum(b.nbytes for b in j.model.buckets), j.index))
        self.job_class = {job.index: max(top - rank, 0) for rank, job in enumerate(by_size)}

    def decide(self, now: float) -> Dict[FlowKey, Decision]:
        rules = {}
        for job in self.jobs:
            decision = Decision(self.job_class[job.index], None)   # one object per job: cheap to diff
            for bucket in range(len(job.model.buckets)):
                for rank in range(job.workers):
                    rules[job.flow(rank, bucket)] = decision
        return rules
