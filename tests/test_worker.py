"""The worker's iteration loop, ground-truth log and operation events, run on loopback with real processes."""
import json
import threading
import time
from collections import defaultdict

import numpy as np
import pytest

from core.model import Bucket, JobSpec, ModelProfile, OperationEvent
from workloads.events import EventReceiver, EventSender
from workloads.local import localize, run_local_job
from workloads.truth import summarize_job
from workloads.worker import EmulatedGpu, GradientData

WORKERS = 3
ITERATIONS = 3
PACE_MBPS = 20.0
# Bucket 0 is large: its all-reduce (~0.2 s at the pacing rate) is still running while the next forward pass
# works through buckets 2 and 1, which is what tells the two semantics apart.
PROFILE = ModelProfile("tiny", "test", 1, (
    Bucket(0, 400_000, 0.010, 0.010),
    Bucket(1, 4_000, 0.008, 0.012),
    Bucket(2, 4_000, 0.006, 0.014),
))
TOL = 2e-6  # log times are rounded to the microsecond


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def run_job(tmp_path_factory, index, semantics, events_socket=None):
    job = JobSpec(index, f"w{semantics}", PROFILE, WORKERS, ITERATIONS, semantics=semantics)
    out = tmp_path_factory.mktemp(semantics)
    paths = run_local_job(job, str(out), events_socket=events_socket, timeout=45.0, pace_mbps=PACE_MBPS,
                          start_delay=1.0)
    return job, [read(p) for p in paths], paths


@pytest.fixture(scope="module")
def overlap_run(tmp_path_factory):
    sock_dir = tmp_path_factory.mktemp("ev")
    receiver = EventReceiver(str(sock_dir / "events.sock"))
    received = []
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            item = receiver.recv(0.05)
            if item is not None:
                received.append(item)

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        job, logs, paths = run_job(tmp_path_factory, 40, "overlap", receiver.path)
        time.sleep(0.2)
    finally:
        stop.set()
        thread.join(5)
        receiver.close()
    return job, logs, paths, received


@pytest.fixture(scope="module")
def wait_all_run(tmp_path_factory):
    return run_job(tmp_path_factory, 41, "wait_all")


def by_type(log, kind):
    return [r for r in log if r["type"] == kind]


def index_log(log):
    compute = {(r["iteration"], r["phase"], r["bucket"]): r for r in by_type(log, "compute")}
    ops = {(r["iteration"], r["bucket"]): r for r in by_type(log, "op")}
    return compute, ops


def check_common(job, logs):
    buckets = len(job.model.buckets)
    for rank, log in enumerate(logs):
        header, summary = log[0], log[-1]
        assert header["type"] == "header" and header["rank"] == rank and header["job"] == job.name
        assert header["model"] == "tiny" and header["workers"] == WORKERS and header["pid"] > 0
        assert header["address"] == localize(job).addresses[rank]
        assert summary["type"] == "summary" and summary["check_failures"] == 0
        assert summary["ops"] == ITERATIONS * buckets
        assert summary["late_start_s"] >= 0.0  # late only if the machine is overloaded at start
        compute, ops = index_log(log)
        assert len(compute) == 2 * ITERATIONS * buckets and len(ops) == ITERATIONS * buckets
        assert all(op["ok"] for op in ops.values())
        # Compute intervals never overlap and follow DDP order: forward B-1..0, then backward 0..B-1.
        seq = sorted(by_type(log, "compute"), key=lambda r: r["start"])
        expected = [(it, "forward", b) for it in range(ITERATIONS) for b in reversed(range(buckets))]
        expected = sorted(expected + [(it, "backward", b) for it in range(ITERATIONS) for b in range(buckets)],
                          key=lambda k: (k[0], k[1] == "backward", k[2] if k[1] == "backward" else -k[2]))
        assert [(r["iteration"], r["phase"], r["bucket"]) for r in seq] == expected
        for a, b in zip(seq, seq[1:]):
            assert b["start"] >= a["end"] - TOL
        for r in seq:
            dur = job.model.buckets[r["bucket"]].forward_s if r["phase"] == "forward" else \
                job.model.buckets[r["bucket"]].backward_s
            assert r["end"] - r["start"] == pytest.approx(dur, abs=TOL)
        # Each all-reduce starts once its bucket's backward compute is done.
        for (it, b), op in ops.items():
            assert op["launch"] >= compute[(it, "backward", b)]["end"] - TOL
            assert op["launch"] <= op["first_byte"] <= op["last_byte"] <= op["done"]
            assert op["nbytes"] == job.model.buckets[b].nbytes
        # Iterations tile the run.
        its = by_type(log, "iteration")
        assert [r["iteration"] for r in its] == list(range(ITERATIONS))
        for a, b in zip(its, its[1:]):
            assert b["start"] == pytest.approx(a["end"], abs=TOL)
        last_done = max(op["done"] for op in ops.values())
        assert its[-1]["end"] >= last_done - TOL
        # Waits are disjoint from compute.
        for w in by_type(log, "wait"):
            for r in seq:
                assert w["end"] <= r["start"] + TOL or w["start"] >= r["end"] - TOL


def test_overlap_log_and_dependencies(overlap_run):
    job, logs, _, _ = overlap_run
    check_common(job, logs)
    for log in logs:
        compute, ops = index_log(log)
        for it in range(1, ITERATIONS):
            for b in range(len(job.model.buckets)):
                assert compute[(it, "forward", b)]["start"] >= ops[(it - 1, b)]["done"] - TOL
            # The first group's forward runs while bucket 0's all-reduce is still in flight.
            assert compute[(it, "forward", 2)]["start"] < ops[(it - 1, 0)]["done"]
        waits = by_type(log, "wait")
        assert any(w["bucket"] == 0 and w["in_iteration"] == w["iteration"] + 1 for w in waits)


