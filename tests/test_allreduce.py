"""Ring all-reduce over loopback TCP: correctness, bytes on the wire, concurrency, connection handling."""
import itertools
import socket
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

from core.model import Bucket, JobSpec, ModelProfile
from core.ring import ring_bytes_per_rank
from testbed.traffic import tcp_state
from workloads.allreduce import HEADER_BYTES, RingMember, framing_overhead
from workloads.local import localize

# Every test gets its own job index, hence its own loopback addresses and ports.
_job_indices = itertools.count(20)


def make_job(workers, buckets=1, index=None):
    profile = ModelProfile("test", "", 1, tuple(Bucket(b, 4096, 0.0, 0.0) for b in range(buckets)))
    index = next(_job_indices) if index is None else index
    return localize(JobSpec(index, f"ar{index}", profile, workers, 1))


def in_threads(fn, args_list):
    results, errors = [None] * len(args_list), []

    def run(i, args):
        try:
            results[i] = fn(*args)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return results


@contextmanager
def ring(job, **kwargs):
    members = [RingMember(job, r, **kwargs) for r in range(job.workers)]
    try:
        in_threads(lambda m: m.connect(10.0), [(m,) for m in members])
        yield members
    finally:
        in_threads(lambda m: m.close(5.0), [(m,) for m in members])


def allreduce_all(members, bucket, arrays, **kwargs):
    return in_threads(lambda m, a: m.allreduce_with_stats(bucket, a, **kwargs),
                      [(m, a) for m, a in zip(members, arrays)])


def integer_arrays(workers, size, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(-1000, 1000, size).astype(np.float32) for _ in range(workers)]


@pytest.mark.parametrize("workers", range(2, 9))
def test_sum_is_exact_for_any_size(workers):
    job = make_job(workers)
    sizes = [1, workers - 1, workers, workers + 1, 1000 + workers - 1, 12345]
    with ring(job) as members:
        for size in sizes:
            arrays = integer_arrays(workers, size, seed=size)
            expected = np.sum(arrays, axis=0)
            for result, stats in allreduce_all(members, 0, arrays):
                assert result.dtype == np.float32 and result.shape == (size,)
                assert np.array_equal(result, expected), f"N={workers} size={size}"
                assert stats.payload_sent + framing_overhead(workers) == stats.bytes_sent


