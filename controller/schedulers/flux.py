"""Flux: Crux's job order on a path per flow, and slack stealing for an operation whose GPU would otherwise stall.

Crux orders jobs by GPU intensity (controller/schedulers/crux.py) and that order is hard to beat where jobs
differ: a network scheduler gains only where a light job's GPU stalls while a more intensive job's operation on
the same links could have waited. Flux v1 (controller/schedulers/flux_v1.py, ``flux-v1``) re-ranked every live
operation continuously; in the emulation it lost to Crux, mainly because live flows changed class (reordered
packets, flows stranded in a starved class, TCP timeouts) and because waiting heavy operations jumped light ones
(docs/headline.md). v2 keeps Crux's order as the base and adds one exception, decided once per operation:

* **Base.** Classes 0..6 hold a static order; class 7, the ACK class (core/classes.py), is kept for steals.
  Where jobs differ in intensity (``bands=jobs``), every job gets Crux's class (published compression,
  ``crux.CruxScheduler``): a job order.
  Where every job has the same intensity (``bands=layers``; ``auto`` picks it when all priorities are within
  5%), a job order has nothing to go by but a tie-break that starves the last jobs; instead all jobs share one
  level and each job's buckets are spread over ``layer_classes`` classes by layer, first layers highest, as
  ByteScheduler orders one job: equal jobs interleave, and each sends first what its next forward pass needs
  first. A bucket's flows keep their class between operations. Two classes by default: with four, the lowest
  one starved past TCP's minimum RTO (3.7-9.3 timeouts per run where Crux had none) for at most 0.007 of
  utilisation (docs/suite.md). Starvation guard: a launching operation that would leave a live operation of a
  lower class queued behind more than ``starve_max_s`` of work in higher classes shares that operation's class
  instead (``layer_class_at_launch``). Off by default: at 0.2 it placed 1 launch lower in 9 emulation runs and
  did not change the timeouts; at 0.1 it merged most launches into class 0 and fell to ECMP's figures.
* **Steal** (real-time scheduling's slack stealing). When operation o of job j is launched (its first rank's
  ``launch`` event), with T_o its expected duration (the last observed duration of the same bucket's operation,
  else its bytes at ``rate_mbps``), it goes to class 7 for its whole life iff
    (a) its GPU would otherwise stall: needed_at_o - now - T_o < 0;
    (b) it is short: T_o <= ``steal_max_s`` (well under TCP's 200 ms minimum RTO, so what it overtakes is
        delayed, never starved into a timeout);
    (c) it is paid for by slack: every live operation p of a more intensive job that contends with j (shares a
        link under the chosen paths) has slack_p = needed_at_p - now - T_p >= T_o + the time of the steals
        already running ahead of it;
  otherwise it stays in its job's class. With ``steal_on=wait`` the same test is made again when a worker starts
  waiting for the operation (its GPU stalls: (a) holds), on what is left of it.
* **Paths per flow** (``paths=hop``, the default). Each ring hop (one flow) takes the least-loaded equal-cost
  path by itself, jobs in Crux's order; Crux puts a whole job on one path (``paths=job``). On a leaf-spine with
  more spines than jobs per uplink, a path per job leaves spines idle while each ring queues on its own; the
  scale map (docs/scale.md) found this the room above Crux, and ``crux`` with ``paths=hop`` is its ablation.
* **Order by contended capacity** (``order=contended``; default ``crux``). Crux ranks a job by its GPU work per
  second of its own busiest link with the fabric to itself. Where many jobs share oversubscribed uplinks, the links
  that limit the cluster are the shared ones; ``contended`` ranks each job by its GPU work per unit of the links'
  capacity priced by the fluid program of all jobs together (``crux.contended_intensities``). Where no link
  binds it is Crux's order. ``contended-in-place`` keeps every job the program leaves unpriced in Crux's place
  and reorders only the priced ones among their own places; ``shared-in-place`` also prices a job on the fabric's
  links only, not on its own host links (``crux.contended_in_place``).
* **No live class change.** A class is decided at launch and kept until the operation is done; a bucket's flows
  return to their job's class only between operations, when they carry nothing. (The first packets of a
  stealing operation leave in the job's class and are promoted a few milliseconds later, when the controller's
  rule lands: one upward change per steal; likewise an operation the starvation guard places lower is
  moved down once, which keeps its packets in order.)

* **Online** (``online=true``). The base order covers only the jobs running: the control loop tells the policy
  of each arrival and departure, and paths and the order are placed again then. Operations launched afterwards
  take the new order; live ones keep the class they launched in, so a reordering changes no live flow's class
  (Crux online changes them all; ``reorder_live=true`` does too, for the comparison docs/scale.md asks for).

By construction no more intensive job loses more than its slack: an operation Crux would have finished in time
still finishes in time, so Flux v2 should not fall below Crux except for the cost of the promotions and of
estimating T badly; where a light job stalls behind slack-rich heavy work, it gains.
"""
from __future__ import annotations

