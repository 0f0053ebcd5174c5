"""The flow-level engine: the workers' iteration program, ring all-reduce steps and the scheduler, in simulated time.

One discrete-event loop (a heap of timed events, plus the network's next flow completion) runs:

* every rank's GPU through ``workloads.program.IterationProgram`` (the very steps workloads/worker.py runs):
  computes take their profile's time, launches start an operation, waits block the GPU until the rank's part of
  the operation is done;
* every operation (one bucket's all-reduce in one iteration) as the ring of ``workloads/allreduce.py``: 2(N-1)
  dependent steps; rank r's step s sends one chunk (np.array_split sizes, plus the 8-byte message header) to rank
  r+1 and may start once r launched, r's step s-1 is sent and r has received step s-1 from r-1. Rank r is done
  when its last step is sent and its last chunk received. Each rank's connection for a bucket is one flow (the
  flow key the scheduler decides on); it carries one step at a time;
* with ``ring_model="pipelined"`` a bucket's whole ring is one flow over all its hops' links instead (a link
  crossed by k hops carries k times its rate), from the moment every rank has launched, with the per-step
  terms charged 2(N-1) times: far fewer rate computations at scale (docs/twin.md); in an overflowing FIFO it
  sends in ``OVERFLOW_PIECES`` pieces and waits out each piece's expected timeouts out of the network;
* the network: every sending connection is a fluid flow on its route; rates come from ``twin.network.allocate``
  whenever the set of sending flows, a class or a path changes, and each flow's completion time follows;
* the scheduler: the project's own policy object (controller/schedulers) gets the workers' ``OperationEvent``s
  (launch, progress at each quarter of a rank's bytes, wait, resume, done), ``event_latency_s`` after they
  happen; events whose kind is in its ``reconcile_on`` make it decide (once per ``decide_batch_s`` window), and
  so does its ``period_s`` timer; decisions reach the network ``reaction_latency_s`` later. The first decision
  is in place before the jobs start, as the controller installs it at set-up.

Decisions give a flow's class and path (an index into FabricView.paths); a flow with no decision, or path None,
is hashed (``twin.network.hashed_path``: Open vSwitch's hash, or a hash salted with the run's seed). The
artefact terms of ``twin.model`` act on steps (latency, same-class queueing, timeouts in an overflowing class
FIFO), flows (retransmission timeouts after starvation, live class changes) and links (goodput).

Times are simulated seconds from 0; the scheduler sees them as its ``now`` and in the events' ``time`` and
``needed_at``, so its arithmetic is the same as on the testbed's clock.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from controller.loop import ControlLoop
from controller.schedulers.base import Scheduler
from core.classes import NUM_CLASSES
from core.model import Decision, FlowKey, JobSpec, OperationEvent
from core.ring import ring_bytes_per_rank, ring_steps
from core.queues import DEFAULT_QUEUE_MS, MTU_BYTES, queue_packets
from core.transport import TCP_PAYLOAD
from twin.model import ModelParams
from twin.network import Network, allocate, hashed_path
from workloads.program import COMPUTE, LAUNCH, WAIT, IterationProgram

HEADER_BYTES = 8          # workloads/allreduce.py: one message header per ring step
RING_MODELS = ("steps", "pipelined")
PROGRESS_STEPS = 4        # workloads/worker.py: a progress event per quarter of a rank's bytes
OVERFLOW_PIECES = 8       # a pipelined ring pays its expected overflow timeouts after each eighth of its bytes
FLOAT_BYTES = 4
_EPS_T = 1e-12

# Heap event kinds (ordered so that, at one instant, deliveries happen before the GPU moves on).
_EV_STEP_DONE, _EV_START, _EV_RESUME_FLOW, _EV_APPLY, _EV_EVENTS, _EV_DECIDE, _EV_PERIODIC, _EV_GPU = range(8)


def chunk_bytes(nbytes: int, workers: int) -> List[int]:
    """Bytes of each of the N chunks of a bucket (np.array_split of its float32 elements)."""
    elements = max(nbytes // FLOAT_BYTES, workers)
    base, extra = divmod(elements, workers)
    return [(base + (1 if i < extra else 0)) * FLOAT_BYTES for i in range(workers)]


def step_chunk(rank: int, step: int, workers: int) -> int:
    """Index of the chunk rank ``rank`` sends in ring step ``step`` (reduce-scatter, then all-gather)."""
    if step < workers - 1:
        return (rank - step) % workers
    return (rank + 1 - (step - (workers - 1))) % workers


class Op:
    """One operation (a bucket's all-reduce in one iteration) of one job, over all its ranks."""

    __slots__ = ("job", "iteration", "bucket", "workers", "steps", "nbytes", "chunks", "share", "launched",
                 "needed_at", "sent", "sending", "bytes_sent", "next_mark", "done_at", "ranks_done")

    def __init__(self, job: JobSpec, iteration: int, bucket: int, nbytes: int):
        n = job.workers
        self.job, self.iteration, self.bucket, self.workers = job, iteration, bucket, n
        self.steps = ring_steps(n)
        self.nbytes = nbytes
        self.chunks = chunk_bytes(nbytes, n)
        self.share = ring_bytes_per_rank(nbytes, n)
        self.launched: List[Optional[float]] = [None] * n
        self.needed_at = [0.0] * n
        self.sent = [0] * n                 # steps rank r has finished sending
        self.sending = [False] * n
        self.bytes_sent = [0] * n
        self.next_mark = [self.share / PROGRESS_STEPS] * n
        self.done_at: List[Optional[float]] = [None] * n
        self.ranks_done = 0


@dataclass
class RankState:
    """One worker's GPU as the program drives it."""

    job: JobSpec
    rank: int
    program: IterationProgram
    start_at: float
    iteration: int = 0
    index: int = 0
    steps: tuple = ()
    pending: Dict[int, Op] = field(default_factory=dict)
    blocked: Optional[Op] = None
    wait_start: float = 0.0
    busy_s: float = 0.0
    wait_s: float = 0.0
    it_start: float = 0.0
    iterations: List[Tuple[float, float]] = field(default_factory=list)
    finished: bool = False


@dataclass
class RunResult:
    """What a simulation produced: per rank busy/wait and iterations, per operation times, controller figures."""

    ranks: Dict[Tuple[int, int], RankState]
    op_times: Dict[int, List[Tuple[int, int, float]]]     # job index -> (iteration, bucket, seconds)
    timeouts: Dict[int, int]                             # job index -> retransmission timeouts
    live_class_changes: int
    events: int
    decide_calls: int
    flow_changes: int
    recomputes: int
    sim_time_s: float
    wall_s: float
    completed: bool
    error: Optional[str] = None
    events_sent: int = 0
    scheduler: Any = None                                # the policy object, for its own statistics
    ring_model: str = "steps"
    starvations: Dict[int, int] = field(default_factory=dict)  # starvations of rto_s or more, by flows in the FIFO
    # job index -> the part of ``timeouts`` the starvation rule charged, and the seconds its flows spent in
    # starvations of rto_s or more (summed over its flows): how much of a job's figure rests on that rule
    # (docs/twin.md, Against the suite).
    starvation_timeouts: Dict[int, float] = field(default_factory=dict)
    starved_flow_s: Dict[int, float] = field(default_factory=dict)
    op_trace: Optional[Dict[Tuple[int, int, int], Dict[int, List[float]]]] = None  # FluidSim(trace_ops=True)


class FluidSim:
    """One run of the twin. ``run()`` returns a ``RunResult``."""

    def __init__(self, network: Network, jobs: Sequence[JobSpec], scheduler: Scheduler, params: ModelParams,
                 class_mode: str = "strict", class_floor: float = 0.0, hash_seed: int = 1,
                 time_limit_s: float = 3600.0, ring_model: str = "steps", hash_model: str = "ovs",
                 queue_ms: float = DEFAULT_QUEUE_MS, lossless: bool = False, seed: int = 1,
                 trace_ops: bool = False, window_packets: Optional[int] = None,
                 rto_min_s: Optional[float] = None):
        self.net = network
        # The transport profile's minimum retransmission timer (the lossless profile's 5 s on every route) is a
        # floor under the model's: a starvation shorter than it costs no timeout.
        if rto_min_s and params.rto_s > 0:
            params = replace(params, rto_s=max(params.rto_s, float(rto_min_s)))
        # (job, iteration, bucket) -> rank -> [launch, done], what the workers log as an op's launch and done
        # (scripts/op_timeline.py sets them side by side); None unless asked for.
        self.op_trace: Optional[Dict[Tuple[int, int, int], Dict[int, List[float]]]] = {} if trace_ops else None
        # Only the model's noise draws from it (ModelParams.step_latency_cv, share_cv).
        self.rng = np.random.default_rng(seed)
        self.jobs = list(jobs)
        self._jobs = {j.index: j for j in self.jobs}
        self.sched = scheduler
        self.p = params
        self.class_mode = class_mode
        self.class_floor = class_floor
        self.hash_seed = hash_seed
        self.hash_model = hash_model
        self.time_limit_s = time_limit_s
        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        # Connections: one per (job, rank, bucket), each the flow rank r -> r+1 of that bucket.
        keys, meta = [], []
        for job in self.jobs:
            for bucket in range(len(job.model.buckets)):
                for rank in range(job.workers):
                    keys.append(job.flow(rank, bucket))
                    meta.append((job.index, rank, bucket))
        self.conn_key: List[FlowKey] = keys
        self.conn_meta = meta
        self.conn_of: Dict[FlowKey, int] = {k: i for i, k in enumerate(keys)}
        self.conn_index: Dict[Tuple[int, int, int], int] = {m: i for i, m in enumerate(meta)}
        self.n_paths = [network.n_paths(k.src_ip, k.dst_ip) for k in keys]
        self.hashed = [hashed_path(k, self.n_paths[i], hash_seed, hash_model) for i, k in enumerate(keys)]
        self.decision: List[Decision] = [Decision()] * len(keys)
        # Entities share the network: a connection each (steps) or a bucket's whole ring (pipelined).
        if ring_model not in RING_MODELS:
            raise ValueError(f"ring model must be one of {', '.join(RING_MODELS)} (got {ring_model!r})")
        self.pipelined = ring_model == "pipelined"
        if self.pipelined:
            rings = sorted({(j, b) for j, _r, b in meta})
            self.ring_index = {rb: i for i, rb in enumerate(rings)}
            self.ent_conns = [[self.conn_index[(j, r, b)] for r in range(self._job(j).workers)] for j, b in rings]
        else:
            self.ent_conns = [[c] for c in range(len(keys))]
        self.ent_job = np.array([meta[conns[0]][0] for conns in self.ent_conns], dtype=np.int64)
        self.n_conns = np.array([len(conns) for conns in self.ent_conns], dtype=float)
        self.n_job_ids = int(self.ent_job.max()) + 1 if len(self.ent_job) else 1
        self.ent_of = [0] * len(keys)
        for e, conns in enumerate(self.ent_conns):
            for c in conns:
                self.ent_of[c] = e
        n = len(self.ent_conns)
        hops = max((len(network.route(k.src_ip, k.dst_ip, 0)) for k in keys), default=1)
        width = max(hops * len(conns) for conns in self.ent_conns) if n else 1
        self.routes = np.full((n, width), -1, dtype=np.int64)
        self.route_conn = np.full((n, width), -1, dtype=np.int64)     # which of the entity's connections
        for e in range(n):
            self._set_route(e)
        self.cls = np.zeros(n, dtype=np.int64)
        self.first_link = self.routes[:, 0].copy()
        self.fluid_time = np.zeros(n)
        self.queued_time = np.zeros(n)
        self.queued_now = np.zeros(n, dtype=bool)
        # A class FIFO overflows when it cannot hold fifo_flow_packets of every flow in it (testbed/qos.py sizes
        # it; the lossless transport profile sizes it so that it never can).
        self.overflow_on = self.p.overflow_timeouts > 0 and self.p.rto_s > 0 and not lossless
        fifo_packets = np.array([queue_packets(r, queue_ms) for r in network.rate_mbps], dtype=float)
        per_flow = np.full(network.links, max(self.p.fifo_flow_packets, 1e-9))
        if self.p.fifo_flow_rate_mbps > 0:
            # The threshold as a time of the link: scaled with each link's rate from the one it was stated at.
            per_flow = per_flow * network.rate_mbps / self.p.fifo_flow_rate_mbps
        self.fifo_flows = fifo_packets / per_flow
        self.overflow_time = np.zeros(n)
        # A pipelined ring's connections (ranks) in an overflowing FIFO, as a share of its connections, now and
        # integrated over its sending time: the step model counts a timeout for each rank whose step overflowed.
        self.overflow_conns_now = np.zeros(n)
        self.overflow_conn_time = np.zeros(n)
        # Pipelined rings in an overflowing FIFO pay their expected timeouts as they go, piece by piece (out of the
        # FIFO while they wait, as steps are), not all after the transfer: rem is the current piece's bytes,
        # piece_left what follows it, piece_time the ring's sending time in this piece.
        self.piece_left = np.zeros(n)
        self.piece_bytes = np.zeros(n)
        self.piece_steps = np.zeros(n)
        self.piece_time = np.zeros(n)
        # What a class FIFO holds at most, in bytes, and each entity's wait behind the bytes queued ahead of it:
        # the current one, and its integral since the entity started sending (queue_backlog).
        self.fifo_bytes = fifo_packets * MTU_BYTES
        # What one flow can have queued: its step's bytes, at most its receive window where the profile clamps it;
        # a lossless FIFO holds every flow's window (core/transport.py), so only the windows bound the backlog.
        self.window_bytes = float(window_packets) * TCP_PAYLOAD if window_packets else np.inf
        self.backlog_cap = np.full(network.links, np.inf) if lossless else self.fifo_bytes
        self.backlog_now = np.zeros(n)
        self.step_bytes = np.full(n, np.inf)    # a pipelined ring's bytes per step (one step in flight per hop)
        self.backlog_int = np.zeros(n)
        self.backlog_t = np.zeros(n)
        self.sending_since = np.zeros(n)
        self.overflow_now = np.zeros(n, dtype=bool)
        self.xfer_overflow = np.zeros(n, dtype=bool)
        # priority_hol_packets: whether a lower class had a link of the entity's path when its step started, the
        # longest packet time of those links, and how long the connection was idle before the step (its gap).
        self.xfer_hol = np.zeros(n, dtype=bool)
        self.hol_packet_s = np.zeros(n)
        self.idle_since = np.full(n, -np.inf)
        self.step_gap = np.zeros(n)
        self.packet_s = MTU_BYTES * 8.0 / network.capacity
        self.lowest_busy = np.full(network.links, 8, dtype=np.int64)
        self.total = np.zeros(n)
        self.t_acc = np.zeros(n)
        self.marks = np.zeros(n, dtype=np.int64)
        self._rank_bytes_cache: Dict[Tuple[int, int], List[int]] = {}
        self.active = np.zeros(n, dtype=bool)       # a step is in the network and may be given a rate
        self.share_draw = np.ones(n)                 # share_cv: each step's drawn weight inside its class
        self.step_start = np.zeros(n)                # when each entity's current step started (fifo_order)
        # share_alpha: every class's link prices from the last allocation, where the next one starts.
        self.alpha_prices = np.zeros((NUM_CLASSES, network.links))
        self.suspended = np.zeros(n, dtype=bool)    # ... but stopped (retransmission timer, class change)
        self.rem = np.zeros(n)                      # bytes left of the current step (at t_ref)
        self.rate = np.zeros(n)                     # bytes/s
        self.t_ref = np.zeros(n)
        self.finish = np.full(n, np.inf)
        self.xfer_op: List[Optional[Op]] = [None] * n
        self.xfer_queued = np.zeros(n, dtype=bool)
        self.starved_since = np.full(n, np.nan)
        self.starved_fifo = np.ones(n, dtype=np.int64)  # flows in its class FIFO when its starvation began
        self.starvations: Dict[int, int] = {}           # starvations of rto_s or more, by that number of flows
        self.backoff = np.zeros(n, dtype=np.int64)
        # rto_rttvar: each entity's RTT variance (Linux's rttvar, what its timer adds to the smoothed RTT), raised by
        # a starvation and decaying while it sends, from rttvar_mark (NaN: not sending, no round trips to count).
        self.rttvar = np.zeros(n)
        self.rttvar_mark = np.full(n, np.nan)
        self.fifo_delay = self.fifo_bytes * 8.0 / network.capacity
        self.dirty = False
        self.ops: Dict[Tuple[int, int, int], Op] = {}
        self.op_times: Dict[int, List[Tuple[int, int, float]]] = {j.index: [] for j in self.jobs}
        self.timeouts: Dict[int, float] = {j.index: 0 for j in self.jobs}
        self.starvation_timeouts: Dict[int, float] = {j.index: 0 for j in self.jobs}
        self.starved_flow_s: Dict[int, float] = {j.index: 0.0 for j in self.jobs}
        self.live_class_changes = 0
        self.events = 0
        self.events_sent = 0
        self.flow_changes = 0
        self.recomputes = 0
        self.programs = {j.index: IterationProgram(j) for j in self.jobs}
        self.ranks: Dict[Tuple[int, int], RankState] = {}
        for job in self.jobs:
            for rank in range(job.workers):
                self.ranks[(job.index, rank)] = RankState(job, rank, self.programs[job.index], job.start_offset_s)
        self.running = len(self.ranks)
        # The controller's own loop, at simulated times: the same decisions, diffed the same way, as in the emulation.
        self.loop = ControlLoop(scheduler, keys)
        self.uses_events = self.loop.listens
        self._decide_pending = False
        self._pending_events: List[OperationEvent] = []
        # Flow sizes of the ring: the (job, bucket) -> chunk list, and each rank's share, computed once.
        self._nbytes = {(j.index, b.index): max(b.nbytes // FLOAT_BYTES, j.workers) * FLOAT_BYTES
                        for j in self.jobs for b in j.model.buckets}

    # ------------------------------------------------------------------------------------------------ plumbing
    def _push(self, t: float, kind: int, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, payload))

    def _job(self, index: int) -> JobSpec:
        return self._jobs[index]

    def _set_route(self, e: int) -> None:
        """The links of entity e from its connections' paths (a link its ring crosses twice counts twice)."""
        links: List[int] = []
        owners: List[int] = []
        for i, c in enumerate(self.ent_conns[e]):
            key = self.conn_key[c]
            path = self.decision[c].path
            route = self.net.route(key.src_ip, key.dst_ip, self.hashed[c] if path is None else path)
            links += route
            owners += [i] * len(route)
        self.routes[e, :] = -1
        self.routes[e, :len(links)] = links
        self.route_conn[e, :] = -1
        self.route_conn[e, :len(owners)] = owners

    def _entity_class(self, e: int) -> int:
        """A connection's class; a pipelined ring moves at the pace of its lowest class."""
        return min(self.decision[c].priority_class for c in self.ent_conns[e])

    # ------------------------------------------------------------------------------------------------ events
    def _emit(self, kind: str, op: Op, rank: int, bytes_done: int = 0) -> None:
        if self.op_trace is not None and kind in ("launch", "done"):
            times = self.op_trace.setdefault((op.job.index, op.iteration, op.bucket), {}).setdefault(
                rank, [math.nan, math.nan])
            times[0 if kind == "launch" else 1] = self.now
        self.events_sent += 1
        if not self.uses_events:
            return  # a policy without events or timers decides once: the events would change nothing
        ev = OperationEvent(kind=kind, job=op.job.index, rank=rank, iteration=op.iteration, bucket=op.bucket,
                            time=self.now, nbytes=op.nbytes, bytes_done=bytes_done, needed_at=op.needed_at[rank])
        self._push(self.now + self.p.event_latency_s, _EV_EVENTS, ev)

    def _deliver(self, ev: OperationEvent) -> None:
        self.events += 1
        if self.loop.on_events(self.now, [ev]) and not self._decide_pending:
            self._decide_pending = True
            self._push(self.now + self.p.decide_batch_s, _EV_DECIDE)

    def _decide(self) -> None:
        changes = self.loop.reconcile(self.now)
        if self.p.reaction_latency_s > 0:
            self._push(self.now + self.p.reaction_latency_s, _EV_APPLY, changes)
        else:
            self._apply(changes)

    def _apply(self, changes: Mapping[FlowKey, Decision]) -> None:
        """Install the decisions that changed (the control loop's output), each flow's class and path."""
        for key, d in changes.items():
            c = self.conn_of.get(key)
            if c is None:
                continue
            old = self.decision[c]
            if old == d:
                continue
            self.flow_changes += 1
            self.decision[c] = d
            e = self.ent_of[c]
            if old.path != d.path and self.n_paths[c] > 1:
                self._set_route(e)
                self.dirty = self.dirty or self.active[e]
            if old.priority_class != d.priority_class:
                cls = self._entity_class(e)
                if cls == self.cls[e]:
                    continue
                self.cls[e] = cls
                if self.active[e]:
                    self.dirty = True
                    if self.rem[e] > 0:
                        self.live_class_changes += 1
                        self._change_live_class(e)

    def _change_live_class(self, e: int) -> None:
        """Flow e, with bytes in flight, changed class. Only a flow starved in its old class (sending at under
        ``starve_share`` of its host link until now) pays: what it has in flight stays in the old FIFO, behind
        the class that starved it. It loses ``class_change_s``: the packets it sends next in the new class let
        TCP detect and resend the stranded ones. With ``class_change_strands``, that holds only if its step has
        more left than it can have in flight (its window, or what its host link's FIFO holds where the profile
        sets none); if not, the stranded bytes are the step's tail, nothing follows them, and the step waits
        until they drain at the flow's old rate or its retransmission timer fires and resends them (one
        timeout), whichever is first. scripts/bench_class_change.py measured both cases. The starvation ends
        here, and a timer it already earned is waited for as well."""
        starved = self.rate[e] < self.p.starve_share * self.net.capacity[self.first_link[e]] / 8.0
        if not (self.p.class_change_strands or self.p.class_change_s) or self.suspended[e] or not starved:
            return
        in_flight = min(self.window_bytes, float(self.fifo_bytes[self.first_link[e]]))
        if not self.p.class_change_strands or self.rem[e] > in_flight:
            cost = self.p.class_change_s
        else:
            timer = self._timer(e)
            drain = float(self.rem[e]) / self.rate[e] if self.rate[e] > 0 else math.inf
            if drain >= timer:
                self._count_timeouts(e, 1)
            cost = min(drain, timer)
        self._end_starvation(e, not_before=self.now + cost)

    # ------------------------------------------------------------------------------------------------ network
    def _settle(self) -> None:
        """Bring every sending flow's remaining bytes to ``now``."""
        idx = np.flatnonzero(self.active & (self.rate > 0))
        if idx.size:
            self.rem[idx] -= self.rate[idx] * (self.now - self.t_ref[idx])
            np.maximum(self.rem, 0.0, out=self.rem)
        self.t_ref[idx] = self.now

    def _recompute(self) -> None:
        self.recomputes += 1
        self._settle()
        self.t_ref[:] = self.now
        idx = np.flatnonzero(self.active & ~self.suspended)
        if self.pipelined and idx.size:
            # Time each ring spent sending, and in a same-class queue: its steps' queueing is charged pro rata.
            dt = self.now - self.t_acc[idx]
            self.fluid_time[idx] += dt
            self.queued_time[idx] += dt * self.queued_now[idx]
            self.overflow_time[idx] += dt * self.overflow_now[idx]
            self.overflow_conn_time[idx] += dt * self.overflow_conns_now[idx]
            self.piece_time[idx] += dt
            self.t_acc[idx] = self.now
            if self.uses_events:
                self._progress(idx)
        while True:
            self.rate[:] = 0.0
            if not idx.size:
                self.lowest_busy[:] = 8     # nothing sends: no lower class has any link
                break
            weight = self._progress_weights(idx) if self.p.progress_weight > 0 else None
            if self.p.share_cv > 0:
                weight = self.share_draw[idx] if weight is None else weight * self.share_draw[idx]
            order = self.step_start[idx] if self.p.fifo_order > 0 else None
            rates = allocate(self.routes[idx], self.cls[idx], self.net.capacity, self.class_mode,
                             self.class_floor, weight, order, self.p.fifo_order, self.p.share_alpha,
                             self.alpha_prices) / 8.0
            self.rate[idx] = rates
            if self.p.rto_s > 0 and self._check_starvation(idx, rates):
                # Flows that timed out wait for their timers: share the links without them.
                idx = np.flatnonzero(self.active & ~self.suspended)
                continue
            if self.p.queue_delay_s > 0 or self.overflow_on or self.p.queue_backlog > 0:
                self._mark_queueing(idx, rates)
            if self.p.job_fifo_order > 0:
                self._serve_in_launch_order(idx, rates)
            if self.p.priority_hol_packets > 0:
                self._mark_lower_class(idx, rates)
            break
        with np.errstate(divide="ignore"):
            self.finish = np.where(self.rate > 0, self.now + self.rem / np.where(self.rate > 0, self.rate, 1.0),
                                   np.inf)
        self.finish[~self.active | self.suspended] = np.inf
        self.dirty = False

    def _progress_weights(self, idx: np.ndarray) -> np.ndarray:
        """``progress_weight``: each flow's weight in its class, 1 plus the term times the fraction of its
        operation's ring steps its ranks have sent."""
        weight = np.ones(idx.size)
        for i, e in enumerate(idx):
            op = self.xfer_op[e]
            if op is not None:
                weight[i] += self.p.progress_weight * sum(op.sent) / (op.workers * op.steps)
        return weight

    def _draw_share(self, e: int) -> None:
        """``share_cv``: entity e's weight inside its class for the step it starts, drawn from a gamma
        distribution of mean 1 and this coefficient of variation (the run's seed)."""
        shape = 1.0 / (self.p.share_cv * self.p.share_cv)
        self.share_draw[e] = float(self.rng.gamma(shape, 1.0 / shape))

    def _serve_in_launch_order(self, idx: np.ndarray, rates: np.ndarray) -> None:
        """``job_fifo_order``: among a job's flows that share class and route, that share of what each gets under
        max-min sharing goes to the one whose operation was launched first (a class FIFO serving a job's older
        operation ahead of its newer ones). Starvation was judged on the shared rates already, and the links
        carry the same load, so only the order in which the job's operations finish changes."""
        groups: Dict[Tuple, List[int]] = {}
        for i, e in enumerate(idx):
            groups.setdefault((int(self.ent_job[e]), int(self.cls[e]), self.routes[e].tobytes()), []).append(i)
        for members in groups.values():
            if len(members) < 2:
                continue
            lead = min(members, key=lambda i: (self.xfer_op[idx[i]].iteration, self.xfer_op[idx[i]].bucket))
            moved = rates[members] * self.p.job_fifo_order
            self.rate[idx[members]] -= moved
            self.rate[idx[lead]] += float(moved.sum())

    def _class_links(self, idx: np.ndarray, rates: np.ndarray):
        """Every (flow, link) crossing of the flows ``idx``: its row in ``idx``, the link, whether that link is
        saturated at ``rates``, and a key for (class, link)."""
        routes = self.routes[idx]
        rows, cols = np.nonzero(routes >= 0)
        links = routes[rows, cols]
        n_links = self.net.links
        load = np.bincount(links, weights=rates[rows] * 8.0, minlength=n_links)
        saturated = load >= self.net.capacity * (1 - 1e-6)
        return rows, links, saturated, self.cls[idx][rows] * n_links + links

    def _mark_queueing(self, idx: np.ndarray, rates: np.ndarray) -> None:
        """Flag the steps that cross a saturated link shared with another job's flow in their class, and those
        that cross a saturated link whose class FIFO overflows (more flows than it holds fifo_flow_packets for);
        with ``queue_backlog``, measure what each step's FIFOs hold ahead of it (``_mark_backlog``).

        Only other jobs count for the constant ``queue_delay_s`` (a constant charged behind the job's own
        operations too slowed a job alone in its class, docs/twin.md); the backlog counts every other flow by its
        bytes. Every flow counts for overflow: a FIFO drops whoever's packet arrives when it is full."""
        rows, links, saturated, key = self._class_links(idx, rates)
        n_links = self.net.links
        # Distinct jobs per (class, link): count each (key, job) pair once.
        pairs = np.unique(key * self.n_job_ids + self.ent_job[idx][rows])
        jobs_here = np.bincount(pairs // self.n_job_ids, minlength=8 * n_links)
        same = jobs_here[key] >= 2
        hit = np.zeros(idx.size, dtype=bool)
        hit[rows[saturated[links] & same]] = True
        self.xfer_queued[idx[hit]] = True
        self.queued_now[idx] = hit
        if self.p.queue_backlog > 0:
            self._mark_backlog(idx, rows, links, saturated, key)
        if self.overflow_on:
            flows_here = np.bincount(key, minlength=8 * n_links)
            over_entry = saturated[links] & (flows_here[key] > self.fifo_flows[links])
            over = np.zeros(idx.size, dtype=bool)
            over[rows[over_entry]] = True
            self.xfer_overflow[idx[over]] = True
            self.overflow_now[idx] = over
            if self.pipelined:
                # Distinct (ring, connection) pairs with a link in an overflowing FIFO, per ring.
                _rows, cols = np.nonzero(self.routes[idx] >= 0)
                width = self.route_conn.shape[1]
                owners = self.route_conn[idx[rows], cols]
                pairs = np.unique(rows[over_entry] * width + owners[over_entry])
                conns = np.bincount(pairs // width, minlength=idx.size)
                self.overflow_conns_now[idx] = conns / self.n_conns[idx]

    def _mark_lower_class(self, idx: np.ndarray, rates: np.ndarray) -> None:
        """Per link, the lowest class that takes more than its floor there: it fills the gaps the higher classes
        leave (``priority_hol_packets``; ``_meet_lower_class``)."""
        rows, _links, _saturated, key = self._class_links(idx, rates)
        n_links = self.net.links
        class_rate = np.bincount(key, weights=rates[rows] * 8.0, minlength=8 * n_links).reshape(8, n_links)
        busy = class_rate > self.class_floor * self.net.capacity * 1.01 + 1e-9      # [class, link]
        self.lowest_busy = np.where(busy.any(axis=0), busy.argmax(axis=0), 8)

    def _meet_lower_class(self, e: int) -> None:
        """Entity e starts a step (a pipelined ring: its operation): if a lower class had a link of its path during
        the gap before it, the step waits behind what that port took (``priority_hol_packets``)."""
        links = self.routes[e][self.routes[e] >= 0]
        hit = links[self.lowest_busy[links] < self.cls[e]]
        self.xfer_hol[e] = bool(hit.size)
        self.hol_packet_s[e] = float(self.packet_s[hit].max()) if hit.size else 0.0

    def _hol_delay(self, e: int, steps: int) -> float:
        """``priority_hol_packets`` for ``steps`` ring steps of entity e that met a lower class: each waits the gap
        before it, at most that many packet times (a pipelined ring's steps: the step latency)."""
        if self.p.priority_hol_packets <= 0 or not self.xfer_hol[e]:
            return 0.0
        self.xfer_hol[e] = False
        gap = self.p.step_latency_s if self.pipelined else self.step_gap[e]
        if gap < self.p.priority_hol_min_packets * self.hol_packet_s[e]:
            # Too short for the lower class to get past its floor (priority_hol_min_packets).
            return steps * self.p.priority_hol_floor_packets * self.hol_packet_s[e]
        return steps * min(gap, self.p.priority_hol_packets * self.hol_packet_s[e])

    def _mark_backlog(self, idx: np.ndarray, rows: np.ndarray, links: np.ndarray, saturated: np.ndarray,
                      key: np.ndarray) -> None:
        """Each entity's wait behind the bytes queued ahead of it from now on: on every saturated link of its path,
        what the other flows in its class FIFO (its own job's included) still have to send, at most the FIFO's
        length, at the link's rate; the longest of its links. The previous value is integrated up to now."""
        if not rows.size:
            return
        # What a flow has in the network is its step's remaining bytes: a pipelined ring holds one step per hop.
        rem = np.minimum(np.minimum(self.rem[idx], self.step_bytes[idx]), self.window_bytes)[rows]
        ahead = np.bincount(key, weights=rem, minlength=8 * self.net.links)[key] - rem
        wait = np.where(saturated[links] & (ahead > 0),
                        np.minimum(ahead, self.backlog_cap[links]) * 8.0 / self.net.capacity[links], 0.0)
        # rows come in order (np.nonzero of the route matrix), so each flow's links are one run: reduce per run
        # (np.maximum.at is an order of magnitude slower at scale).
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        longest = np.zeros(idx.size)
        longest[rows[starts]] = np.maximum.reduceat(wait, starts)
        self.backlog_int[idx] += self.backlog_now[idx] * (self.now - self.backlog_t[idx])
        self.backlog_now[idx] = longest
        self.backlog_t[idx] = self.now

    def _backlog_delay(self, e: int, steps: int) -> float:
        """``queue_backlog`` for ``steps`` ring steps of entity e: its wait behind the bytes queued ahead of it,
        averaged over its time since it started sending, per step."""
        if self.p.queue_backlog <= 0:
            return 0.0
        span = self.now - self.sending_since[e]
        if span <= 0:
            return 0.0
        total = self.backlog_int[e] + self.backlog_now[e] * (self.now - self.backlog_t[e])
        return steps * self.p.queue_backlog * total / span

    def _reset_backlog(self, e: int) -> None:
        self.backlog_now[e] = self.backlog_int[e] = 0.0
        self.backlog_t[e] = self.sending_since[e] = self.now

    def _overflow_delay(self, e: int, steps: float) -> float:
        """Expected retransmission timeouts of ``steps`` ring steps of entity e for the share of its sending
        time it spent in an overflowing FIFO (counted for its job), and their cost in time."""
        if not self.overflow_on:
            return 0.0
        if self.pipelined:
            # The piece's share (the whole transfer's when the ring is one piece): a step waits while any of
            # its ranks overflows, and only those ranks' connections time out.
            share = self.overflow_time[e] / self.piece_time[e] if self.piece_time[e] > 0 else 0.0
            conn_share = self.overflow_conn_time[e] / self.piece_time[e] if self.piece_time[e] > 0 else 0.0
            self.overflow_time[e] = self.overflow_conn_time[e] = self.piece_time[e] = 0.0
        else:
            share = conn_share = float(self.xfer_overflow[e])
            self.xfer_overflow[e] = False
        self._count_timeouts(e, steps * conn_share * self.p.overflow_timeouts)
        return steps * share * self.p.overflow_timeouts * self._timer(e)

    def _timer(self, e: int) -> float:
        """Entity e's retransmission timer: ``rto_s``, or with ``rto_rttvar`` at least its RTT variance (Linux:
        the smoothed RTT plus the larger of the variance and 200 ms; the smoothed RTT is left out)."""
        if self.p.rto_rttvar <= 0:
            return self.p.rto_s
        self._decay_rttvar(e)
        return max(self.p.rto_s, float(self.rttvar[e]))

    def _sample_starvation(self, e: int, starved: float) -> None:
        """``rto_rttvar``: a packet that waited through a starvation of ``starved`` seconds is an RTT sample that
        far above the smoothed RTT, which Linux's estimator adds to the variance at once."""
        if self.p.rto_rttvar > 0:
            self.rttvar[e] = max(float(self.rttvar[e]), self.p.rto_rttvar * starved)
            self.rttvar_mark[e] = self.now

    def _decay_rttvar(self, e: int, stop: bool = False) -> None:
        """Linux lowers the variance by a quarter of its excess over 200 ms once per round trip in which data
        was acknowledged: per round trip of the FIFOs on e's path (their length at the link's rate) that e spent
        sending since its mark. ``stop``: e stops sending (starved, or its step ended)."""
        mark = self.rttvar_mark[e]
        if math.isnan(mark):
            return
        if self.rttvar[e] > self.p.rto_s:
            links = self.routes[e][self.routes[e] >= 0]
            rtt = float(self.fifo_delay[links].max()) if links.size else 0.0
            if rtt > 0:
                excess = (self.rttvar[e] - self.p.rto_s) * 0.75 ** ((self.now - mark) / rtt)
                self.rttvar[e] = self.p.rto_s + excess
        self.rttvar_mark[e] = np.nan if stop else self.now

    def _check_starvation(self, idx: np.ndarray, rates: np.ndarray) -> bool:
        """Start or end every flow's starvation; one that ends after ``rto_s`` or more waits for its timer.
        True when some flow went to sleep."""
        threshold = self.p.starve_share * self.net.capacity[self.first_link[idx]] / 8.0
        starving = rates < threshold
        since = self.starved_since[idx]
        begin = starving & np.isnan(since)
        self.starved_since[idx[begin]] = self.now
        if begin.any():
            self.starved_fifo[idx[begin]] = self._fifo_flows(idx, rates)[begin]
            if self.p.rto_rttvar > 0:
                for c in idx[begin]:
                    self._decay_rttvar(int(c), stop=True)
        ended = ~starving & ~np.isnan(since)
        slept = False
        for c in idx[ended]:
            slept = self._end_starvation(int(c)) or slept
        return slept

    def _fifo_flows(self, idx: np.ndarray, rates: np.ndarray) -> np.ndarray:
        """For each flow of ``idx``, the most flows (connections) its class FIFO holds on a saturated link of its
        path (1 when none of its links is saturated)."""
        rows, links, saturated, key = self._class_links(idx, rates)
        flows_here = np.bincount(key, minlength=8 * self.net.links)
        most = np.ones(idx.size, dtype=np.int64)
        on = saturated[links]
        np.maximum.at(most, rows[on], flows_here[key[on]])
        return most

    def _backs_off(self, c: int) -> bool:
        """Whether flow c's starvation follows the backoff rule (``rto_backoff``, and enough flows in its FIFO when
        it began, ``starve_backoff_flows``) rather than the one-timeout reading."""
        return bool(self.p.rto_backoff) and self.starved_fifo[c] >= self.p.starve_backoff_flows

    def _count_starvation(self, c: int, starved: float) -> None:
        if starved >= self.p.rto_s:
            k = int(self.starved_fifo[c])
            self.starvations[k] = self.starvations.get(k, 0) + 1
            self.starved_flow_s[int(self.ent_job[c])] += starved

    def _count_timeouts(self, e: int, per_connection: float, starved: bool = False) -> None:
        """Charge entity e's job ``per_connection`` timeouts for each connection the entity carries; ``starved``:
        the starvation rule's."""
        count = per_connection * len(self.ent_conns[e])
        self.timeouts[int(self.ent_job[e])] += count
        if starved:
            self.starvation_timeouts[int(self.ent_job[e])] += count

    def _adaptive_timeout(self, c: int, starved: float, timer: float) -> None:
        """``rto_backoff`` off: a starvation as long as the flow's timer or longer cost one timeout, at its onset,
        and nothing after it: the flow went on at what its class was left (the floor), its RTO grew with the RTT
        it measured there, and it sends again as soon as capacity is back."""
        if starved >= timer:
            self._count_timeouts(c, 1, starved=True)

    def _close_starvation(self, c: int) -> Optional[Tuple[float, int]]:
        """Flow c's starvation (if any) ends now: count it, let it raise c's timer and charge its timeouts. Under
        the backoff rule, when c's timer lets it send again and how many timers fired until then; None when it
        goes on at once."""
        since = self.starved_since[c]
        self.starved_since[c] = np.nan
        if math.isnan(since):
            return None
        starved = self.now - since
        self._count_starvation(c, starved)
        timer = self._timer(c)
        self._sample_starvation(c, starved)
        if not self._backs_off(c):
            self._adaptive_timeout(c, starved, timer)
            return None
        base = timer * (2 ** int(self.backoff[c]))
        if starved < base:
            return None
        # Timers fire at since + base (2^k - 1); the flow resumes at the first one at or after now.
        k = max(1, math.ceil(math.log2(starved / base + 1) - 1e-12))
        self._count_timeouts(c, k, starved=True)
        return since + base * (2 ** k - 1), k

    def _end_starvation(self, c: int, not_before: float = 0.0) -> bool:
        """Capacity is back for flow c: if it was starved long enough to time out, it sleeps until its next
        retransmission timer, and in any case until ``not_before`` (True), else it goes on at once (False)."""
        timed_out = self._close_starvation(c)
        resume = not_before
        if timed_out is not None:
            resume = max(resume, timed_out[0])
            self.backoff[c] += timed_out[1]
        if resume > self.now + _EPS_T and not self.suspended[c]:
            self.suspended[c] = True
            self.dirty = True
            self._push(resume, _EV_RESUME_FLOW, c)
            return True
        return False

    # ------------------------------------------------------------------------------------------------ the ring
    def _try_start(self, op: Op, r: int) -> None:
        if self.pipelined:
            # The whole ring moves together once every rank has launched.
            if not op.sending[0] and op.sent[0] < op.steps and all(t is not None for t in op.launched):
                op.sending[0] = True
                self._start_ring(op)
            return
        s = op.sent[r]
        if op.launched[r] is None or op.sending[r] or s >= op.steps:
            return
        if s > 0 and op.sent[(r - 1) % op.workers] < s:
            return  # step s sends what was received in step s - 1
        op.sending[r] = True
        if self.p.step_latency_s > 0:
            self._push(self.now + self._step_latency(1), _EV_START, (op, r))
        else:
            self._start(op, r)

    def _start(self, op: Op, r: int) -> None:
        c = self.conn_index[(op.job.index, r, op.bucket)]
        self.active[c] = True
        self.rem[c] = op.chunks[step_chunk(r, op.sent[r], op.workers)] + HEADER_BYTES
        self.t_ref[c] = self.now
        self.xfer_op[c] = op
        self.xfer_queued[c] = self.xfer_overflow[c] = False
        self.step_gap[c] = self.now - self.idle_since[c]
        self.step_start[c] = self.now
        if self.p.share_cv > 0:
            self._draw_share(c)
        if self.p.priority_hol_packets > 0:
            self._meet_lower_class(c)
        self._reset_backlog(c)
        self.backoff[c] = 0
        self.starved_since[c] = np.nan
        self.rttvar_mark[c] = self.now
        self.dirty = True

    def _start_ring(self, op: Op) -> None:
        e = self.ring_index[(op.job.index, op.bucket)]
        total = float(max(self._rank_bytes(op)))
        pieces = min(op.steps, OVERFLOW_PIECES) if self.overflow_on else 1
        self.active[e] = True
        self.total[e] = total
        self.rem[e] = self.piece_bytes[e] = total / pieces
        self.piece_left[e] = total - self.rem[e]
        self.piece_steps[e] = op.steps / pieces
        self.step_bytes[e] = total / op.steps
        self.t_ref[e] = self.t_acc[e] = self.now
        self.xfer_op[e] = op
        self.xfer_queued[e] = self.queued_now[e] = self.overflow_now[e] = False
        self.fluid_time[e] = self.queued_time[e] = self.overflow_time[e] = self.piece_time[e] = 0.0
        self.overflow_conn_time[e] = self.overflow_conns_now[e] = 0.0
        self.step_start[e] = self.now
        if self.p.share_cv > 0:
            self._draw_share(e)
        if self.p.priority_hol_packets > 0:
            self._meet_lower_class(e)
        self._reset_backlog(e)
        self.marks[e] = 0
        self.backoff[e] = 0
        self.starved_since[e] = np.nan
        self.rttvar_mark[e] = self.now
        self.dirty = True

    def _rank_bytes(self, op: Op) -> List[int]:
        """Bytes each rank sends in the whole operation, headers included."""
        key = (op.job.index, op.bucket)
        out = self._rank_bytes_cache.get(key)
        if out is None:
            n = op.workers
            out = self._rank_bytes_cache[key] = [sum(op.chunks[step_chunk(r, s, n)] + HEADER_BYTES
                                                     for s in range(op.steps)) for r in range(n)]
        return out

    def _progress(self, idx: np.ndarray) -> None:
        """Progress events of the pipelined rings that crossed another quarter of their bytes."""
        left = self.rem[idx] + self.piece_left[idx]
        done = 1.0 - left / np.maximum(self.total[idx], 1.0)
        marks = np.minimum((done * PROGRESS_STEPS + 1e-9).astype(np.int64), PROGRESS_STEPS - 1)
        for e in idx[marks > self.marks[idx]]:
            frac = 1.0 - (self.rem[e] + self.piece_left[e]) / max(self.total[e], 1.0)
            self.marks[e] = min(int(frac * PROGRESS_STEPS + 1e-9), PROGRESS_STEPS - 1)
            op = self.xfer_op[e]
            for r, b in enumerate(self._rank_bytes(op)):
                op.bytes_sent[r] = int(frac * b)
                self._emit("progress", op, r, op.bytes_sent[r])

    def _accumulate_ring(self, e: int) -> None:
        """Ring e's sending time since the last count, and the part of it spent queueing or overflowing."""
        dt = self.now - self.t_acc[e]
        self.fluid_time[e] += dt
        self.queued_time[e] += dt * self.queued_now[e]
        self.overflow_time[e] += dt * self.overflow_now[e]
        self.overflow_conn_time[e] += dt * self.overflow_conns_now[e]
        self.piece_time[e] += dt
        self.t_acc[e] = self.now

    def _ring_piece_done(self, e: int) -> None:
        """Ring e sent a piece of its bytes: it pays the piece's expected overflow timeouts now, out of the
        network (as the step model's steps wait out theirs), then sends the next piece."""
        self._accumulate_ring(e)
        delay = self._overflow_delay(e, self.piece_steps[e])
        piece = min(self.piece_bytes[e], self.piece_left[e])
        self.piece_left[e] -= piece
        if self.piece_left[e] < 1.0:        # rounding: what is left goes with this piece
            piece += self.piece_left[e]
            self.piece_left[e] = 0.0
        self.rem[e] = piece
        self.t_ref[e] = self.now
        if delay > _EPS_T and not self.suspended[e]:
            self.suspended[e] = True
            self.finish[e] = np.inf
            self.dirty = True
            self._push(self.now + delay, _EV_RESUME_FLOW, e)
        elif self.rate[e] > 0 and not self.suspended[e]:
            self.finish[e] = self.now + piece / self.rate[e]

    def _ring_flow_done(self, e: int) -> None:
        if self.piece_left[e] > 0:
            self._ring_piece_done(e)
            return
        op = self.xfer_op[e]
        self._accumulate_ring(e)
        self._retire(e)
        # Every step's fixed latency lies on the ring's critical path; queueing is charged per step for the
        # share of the time the ring's flows spent behind same-class traffic on a saturated link.
        delay = self._step_latency(op.steps)
        if self.p.queue_delay_s > 0 and self.fluid_time[e] > 0:
            delay += op.steps * self.p.queue_delay_s * self.queued_time[e] / self.fluid_time[e]
        delay += self._backlog_delay(e, op.steps)
        delay += self._overflow_delay(e, self.piece_steps[e])
        delay += self._hol_delay(e, op.steps)
        delay += self._starved_tail(e)
        if delay > 0:
            self._push(self.now + delay, _EV_STEP_DONE, (op, -1))
        else:
            self._ring_done(op)

    def _step_latency(self, steps: int) -> float:
        """The fixed latency of ``steps`` ring steps: exactly steps x step_latency_s, or with step_latency_cv a
        draw of their sum (a sum of k gamma(a, s) draws is gamma(k a, s))."""
        mean, cv = self.p.step_latency_s, self.p.step_latency_cv
        if mean <= 0 or steps <= 0:
            return 0.0
        if cv <= 0:
            return steps * mean
        shape = 1.0 / (cv * cv)
        return float(self.rng.gamma(steps * shape, mean / shape))

    def _retire(self, e: int) -> None:
        """Entity e has sent its last byte: it leaves the rate allocation."""
        if self.p.rto_rttvar > 0:
            self._decay_rttvar(e, stop=True)
        self.active[e] = False
        self.rate[e] = 0.0
        self.rem[e] = 0.0
        self.finish[e] = np.inf
        self.xfer_op[e] = None
        self.dirty = True

    def _ring_done(self, op: Op) -> None:
        for r, b in enumerate(self._rank_bytes(op)):
            op.sent[r] = op.steps
            op.bytes_sent[r] = b
        op.sending[0] = False
        for r in range(op.workers):
            self._check_done(op, r)

    def _starved_tail(self, c: int) -> float:
        """Timeouts of an entity that finished while starved, and the wait for the timer that sent its last
        bytes."""
        if self.p.rto_s <= 0:
            return 0.0
        timed_out = self._close_starvation(c)
        return 0.0 if timed_out is None else timed_out[0] - self.now

    def _flow_done(self, c: int) -> None:
        """Flow c sent its step's last byte."""
        if self.pipelined:
            self._ring_flow_done(c)
            return
        op = self.xfer_op[c]
        self._retire(c)
        delay = self.p.queue_delay_s if self.xfer_queued[c] else 0.0
        delay += self._backlog_delay(c, 1)
        delay += self._overflow_delay(c, 1)
        delay += self._hol_delay(c, 1)
        delay += self._starved_tail(c)
        r = self.conn_meta[c][1]
        if delay > 0:
            self._push(self.now + delay, _EV_STEP_DONE, (op, r))
        else:
            self._step_done(op, r)

    def _step_done(self, op: Op, r: int) -> None:
        n = op.workers
        s = op.sent[r]
        # The connection is idle from here (its step's own waits, charged above, are not a gap).
        self.idle_since[self.conn_index[(op.job.index, r, op.bucket)]] = self.now
        op.sent[r] = s + 1
        op.sending[r] = False
        op.bytes_sent[r] += op.chunks[step_chunk(r, s, n)] + HEADER_BYTES
        if op.bytes_sent[r] >= op.next_mark[r] and op.next_mark[r] < op.share:
            self._emit("progress", op, r, op.bytes_sent[r])
            while op.next_mark[r] <= op.bytes_sent[r]:
                op.next_mark[r] += op.share / PROGRESS_STEPS
        nxt = (r + 1) % n
        self._try_start(op, r)
        self._try_start(op, nxt)
        self._check_done(op, r)
        self._check_done(op, nxt)

    def _check_done(self, op: Op, r: int) -> None:
        if op.done_at[r] is not None or op.launched[r] is None:
            return
        if op.sent[r] < op.steps or op.sent[(r - 1) % op.workers] < op.steps:
            return
        op.done_at[r] = self.now
        op.ranks_done += 1
        self._emit("done", op, r, op.bytes_sent[r])
        if op.ranks_done == op.workers:
            first = min(t for t in op.launched if t is not None)
            self.op_times[op.job.index].append((op.iteration, op.bucket, self.now - first))
            del self.ops[(op.job.index, op.iteration, op.bucket)]
        rank = self.ranks[(op.job.index, r)]
        if rank.blocked is op:
            rank.blocked = None
            rank.wait_s += self.now - rank.wait_start
            self._emit("resume", op, r)
            rank.pending.pop(op.bucket, None)
            rank.index += 1
            self._advance(rank)

    # ------------------------------------------------------------------------------------------------ the GPUs
    def _advance(self, st: RankState) -> None:
        """Run the rank's program from where it is until it computes, blocks or ends."""
        job = st.job
        while True:
            if st.index >= len(st.steps):
                if st.steps:
                    st.iterations.append((st.it_start, self.now))
                    st.iteration += 1
                if st.iteration >= job.iterations:
                    st.finished = True
                    self.running -= 1
                    return
                st.it_start = self.now
                st.steps = st.program.steps(st.iteration)
                st.index = 0
            step = st.steps[st.index]
            if step.kind == COMPUTE:
                st.busy_s += step.duration_s
                st.index += 1
                if step.duration_s > 0:
                    self._push(self.now + step.duration_s, _EV_GPU, st)
                    return
            elif step.kind == LAUNCH:
                self._launch(st, step.bucket)
                st.index += 1
            elif step.kind == WAIT:
                op = st.pending.get(step.bucket)
                if op is not None and op.done_at[st.rank] is None:
                    st.blocked = op
                    st.wait_start = self.now
                    self._emit("wait", op, st.rank)
                    return
                st.pending.pop(step.bucket, None)
                st.index += 1

    def _launch(self, st: RankState, bucket: int) -> None:
        job = st.job
        key = (job.index, st.iteration, bucket)
        op = self.ops.get(key)
        if op is None:
            op = self.ops[key] = Op(job, st.iteration, bucket, self._nbytes[(job.index, bucket)])
        r = st.rank
        op.launched[r] = self.now
        op.needed_at[r] = self.now + st.program.needed_offset(bucket, st.iteration)
        st.pending[bucket] = op
        self._emit("launch", op, r)
        if op.steps == 0:
            self._check_done(op, r)
            return
        self._try_start(op, r)

    # ------------------------------------------------------------------------------------------------ the loop
    def run(self) -> RunResult:
        wall0 = time.perf_counter()
        # The controller's first decision is installed before the workload starts.
        self._apply(self.loop.install_all(0.0))
        if self.loop.period_s:
            self._push(self.loop.period_s, _EV_PERIODIC)
        for st in self.ranks.values():
            self._push(st.start_at, _EV_GPU, st)
        error = None
        while self.running > 0:
            if self.dirty:
                self._recompute()
            t_net = float(self.finish.min()) if self.finish.size else math.inf
            t_heap = self._heap[0][0] if self._heap else math.inf
            t = min(t_net, t_heap)
            if t == math.inf:
                error = "deadlock: no flow can progress and nothing is scheduled"
                break
            if t > self.time_limit_s:
                error = f"simulated time limit of {self.time_limit_s:g} s reached"
                break
            self.now = max(self.now, t)
            if t_net <= t:
                done = np.flatnonzero(self.finish <= self.now + max(_EPS_T, self.now * 1e-12))
                self._settle()
                for c in done:
                    self._flow_done(int(c))
            while self._heap and self._heap[0][0] <= self.now:
                _t, kind, _seq, payload = heapq.heappop(self._heap)
                self._handle(kind, payload)
        if error is None and self.loop.errors:
            error = f"the scheduler raised {self.loop.errors} time(s); its last decisions were kept (see the log)"
        return RunResult(self.ranks, self.op_times, self.timeouts, self.live_class_changes, self.events,
                         self.loop.decide_calls, self.flow_changes, self.recomputes, self.now,
                         time.perf_counter() - wall0, error is None and self.running == 0, error,
                         self.events_sent, ring_model="pipelined" if self.pipelined else "steps",
                         starvations=dict(sorted(self.starvations.items())), op_trace=self.op_trace,
                         starvation_timeouts=self.starvation_timeouts, starved_flow_s=self.starved_flow_s)

    def _handle(self, kind: int, payload: Any) -> None:
        if kind == _EV_GPU:
            self._advance(payload)
        elif kind == _EV_STEP_DONE:
            op, r = payload
            if r < 0:
                self._ring_done(op)
            else:
                self._step_done(op, r)
        elif kind == _EV_START:
            self._start(*payload)
        elif kind == _EV_RESUME_FLOW:
            c = payload
            if self.suspended[c]:
                self._settle()
                self.suspended[c] = False
                self.starved_since[c] = np.nan
                self.t_acc[c] = self.now    # a pipelined ring's time asleep is not time sending
                self.dirty = True
        elif kind == _EV_EVENTS:
            self._deliver(payload)
        elif kind == _EV_DECIDE:
            self._decide_pending = False
            self._decide()
        elif kind == _EV_APPLY:
            self._apply(payload)
        elif kind == _EV_PERIODIC:
            if self.running > 0:
                self._decide()
                self._push(self.now + self.loop.period_s, _EV_PERIODIC)
