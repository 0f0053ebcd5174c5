"""The scheduler interface: pure policy code that the controller enforces.

A scheduler sees the fabric (``FabricView``), the jobs as placed (``JobSpec``), and the live state of
operations (``OperationEvent`` from the workers, folded into an ``OperationTracker``). ``decide(now)`` returns a
``Decision`` (priority class 0..7, an equal-cost path or None for hashed) for each flow it wants to steer;
flows it leaves out keep the default rule (class 0, hashed path). The controller diffs successive decisions and
rewrites only the rules that changed, so ``decide`` may be called as often as the policy likes.

No I/O here: everything is testable without root, a switch or a controller.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Mapping, Optional, Sequence, Tuple

from core.fabric import FabricView
from core.model import EVENT_KINDS, Decision, FlowKey, JobSpec, OperationEvent, OperationId
from core.ring import ring_bytes_per_rank


@dataclass
class OperationState:
    """What is known of one live operation, merged over its workers' events."""

    op: OperationId
    nbytes: int = 0
    launched_at: float = 0.0
    needed_at: float = 0.0
    bytes_done: Dict[int, int] = field(default_factory=dict)  # rank -> bytes sent so far
    waiting_ranks: set = field(default_factory=set)
    done_ranks: set = field(default_factory=set)

    @property
    def waiting(self) -> bool:
        """True while some worker's GPU is idle waiting for this operation."""
        return bool(self.waiting_ranks)

    def remaining_bytes(self, workers: int) -> int:
        """Bytes the slowest rank still has to send (the operation ends when every rank has)."""
        if self.nbytes <= 0:
            return 0
        per_rank = int(ring_bytes_per_rank(self.nbytes, workers))
        if not self.bytes_done:
            return per_rank
        slowest = min(self.bytes_done.get(r, 0) for r in range(workers))
        return max(per_rank - slowest, 0)


class OperationTracker:
    """Folds operation events into the set of live operations per job."""

    def __init__(self, jobs: Sequence[JobSpec]):
        self.jobs = {j.index: j for j in jobs}
        self.live: Dict[OperationId, OperationState] = {}
        self.finished: set = set()

    def apply(self, ev: OperationEvent) -> None:
        job = self.jobs.get(ev.job)
        if job is None:
            return
        state = self.live.get(ev.op)
        if state is None:
            # A worker's "resume" follows its "done" (the GPU resumes once the result is in), so late events of
            # a finished operation must not bring it back to life.
            if ev.kind in ("done", "resume") or ev.op in self.finished:
                return
            state = self.live[ev.op] = OperationState(ev.op, launched_at=ev.time)
        if ev.nbytes:
            state.nbytes = ev.nbytes
        if ev.needed_at:
            # Workers disagree slightly on when they need the result; the earliest one stalls first.
            state.needed_at = ev.needed_at if not state.needed_at else min(state.needed_at, ev.needed_at)
        if ev.kind == "launch":
            state.launched_at = min(state.launched_at, ev.time)
        elif ev.kind == "progress":
            state.bytes_done[ev.rank] = max(state.bytes_done.get(ev.rank, 0), ev.bytes_done)
        elif ev.kind == "wait":
            state.waiting_ranks.add(ev.rank)
        elif ev.kind == "resume":
            state.waiting_ranks.discard(ev.rank)
        elif ev.kind == "done":
            state.done_ranks.add(ev.rank)
            state.waiting_ranks.discard(ev.rank)
            if len(state.done_ranks) >= job.workers:
                del self.live[ev.op]
                self.finished.add(ev.op)

    def live_ops(self, job_index: Optional[int] = None):
        return [s for s in self.live.values() if job_index is None or s.op.job == job_index]


class Scheduler(ABC):
    """Base class of every policy. Subclasses set ``name`` and implement ``decide``."""

    name: ClassVar[str] = ""
    #: Seconds between periodic calls of ``decide`` by the controller (None: only on events).
    period_s: ClassVar[Optional[float]] = None
    #: Event kinds after which the controller recomputes decisions (all events are still passed to on_event).
    #: Policies whose decisions cannot change on some kinds leave them out and save the controller the work.
    reconcile_on: ClassVar[Tuple[str, ...]] = EVENT_KINDS
    #: Parameters with their defaults; ``params`` given to __init__ override them.
    defaults: ClassVar[Mapping[str, Any]] = {}
    #: Whether the policy wants to hear of jobs arriving and leaving (``on_job_arrival``, ``on_job_departure``);
    #: the control loop then tells it, and decides again, at each. A policy may set it per instance.
    hears_jobs: bool = False

    def __init__(self, fabric: FabricView, jobs: Sequence[JobSpec], params: Optional[Mapping[str, Any]] = None):
        unknown = set(params or {}) - set(self.defaults)
        if unknown:
            raise ValueError(f"scheduler {self.name!r} has no parameter(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(self.defaults)) or 'none'}")
        self.params: Dict[str, Any] = {**self.defaults, **(params or {})}
        self.fabric = fabric
        self.jobs = list(jobs)
        self.tracker = OperationTracker(self.jobs)

    def on_event(self, event: OperationEvent, now: float) -> None:
        """Record an operation event. Policies that need more override and call super()."""
        self.tracker.apply(event)

    def on_job_arrival(self, job: JobSpec, now: float) -> None:
        """A job started: its first operation event arrived (controller/loop.py). Only with ``hears_jobs``."""

    def on_job_departure(self, job: JobSpec, now: float) -> None:
        """A job ended: every rank reported every operation of its last iteration done. Only with ``hears_jobs``."""

    def on_fabric_change(self, fabric: FabricView) -> None:
        """The fabric changed (links failed or came back): ``fabric`` holds the paths that are left, and a
        decision's path index now refers to them. Policies that place paths override this, call super() and
        place them again; classes and everything learnt from events are kept."""
        self.fabric = fabric

    @abstractmethod
    def decide(self, now: float) -> Dict[FlowKey, Decision]:
        """The wanted class and path of every flow this policy steers."""


class EcmpScheduler(Scheduler):
    """Plain ECMP: every flow in class 0 on a hashed path, i.e. no per-flow rules at all."""

    name = "ecmp"
    reconcile_on = ()

    def decide(self, now: float) -> Dict[FlowKey, Decision]:
        return {}