import math
from typing import Dict, Mapping, Optional, Sequence, Tuple

from controller.schedulers.base import OperationState, Scheduler
from controller.schedulers.compression import compress_kcut, count_changes
from controller.schedulers.crux import (
    JobIntensity,
    OnlineOrder,
    check_placed,
    contended_in_place,
    contended_intensities,
    job_intensities,
    pairs_of,
    place_paths,
    validate_path_params,
)
from core.classes import ACK_CLASS
from core.fabric import FabricView
from core.model import Decision, FlowKey, JobSpec, OperationEvent, OperationId
from core.ring import ring_bytes_per_rank
from workloads.program import IterationProgram

#: Steals share the ACK class: a steal is short (steal_max_s), so ACKs wait behind little data there.
STEAL_CLASS = ACK_CLASS
BANDS = ("auto", "jobs", "layers")
ORDERS = ("crux", "contended", "contended-in-place", "shared-in-place")
#: Jobs whose priorities differ by less than this (relative) count as equally intensive.
EQUAL_INTENSITY = 0.05


def equal_intensity(priorities) -> bool:
    """Whether all these job priorities are equal within EQUAL_INTENSITY (and there are at least two)."""
    values = [p for p in priorities]
    if len(values) < 2:
        return False
    return max(values) <= min(values) * (1.0 + EQUAL_INTENSITY)


