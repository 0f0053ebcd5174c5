"""One worker of a data-parallel training job: emulated GPU compute, real ring all-reduce traffic, ground truth log.

Usage::

    python -m workloads.worker --job-file JOB.json --rank R [--events-socket PATH] [--log FILE] [--seed S]
                               [--start-at EPOCH]

The job file holds ``JobSpec.to_dict()`` with the model already scaled to the emulation (seconds and bytes as the
testbed runs them). The worker connects its ring (``workloads.allreduce``), waits until ``--start-at`` so all
workers of the job begin iteration 0 together, and runs the iteration loop of PyTorch DDP (its steps come from
``workloads.program``, which the flow-level twin runs too):

* forward pass through the layer groups in forward order: highest bucket index first, bucket 0 last. Under
  semantics ``overlap`` each group's forward first waits for the all-reduce of its own bucket from the previous
  iteration; under ``wait_all`` the forward pass starts only once every bucket of the previous iteration is done;
* backward pass bucket 0 first; as soon as a bucket's backward compute is done its all-reduce is launched in a
  background thread and overlaps the rest of the backward pass;
* after the last iteration the worker waits for every outstanding all-reduce (the final optimizer step).

Computation is emulated by sleeping for the bucket's ``forward_s`` / ``backward_s``. Deadlines are kept on
``time.perf_counter`` and the next compute starts at the previous one's ideal end, so sleep overshoot does not
accumulate. Like a real GPU, whose kernels are queued ahead by the CPU, the emulated GPU also absorbs short delays
of the worker's thread (up to ``CATCH_UP_S``, e.g. when the process was descheduled on a busy machine); longer
gaps are not hidden and appear as idle time that no wait explains.
A wait that ends because an operation completed ends at the operation's completion time.

Gradients are real: bucket b is a float32 array of ``max(nbytes // 4, workers)`` elements (every rank's chunk is
non-empty). Rank r in iteration k contributes ``base_b * (r + 1) + (k % 16) - r`` where ``base_b`` holds seeded
integers in [-1000, 1000]; all partial sums are integers below 2**24, so float32 sums are exact and the result is
checked against the analytic sum ``base_b * N(N+1)/2 + N (k % 16) - N(N-1)/2``. Mismatches are counted.

Ground-truth log (JSON Lines, one object per line, times in epoch seconds on one clock per worker: wall clock at
start plus ``perf_counter`` elapsed)::

    {"type": "header", "version": 1, "job": name, "job_index", "rank", "workers", "model", "semantics",
     "iterations", "pid", "host", "address", "seed", "start_at", "pace_mbps"}
    {"type": "compute", "iteration", "phase": "forward"|"backward", "bucket", "start", "end"}
    {"type": "op", "iteration", "bucket", "nbytes", "launch", "first_byte", "last_byte", "done", "bytes_sent",
     "payload_sent", "ok"}
        launch: the all-reduce was started; first_byte / last_byte: this rank's first / last message went to the
        kernel; done: the reduced bucket is available; bytes_sent: this rank's bytes incl. 8 B framing per step;
        ok: the result equalled the analytic sum.
    {"type": "wait", "iteration", "bucket", "in_iteration", "start", "end"}
        the GPU idled waiting for op (iteration, bucket); in_iteration is the iteration during which it waited
        (iteration + 1 before a forward pass, or the last iteration for the final wait).
    {"type": "iteration", "iteration", "start", "end"}
        iteration k runs from the start of its waits/forward pass to the end of its backward pass; the next
        iteration starts right there, and the last one ends when its last all-reduce is done. Iterations tile the
        worker's run.
    {"type": "summary", "iterations", "start", "end", "busy_s", "wait_s", "check_failures", "ops", "bytes_sent",
     "connect_s", "late_start_s", "events_sent", "events_dropped"}
    {"type": "error", "message"}   (only if the worker failed)

Operation events (``workloads.events``) go to ``--events-socket`` when given: ``launch`` (with ``needed_at``),
``progress`` (each time this rank's bytes cross another quarter of its share), ``wait`` / ``resume`` around a
blocking wait, and ``done``. ``needed_at`` is when this worker's GPU will need the result if nothing else waits:
launch + the remaining backward compute + (under ``overlap``, and not in the last iteration) the forward compute
of the groups that run before this bucket's group in the next forward pass.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from core.model import JobSpec, OperationEvent
from core.ring import ring_bytes_per_rank
from workloads.allreduce import RingMember
from workloads.events import EventSender
from workloads.program import COMPUTE, WAIT, IterationProgram

LOG_VERSION = 1
CATCH_UP_S = 0.02
VALUE_RANGE = 1000
PROGRESS_STEPS = 4


class WallClock:
    """Epoch seconds derived from ``perf_counter``: monotonic, precise, and comparable across processes."""

    def __init__(self):
        self.wall0 = time.time()
        self.perf0 = time.perf_counter()

    def now(self) -> float:
        return self.wall0 + (time.perf_counter() - self.perf0)

    def wall(self, perf: float) -> float:
        return self.wall0 + (perf - self.perf0)

    def perf(self, wall: float) -> float:
        return self.perf0 + (wall - self.wall0)


class EmulatedGpu:
    """A GPU that is either computing (sleeping to a deadline) or idle. Times are ``perf_counter`` values."""

    def __init__(self):
        self.free_at: Optional[float] = None  # ideal end of the last compute or wait

    def start_time(self) -> float:
        now = time.perf_counter()
        if self.free_at is not None and now - self.free_at <= CATCH_UP_S:
            return self.free_at
        return now

    def compute(self, duration: float) -> tuple:
        start = self.start_time()
        end = start + duration
        remaining = end - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        self.free_at = end
        return start, end


class GradientData:
    """Seeded gradient buffers whose ring sum is known in closed form (see the module docstring)."""

    def __init__(self, job: JobSpec, rank: int, seed: int):
        self.workers = job.workers
        self.rank = rank
        self.base: Dict[int, np.ndarray] = {}
        tri = self.workers * (self.workers + 1) // 2
        self.base_sum: Dict[int, np.ndarray] = {}
        for b in job.model.buckets:
            n = max(b.nbytes // 4, self.workers)
            rng = np.random.default_rng([seed, job.index, b.index])
            base = rng.integers(-VALUE_RANGE, VALUE_RANGE + 1, n).astype(np.float32)
            self.base[b.index] = base
            self.base_sum[b.index] = base * np.float32(tri)

    def nbytes(self, bucket: int) -> int:
        return self.base[bucket].nbytes

    @staticmethod
    def _shift(iteration: int, rank: int) -> int:
        return iteration % 16 - rank

    def gradient(self, bucket: int, iteration: int) -> np.ndarray:
        return self.base[bucket] * np.float32(self.rank + 1) + np.float32(self._shift(iteration, self.rank))

    def expected_shift(self, iteration: int) -> int:
        return sum(self._shift(iteration, r) for r in range(self.workers))

    def check(self, bucket: int, iteration: int, result: np.ndarray) -> bool:
        return bool(np.array_equal(result - np.float32(self.expected_shift(iteration)), self.base_sum[bucket]))


class JsonlLog:
    """Thread-safe JSON Lines writer (the op threads and the compute loop both write)."""

    def __init__(self, path: Optional[str]):
        self._file = open(path, "w", encoding="utf-8") if path else None
        self._lock = threading.Lock()

    def write(self, record: dict, flush: bool = False) -> None:
        if self._file is None:
            return
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            if flush:
                self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            with self._lock:
                self._file.close()
                self._file = None


@dataclass
class Operation:
    """One launched all-reduce as the compute loop sees it."""

    iteration: int
    bucket: int
    nbytes: int
    launch: float  # wall clock
    needed_at: float
    finished: threading.Event = field(default_factory=threading.Event)
    done_perf: float = 0.0
    error: Optional[BaseException] = None


@dataclass
class WorkerConfig:
    job: JobSpec
    rank: int
    events_socket: Optional[str] = None
    log_path: Optional[str] = None
    seed: int = 0
    start_at: Optional[float] = None
    connect_timeout: float = 60.0
    port_offset: int = 0
    pace_mbps: Optional[float] = None
    bind_address: Optional[str] = None
    window_clamp: Optional[int] = None


def _r(t: float) -> float:
    return round(t, 6)


class Worker:
    def __init__(self, cfg: WorkerConfig):
        self.cfg = cfg
        self.job = cfg.job
        self.rank = cfg.rank
        # The iteration program (order of computes, launches and waits; needed_at) is shared with the twin.
        self.program = IterationProgram(self.job)
        self.buckets = self.program.buckets
        self.clock = WallClock()
        self.gpu = EmulatedGpu()
        self.log = JsonlLog(cfg.log_path)
        self.events = EventSender(cfg.events_socket)
        self.data = GradientData(self.job, self.rank, cfg.seed)
        self.ring = RingMember(self.job, self.rank, bind_address=cfg.bind_address, port_offset=cfg.port_offset,
                               clock=self.clock.now, pace_mbps=cfg.pace_mbps, window_clamp=cfg.window_clamp)
        self.pending: Dict[int, Operation] = {}
        self.busy_s = 0.0
        self.wait_s = 0.0
        self.check_failures = 0
        self.op_count = 0
        self.bytes_sent = 0
        self._count_lock = threading.Lock()

    # -- events ------------------------------------------------------------------------------------------------

    def _event(self, kind: str, op: Operation, bytes_done: int = 0) -> None:
        if self.events.enabled:
            self.events.send(OperationEvent(kind=kind, job=self.job.index, rank=self.rank, iteration=op.iteration,
                                            bucket=op.bucket, time=time.time(), nbytes=op.nbytes,
                                            bytes_done=bytes_done, needed_at=op.needed_at))

    # -- operations --------------------------------------------------------------------------------------------

    def _launch(self, pool: ThreadPoolExecutor, iteration: int, bucket: int) -> None:
        launch = self.clock.now()
        op = Operation(iteration, bucket, self.data.nbytes(bucket), launch,
                       launch + self.program.needed_offset(bucket, iteration))
        self.pending[bucket] = op
        self._event("launch", op)
        pool.submit(self._run_op, op)

    def _run_op(self, op: Operation) -> None:
        share = ring_bytes_per_rank(op.nbytes, self.job.workers)
        next_mark = [share / PROGRESS_STEPS]

        def progress(sent: int) -> None:
            if sent >= next_mark[0] and next_mark[0] < share:
                self._event("progress", op, sent)
                while next_mark[0] <= sent:
                    next_mark[0] += share / PROGRESS_STEPS

        try:
            grad = self.data.gradient(op.bucket, op.iteration)
            result, stats = self.ring.allreduce_with_stats(op.bucket, grad,
                                                           progress if self.events.enabled else None)
        except BaseException as exc:  # noqa: BLE001 - handed to the compute loop, which fails the worker
            op.error = exc
            op.done_perf = time.perf_counter()
            op.finished.set()
            return
        # Release a waiting GPU before checking the result: the check is bookkeeping, not training.
        op.done_perf = self.clock.perf(stats.done)
        op.finished.set()
        self._event("done", op, stats.bytes_sent)
        ok = self.data.check(op.bucket, op.iteration, result)
        with self._count_lock:
            self.op_count += 1
            self.bytes_sent += stats.bytes_sent
            if not ok:
                self.check_failures += 1
        self.log.write({"type": "op", "iteration": op.iteration, "bucket": op.bucket, "nbytes": op.nbytes,
                        "launch": _r(op.launch), "first_byte": _r(stats.first_byte),
                        "last_byte": _r(stats.last_byte), "done": _r(stats.done),
                        "bytes_sent": stats.bytes_sent, "payload_sent": stats.payload_sent, "ok": ok})

    def _wait_for(self, bucket: int, in_iteration: int) -> None:
        op = self.pending.pop(bucket, None)
        if op is None:
            return
        start = self.gpu.start_time()
        blocked = not op.finished.is_set()
        if blocked:
            self._event("wait", op)
            op.finished.wait()
        # The GPU idles until the op is done, even when the thread noticed the completion only afterwards (the GPU
        # may be running behind the thread by up to CATCH_UP_S).
        end = min(op.done_perf, time.perf_counter())
        if end > start:
            self.gpu.free_at = end
            self.wait_s += end - start
            self.log.write({"type": "wait", "iteration": op.iteration, "bucket": bucket, "in_iteration": in_iteration,
                            "start": _r(self.clock.wall(start)), "end": _r(self.clock.wall(end))})
        if blocked:
            self._event("resume", op)
        if op.error is not None:
            raise RuntimeError(f"all-reduce of bucket {bucket} in iteration {op.iteration} failed: "
                               f"{op.error!r}") from op.error

    def _compute(self, iteration: int, phase: str, bucket: int, duration: float) -> None:
        start, end = self.gpu.compute(duration)
        self.busy_s += end - start
        self.log.write({"type": "compute", "iteration": iteration, "phase": phase, "bucket": bucket,
                        "start": _r(self.clock.wall(start)), "end": _r(self.clock.wall(end))})

    # -- main loop ---------------------------------------------------------------------------------------------

    def run(self) -> dict:
        cfg, job = self.cfg, self.job
        self.log.write({"type": "header", "version": LOG_VERSION, "job": job.name, "job_index": job.index,
                        "rank": self.rank, "workers": job.workers, "model": job.model.name,
                        "semantics": job.semantics, "iterations": job.iterations, "pid": os.getpid(),
                        "host": job.hosts[self.rank] if len(job.hosts) > self.rank else socket.gethostname(),
                        "address": self.ring.bind_address, "seed": cfg.seed, "start_at": cfg.start_at,
                        "pace_mbps": cfg.pace_mbps}, flush=True)
        t0 = time.perf_counter()
        self.ring.connect(cfg.connect_timeout)
        connect_s = time.perf_counter() - t0
        late = 0.0
        if cfg.start_at is not None:
            target = self.clock.perf(cfg.start_at)
            late = max(0.0, time.perf_counter() - target)
            if late == 0.0:
                time.sleep(max(0.0, target - time.perf_counter()))
                self.gpu.free_at = target
        run_start = self.gpu.start_time()
        # Twice the buckets: an op thread still checking its result must not delay the next launch.
        with ThreadPoolExecutor(max_workers=2 * len(self.buckets), thread_name_prefix="op") as pool:
            try:
                it_start = run_start
                for it in range(job.iterations):
                    for step in self.program.steps(it):
                        if step.kind == WAIT:
                            self._wait_for(step.bucket, it)
                        elif step.kind == COMPUTE:
                            self._compute(it, step.phase, step.bucket, step.duration_s)
                        else:
                            self._launch(pool, it, step.bucket)
                    it_end = self.gpu.start_time()
                    self.log.write({"type": "iteration", "iteration": it, "start": _r(self.clock.wall(it_start)),
                                    "end": _r(self.clock.wall(it_end))}, flush=True)
                    it_start = it_end
            except BaseException:
                # Unblock op threads stuck on a broken ring so the pool can shut down.
                self.ring.abort()
                raise
            finally:
                # Let in-flight operations finish (or fail) before the ring is torn down.
                for op in self.pending.values():
                    op.finished.wait(self.ring.io_timeout)
        run_end = it_start
        summary = {"type": "summary", "iterations": job.iterations, "start": _r(self.clock.wall(run_start)),
                   "end": _r(self.clock.wall(run_end)), "busy_s": round(self.busy_s, 6),
                   "wait_s": round(self.wait_s, 6), "check_failures": self.check_failures, "ops": self.op_count,
                   "bytes_sent": self.bytes_sent, "connect_s": round(connect_s, 6), "late_start_s": round(late, 6),
                   "events_sent": self.events.sent, "events_dropped": self.events.dropped}
        self.log.write(summary, flush=True)
        return summary

    def close(self) -> None:
        self.ring.close()
        self.events.close()
        self.log.close()


def load_job(path: str) -> JobSpec:
    with open(path, encoding="utf-8") as f:
        return JobSpec.from_dict(json.load(f))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job-file", required=True, help="JSON file holding JobSpec.to_dict()")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--events-socket", default=None, help="Unix datagram socket path for operation events")
    p.add_argument("--log", default=None, help="ground-truth JSONL log (default: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start-at", type=float, default=None, help="epoch seconds at which iteration 0 starts")
    p.add_argument("--connect-timeout", type=float, default=60.0)
    p.add_argument("--port-offset", type=int, default=0, help="shift data ports (tests only)")
    p.add_argument("--pace-mbps", type=float, default=None,
                   help="pace each connection at this rate (loopback runs without an emulated network)")
    p.add_argument("--bind-address", default=None, help="local address to use (default: the job's address)")
    p.add_argument("--window-clamp", type=int, default=None,
                   help="clamp the receive window of incoming ring connections to this many bytes "
                        "(the lossless transport profile's bound on data in flight)")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    # The op threads hold the GIL in short bursts; a short switch interval lets the compute loop wake on time.
    sys.setswitchinterval(0.0005)
    cfg = WorkerConfig(job=load_job(args.job_file), rank=args.rank, events_socket=args.events_socket,
                       log_path=args.log, seed=args.seed, start_at=args.start_at,
                       connect_timeout=args.connect_timeout, port_offset=args.port_offset,
                       pace_mbps=args.pace_mbps, bind_address=args.bind_address, window_clamp=args.window_clamp)
    worker = Worker(cfg)
    try:
        summary = worker.run()
    except BaseException as exc:  # noqa: BLE001 - recorded in the log, then reported by the exit status
        worker.log.write({"type": "error", "message": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()}, flush=True)
        traceback.print_exc()
        worker.close()
        return 1
    worker.close()
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
