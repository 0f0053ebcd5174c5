"""The ring all-reduce in the twin: each operation's chunks, and the ring steps (or whole pipelined rings) that
start, send and finish in the fluid network.

An operation (one bucket's all-reduce in one iteration) runs the ring of ``workloads/allreduce.py``: 2(N-1)
dependent steps, rank r's step s sending one chunk to rank r+1 once r has launched, sent step s-1 and received
step s-1 from r-1. With ``ring_model="pipelined"`` the bucket's whole ring is one flow from the moment every rank
has launched, and the per-step terms are charged 2(N-1) times. ``RingMixin`` holds this for ``FluidSim``
(twin/engine.py): it owns the operations and the ring's byte and time counts, and charges each step the artefact
terms of twin/tcp.py when it has sent its last byte. The heap's event kinds are here too: every concern
schedules events, and this module needs none of the others when it is imported.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from core.model import JobSpec
from core.ring import ring_bytes_per_rank, ring_steps
from twin import events as kinds

HEADER_BYTES = 8          # workloads/allreduce.py: one message header per ring step
RING_MODELS = ("steps", "pipelined")
PROGRESS_STEPS = 4        # workloads/worker.py: a progress event per quarter of a rank's bytes
FLOAT_BYTES = 4
OVERFLOW_PIECES = 8       # a pipelined ring pays its expected overflow timeouts after each eighth of its bytes


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


class RingMixin:
    """``FluidSim``'s ring steps and pipelined rings: when a rank's step (or a bucket's ring) may start, what it
    sends, and what follows its last byte. The entities, their rates and the event heap are ``FluidSim``'s."""

    def _init_rings(self, n: int) -> None:
        """The operations in flight, the step each of the ``n`` entities sends, and a pipelined ring's counts."""
        self.fluid_time = np.zeros(n)
        self.queued_time = np.zeros(n)
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
        self.total = np.zeros(n)
        self.t_acc = np.zeros(n)
        self.marks = np.zeros(n, dtype=np.int64)
        self._rank_bytes_cache: Dict[Tuple[int, int], List[int]] = {}
        self.xfer_op: List[Optional[Op]] = [None] * n
        self.ops: Dict[Tuple[int, int, int], Op] = {}
        self.op_times: Dict[int, List[Tuple[int, int, float]]] = {j.index: [] for j in self.jobs}
        # Flow sizes of the ring: the (job, bucket) -> chunk list, and each rank's share, computed once.
        self._nbytes = {(j.index, b.index): max(b.nbytes // FLOAT_BYTES, j.workers) * FLOAT_BYTES
                        for j in self.jobs for b in j.model.buckets}

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
            self._push(self.now + self._step_latency(1), kinds.START, (op, r))
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
        if delay > kinds.EPS_T and not self.suspended[e]:
            self.suspended[e] = True
            self.finish[e] = np.inf
            self.dirty = True
            self._push(self.now + delay, kinds.RESUME_FLOW, e)
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
            self._push(self.now + delay, kinds.STEP_DONE, (op, -1))
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
            self._push(self.now + delay, kinds.STEP_DONE, (op, r))
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