class FluxScheduler(OnlineOrder, Scheduler):
    """Crux's job classes (0..6) plus class 7 for operations allowed to steal slack (see the module docstring)."""

    name = "flux"
    period_s = None                     # classes change only when operations start or end
    reconcile_on = ("launch", "wait", "done")
    defaults = {
        "steal_max_s": 0.1,     # longest operation that may steal (s)
        "steal_on": "launch",   # launch: decided once at launch | wait: also when a worker starts waiting for it
        "rate_mbps": 0.0,       # rate for T_o before a bucket's first observed duration; 0 = host link rate
        "paths": "hop",         # hop (a path per flow) | job (Crux's path per job) | hashed; as in crux
        "correction": "pairwise",  # Crux's k_j, as in crux: pairwise (as published) | overlap
        "steal": True,          # False: Crux's order only (classes 0..6), for ablations
        "bands": "auto",        # auto | jobs | layers: how the classes 0..6 are used (module docstring)
        "layer_classes": 2,     # with bands=layers: classes the buckets are spread over (2..7); docs/suite.md
        "margin": 2.0,          # an overtaken job must absorb margin x the steal's expected time
        "starve_max_s": 0.0,    # with bands=layers: longest a live operation may wait behind higher classes; 0 = off
        "online": False,        # True: Crux's order over the jobs running only, placed again at each arrival and
                                # departure (new operations take it; live ones keep the class they launched in)
        "reorder_live": False,  # with online: True moves live operations to the new order too, as Crux online does
        "order": "crux",        # crux: each job's P_j against its own bottleneck | contended: against the links
                                # the jobs contend for together (crux.contended_intensities) | contended-in-place:
                                # Crux's order, its priced jobs reordered so among their places
                                # (crux.contended_in_place) | shared-in-place: the same, priced on the fabric's
                                # links only
    }

    def __init__(self, fabric: FabricView, jobs: Sequence[JobSpec], params: Optional[Mapping] = None):
        super().__init__(fabric, jobs, params)
        validate_path_params(self.params)
        self.steal_max_s = float(self.params["steal_max_s"])
        self.margin = float(self.params["margin"])
        if self.margin < 1.0:
            raise ValueError("margin must be >= 1")
        self.steal_on = str(self.params["steal_on"])
        if self.steal_on not in ("launch", "wait"):
            raise ValueError("steal_on must be 'launch' or 'wait'")
        if self.steal_max_s < 0:
            raise ValueError("steal_max_s must be >= 0")
        self.starve_max_s = float(self.params["starve_max_s"])
        if self.starve_max_s < 0:
            raise ValueError("starve_max_s must be >= 0 (0: no starvation guard)")
        rate = float(self.params["rate_mbps"])
        if rate < 0:
            raise ValueError("rate_mbps must be >= 0")
        self.rate_bps = (rate if rate > 0 else fabric.host_rate_mbps) * 1e6
        for job in self.jobs:
            check_placed(job)
        self.intensities = job_intensities(fabric, self.jobs, paths=self.params["paths"],
                                           correction=str(self.params["correction"]))
        if str(self.params["bands"]) not in BANDS:
            raise ValueError(f"bands must be one of {', '.join(BANDS)}, not {self.params['bands']!r}")
        if not 2 <= int(self.params["layer_classes"]) <= STEAL_CLASS:
            raise ValueError(f"layer_classes must be 2..{STEAL_CLASS}")
        if str(self.params["order"]) not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {self.params['order']!r}")
        if not isinstance(self.params["reorder_live"], bool):
            raise ValueError(f"reorder_live must be true or false, not {self.params['reorder_live']!r}")
        self.by_index = {j.index: j for j in self.jobs}
        self.decided: Dict[OperationId, int] = {}              # op -> class decided at launch
        self._init_online()
        self.duration: Dict[Tuple[int, int], float] = {}      # (job, bucket) -> last observed duration (s)
        # What an operation takes with nothing ahead of it (ring steps' synchronisation, headers, latency): the
        # shortest duration seen for operations of its size (bytes per rank, workers), else its line-rate time
        # times the shortest ratio of duration to line-rate time seen so far (1 before any operation finished).
        self.fastest: Dict[Tuple[int, int], float] = {}
        self.best_ratio: Optional[float] = None
        self.stealing: Dict[OperationId, float] = {}           # op -> expected end of its steal
        self.launched_at: Dict[OperationId, float] = {}       # op -> when its first launch event arrived
        self.programs = {j.index: IterationProgram(j) for j in self.jobs}
        self.last_launch: Dict[int, Tuple[int, int, float]] = {}  # job -> (iteration, bucket, time) of its last launch
        self.steals = 0
        self.lowered = 0                                       # launches the starvation guard placed lower
        self.changes = 0
        self._last: Dict[FlowKey, Decision] = {}

    def _order(self) -> None:
        """Crux's paths and job order over the active jobs, and how the classes are used (``bands``)."""
        jobs = self.active_jobs()
        self.ranked = self._ranked(self.fabric, jobs)
        self.paths, self.contention = place_paths(self.fabric, jobs, self.ranked, self.params["paths"])
        networked = {j.index: self.ranked[j.index].priority for j in jobs if self.ranked[j.index].comm_s > 0}
        bands = str(self.params["bands"])
        if bands == "auto":
            bands = "layers" if equal_intensity(networked.values()) else "jobs"
        self.bands = bands
        # A job's level (``base``, compared to tell more intensive jobs) and the classes inside it: with ``jobs``
        # one class per job, in Crux's order with unique priorities; with ``layers`` one level for all, and its
        # seven classes by layer as ByteScheduler orders them (a bucket's class never changes).
        self.inner = 1 if bands == "jobs" else int(self.params["layer_classes"])
        if bands == "jobs" and networked:
            self.base: Dict[int, int] = compress_kcut(networked, pairs_of(self.contention), levels=STEAL_CLASS)
        else:
            self.base = {i: 0 for i in networked}
        if self.params["reorder_live"]:  # live operations (steals aside) take their job's new class now
            for op, cls in self.decided.items():
                if cls != STEAL_CLASS and op.job in self.base:
                    self.decided[op] = self.band_class(self.by_index[op.job], op.bucket)

    def _ranked(self, fabric: FabricView, jobs: Sequence[JobSpec]) -> Dict[int, JobIntensity]:
        """The priorities that order the jobs (``order``)."""
        if self.params["order"] == "contended":
            return contended_intensities(fabric, jobs, self.intensities)
        if self.params["order"] in ("contended-in-place", "shared-in-place"):
            return contended_in_place(fabric, jobs, self.intensities,
                                      shared_only=self.params["order"] == "shared-in-place")
        return self.intensities

    def on_fabric_change(self, fabric: FabricView) -> None:
        super().on_fabric_change(fabric)
        self.ranked = self._ranked(fabric, self.active_jobs())
        self.paths, self.contention = place_paths(fabric, self.active_jobs(), self.ranked, self.params["paths"])

    # -- what an operation costs and how much slack it has ------------------------------------------------------
    def expected_s(self, job: JobSpec, bucket: int, remaining_bytes: Optional[int] = None,
                   stolen: bool = False) -> float:
        """T: the last observed duration of this bucket's operation (scaled to what is left), else its bytes at
        the expected rate. ``stolen``: its duration in the steal class instead, where nothing is ahead of it: its
        bytes at the line rate times the best ratio of observed duration to line-rate time of any operation so
        far (the last duration of a light job's bucket is stretched by whatever was ahead of it then)."""
        per_rank = ring_bytes_per_rank(job.model.buckets[bucket].nbytes, job.workers)
        left = per_rank if remaining_bytes is None else remaining_bytes
        line_s = left * 8.0 / self.rate_bps
        if stolen:
            return self.unhindered_s(job, left, per_rank)
        seen = self.duration.get((job.index, bucket))
        if seen is not None and per_rank > 0:
            return seen * left / per_rank
        return line_s

    def slack_s(self, state: OperationState, now: float) -> Optional[float]:
        job = self.by_index[state.op.job]
        if not state.needed_at:
            return None
        return state.needed_at - now - self.expected_s(job, state.op.bucket, state.remaining_bytes(job.workers))

    def contends(self, a: int, b: int) -> bool:
        return a == b or frozenset((a, b)) in self.contention

    # -- events ----------------------------------------------------------------------------------------------------
    def on_event(self, event: OperationEvent, now: float) -> None:
        first_launch = event.kind == "launch" and event.op not in self.tracker.live \
            and event.op not in self.tracker.finished
        super().on_event(event, now)
        state = self.tracker.live.get(event.op)
        if first_launch and state is not None:
            self.launched_at[event.op] = now
            self.last_launch[event.job] = (event.iteration, event.bucket, now)
            self.decided[event.op] = self._decide_steal(state, now)
        elif (event.kind == "wait" and self.steal_on == "wait" and state is not None
              and self.decided.get(event.op) != STEAL_CLASS):
            # The GPU stalls now: what is left of the operation may steal (one upward change of its class);
            # otherwise it keeps the class it was given at launch.
            if self._decide_steal(state, now, remaining=True) == STEAL_CLASS:
                self.decided[event.op] = STEAL_CLASS
        if event.kind == "done" and event.op not in self.tracker.live:
            self.decided.pop(event.op, None)
            self.stealing.pop(event.op, None)
            start = self.launched_at.pop(event.op, None)
            if start is not None:
                # A finished operation's duration, for the next estimate of the same bucket.
                took = max(now - start, 0.0)
                self.duration[(event.job, event.bucket)] = took
                job = self.by_index[event.job]
                line_s = ring_bytes_per_rank(job.model.buckets[event.bucket].nbytes, job.workers) * 8.0 / self.rate_bps
                per_rank = self._per_rank(job, event.bucket)
                size = (per_rank, job.workers)
                self.fastest[size] = min(took, self.fastest.get(size, took))
                if line_s > 0:
                    ratio = max(took / line_s, 1.0)
                    self.best_ratio = ratio if self.best_ratio is None else min(self.best_ratio, ratio)

    def band_class(self, job: JobSpec, bucket: int) -> int:
        """A bucket's class: its job's level x inner + its layer position spread over 0..inner-1 (the last
        bucket, the first layers, highest), as ``bytescheduler``'s linear mapping does over 0..6."""
        buckets = len(job.model.buckets)
        inside = int(math.floor((self.inner - 1) * bucket / (buckets - 1) + 0.5)) if buckets > 1 else self.inner - 1
        return self.base[job.index] * self.inner + inside

    @staticmethod
    def _per_rank(job: JobSpec, bucket: int) -> int:
        return int(ring_bytes_per_rank(job.model.buckets[bucket].nbytes, job.workers))

    def _more_intensive(self, job_index: int, base: int) -> set:
        """Jobs in a higher class than ``base`` whose paths share a link with ``job_index``'s."""
        return {j for j, cls in self.base.items() if cls > base and j != job_index and self.contends(job_index, j)}

    def unhindered_s(self, job: JobSpec, left: float, per_rank: Optional[int] = None) -> float:
        """Seconds to send ``left`` of an operation of ``per_rank`` bytes per rank (default: ``left``) with
        nothing ahead of it."""
        per_rank = int(left) if per_rank is None else per_rank
        fastest = self.fastest.get((per_rank, job.workers))
        if fastest is not None and per_rank > 0:
            return fastest * left / per_rank
        return left * 8.0 / self.rate_bps * (self.best_ratio or 1.0)

    def chain_absorbs(self, job: JobSpec, delay: float, now: float) -> bool:
        """Whether ``job`` (more intensive than a would-be stealer) absorbs ``delay`` seconds of lost link time
        from ``now`` without any of its operations finishing later than it would have, wherever that would be
        past its need. Its live operations and the ones its backward pass will still launch (the program
        fixes when) are served in launch order at the rate an operation with nothing ahead of it gets; the delay
        is absorbed by the first gap in that chain. A steal checked only against live operations would push
        the job's later, tighter operations (the last bucket of a backward pass is needed at once) past their
        need."""
        program = self.programs[job.index]
        chain = [(s.launched_at, s.needed_at or now, self._left_s(s)) for s in self.tracker.live_ops(job.index)]
        last = self.last_launch.get(job.index)
        if last is not None:
            iteration, bucket, launched = last
            buckets = program.buckets
            at = launched
            if bucket == buckets[-1].index and iteration + 1 < program.iterations:
                # Backward pass done: the next one starts after a forward pass at the earliest.
                iteration, bucket = iteration + 1, -1
                at = max(launched + sum(b.forward_s for b in buckets), now)
            for b in buckets:
                if b.index <= bucket:
                    continue
                at += b.backward_s
                per_rank = ring_bytes_per_rank(b.nbytes, job.workers)
                chain.append((at, at + program.needed_offset(b.index, iteration), self.unhindered_s(job, per_rank)))
        chain.sort()
        end_without, end_with = now, now + delay   # with the steal, the link is the stealer's for ``delay``
        for launched, needed, duration in chain:
            end_without = max(end_without, launched) + duration
            end_with = max(end_with, launched) + duration
            if end_with > end_without + 1e-9 and end_with > needed:
                return False
        return True

    def _left_s(self, state: OperationState) -> float:
        """What a live operation still takes with nothing ahead of it."""
        job = self.by_index[state.op.job]
        return self.unhindered_s(job, state.remaining_bytes(job.workers), self._per_rank(job, state.op.bucket))

    def layer_class_at_launch(self, job: JobSpec, state: OperationState) -> int:
        """The class a launching operation takes in the layer order: its bucket's, lowered (to share a class
        instead of overtaking) wherever putting it above a live operation would leave that operation queued
        behind more than ``starve_max_s`` of work in higher classes. A strict priority starves what is below
        it for as long as what is above has data; past TCP's 200 ms minimum RTO the starved flow times out
        and is then slower than if it had shared. A job order (``bands=jobs``) is Crux's and is left as it is."""
        cls = self.band_class(job, state.op.bucket)
        if self.bands != "layers" or self.starve_max_s <= 0:
            return cls
        cost = self.unhindered_s(job, self._per_rank(job, state.op.bucket))
        live = [(self.decided.get(s.op, self.band_class(self.by_index[s.op.job], s.op.bucket)), s)
                for s in self.tracker.live_ops() if s.op != state.op]
        for below, p in sorted(live, key=lambda item: -item[0]):
            if below >= cls or not self.contends(job.index, p.op.job) or self._left_s(p) <= 0:
                continue
            above = sum(self._left_s(q) for c, q in live
                        if c > below and q.op != p.op and self.contends(p.op.job, q.op.job))
            if above + cost > self.starve_max_s:
                cls = below
        return cls

    def _decide_steal(self, state: OperationState, now: float, remaining: bool = False) -> int:
        """Class 7 if the operation may steal now (conditions (a)-(c) of the module docstring), else its job's.
        ``remaining``: judged on what is left of it (a worker already waits: (a) holds)."""
        job = self.by_index[state.op.job]
        if job.index not in self.base:
            return 0
        base = self.base[job.index]
        own = self.band_class(job, state.op.bucket)
        if not remaining:
            guarded = self.layer_class_at_launch(job, state)
            self.lowered += guarded < own
            own = guarded
        if not self.params["steal"]:
            return own
        left = state.remaining_bytes(job.workers) if remaining else None
        cost = self.expected_s(job, state.op.bucket, left, stolen=True)
        slack = -1.0 if remaining else self.slack_s(state, now)
        if slack is None or slack >= 0 or cost > self.steal_max_s:
            return own
        # Already running steals are ahead of this one: each overtaken operation must cover them too.
        ahead = sum(max(end - now, 0.0) for end in self.stealing.values())
        overtaken = [other for other in self.tracker.live_ops()
                     if other.op.job != job.index and self.contends(job.index, other.op.job)
                     and self.base.get(other.op.job, 0) > base and other.op not in self.stealing]
        if not overtaken:
            return own  # nothing more intensive in its way: its job's class already puts it first
        for other_job in {other.op.job for other in overtaken} | self._more_intensive(job.index, base):
            if not self.chain_absorbs(self.by_index[other_job], (cost + ahead) * self.margin, now):
                return own
        self.stealing[state.op] = now + cost
        self.steals += 1
        return STEAL_CLASS

    # -- decisions -------------------------------------------------------------------------------------------------
    def decide(self, now: float) -> Dict[FlowKey, Decision]:
        rules: Dict[FlowKey, Decision] = {}
        live = {(s.op.job, s.op.bucket): self.decided.get(s.op) for s in self.tracker.live_ops()}
        for job in self.jobs:
            if job.index not in self.base:
                continue
            for bucket in range(len(job.model.buckets)):
                cls = live.get((job.index, bucket))
                cls = self.band_class(job, bucket) if cls is None else cls
                for rank in range(job.workers):
                    rules[job.flow(rank, bucket)] = Decision(cls, self.paths.get((job.index, rank)))
        self.changes += count_changes(self._last, rules)
        self._last = rules
        return rules
