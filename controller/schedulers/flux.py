"""Flux: per-operation priority from the operation's urgency and its job's GPU intensity.

Job-level policies (Crux) give every flow of a job one class, so a bucket the GPU is already waiting for queues
behind a more intensive job's bucket that would not be needed for a while. Flux scores each live operation
(one ring all-reduce of one bucket) instead, recomputes the scores as operations start, progress and finish,
and as time runs down their slack, and compresses them into the switch's classes.

For a live operation o of job j at time ``now`` (state folded from worker events by ``OperationTracker``):

    R_o     = bytes the slowest rank still has to send (OperationState.remaining_bytes)
    r       = expected sending rate: ``rate_mbps``, or the host link rate when it is 0
    slack_o = (needed_at_o - now) - R_o * 8 / r                 seconds before the GPU would wait for o
    U_o     = 1                                  if a worker already waits for o (``wait`` without ``resume``)
            = exp(-max(slack_o, 0) / tau)        otherwise, in (0, 1]; unknown needed_at counts as no urgency
    Ihat_j  = I_j / max_k I_k                    Crux's GPU intensity (crux.job_intensity), in (0, 1]
    S_o     = U_o^alpha * Ihat_j^(1 - alpha)

In logs, ln S_o = -alpha * slack_o / tau + (1 - alpha) ln Ihat_j (for slack >= 0): the score ranks by slack, with
a job e times more intensive credited tau (1 - alpha) / alpha seconds of extra slack (0.2 s at the defaults).
So a waiting operation (slack <= 0, U = 1) of a job with Ihat = 0.25 outranks a most-intensive job's operation
whose slack exceeds tau (1-alpha)/alpha * ln 4 = 0.28 s: Flux's defining difference from Crux, where the
intensive job always wins. Raw intensity I_j is used, not Crux's overlap-corrected P_j: slack already accounts
for the overlap, per operation. ln U is floored at -20 (slack beyond 20 tau is equally non-urgent) so scores stay
finite.

Classes. Live operations' scores go through ``compression.compress_log`` into 7 classes (1..7), with contention
between operations of jobs that share a link (and within a job). Class 0 is left for flows that carry no live
operation: they send nothing (or a straggling tail), and keeping them lowest means a flow that starts before its
``launch`` event is processed cannot push a scored operation aside. Paths are Crux's: jobs in decreasing P_j
take the least-loaded spine (``paths`` as in crux), fixed for the run.

Time alone does not reorder operations with positive slack: for them ln S_o = alpha * now / tau + kappa_o, where
kappa_o = (1 - alpha) ln Ihat_j - alpha (needed_at_o - R_o * 8 / r) / tau changes only with progress, so their
order is least-slack-first with an intensity credit. The ranking changes when an operation progresses, when a
worker starts waiting, when slack reaches 0 (U saturates at 1 while others keep rising) and when operations
arrive or finish; an operation launched now ranks below an older one that had the same slack at its launch,
because the older one's urgency has grown since.

Stability. Scores move continuously, so without care two operations of similar score would swap classes on
every recomputation and each swap costs one rule rewrite per worker. Two mechanisms:

* hysteresis (a margin on class boundaries): the classes are recomputed from the current scores, but an
  operation whose class would change moves only if it still moves, in the same direction, when its own ln S is
  pulled back towards its old class by ``hysteresis``. An operation therefore overtakes another only when it
  scores more than the margin above it, and a class boundary that merely shifts by less than the margin moves
  nobody, so small oscillations of scores never change a class;
* dwell time: an operation keeps its class for at least ``min_dwell_s`` after a change, except in a decision
  where a worker has just started waiting for some operation: a stalled GPU is exactly what Flux exists to fix,
  so that decision re-ranks every operation at once (the stalled one up, those it overtakes down). Such rounds
  happen at most once per ``wait`` event.

``changes`` counts flow decisions that changed between successive ``decide`` calls (the flow-mods the
controller sends); ``op_changes`` counts class changes of operations. ``decide`` runs every ``period_s``
(0.1 s) and after events.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from controller.schedulers.base import OperationState, Scheduler
from controller.schedulers.compression import compress_log, count_changes
from controller.schedulers.crux import (JobIntensity, check_placed, contending_jobs, job_intensity, select_paths,
                                        validate_path_params)
from workloads.model import NUM_CLASSES, Decision, FabricView, FlowKey, JobSpec, OperationId

#: ln U never goes below this: operations with slack above 20 tau are all equally non-urgent.
LOG_URGENCY_FLOOR = -20.0


@dataclass(frozen=True)
class OpScore:
    """How Flux sees one live operation at one instant."""

    op: OperationId
    waiting: bool
    slack_s: float       # inf when needed_at is unknown
    urgency: float       # U_o in (0, 1]
    intensity: float     # Ihat_j in (0, 1]
    log_score: float     # ln S_o

    @property
    def score(self) -> float:
        return math.exp(self.log_score)


@dataclass
class _Held:
    """Per-operation state kept between decisions for hysteresis and dwell time."""

    cls: int
    since: float      # when cls last changed
    waiting: bool


class FluxScheduler(Scheduler):
    """Per-operation urgency x job intensity, compressed into classes 1..7 with hysteresis and dwell time."""

    name = "flux"
    period_s = 0.1
    defaults = {
        "alpha": 0.5,         # weight of urgency against intensity in S = U^alpha * Ihat^(1-alpha)
        "tau_s": 0.2,         # slack (s) over which urgency falls by a factor e
        "rate_mbps": 0.0,     # expected sending rate for the slack; 0 = host link rate
        "hysteresis": 0.1,    # margin in ln S by which an operation must cross a class boundary
        "min_dwell_s": 0.05,  # least time between class changes of one operation (waits excepted)
        "paths": "job",       # job | hop | hashed, as in crux
    }

    def __init__(self, fabric: FabricView, jobs: Sequence[JobSpec], params: Optional[Mapping] = None):
        super().__init__(fabric, jobs, params)
        validate_path_params(self.params)
        self.alpha = float(self.params["alpha"])
        self.tau_s = float(self.params["tau_s"])
        self.hysteresis = float(self.params["hysteresis"])
        self.min_dwell_s = float(self.params["min_dwell_s"])
        rate = float(self.params["rate_mbps"])
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError("alpha must be in [0, 1]")
        if self.tau_s <= 0:
            raise ValueError("tau_s must be > 0")
        if rate < 0 or self.hysteresis < 0 or self.min_dwell_s < 0:
            raise ValueError("rate_mbps, hysteresis and min_dwell_s must be >= 0")
        self.rate_bps = (rate if rate > 0 else fabric.host_rate_mbps) * 1e6
        if self.rate_bps <= 0:
            raise ValueError("no expected rate: set rate_mbps or a positive host link rate")
        for job in self.jobs:
            check_placed(job)
        self._jobs = {j.index: j for j in self.jobs}
        self.intensities: Dict[int, JobIntensity] = {
            j.index: job_intensity(fabric, j, paths=self.params["paths"]) for j in self.jobs}
        networked = {i: ji for i, ji in self.intensities.items() if ji.comm_s > 0}
        top = max((ji.intensity for ji in networked.values()), default=1.0)
        # Ihat_j in (0, 1]; the log is what the score uses.
        self.log_intensity: Dict[int, float] = {i: math.log(ji.intensity / top) for i, ji in networked.items()}
        self.paths = select_paths(fabric, self.jobs, {i: ji.priority for i, ji in self.intensities.items()},
                                  self.params["paths"])
        self.contention = contending_jobs(fabric, self.jobs, self.paths)
        self.changes = 0
        self.op_changes = 0
        self._held: Dict[OperationId, _Held] = {}
        self._last: Dict[FlowKey, Decision] = {}

    # -- scoring -----------------------------------------------------------------------------------------------

    def score(self, state: OperationState, now: float) -> OpScore:
        """U_o, Ihat_j and S_o of one live operation (see the module docstring)."""
        job = self._jobs[state.op.job]
        waiting = state.waiting
        if state.needed_at > 0:
            slack = (state.needed_at - now) - state.remaining_bytes(job.workers) * 8.0 / self.rate_bps
        else:
            slack = math.inf
        if waiting:
            log_u = 0.0
        else:
            log_u = max(-max(slack, 0.0) / self.tau_s, LOG_URGENCY_FLOOR)
        log_i = self.log_intensity[state.op.job]
        log_s = self.alpha * log_u + (1.0 - self.alpha) * log_i
        return OpScore(state.op, waiting, slack, math.exp(log_u), math.exp(log_i), log_s)

    def scores(self, now: float) -> Dict[OperationId, OpScore]:
        """Scores of every live operation of a job that sends over the network."""
        return {s.op: self.score(s, now) for s in self.tracker.live_ops() if s.op.job in self.log_intensity}

    # -- decisions ---------------------------------------------------------------------------------------------

    def _op_contention(self, ops: Sequence[OperationId]) -> List[Tuple[int, int]]:
        """Index pairs (i < k) of operations that contend: same job, or jobs that share a link."""
        contending_jobs = {(a, b) for pair in self.contention for a in pair for b in pair}
        jobs = [op.job for op in ops]
        return [(i, k) for i in range(len(ops)) for k in range(i + 1, len(ops))
                if jobs[i] == jobs[k] or (jobs[i], jobs[k]) in contending_jobs]

    def classes(self, now: float) -> Dict[OperationId, int]:
        """Class 1..7 of every live operation after hysteresis and dwell time; updates the held state.

        Compression runs on integer keys (operation indexes): it is called on every event, and hashing
        dataclass keys in its pairwise loops dominated the controller's CPU."""
        current = self.scores(now)
        for op in [op for op in self._held if op not in current]:
            del self._held[op]
        ops = sorted(current, key=lambda o: (o.job, o.iteration, o.bucket))
        values = [current[op].log_score for op in ops]
        contention = self._op_contention(ops)
        fresh = compress_log(dict(enumerate(values)), NUM_CLASSES - 1, contention)
        # A new wait re-ranks everything at once: lifting the stalled operation is useless if the operations it
        # overtakes are held in their classes by their dwell time.
        new_wait = any(sc.waiting and (op not in self._held or not self._held[op].waiting)
                       for op, sc in current.items())
        candidates = {}
        for i, op in enumerate(ops):
            held = self._held.get(op)
            new = fresh[i] + 1
            if held is None:
                self._held[op] = _Held(new, now, current[op].waiting)
            elif new != held.cls and (new_wait or now - held.since >= self.min_dwell_s):
                candidates[i] = new
        if candidates and self.hysteresis > 0:
            # Margin: pull every candidate's score back towards its held class and compress once more; only
            # those that still leave their class in the same direction move.
            pulled = list(values)
            for i, new in candidates.items():
                pulled[i] -= (1 if new > self._held[ops[i]].cls else -1) * self.hysteresis
            again = compress_log(dict(enumerate(pulled)), NUM_CLASSES - 1, contention)
            candidates = {i: new for i, new in candidates.items()
                          if (again[i] + 1 - self._held[ops[i]].cls) * (new - self._held[ops[i]].cls) > 0}
        out: Dict[OperationId, int] = {}
        for i, op in enumerate(ops):
            held = self._held[op]
            if i in candidates:
                held.cls, held.since = candidates[i], now
                self.op_changes += 1
            held.waiting = current[op].waiting
            out[op] = held.cls
        return out

    def decide(self, now: float) -> Dict[FlowKey, Decision]:
        op_class = self.classes(now)
        # Flows carry a (job, bucket) and no iteration: if two iterations of a bucket are live, the more urgent wins.
        bucket_class: Dict[Tuple[int, int], int] = {}
        for op, cls in op_class.items():
            key = (op.job, op.bucket)
            bucket_class[key] = max(bucket_class.get(key, 0), cls)
        rules: Dict[FlowKey, Decision] = {}
        for job in self.jobs:
            if job.index not in self.log_intensity:
                continue
            for bucket in range(len(job.model.buckets)):
                cls = bucket_class.get((job.index, bucket), 0)
                for rank in range(job.workers):
                    rules[job.flow(rank, bucket)] = Decision(cls, self.paths.get((job.index, rank)))
        self.changes += count_changes(self._last, rules)
        self._last = rules
        return rules