def test_wait_all_log_and_dependencies(wait_all_run):
    job, logs, _ = wait_all_run
    check_common(job, logs)
    for log in logs:
        compute, ops = index_log(log)
        for it in range(1, ITERATIONS):
            all_done = max(ops[(it - 1, b)]["done"] for b in range(len(job.model.buckets)))
            first_forward = min(r["start"] for k, r in compute.items() if k[0] == it and k[1] == "forward")
            assert first_forward >= all_done - TOL


def test_truth_summary_of_real_logs(overlap_run, wait_all_run):
    for job, _, paths in (overlap_run[:3], wait_all_run):
        s = summarize_job(paths)
        assert s["complete"] and s["iterations"] == ITERATIONS and s["check_failures"] == 0
        assert s["busy_s"] == pytest.approx(ITERATIONS * PROFILE.compute_s, abs=1e-4)
        assert 0.0 < s["gpu_utilization"] < 1.0
        # Almost all idle time is attributed to named waits.
        assert s["wait_s"] <= s["idle_s"] + 1e-4 and s["idle_s"] - s["wait_s"] < 0.1 * s["wall_s"]
        assert s["op_time_by_bucket_s"][0] > s["op_time_by_bucket_s"][2]
        assert len(s["ops"]) == ITERATIONS * len(PROFILE.buckets)


def test_events_arrive_with_plausible_needed_at(overlap_run):
    job, logs, _, received = overlap_run
    summaries = [log[-1] for log in logs]
    sent = sum(s["events_sent"] for s in summaries)
    dropped = sum(s["events_dropped"] for s in summaries)
    assert sent > 0 and len(received) == sent
    events = [r.event for r in received]
    for r in received:
        assert isinstance(r.event, OperationEvent) and r.event.job == job.index
        assert r.received_at >= r.event.time - 1e-3
    buckets = PROFILE.buckets
    for ev in events:
        if ev.kind != "launch":
            continue
        offset = sum(x.backward_s for x in buckets if x.index > ev.bucket)
        if ev.iteration < ITERATIONS - 1:
            offset += sum(x.forward_s for x in buckets if x.index > ev.bucket)
        assert ev.nbytes == buckets[ev.bucket].nbytes
        assert offset - 0.01 <= ev.needed_at - ev.time <= offset + 1e-3
    kinds = defaultdict(set)
    for ev in events:
        kinds[(ev.rank, ev.iteration, ev.bucket)].add(ev.kind)
    if dropped == 0:
        for rank in range(WORKERS):
            for it in range(ITERATIONS):
                for b in range(len(buckets)):
                    assert {"launch", "done"} <= kinds[(rank, it, b)]
        assert any("wait" in k and "resume" in k for k in kinds.values())
        progress = [ev for ev in events if ev.kind == "progress" and ev.bucket == 0]
        assert progress
        per_op = defaultdict(list)
        for ev in progress:
            per_op[(ev.rank, ev.iteration)].append(ev.bytes_done)
        for values in per_op.values():
            assert values == sorted(values) and len(values) <= 3


def test_gradient_data_sum_is_exact():
    job = localize(JobSpec(3, "g", PROFILE, 8, 1))
    data = [GradientData(job, r, seed=7) for r in range(8)]
    for it in (0, 5, 17):
        for b in range(3):
            total = np.sum([d.gradient(b, it) for d in data], axis=0, dtype=np.float32)
            assert data[0].check(b, it, total)
            total[0] += 1
            assert not data[3].check(b, it, total)
    assert data[0].nbytes(1) == 4000
    assert not np.array_equal(data[0].gradient(0, 0), data[1].gradient(0, 0))


def test_emulated_gpu_deadlines_do_not_drift():
    gpu = EmulatedGpu()
    t0 = time.perf_counter()
    intervals = [gpu.compute(0.002) for _ in range(25)]
    elapsed = time.perf_counter() - t0
    for (s0, e0), (s1, _) in zip(intervals, intervals[1:]):
        assert s1 == e0
    assert intervals[-1][1] - intervals[0][0] == pytest.approx(0.05, abs=1e-9)
    assert elapsed < 0.05 + 0.02


def test_event_sender_never_fails_without_receiver(tmp_path):
    sender = EventSender(str(tmp_path / "nobody.sock"))
    ev = OperationEvent("launch", 1, 0, 0, 0, time.time())
    assert sender.send(ev) is False and sender.send(ev) is False
    assert sender.dropped == 2 and sender.sent == 0
    sender.close()
    assert EventSender(None).send(ev) is False


def test_event_round_trip(tmp_path):
    with EventReceiver(str(tmp_path / "ev.sock")) as receiver, EventSender(receiver.path) as sender:
        ev = OperationEvent("progress", 2, 1, 4, 3, time.time(), nbytes=100, bytes_done=50, needed_at=12.5)
        assert sender.send(ev)
        got = receiver.recv(1.0)
        assert got.event == ev and got.received_at >= ev.time
        assert receiver.recv(0.01) is None


def test_local_run_times_out_and_stops_workers(tmp_path):
    slow = ModelProfile("slow", "test", 1, (Bucket(0, 400, 5.0, 5.0),))
    job = JobSpec(42, "slow", slow, 2, 1)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        run_local_job(job, str(tmp_path), timeout=1.0, start_delay=0.2)
    assert time.monotonic() - t0 < 5.0