def test_float_data_and_shape_are_kept():
    job = make_job(3)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((7, 5)).astype(np.float32) for _ in range(3)]
    with ring(job) as members:
        for result, _ in allreduce_all(members, 0, arrays):
            assert result.shape == (7, 5)
            np.testing.assert_allclose(result, arrays[0] + arrays[1] + arrays[2], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("workers,size", [(4, 4000), (4, 4003), (5, 1001), (2, 1)])
def test_bytes_sent_per_worker(workers, size):
    job = make_job(workers)
    nbytes = size * 4
    with ring(job) as members:
        results = allreduce_all(members, 0, integer_arrays(workers, size))
    payloads = [stats.payload_sent for _, stats in results]
    # Each step moves every chunk exactly once around the ring.
    assert sum(payloads) == 2 * (workers - 1) * nbytes
    assert sum(s.bytes_received for _, s in results) == sum(s.bytes_sent for _, s in results)
    for _, stats in results:
        assert abs(stats.payload_sent - ring_bytes_per_rank(nbytes, workers)) <= 2 * (workers - 1) * 4
        assert stats.bytes_sent - stats.payload_sent == 2 * (workers - 1) * HEADER_BYTES
        assert stats.launch <= stats.first_byte <= stats.last_byte <= stats.done
    if size % workers == 0:
        assert all(p == ring_bytes_per_rank(nbytes, workers) for p in payloads)
    assert sum(m.total_bytes_sent for m in members) == sum(s.bytes_sent for _, s in results)


def test_buckets_run_concurrently_and_large_chunks_do_not_deadlock():
    workers, buckets = 3, 4
    job = make_job(workers, buckets)
    sizes = {0: 3_000_001, 1: 17, 2: 250_000, 3: 2}  # bucket 0's chunks exceed the socket buffers
    arrays = {b: integer_arrays(workers, n, seed=b) for b, n in sizes.items()}
    with ring(job) as members:
        calls = [(m, b, arrays[b][m.rank]) for m in members for b in range(buckets)]
        results = in_threads(lambda m, b, a: (m.rank, b, m.allreduce(b, a)), calls)
    for rank, b, result in results:
        assert np.array_equal(result, np.sum(arrays[b], axis=0)), (rank, b)


def test_repeated_operations_on_persistent_connections():
    job = make_job(3, 2)
    with ring(job) as members:
        for it in range(5):
            for b in range(2):
                arrays = integer_arrays(3, 100 + it * 10 + b, seed=it)
                for result, stats in allreduce_all(members, b, arrays):
                    assert np.array_equal(result, np.sum(arrays, axis=0))
                    assert stats.seq == it


def test_connections_follow_the_port_encoding():
    job = make_job(3, 3)
    with ring(job) as members:
        for m in members:
            flows = m.flows()
            assert set(flows) == {0, 1, 2}
            for b, flow in flows.items():
                assert flow == job.flow(m.rank, b)


def test_ring_reconnects_on_the_same_ports_after_close():
    job = make_job(2, 2)
    for _ in range(2):
        with ring(job) as members:
            arrays = integer_arrays(2, 10)
            for result, _ in allreduce_all(members, 1, arrays):
                assert np.array_equal(result, arrays[0] + arrays[1])


def test_progress_callback_counts_bytes_sent():
    job = make_job(2)
    seen = {0: [], 1: []}
    size = 600_000  # several send slices per message
    arrays = integer_arrays(2, size)
    with ring(job) as members:
        results = in_threads(
            lambda m, a: m.allreduce_with_stats(0, a, on_progress=seen[m.rank].append),
            [(m, a) for m, a in zip(members, arrays)])
    for rank, (_, stats) in enumerate(results):
        values = seen[rank]
        assert len(values) >= 2
        assert values == sorted(values)
        assert values[-1] == stats.bytes_sent


def test_pacing_limits_the_rate():
    job = make_job(2)
    size = 50_000  # 200 kB: each rank sends 200 kB at 16 Mbit/s, i.e. 0.1 s
    with ring(job, pace_mbps=16.0) as members:
        t0 = time.perf_counter()
        results = allreduce_all(members, 0, integer_arrays(2, size))
        elapsed = time.perf_counter() - t0
    assert np.array_equal(results[0][0], results[1][0])
    assert 0.08 <= elapsed < 1.0


def test_single_worker_is_a_copy():
    job = make_job(1)
    with ring(job) as (member,):
        a = np.arange(5, dtype=np.float32)
        result, stats = member.allreduce_with_stats(0, a)
        assert np.array_equal(result, a) and result is not a
        assert stats.bytes_sent == 0


def test_connect_times_out_without_peer():
    job = make_job(2)
    member = RingMember(job, 0)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        member.connect(0.5)
    assert time.monotonic() - t0 < 3.0
    member.close(0.1)


def test_unknown_bucket_is_rejected():
    job = make_job(1)
    member = RingMember(job, 0)
    member.connect(1.0)
    with pytest.raises(KeyError):
        member.allreduce(5, np.zeros(3, dtype=np.float32))


def test_window_clamp_bounds_what_the_previous_rank_may_send():
    # The lossless profile's bound on data in flight: every accepted connection carries the clamp from its
    # SYN-ACK on, and the sum stays exact through a window of a few packets.
    job = make_job(3, 2)
    clamp = 8 * 1448
    with ring(job, window_clamp=clamp) as members:
        for m in members:
            for sock in m._in.values():
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP) == clamp
            for sock in m._out.values():
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP) != clamp
        arrays = integer_arrays(3, 200_000)
        for out in allreduce_all(members, 1, arrays):
            np.testing.assert_array_equal(out[0], sum(arrays))
        # Data has flowed: the kernel's receive autotuning would have raised a bare clamp by now (to megabytes),
        # and the sender would see far more than the clamp.
        for m in members:
            for sock in m._in.values():
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP) == clamp
            for sock in m._out.values():
                assert tcp_state(sock)["snd_wnd"] <= clamp
