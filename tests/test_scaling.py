"""Real-to-emulated scaling: the ring formula, the preserved ratio, the time-scale rule."""
import math

import pytest

from core.model import Bucket, ModelProfile
from core.ring import ring_time_s
from workloads.profiles import coarsen, load_profile
from workloads.scaling import (
    MIN_BUCKET_BYTES,
    MIN_BYTES_PER_WORKER,
    Scaling,
    estimate_iteration_s,
    suggest_time_scale,
)

SHIPPED = ("resnet50", "vgg16", "bert_large", "gpt2_xl")


def test_ring_time_s_formula():
    # 2(N-1)/N * S * 8 / rate
    assert math.isclose(ring_time_s(1_000_000, 4, 8e6), 2 * 3 / 4 * 1.0)
    assert math.isclose(ring_time_s(10 ** 9, 2, 100e9), 0.08)
    assert ring_time_s(123, 1, 1e9) == 0.0
    # Grows towards 2 S / B with the ring size.
    assert ring_time_s(1000, 64, 1e6) < 2 * 1000 * 8 / 1e6
    with pytest.raises(ValueError):
        ring_time_s(1, 0, 1e9)
    with pytest.raises(ValueError):
        ring_time_s(1, 2, 0)


def test_byte_factor():
    s = Scaling(real_link_gbps=100, emu_link_mbps=10, time_scale=2.0)
    assert math.isclose(s.byte_factor, 2.0 * 10e6 / 100e9)
    assert s.scale_seconds(1.5) == 3.0
    for bad in (0, -1, float("nan"), True):
        with pytest.raises(ValueError):
            Scaling(time_scale=bad)


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("tau", [0.7, 1.9, 5.0])
def test_ratio_preserved(name, tau):
    real = load_profile(name)
    s = Scaling(real_link_gbps=100, emu_link_mbps=10, time_scale=tau)
    emu = s.scale_profile(coarsen(real, 6), workers=4)
    comm_real = ring_time_s(real.gradient_bytes, 4, s.real_rate_bps)
    comm_emu = ring_time_s(emu.gradient_bytes, 4, s.emu_rate_bps)
    ratio_real = comm_real / real.compute_s
    ratio_emu = comm_emu / emu.compute_s
    # Exact up to rounding to whole bytes and the minimum bucket size (a few KiB at most).
    slack = len(emu.buckets) * MIN_BUCKET_BYTES / emu.gradient_bytes
    assert abs(ratio_emu / ratio_real - 1) <= slack + 1e-6
    assert math.isclose(emu.compute_s, tau * real.compute_s)
    assert math.isclose(comm_emu, tau * comm_real, rel_tol=slack + 1e-6)


def test_ratio_exact_per_bucket_without_floor():
    real = ModelProfile("m", "g", 1, (Bucket(0, 10 ** 9, 0.1, 0.2), Bucket(1, 3 * 10 ** 9, 0.3, 0.6)))
    s = Scaling(100, 10, 1.0)                       # beta = 1e-4 -> 100 kB and 300 kB
    emu = s.scale_profile(real)
    assert [b.nbytes for b in emu.buckets] == [100_000, 300_000]
    for r, e in zip(real.buckets, emu.buckets):
        assert math.isclose(e.nbytes * 8 / s.emu_rate_bps / e.backward_s, r.nbytes * 8 / s.real_rate_bps / r.backward_s)


def test_scale_profile_floor():
    real = ModelProfile("m", "g", 1, (Bucket(0, 1000, 0.1, 0.2), Bucket(1, 10 ** 9, 0.3, 0.6)))
    s = Scaling(100, 10, 1.0)
    emu = s.scale_profile(real)
    assert emu.buckets[0].nbytes == MIN_BUCKET_BYTES
    emu64 = s.scale_profile(real, workers=64)
    assert emu64.buckets[0].nbytes == 64 * MIN_BYTES_PER_WORKER
    assert emu.name == real.name and emu.sources == real.sources
    assert [b.index for b in emu.buckets] == [0, 1]


def test_suggest_time_scale_puts_shipped_models_in_range():
    profiles = [load_profile(n) for n in SHIPPED]
    lo, hi = 0.5, 3.0
    tau = suggest_time_scale(profiles, emu_link_mbps=10, real_link_gbps=100, target_iteration_s=(lo, hi), workers=4)
    s = Scaling(100, 10, tau)
    for p in profiles:
        emu = s.scale_profile(coarsen(p, 6), workers=4)
        t = estimate_iteration_s(emu, 4, s.emu_rate_bps)
        assert lo <= t <= hi, (p.name, t)
        assert math.isclose(t, tau * estimate_iteration_s(p, 4, s.real_rate_bps), rel_tol=0.01)


def test_suggest_time_scale_rule():
    def model(seconds):
        return ModelProfile("m", "g", 1, (Bucket(0, 1, seconds / 3, 2 * seconds / 3),))

    # One job: its iteration goes to the center, 1.5 s.
    tau = suggest_time_scale([model(0.3)], real_link_gbps=1e6)
    assert math.isclose(tau * 0.3, 1.5, rel_tol=1e-6)
    # Geometric mean to 1.5 s when that keeps all jobs inside.
    tau = suggest_time_scale([model(0.25), model(0.64)], real_link_gbps=1e6)
    assert math.isclose(tau, 1.5 / 0.4, rel_tol=1e-6)
    # Clipped when the mean would push the longest job out.
    tau = suggest_time_scale([model(0.1), model(0.5), model(0.5), model(0.5)], real_link_gbps=1e6)
    assert 0.5 * tau <= 3.0 and 0.1 * tau >= 0.5
    # Impossible spread: both ends equally far out, in ratio.
    tau = suggest_time_scale([model(0.1), model(10.0)], real_link_gbps=1e6)
    assert math.isclose(0.5 / (0.1 * tau), (10.0 * tau) / 3.0, rel_tol=1e-6)


def test_suggest_time_scale_independent_of_emulated_rate():
    profiles = [load_profile("resnet50"), load_profile("bert_large")]
    assert suggest_time_scale(profiles, 10) == suggest_time_scale(profiles, 20)


def test_suggest_time_scale_per_job_workers_and_errors():
    profiles = [load_profile("vgg16"), load_profile("bert_large")]
    a = suggest_time_scale(profiles, workers=[2, 8])
    b = suggest_time_scale(profiles, workers=4)
    assert a != b
    with pytest.raises(ValueError):
        suggest_time_scale([])
    with pytest.raises(ValueError):
        suggest_time_scale(profiles, workers=[2])
    with pytest.raises(ValueError):
        suggest_time_scale(profiles, target_iteration_s=(3.0, 0.5))
    with pytest.raises(ValueError):
        suggest_time_scale(profiles, emu_link_mbps=0)


def test_scaling_dict_round_trip():
    s = Scaling(200, 20, 3.5)
    d = s.to_dict()
    assert math.isclose(d["byte_factor"], s.byte_factor)
    assert Scaling.from_dict(d) == s
