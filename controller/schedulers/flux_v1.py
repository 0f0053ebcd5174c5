"""Flux v1 (``flux-v1``): per-operation priority from the operation's urgency and its job's GPU intensity.

Kept for comparison; ``flux`` is v2 (controller/schedulers/flux.py).

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
    Ihat_o  = Ihat_j * Rbar_j / max(R_o, 4 kB)   the operation's intensity (``size_aware``, default): GPU work
                                                 per second of link time at operation granularity; Rbar_j is
                                                 the job's mean bytes per rank and operation
    S_o     = U_o^alpha * Ihat_o^(1 - alpha)     (Ihat_j in place of Ihat_o when not size_aware)

The paragraphs below describe the score with Ihat_j; with ``size_aware`` read Ihat_o.

In logs, ln S_o = -alpha * slack_o / tau + (1 - alpha) ln Ihat_j (for slack >= 0): the score ranks by slack, with
a job e times more intensive credited tau (1 - alpha) / alpha seconds of extra slack (0.2 s at the defaults).
So a waiting operation (slack <= 0, U = 1) of a job with Ihat = 0.25 outranks a most-intensive job's operation
whose slack exceeds tau (1-alpha)/alpha * ln 4 = 0.28 s: Flux's defining difference from Crux, where the
intensive job always wins. Raw intensity I_j is used, not Crux's overlap-corrected P_j: slack already accounts
for the overlap, per operation. ln U is floored at -20 (slack beyond 20 tau is equally non-urgent) so scores stay
finite.

Classes. Scores go through ``compression.compress_log`` into 7 levels (1..7, 0 meaning none yet), with
contention between operations of jobs that share a link (and within a job); level l travels in data class l - 1
(0..6: class 7 carries ACKs, core/classes.py). A
bucket's flows between two operations keep a *resting* score, its job's intensity with the urgency of
``rest_slack_s`` of slack, compressed together with the live operations: an operation's first packets leave
before its ``launch`` event has become a rule, and for a small bucket that can be most of the operation, so
they must not start in the lowest class. Paths are Crux's: jobs in decreasing P_j take the least-loaded path
(``paths`` as in crux), fixed for the run.

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
* no demotion in flight (unless ``demote_live``): a live operation's class only rises, from its bucket's resting
  class, until it finishes. A flow moved to a lower class while it has packets in flight finds them stuck
  behind higher classes (which leave the lower ones 1% of the link); its RTT estimate still reflects the old
  class, so its retransmission timer fires, cwnd collapses to one segment, and the flow loses far more than
  the reordering was worth (measured on the headline scenario: 7x more retransmission timeouts than Crux with
  demotions allowed). Lower-scoring operations therefore make room only as others finish;
* dwell time: an operation keeps its class for at least ``min_dwell_s`` after a change, except in a decision
  where a worker has just started waiting for some operation: a stalled GPU is exactly what Flux exists to fix,
  so that decision re-ranks every operation at once (the stalled one up, those it overtakes down). Such rounds
  happen at most once per ``wait`` event.

When a live operation may change class at all is set by ``promote_on``: "wait" (default) keeps the class it got
at launch until a worker starts waiting for it; "any" lets it follow its score; "never" fixes it at launch. Each
change of a live flow's class reorders its packets, which TCP pays for in retransmissions.

``mode`` "banded" replaces the compression of one score by fixed bands: jobs in decreasing intensity own
disjoint ranges of classes, and an operation's place inside its job's band comes from its urgency alone (see
``_make_bands`` and ``_banded_class``), so no operation ever overtakes a more intensive job's.

Measured on the headline scenario (docs/headline.md), none of these variants beats Crux's one class per job.

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
from controller.schedulers.crux import (
    JobIntensity,
    check_placed,
    job_intensity,
    place_paths,
    validate_path_params,
)
from core.classes import NUM_CLASSES

#: ln U never goes below this: operations with slack above 20 tau are all equally non-urgent.
from core.fabric import FabricView

#: ln U never goes below this: operations with slack above 20 tau are all equally non-urgent.
from core.model import Decision, FlowKey, JobSpec, OperationId

#: ln U never goes below this: operations with slack above 20 tau are all equally non-urgent.
LOG_URGENCY_FLOOR = -20.0
#: In "banded" mode, ln of the job intensity is multiplied by this, so jobs never interleave.
BAND_SCALE = 1000.0
#: Iteration number of the resting score of a bucket that has no live operation.
RESTING = -1
#: Remaining bytes below this count as this much (a few segments): a finishing operation is not infinitely intense.
MIN_REMAINING_BYTES = 4096


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


class FluxV1Scheduler(Scheduler):
    """Per-operation urgency x job intensity, compressed into levels 1..7 (data classes 0..6) with hysteresis and
    dwell time."""

    name = "flux-v1"
    period_s = 0.1
    defaults = {
        "alpha": 0.5,         # weight of urgency against intensity in S = U^alpha * Ihat^(1-alpha)
        "tau_s": 0.2,         # slack (s) over which urgency falls by a factor e
        "rate_mbps": 0.0,     # expected sending rate for the slack; 0 = host link rate
        "hysteresis": 0.1,    # margin in ln S by which an operation must cross a class boundary
        "min_dwell_s": 0.05,  # least time between class changes of one operation (waits excepted)
        "paths": "job",       # job | hop | hashed, as in crux
        "rest_slack_s": 0.2,  # slack assumed for a bucket's flows between its operations
        "demote_live": False,  # may a live operation move to a lower class (risking RTOs of its flows)?
        "size_aware": True,   # scale the job's intensity by the operation's remaining bytes (see score)
        "promote_on": "wait",  # when a live operation may change class: "wait" (a worker starts waiting) | "any"
        "mode": "product",    # how urgency and intensity combine: "product" | "banded" (see combine)
    }

    def __init__(self, fabric: FabricView, jobs: Sequence[JobSpec], params: Optional[Mapping] = None):
        super().__init__(fabric, jobs, params)
        validate_path_params(self.params)
        self.alpha = float(self.params["alpha"])
        self.tau_s = float(self.params["tau_s"])
        self.hysteresis = float(self.params["hysteresis"])
        self.min_dwell_s = float(self.params["min_dwell_s"])
        self.rest_slack_s = float(self.params["rest_slack_s"])
        self.demote_live = bool(self.params["demote_live"])
        self.size_aware = bool(self.params["size_aware"])
        self.mode = str(self.params["mode"])
        if self.mode not in ("product", "banded"):
            raise ValueError("mode must be 'product' or 'banded'")
        self.promote_on = str(self.params["promote_on"])
        if self.promote_on not in ("wait", "any", "never"):
            raise ValueError("promote_on must be 'wait', 'any' or 'never'")
        if self.promote_on == "never":
            self.reconcile_on = ("launch", "done")
        elif self.promote_on == "wait":
            # Progress can only move a live operation that is not waited for, which "wait" forbids: it updates
            # the scores (and the periodic decisions) but need not trigger a decision of its own.
            self.reconcile_on = ("launch", "wait", "resume", "done")
        # Mean bytes one rank sends per operation, over the job's buckets.
        self.mean_op_bytes = {j.index: max(2 * (j.workers - 1) * j.model.gradient_bytes
                                           / (j.workers * len(j.model.buckets)), 1.0) for j in self.jobs}
        rate = float(self.params["rate_mbps"])
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError("alpha must be in [0, 1]")
        if self.tau_s <= 0:
            raise ValueError("tau_s must be > 0")
        if rate < 0 or self.hysteresis < 0 or self.min_dwell_s < 0 or self.rest_slack_s < 0:
            raise ValueError("rate_mbps, hysteresis, min_dwell_s and rest_slack_s must be >= 0")
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
        self.bands = self._make_bands() if self.mode == "banded" else {}
        self.paths, self.contention = place_paths(fabric, self.jobs, self.intensities, self.params["paths"])
        self.changes = 0
        self._flow_cache = None
        self._decisions: Dict[Tuple[int, Optional[int]], Decision] = {}
        self.op_changes = 0
        self._held: Dict[OperationId, _Held] = {}
        self._last: Dict[FlowKey, Decision] = {}

    def on_fabric_change(self, fabric: FabricView) -> None:
        """Paths placed again over what is left (as Crux does); scores, live operations and classes are kept."""
        super().on_fabric_change(fabric)
        self.paths, _ = place_paths(fabric, self.jobs, self.intensities, self.params["paths"])
        self._flow_cache = None

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
        log_i = self.op_log_intensity(job, state.op.bucket, state.remaining_bytes(job.workers))
        return OpScore(state.op, waiting, slack, math.exp(log_u), math.exp(log_i),
                       self.combine(job.index, log_u, log_i))

    def _make_bands(self) -> Dict[int, Tuple[int, int]]:
        """Job index -> (lowest, highest) class of its band, for "banded" mode.

        Jobs in decreasing intensity take the levels from 7 down; with fewer jobs than the 7 classes, the spare
        classes go one at a time to the jobs from the least intensive up: they communicate the most, so they
        have the most operations to tell apart. With 7 jobs or more, jobs share classes by compression of their
        intensities (no room for operations)."""
        order = sorted(self.log_intensity, key=lambda j: -self.log_intensity[j])
        levels = NUM_CLASSES - 1
        if len(order) >= levels:
            cls = compress_log({j: self.log_intensity[j] for j in order}, levels)
            return {j: (c + 1, c + 1) for j, c in cls.items()}
        width = {j: 1 for j in order}
        spare = levels - len(order)
        k = 0
        while spare > 0:
            width[order[-1 - (k % len(order))]] += 1
            spare -= 1
            k += 1
        bands, top = {}, levels
        for j in order:
            bands[j] = (top - width[j] + 1, top)
            top -= width[j]
        return bands

    def _banded_class(self, sc: OpScore) -> int:
        """Class inside the job's band: the top for an operation a GPU waits for, one lower per tau_s of slack."""
        low, high = self.bands[sc.op.job]
        drop = 0 if sc.waiting else int(-math.log(max(sc.urgency, 1e-300)))
        return max(low, high - drop)

    def combine(self, job_index: int, log_u: float, log_i: float) -> float:
        """ln S from ln U and ln Ihat (operation or job intensity), by ``mode``.

        "product": S = U^alpha * Ihat^(1-alpha), one scale for all operations.
        "banded": the job's intensity ranks first (BAND_SCALE makes a factor e between two jobs' intensities
        outweigh any urgency), and U^alpha * (Ihat_o / Ihat_j)^(1-alpha) orders the operations within a job's
        band: the classes a job gets separate its urgent operations from the others, and no operation ever
        overtakes a more intensive job's."""
        if self.mode == "product":
            return self.alpha * log_u + (1.0 - self.alpha) * log_i
        log_job = self.log_intensity[job_index]
        return BAND_SCALE * log_job + self.alpha * log_u + (1.0 - self.alpha) * (log_i - log_job)

    def op_log_intensity(self, job: JobSpec, bucket: int, remaining_bytes: int) -> float:
        """ln of the operation's intensity, normalised so that the job's whole-bucket average is ln Ihat_j.

        Ihat_o = Ihat_j * (mean bytes per rank of the job's operations) / (bytes o still has to send): GPU work per
        second of link time at the granularity of one operation. Crux's intensity ranks jobs by GPU work per
        second of communication; an operation that is almost done, or a small bucket, frees its GPUs after
        less link time than the job's average one and ranks higher, a big one lower. Without this, an urgent
        operation of a communication-heavy job would hold the top class for seconds and starve every small
        operation below it into retransmission timeouts (measured; see docs/schedulers.md)."""
        if not self.size_aware:
            return self.log_intensity[job.index]
        remaining = max(remaining_bytes, MIN_REMAINING_BYTES)
        return self.log_intensity[job.index] + math.log(self.mean_op_bytes[job.index] / remaining)

    def scores(self, now: float) -> Dict[OperationId, OpScore]:
        """Scores of every live operation of a job that sends over the network."""
        return {s.op: self.score(s, now) for s in self.tracker.live_ops() if s.op.job in self.log_intensity}

    def resting_scores(self, live: Mapping[OperationId, OpScore]) -> Dict[OperationId, OpScore]:
        """A score for every (job, bucket) with no live operation, keyed by iteration RESTING.

        Its flow carries nothing until the bucket's next operation starts, but the first packets of that
        operation leave before its ``launch`` event has been turned into a rule (a reaction takes milliseconds,
        a small bucket's whole all-reduce not much more). So the flow waits in the class that operation would
        likely get: its job's intensity with the urgency of ``rest_slack_s`` of slack."""
        busy = {(op.job, op.bucket) for op in live}
        log_u = max(-self.rest_slack_s / self.tau_s, LOG_URGENCY_FLOOR)
        out = {}
        for job in self.jobs:
            log_i = self.log_intensity.get(job.index)
            if log_i is None:
                continue
            for b in range(len(job.model.buckets)):
                if (job.index, b) not in busy:
                    op = OperationId(job.index, RESTING, b)
                    full = 2 * (job.workers - 1) * job.model.buckets[b].nbytes // job.workers
                    log_o = self.op_log_intensity(job, b, full)
                    out[op] = OpScore(op, False, self.rest_slack_s, math.exp(log_u), math.exp(log_o),
                                      self.combine(job.index, log_u, log_o))
        return out

    # -- decisions ---------------------------------------------------------------------------------------------

    def _op_contention(self, ops: Sequence[OperationId]) -> List[Tuple[int, int]]:
        """Index pairs (i < k) of operations that contend: same job, or jobs that share a link."""
        contending_jobs = {(a, b) for pair in self.contention for a in pair for b in pair}
        jobs = [op.job for op in ops]
        return [(i, k) for i in range(len(ops)) for k in range(i + 1, len(ops))
                if jobs[i] == jobs[k] or (jobs[i], jobs[k]) in contending_jobs]

    def classes(self, now: float) -> Dict[OperationId, int]:
        """Level 1..7 of every live operation after hysteresis and dwell time; updates the held state.

        Compression runs on integer keys (operation indexes): it is called on every event, and hashing
        dataclass keys in its pairwise loops dominated the controller's CPU."""
        current = self.scores(now)
        current.update(self.resting_scores(current))
        resting_before = {(op.job, op.bucket): held.cls for op, held in self._held.items()
                          if op.iteration == RESTING}
        for op in [op for op in self._held if op not in current]:
            del self._held[op]
        ops = sorted(current, key=lambda o: (o.job, o.iteration, o.bucket))
        values = [current[op].log_score for op in ops]
        contention = self._op_contention(ops)
        if self.mode == "banded":
            fresh = {i: self._banded_class(current[op]) - 1 for i, op in enumerate(ops)}
        else:
            fresh = compress_log(dict(enumerate(values)), NUM_CLASSES - 1, contention)
        # A new wait re-ranks everything at once: lifting the stalled operation is useless if the operations it
        # overtakes are held in their classes by their dwell time.
        new_wait = any(sc.waiting and (op not in self._held or not self._held[op].waiting)
                       for op, sc in current.items())
        candidates = {}
        for i, op in enumerate(ops):
            held = self._held.get(op)
            new = fresh[i] + 1
            live = op.iteration != RESTING
            if held is None:
                if live and not self.demote_live:
                    # The operation's first packets already left in its bucket's resting class.
                    new = max(new, resting_before.get((op.job, op.bucket), 1))
                self._held[op] = _Held(new, now, current[op].waiting)
            elif new != held.cls and (new_wait or now - held.since >= self.min_dwell_s):
                if live and new < held.cls and not self.demote_live:
                    continue
                if live and self.promote_on == "never":
                    continue
                if live and self.promote_on == "wait" and not (current[op].waiting and not held.waiting):
                    continue
                candidates[i] = new
        if candidates and self.hysteresis > 0 and self.mode != "banded":
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
        # decide() runs on every event: flow keys and decisions are built once and reused.
        if self._flow_cache is None:
            self._flow_cache = [((job.index, bucket), [(job.flow(rank, bucket), self.paths.get((job.index, rank)))
                                                       for rank in range(job.workers)])
                                for job in self.jobs if job.index in self.log_intensity
                                for bucket in range(len(job.model.buckets))]
        for key, flows in self._flow_cache:
            cls = max(bucket_class.get(key, 1) - 1, 0)      # level 1..7 -> data class 0..6
            for flow, path in flows:
                decision = self._decisions.get((cls, path))
                if decision is None:
                    decision = self._decisions[(cls, path)] = Decision(cls, path)
                rules[flow] = decision
        self.changes += count_changes(self._last, rules)
        self._last = rules
        return rules
