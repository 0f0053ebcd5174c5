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
  sends in ``twin.rings.OVERFLOW_PIECES`` pieces and waits out each piece's expected timeouts out of the network;
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

``FluidSim`` is put together by concern: the ring steps and pipelined rings are twin/rings.py's ``RingMixin``,
the TCP and FIFO artefacts twin/tcp.py's ``TcpMixin``, the controller's latencies and decisions twin/control.py's
``ControlMixin``; each sets up its own state (``_init_rings``, ``_init_tcp``, ``_init_control``). This module
keeps the event loop, the GPUs' program and the network's rate allocation that they all act on.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from controller.schedulers.base import Scheduler
from core.classes import NUM_CLASSES
from core.model import Decision, FlowKey, JobSpec
from core.queues import DEFAULT_QUEUE_MS
from twin import events as kinds
from twin.control import ControlMixin
from twin.model import ModelParams
from twin.network import Network, allocate, hashed_path
from twin.rings import (FLOAT_BYTES, HEADER_BYTES, PROGRESS_STEPS, RING_MODELS, Op, RingMixin,
                        chunk_bytes, step_chunk)
from twin.tcp import TcpMixin
from workloads.program import COMPUTE, LAUNCH, WAIT, IterationProgram

# What other code imports from here (the ring's definitions live in twin/rings.py).
__all__ = ["FLOAT_BYTES", "HEADER_BYTES", "PROGRESS_STEPS", "RING_MODELS", "FluidSim", "Op",
           "RankState", "RunResult", "chunk_bytes", "step_chunk"]


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


class FluidSim(RingMixin, TcpMixin, ControlMixin):
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
        # The network: which entities send, their rates and remaining bytes, what the allocation weighs.
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
        self.dirty = False
        self.recomputes = 0
        self._init_rings(n)
        self._init_tcp(network, n, queue_ms, lossless, window_packets)
        self.programs = {j.index: IterationProgram(j) for j in self.jobs}
        self.ranks: Dict[Tuple[int, int], RankState] = {}
        for job in self.jobs:
            for rank in range(job.workers):
                self.ranks[(job.index, rank)] = RankState(job, rank, self.programs[job.index], job.start_offset_s)
        self.running = len(self.ranks)
        self._init_control(scheduler, keys)

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
                    self._push(self.now + step.duration_s, kinds.GPU, st)
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
            self._push(self.loop.period_s, kinds.PERIODIC)
        for st in self.ranks.values():
            self._push(st.start_at, kinds.GPU, st)
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
                done = np.flatnonzero(self.finish <= self.now + max(kinds.EPS_T, self.now * 1e-12))
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
        if kind == kinds.GPU:
            self._advance(payload)
        elif kind == kinds.STEP_DONE:
            op, r = payload
            if r < 0:
                self._ring_done(op)
            else:
                self._step_done(op, r)
        elif kind == kinds.START:
            self._start(*payload)
        elif kind == kinds.RESUME_FLOW:
            c = payload
            if self.suspended[c]:
                self._settle()
                self.suspended[c] = False
                self.starved_since[c] = np.nan
                self.t_acc[c] = self.now    # a pipelined ring's time asleep is not time sending
                self.dirty = True
        elif kind == kinds.EVENTS:
            self._deliver(payload)
        elif kind == kinds.DECIDE:
            self._decide_pending = False
            self._decide()
        elif kind == kinds.APPLY:
            self._apply(payload)
        elif kind == kinds.PERIODIC:
            if self.running > 0:
                self._decide()
                self._push(self.now + self.loop.period_s, kinds.PERIODIC)
