"""Each scheduling policy's defining behaviour on small hand-built fabrics and jobs (no network needed).

The fabric: 2 spines, 2 leaves, 4 hosts per leaf (10.0.0.1-4 on leaf 0, 10.0.0.5-8 on leaf 1), hosts at
10 Mbit/s and leaf-spine links at 20 Mbit/s.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from controller.schedulers.base import EcmpScheduler
from controller.schedulers.bytescheduler import ByteScheduler, bucket_class
from controller.schedulers.compression import compress, compress_log
from controller.schedulers.correction import IterationShape, link_time, pairwise_factor, pairwise_factors
from controller.schedulers.crux import CruxScheduler, job_intensity, overlap_window, select_paths
from controller.schedulers.flux_v1 import FluxV1Scheduler
from controller.schedulers.registry import SCHEDULERS, make_scheduler, parse_params, scheduler_names
from core.classes import ACK_CLASS
from core.fabric import FabricLayout, FabricSpec, FabricView
from core.model import Bucket, Decision, JobSpec, ModelProfile, OperationEvent, OperationId

DOCS = Path(__file__).resolve().parents[1] / "docs" / "schedulers.md"


# -- builders --------------------------------------------------------------------------------------------------


def make_fabric(spines=2, leaves=2, per_leaf=4, host_mbps=10.0, fabric_mbps=20.0) -> FabricView:
    """Hosts 10.0.0.1.. numbered leaf by leaf, as in every fabric the testbed builds."""
    return FabricLayout.from_spec(FabricSpec(spines, leaves, per_leaf, host_mbps, fabric_mbps)).view()


def make_model(name="m", buckets=4, bucket_bytes=250_000, forward_s=0.01, backward_s=0.02) -> ModelProfile:
    """``buckets`` equal buckets; forward_s / backward_s are per bucket."""
    return ModelProfile(name=name, gpu="test", batch_size=1,
                        buckets=tuple(Bucket(i, bucket_bytes, forward_s, backward_s) for i in range(buckets)))


def make_job(index, hosts, model, semantics="overlap") -> JobSpec:
    """A job whose rank r runs on host 10.0.0.<hosts[r]>."""
    return JobSpec(index=index, name=f"job{index}", model=model, workers=len(hosts), iterations=10,
                   semantics=semantics, hosts=tuple(f"h{h}" for h in hosts),
                   addresses=tuple(f"10.0.0.{h}" for h in hosts))


def launch(job, bucket, t, needed_at, iteration=0, rank=None):
    """Launch events of one operation (every rank, or one)."""
    nbytes = job.model.buckets[bucket].nbytes
    ranks = range(job.workers) if rank is None else [rank]
    return [OperationEvent("launch", job.index, r, iteration, bucket, t, nbytes=nbytes, needed_at=needed_at)
            for r in ranks]


def feed(sched, events, now):
    for ev in events:
        sched.on_event(ev, now)


def job_class(decisions, job, bucket=None):
    """The single class of a job's flows (of one bucket, or of all buckets)."""
    buckets = [bucket] if bucket is not None else range(len(job.model.buckets))
    classes = {decisions[f].priority_class for b in buckets for f in job.flows(b)}
    assert len(classes) == 1, classes
    return classes.pop()


# Intensities: HEAVY computes long on a small gradient, LIGHT computes little on a large one.
HEAVY = make_model("heavy", buckets=4, bucket_bytes=100_000, forward_s=0.1, backward_s=0.2)
LIGHT = make_model("light", buckets=4, bucket_bytes=400_000, forward_s=0.01, backward_s=0.02)


# -- ByteScheduler -----------------------------------------------------------------------------------------------


def test_bytescheduler_first_layer_buckets_get_higher_class_in_every_job():
    fabric = make_fabric()
    a = make_job(0, [1, 5], make_model(buckets=4))
    b = make_job(1, [2, 3, 6], make_model(buckets=6))
    rules = ByteScheduler(fabric, [a, b]).decide(0.0)
    for job in (a, b):
        classes = [job_class(rules, job, bucket) for bucket in range(len(job.model.buckets))]
        assert classes == sorted(classes) and len(set(classes)) == len(classes)
        assert classes[0] == 0 and classes[-1] == 6  # first layers (highest index) most urgent; 7 is the ACKs'
        assert all(rules[f].path is None for bk in range(len(job.model.buckets)) for f in job.flows(bk))
    assert len(rules) == 2 * 4 + 3 * 6  # every flow of every bucket, up front


def test_bytescheduler_ignores_other_jobs():
    fabric = make_fabric()
    a = make_job(0, [1, 5], HEAVY)
    b = make_job(1, [2, 6], LIGHT)  # very different intensity, same bucket count
    alone = ByteScheduler(fabric, [a]).decide(0.0)
    both = ByteScheduler(fabric, [a, b]).decide(0.0)
    assert {f: both[f] for f in alone} == alone
    for bucket in range(4):
        assert job_class(both, a, bucket) == job_class(both, b, bucket)


def test_bytescheduler_rank_mapping():
    assert [bucket_class(b, 10, "rank") for b in range(10)] == [0, 0, 0, 0, 1, 2, 3, 4, 5, 6]
    assert [bucket_class(b, 3, "linear") for b in range(3)] == [0, 3, 6]
    assert bucket_class(0, 1) == 6


# -- Crux --------------------------------------------------------------------------------------------------------


def test_crux_intensity_by_hand():
    fabric = make_fabric()
    model = make_model(buckets=1, bucket_bytes=1_000_000, forward_s=0.2, backward_s=0.2)
    job = make_job(0, [1, 5], model, semantics="wait_all")
    ji = job_intensity(fabric, job)
    # Each rank sends 2*(2-1)/2 * 1 MB = 8 Mbit: 0.8 s on its 10 Mbit/s host link (0.4 s on the 20 Mbit/s fabric).
    assert ji.comm_s == pytest.approx(0.8)
    assert ji.compute_gpu_s == pytest.approx(0.8)  # 0.4 s x 2 GPUs
    assert ji.intensity == pytest.approx(1.0)
    # One bucket, wait_all: nothing can hide the communication.
    assert overlap_window(job) == 0.0 and ji.exposed == 1.0 and ji.priority == pytest.approx(1.0)


def test_crux_overlap_correction_lowers_hidden_jobs():
    fabric = make_fabric()
    model = make_model(buckets=4, bucket_bytes=50_000, forward_s=0.05, backward_s=0.1)
    job = make_job(0, [1, 5], model)
    ji = job_intensity(fabric, job)
    # H = 0.4 - 0.1 + 0.2 - 0.05 = 0.45 s >= t = 0.16 s: fully hidden, k at its floor.
    assert overlap_window(job) == pytest.approx(0.45)
    assert ji.exposed == pytest.approx(0.1)
    assert job_intensity(fabric, job, overlap_scale=0.0).priority == pytest.approx(ji.intensity)


def test_pairwise_comparison_by_hand():
    """Alone, a job sends its t_j per iteration; shared, the first job is served whenever its data is ready."""
    job = IterationShape(compute_s=1.0, ready_s=0.5, comm_s=0.6)   # alone: 0.5 + 0.6 = 1.1 s per iteration
    assert job.alone_s == pytest.approx(1.1)
    assert link_time([job], 0, 11.0) == pytest.approx([6.0])        # 10 iterations
    other = IterationShape(compute_s=1.0, ready_s=0.5, comm_s=0.6)
    first, second = link_time([job, other], 0, 11.0)
    assert first == pytest.approx(6.0) and second < first and first + second <= 11.0 + 1e-9
    # Identical jobs: going first gains exactly what it costs, k = 1.
    assert pairwise_factor(job, other) == pytest.approx(1.0)


def test_pairwise_correction_follows_the_papers_two_examples():
    """Crux's Example 2: a job whose communication hides behind its computation gains nothing by going first;
    Example 1: of equal intensity, the shorter-iteration job gains more link time than it costs the longer one."""
    exposed = IterationShape(compute_s=1.0, ready_s=0.9, comm_s=0.6)
    hidden = IterationShape(compute_s=2.0, ready_s=0.5, comm_s=0.5)
    assert pairwise_factor(hidden, exposed) < 0.01 and pairwise_factor(exposed, hidden) > 100
    short, long_ = IterationShape(0.5, 0.25, 0.3), IterationShape(2.0, 1.0, 1.2)
    assert pairwise_factor(short, long_) > 1.0 > pairwise_factor(long_, short)


def test_crux_pairwise_reference_is_the_job_with_most_traffic_and_orders_by_k_times_intensity():
    fabric = make_fabric()
    light = make_job(0, [1, 5], make_model("light", buckets=2, bucket_bytes=50_000, forward_s=0.1, backward_s=0.2))
    heavy = make_job(1, [2, 6], HEAVY)
    pairwise = CruxScheduler(fabric, [light, heavy])
    overlap = CruxScheduler(fabric, [light, heavy], {"correction": "overlap"})
    ref, factors = pairwise_factors([light, heavy], {i: ji.comm_s for i, ji in overlap.intensities.items()},
                                    {0: 50_000.0, 1: 4e6})
    assert ref == 1 and factors[1] == 1.0 and pairwise.intensities[1].exposed == 1.0
    assert pairwise.intensities[0].priority == pytest.approx(factors[0] * pairwise.intensities[0].intensity)
    assert {i: ji.intensity for i, ji in pairwise.intensities.items()} == pytest.approx(
        {i: ji.intensity for i, ji in overlap.intensities.items()})
    with pytest.raises(ValueError):
        CruxScheduler(fabric, [light, heavy], {"correction": "nope"})


def test_crux_higher_intensity_job_gets_higher_class_on_all_its_flows():
    fabric = make_fabric()
    heavy = make_job(0, [1, 5], HEAVY)
    light = make_job(1, [2, 6], LIGHT)
    sched = CruxScheduler(fabric, [light, heavy], {"correction": "overlap", "overlap_scale": 0.0})
    assert sched.intensities[0].intensity > sched.intensities[1].intensity
    rules = sched.decide(0.0)
    assert job_class(rules, heavy) > job_class(rules, light)
    assert job_class(rules, heavy) == 6  # the top data class: 7 carries ACKs
    assert len(rules) == 2 * 4 * 2  # static: all flows of all buckets without any event
    assert sched.decide(1.0) == rules


def test_crux_least_loaded_spine_spreads_jobs():
    fabric = make_fabric()
    jobs = [make_job(i, [1 + i, 5 + i], make_model(bucket_bytes=100_000 * (i + 1))) for i in range(4)]
    rules = CruxScheduler(fabric, jobs).decide(0.0)
    spines = []
    for job in jobs:
        used = {rules[f].path for b in range(4) for f in job.flows(b)}
        assert len(used) == 1  # one spine per job
        spines.append(used.pop())
    assert sorted(spines) == [0, 0, 1, 1]
    # The two jobs sent first (largest priority) take different spines.
    sched = CruxScheduler(fabric, jobs)
    order = sorted(jobs, key=lambda j: -sched.intensities[j.index].priority)
    assert sched.paths[(order[0].index, 0)] != sched.paths[(order[1].index, 0)]


def test_crux_intra_leaf_hops_stay_hashed_and_hop_mode_balances():
    fabric = make_fabric()
    local = make_job(0, [1, 2, 3], make_model())
    rules = CruxScheduler(fabric, [local]).decide(0.0)
    assert all(d.path is None for d in rules.values())
    # Four ranks alternating leaves: four cross-leaf hops; per-hop choice uses both spines.
    ring = make_job(1, [1, 5, 2, 6], make_model())
    paths = select_paths(fabric, [ring], {1: 1.0}, mode="hop")
    assert {paths[(1, r)] for r in range(4)} == {0, 1}
    assert all(d.path is None for d in CruxScheduler(fabric, [ring], {"paths": "hashed"}).decide(0).values())


def test_compress_twelve_keys_into_eight_classes_keeps_order_and_separates_contenders():
    scores = {f"j{i}": 2.0 ** i for i in range(12)}
    # j0..j5 contend in a chain; j6..j11 share no link with anyone, so merging them costs nothing.
    contention = [(f"j{i}", f"j{i + 1}") for i in range(5)]
    classes = compress(scores, levels=8, contention=contention)
    ordered = [classes[f"j{i}"] for i in range(12)]
    assert ordered == sorted(ordered)
    assert classes["j11"] == 7 and classes["j0"] == 0
    assert len({classes[f"j{i}"] for i in range(6)}) == 6  # contending jobs of different intensity kept apart
    assert len(set(ordered)) == 8


def test_compress_without_contention_info_clusters_log_scores():
    scores = {"a": 1.0, "b": 1.1, "c": 100.0, "d": 110.0, "e": 1e4}
    classes = compress(scores, levels=3)
    assert classes["a"] == classes["b"] == 0
    assert classes["c"] == classes["d"] == 1
    assert classes["e"] == 2


def test_compress_few_keys_get_own_spaced_classes_and_ties_share():
    classes = compress({"a": 1.0, "b": 1.0, "c": 2.0, "d": 1000.0})
    assert classes["a"] == classes["b"] == 0
    assert classes["d"] == 7
    assert 0 < classes["c"] < 3  # close to a and b on the log scale, far from d
    assert compress({"only": 5.0}) == {"only": 7}
    assert compress({}) == {}
    assert compress_log({"x": -1e6, "y": 0.0}, levels=2) == {"x": 0, "y": 1}


def test_crux_compresses_twelve_jobs_in_intensity_order():
    fabric = make_fabric(per_leaf=12)
    jobs = [make_job(i, [1 + i, 13 + i], make_model(bucket_bytes=50_000 * (i + 1))) for i in range(12)]
    sched = CruxScheduler(fabric, jobs, {"correction": "overlap", "overlap_scale": 0.0, "compression": "contiguous"})
    rules = sched.decide(0.0)
    by_priority = sorted(jobs, key=lambda j: sched.intensities[j.index].priority)
    classes = [job_class(rules, j) for j in by_priority]
    assert classes == sorted(classes) and classes[-1] == 6 and set(classes) <= set(range(7))
    assert len(set(classes)) == 7


def test_published_crux_gives_equal_jobs_unique_classes_and_cuts_the_contention_dag():
    # Four equal jobs on one spine all contend: the contiguous variant lets them share one class (fair sharing),
    # the published one orders them (interleaving), by index.
    fabric = make_fabric(spines=1)
    jobs = [make_job(i, [1 + i, 5 + i], make_model()) for i in range(4)]
    published = CruxScheduler(fabric, jobs).decide(0.0)
    contiguous = CruxScheduler(fabric, jobs, {"compression": "contiguous"}).decide(0.0)
    assert [job_class(published, j) for j in jobs] == [6, 5, 4, 3]
    assert {job_class(contiguous, j) for j in jobs} == {6}
    # Twelve jobs that all meet on the one spine: every data class used, never a lower class for a higher priority.
    fabric = make_fabric(spines=1, per_leaf=12)
    jobs = [make_job(i, [1 + i, 13 + i], make_model(bucket_bytes=50_000 * (i + 1))) for i in range(12)]
    sched = CruxScheduler(fabric, jobs, {"correction": "overlap", "overlap_scale": 0.0})
    rules = sched.decide(0.0)
    by_priority = sorted(jobs, key=lambda j: (sched.intensities[j.index].priority, -j.index))
    classes = [job_class(rules, j) for j in by_priority]
    assert classes == sorted(classes) and set(classes) == set(range(7))  # every data class, never the ACK class


def test_the_k_cut_separates_contending_pairs_that_contiguous_groups_would_merge():
    from controller.schedulers.compression import compress_kcut
    # Two pairs that contend only within themselves, two levels: the cut puts each pair's members apart.
    classes = compress_kcut({"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}, [("a", "b"), ("c", "d")], levels=2)
    assert classes["a"] > classes["b"] and classes["c"] > classes["d"]
    # Contiguous groups of the sorted scores cannot: one pair always shares a class.
    merged = compress({"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}, 2, contention=[("a", "b"), ("c", "d")])
    assert merged["a"] == merged["b"] or merged["c"] == merged["d"]


# -- Flux --------------------------------------------------------------------------------------------------------


def _two_tenant_world():
    fabric = make_fabric()
    heavy = make_job(0, [1, 5], HEAVY)
    light = make_job(1, [2, 6], LIGHT)
    return fabric, heavy, light


def test_flux_lifts_a_stalling_light_job_above_an_intensive_job_with_slack():
    fabric, heavy, light = _two_tenant_world()
    crux = CruxScheduler(fabric, [heavy, light]).decide(0.0)
    assert job_class(crux, heavy) > job_class(crux, light)  # Crux: the intensive job always first

    flux = FluxV1Scheduler(fabric, [heavy, light])
    t = 100.0
    feed(flux, launch(heavy, 3, t, needed_at=t + 2.0), t)   # needed in 2 s: plenty of slack
    feed(flux, launch(light, 3, t, needed_at=t + 0.05), t)
    feed(flux, [OperationEvent("wait", light.index, 0, 0, 3, t + 0.05)], t + 0.05)
    rules = flux.decide(t + 0.05)
    scores = flux.scores(t + 0.05)
    assert scores[OperationId(0, 0, 3)].intensity > scores[OperationId(1, 0, 3)].intensity
    assert scores[OperationId(1, 0, 3)].waiting and scores[OperationId(0, 0, 3)].slack_s > 1.0
    assert job_class(rules, light, 3) > job_class(rules, heavy, 3)
    # Flows of buckets with no live operation rest below the stalled operation, and keep the job's spine.
    assert 1 <= job_class(rules, light, 0) < job_class(rules, light, 3)
    assert rules[heavy.flow(0, 0)].path is not None


def test_flux_intensity_decides_between_equally_urgent_operations():
    fabric, heavy, light = _two_tenant_world()
    flux = FluxV1Scheduler(fabric, [heavy, light])
    t = 0.0
    feed(flux, launch(heavy, 3, t, needed_at=t + 1.0), t)
    feed(flux, launch(light, 3, t, needed_at=t + 1.0 + 0.24), t)  # light sends 4x the bytes: same slack
    rules = flux.decide(t)
    scores = flux.scores(t)
    assert scores[OperationId(1, 0, 3)].slack_s == pytest.approx(scores[OperationId(0, 0, 3)].slack_s)
    assert job_class(rules, heavy, 3) > job_class(rules, light, 3)


def test_flux_urgency_grows_as_slack_shrinks():
    fabric, heavy, light = _two_tenant_world()
    flux = FluxV1Scheduler(fabric, [heavy, light], {"promote_on": "any", "size_aware": False})
    feed(flux, launch(light, 2, 0.0, needed_at=1.0), 0.0)
    urgencies = []
    for now in (0.0, 0.2, 0.4, 0.6, 0.8):
        flux.decide(now)
        (score,) = flux.scores(now).values()
        urgencies.append(score.urgency)
    assert urgencies == sorted(urgencies) and urgencies[0] < urgencies[-1] <= 1.0
    assert urgencies[-1] == pytest.approx(1.0)  # 0.2 s left, 0.32 s of sending: it will stall
    # An operation launched now with the slack the older one started with ranks below it: the older one's
    # urgency has grown since its launch.
    feed(flux, launch(light, 1, 0.8, needed_at=1.8), 0.8)
    rules = flux.decide(0.8)
    assert job_class(rules, light, 2) > job_class(rules, light, 1)


def test_flux_progress_lowers_urgency_and_done_clears_the_class():
    fabric, heavy, light = _two_tenant_world()
    flux = FluxV1Scheduler(fabric, [heavy, light], {"min_dwell_s": 0.0})
    feed(flux, launch(light, 0, 0.0, needed_at=0.5), 0.0)
    before = flux.scores(0.1)
    feed(flux, [OperationEvent("progress", light.index, r, 0, 0, 0.1, bytes_done=300_000) for r in range(2)], 0.1)
    after = flux.scores(0.1)
    op = next(iter(after))
    assert after[op].slack_s > before[op].slack_s and after[op].urgency < before[op].urgency
    assert job_class(flux.decide(0.1), light, 0) >= 1
    feed(flux, [OperationEvent("done", light.index, r, 0, 0, 0.2) for r in range(2)], 0.2)
    # done: the flow goes back to its resting class, below the light job's live operation of before
    assert job_class(flux.decide(0.2), light, 0) <= job_class(flux.decide(0.1), light, 0)


def _oscillate(params):
    """Two operations of one job whose slack order flips on every step; returns the scheduler."""
    fabric, heavy, light = _two_tenant_world()
    flux = FluxV1Scheduler(fabric, [heavy, light], params)
    # Per-rank bytes of a LIGHT bucket: 400 kB. 12.5 kB of progress is 10 ms of sending at 10 Mbit/s.
    step_bytes = 12_500
    feed(flux, launch(light, 1, 0.0, needed_at=3.0), 0.0)
    feed(flux, launch(light, 2, 0.0, needed_at=3.005), 0.0)
    done = {1: 0, 2: 0}
    now = 0.0
    for k in range(40):
        now += 0.01
        bucket = 1 if k % 2 == 0 else 2
        done[bucket] += step_bytes
        feed(flux, [OperationEvent("progress", light.index, r, 0, bucket, now, bytes_done=done[bucket])
                    for r in range(2)], now)
        flux.decide(now)
    return flux


def test_flux_hysteresis_prevents_flapping():
    # Demotions allowed, so that both directions of a swap are possible.
    flapping = _oscillate({"hysteresis": 0.0, "min_dwell_s": 0.0, "demote_live": True, "promote_on": "any",
                           "size_aware": False})
    stable = _oscillate({"demote_live": True, "promote_on": "any", "size_aware": False})
    assert flapping.op_changes >= 30 and flapping.changes >= 60
    assert stable.op_changes <= 2
    # Dwell time alone also bounds the rate: at most one change per operation per 50 ms.
    dwell_only = _oscillate({"hysteresis": 0.0, "min_dwell_s": 0.05, "demote_live": True, "promote_on": "any",
                             "size_aware": False})
    # Without demotions (the default) oscillating scores cannot swap live operations back and forth at all.
    assert _oscillate({"hysteresis": 0.0, "min_dwell_s": 0.0}).op_changes <= 2
    assert dwell_only.op_changes <= 2 * (0.4 / 0.05) + 2


def test_flux_wait_bypasses_dwell_time():
    fabric, heavy, light = _two_tenant_world()
    flux = FluxV1Scheduler(fabric, [heavy, light], {"min_dwell_s": 10.0, "demote_live": True, "promote_on": "any"})
    feed(flux, launch(heavy, 3, 0.0, needed_at=1.0), 0.0)
    feed(flux, launch(light, 3, 0.0, needed_at=3.0), 0.0)
    rules = flux.decide(0.0)
    assert job_class(rules, heavy, 3) > job_class(rules, light, 3)
    feed(flux, [OperationEvent("wait", light.index, 1, 0, 3, 0.01)], 0.01)
    rules = flux.decide(0.01)  # well within the dwell time, yet the stalled operation is lifted at once
    assert job_class(rules, light, 3) > job_class(rules, heavy, 3)


def test_flux_never_demotes_a_live_operation_by_default():
    fabric, heavy, light = _two_tenant_world()
    flux = FluxV1Scheduler(fabric, [heavy, light])
    resting = job_class(flux.decide(0.0), heavy, 3)
    feed(flux, launch(heavy, 3, 0.0, needed_at=5.0), 0.0)   # lots of slack: scores below its resting class
    first = job_class(flux.decide(0.0), heavy, 3)
    assert first >= resting
    feed(flux, launch(light, 3, 0.0, needed_at=2.0), 0.0)
    before_wait = job_class(flux.decide(0.0), light, 3)
    feed(flux, [OperationEvent("wait", light.index, 0, 0, 3, 0.05)], 0.05)
    seen = [job_class(flux.decide(t), heavy, 3) for t in (0.05, 0.1, 0.2, 0.4)]
    assert seen == sorted(seen) and seen[0] >= first   # only ever up while live
    # the stalled operation is still lifted, into the top classes, without pushing the other one down
    assert job_class(flux.decide(0.4), light, 3) > before_wait
    assert job_class(flux.decide(0.4), light, 3) >= 5


def test_flux_without_events_rests_by_intensity():
    fabric, heavy, light = _two_tenant_world()
    flux = FluxV1Scheduler(fabric, [heavy, light])
    rules = flux.decide(0.0)
    # No operation is live: every flow rests at its job's intensity, the intensive job above the light one.
    assert len({job_class(rules, heavy, b) for b in range(len(heavy.model.buckets))}) == 1
    assert job_class(rules, heavy, 0) > job_class(rules, light, 0)
    assert {d.path for d in rules.values()} == {0, 1}  # the two cross-leaf jobs on different spines
    assert flux.decide(0.1) == rules and flux.period_s == 0.1


# -- registry and parameters -------------------------------------------------------------------------------------


def test_registry_builds_every_scheduler():
    fabric, heavy, light = _two_tenant_world()
    assert scheduler_names() == ["bytescheduler", "crux", "ecmp", "flux", "flux-v1"]
    assert SCHEDULERS["ecmp"] is EcmpScheduler
    for name in scheduler_names():
        sched = make_scheduler(name, fabric, [heavy, light])
        assert sched.name == name
        assert isinstance(sched.defaults, dict)
        assert all(isinstance(d, Decision) for d in sched.decide(0.0).values())


def test_unknown_scheduler_and_parameter_errors():
    fabric, heavy, light = _two_tenant_world()
    with pytest.raises(ValueError, match=r"^unknown scheduler 'x'; known: bytescheduler, crux, ecmp, flux, flux-v1, "
                                         r"or package.module:ClassName$"):
        make_scheduler("x", fabric, [heavy])
    with pytest.raises(ValueError, match="no parameter"):
        make_scheduler("flux-v1", fabric, [heavy], {"beta": 1})
    with pytest.raises(ValueError, match="alpha"):
        make_scheduler("flux-v1", fabric, [heavy], {"alpha": 2})
    with pytest.raises(ValueError, match="paths"):
        make_scheduler("crux", fabric, [heavy], {"paths": "random"})
    with pytest.raises(ValueError, match="mapping"):
        make_scheduler("bytescheduler", fabric, [heavy], {"mapping": "reverse"})
    unplaced = JobSpec(index=2, name="unplaced", model=LIGHT, workers=2, iterations=1)
    with pytest.raises(ValueError, match="place it"):
        make_scheduler("crux", fabric, [unplaced])


def test_parse_params_converts_numbers():
    assert parse_params(["alpha=0.5", "min_dwell_s=1e-2", "n=3", "paths=hop", "flag=true"]) == {
        "alpha": 0.5, "min_dwell_s": 0.01, "n": 3, "paths": "hop", "flag": True}
    assert parse_params([]) == {}
    with pytest.raises(ValueError):
        parse_params(["alpha"])
    fabric, heavy, light = _two_tenant_world()
    sched = make_scheduler("flux-v1", fabric, [heavy, light], parse_params(["alpha=0.7", "tau_s=0.1"]))
    assert sched.params["alpha"] == 0.7 and sched.params["tau_s"] == 0.1


def test_every_parameter_is_documented():
    text = DOCS.read_text()
    for name, cls in SCHEDULERS.items():
        assert f"`{name}`" in text
        for param in cls.defaults:
            assert f"`{param}`" in text, (name, param)


def test_scores_are_finite_for_unknown_deadlines():
    fabric, heavy, light = _two_tenant_world()
    flux = FluxV1Scheduler(fabric, [heavy, light])
    feed(flux, launch(heavy, 0, 0.0, needed_at=0.0), 0.0)  # needed_at unknown
    (score,) = flux.scores(0.0).values()
    assert math.isinf(score.slack_s) and 0 < score.urgency < 1e-6 and math.isfinite(score.log_score)
    assert job_class(flux.decide(0.0), heavy, 0) < ACK_CLASS  # data never rides with the ACKs


def test_tracker_ignores_events_of_finished_operations():
    """A worker's "resume" arrives after its "done": it must not bring the operation back to life."""
    from controller.schedulers.base import OperationTracker
    from core.model import Bucket, JobSpec, ModelProfile, OperationEvent

    model = ModelProfile("m", "none", 1, (Bucket(0, 1000, 0.1, 0.1),))
    job = JobSpec(0, "j", model, 2, 1, addresses=("10.0.0.1", "10.0.0.2"))
    tracker = OperationTracker([job])
    tracker.apply(OperationEvent("launch", 0, 0, 0, 0, 1.0, nbytes=1000, needed_at=2.0))
    tracker.apply(OperationEvent("wait", 0, 1, 0, 0, 1.1))
    assert len(tracker.live) == 1 and tracker.live_ops()[0].waiting
    for rank in (0, 1):
        tracker.apply(OperationEvent("done", 0, rank, 0, 0, 1.5))
    tracker.apply(OperationEvent("resume", 0, 1, 0, 0, 1.6))
    tracker.apply(OperationEvent("progress", 0, 1, 0, 0, 1.7, bytes_done=10))
    assert tracker.live == {}


def test_events_that_trigger_a_decision():
    fabric, heavy, light = _two_tenant_world()
    for name in ("ecmp", "bytescheduler", "crux"):
        assert make_scheduler(name, fabric, [heavy, light]).reconcile_on == ()
    assert "progress" not in make_scheduler("flux-v1", fabric, [heavy, light]).reconcile_on
    assert "progress" in make_scheduler("flux-v1", fabric, [heavy, light], {"promote_on": "any"}).reconcile_on


def test_flux_banded_mode_never_interleaves_jobs():
    fabric, heavy, light = _two_tenant_world()
    flux = FluxV1Scheduler(fabric, [heavy, light], {"mode": "banded"})
    (hlo, hhi), (llo, lhi) = flux.bands[heavy.index], flux.bands[light.index]
    assert llo <= lhi < hlo <= hhi and lhi - llo + hhi - hlo + 2 == 7   # all 7 classes used, heavy on top
    feed(flux, launch(light, 3, 0.0, needed_at=0.1), 0.0)
    feed(flux, [OperationEvent("wait", light.index, 0, 0, 3, 0.05)], 0.05)   # the light job stalls...
    feed(flux, launch(heavy, 0, 0.05, needed_at=9.0), 0.05)                  # ...the intensive one has slack
    rules = flux.decide(0.06)
    assert job_class(rules, light, 3) == lhi - 1             # lifted to the top of its own band (level l: class l-1)
    assert min(job_class(rules, heavy, b) for b in range(len(heavy.model.buckets))) >= hlo - 1
    with pytest.raises(ValueError, match="mode"):
        FluxV1Scheduler(fabric, [heavy, light], {"mode": "nonsense"})


# -- a second topology family ----------------------------------------------------------------------------------


def test_crux_spreads_jobs_over_a_fattrees_equal_cost_paths():
    """Two rings with one rank in every pod, both starting on lf1: every hop has 4 paths (2 aggregation switches
    x 2 cores). Jobs take the least-loaded path in priority order, so the second avoids all of the first's
    switch-to-switch links, and the decisions name those paths."""
    from controller.schedulers.crux import job_link_bytes
    fabric = FabricLayout.from_spec(FabricSpec.fattree(4)).view()
    assert fabric.max_paths == 4
    model = make_model(bucket_bytes=500_000)
    jobs = [make_job(0, [1, 5, 9, 13], model), make_job(1, [2, 6, 10, 14], make_model(bucket_bytes=250_000))]
    crux = CruxScheduler(fabric, jobs)
    rules = crux.decide(0.0)
    links = []
    for job in jobs:
        used = {rules[f].path for b in range(4) for f in job.flows(b)}
        assert len(used) == 1 and None not in used           # one path index per job
        paths = {(job.index, r): used.copy().pop() for r in range(job.workers)}
        links.append({e for e, b in job_link_bytes(fabric, job, paths=paths).items()
                      if b > 0 and not fabric.is_host_link(e)})
    assert links[0] and links[1] and not links[0] & links[1]


@pytest.mark.parametrize("name", ["ecmp", "bytescheduler", "crux", "flux"])
def test_every_scheduler_decides_on_a_fattree(name):
    fabric = FabricLayout.from_spec(FabricSpec.fattree(4)).view()
    jobs = [make_job(0, [1, 3, 5, 7], make_model()), make_job(1, [2, 4, 6, 8, 9, 11], make_model(buckets=2))]
    scheduler = make_scheduler(name, fabric, jobs, {})
    for ev in launch(jobs[0], 0, 0.0, needed_at=0.1):
        scheduler.on_event(ev, 0.0)
    for d in scheduler.decide(0.01).values():
        assert d.path is None or 0 <= d.path < fabric.max_paths


@pytest.mark.parametrize("name", ["crux", "flux"])
def test_path_placing_policies_move_off_a_failed_link_and_keep_their_classes(name):
    layout = FabricLayout.from_spec(FabricSpec(2, 2, 4, 10.0, 20.0))
    jobs = [make_job(0, [1, 5, 2, 6], make_model()), make_job(1, [3, 7], make_model(bucket_bytes=100_000))]
    scheduler = make_scheduler(name, layout.view(), jobs, {})
    before = scheduler.decide(0.0)
    assert {d.path for d in before.values()} == {0, 1}               # the two jobs on different spines
    scheduler.on_fabric_change(layout.without([layout.link_between("lf1", "sp1")]).view())
    after = scheduler.decide(0.0)
    assert set(after) == set(before)
    assert all(after[f].priority_class == before[f].priority_class for f in before)
    # Cross-leaf hops have one path left, through sp2: nothing to choose, so the forwarding table takes it.
    crossing = [f for f in after if scheduler.fabric.crosses_leaves(f)]
    assert crossing
    for flow in crossing:
        (path,) = scheduler.fabric.paths(flow.src_ip, flow.dst_ip)
        assert path[1] == "sp2" and after[flow].path is None


# -- Flux v2: Crux's order plus slack stealing ---------------------------------------------------------------------


def _steal_world(heavy_needed_in, light_needed_in, steal_max_s=0.1):
    """A heavy (intensive) and a light job on the same two leaves and one spine, both operations live."""
    from controller.schedulers.flux import FluxScheduler
    fabric = make_fabric(spines=1)
    heavy = make_job(0, [1, 5], HEAVY)
    # Small buckets: one operation takes 16 ms at the 10 Mbit/s host rate, short enough to steal.
    light = make_job(1, [2, 6], make_model("light", buckets=4, bucket_bytes=20_000, forward_s=0.001,
                                           backward_s=0.002))
    flux = FluxScheduler(fabric, [heavy, light], {"steal_max_s": steal_max_s})
    t = 10.0
    feed(flux, launch(heavy, 3, t, needed_at=t + heavy_needed_in), t)
    feed(flux, launch(light, 3, t + 0.001, needed_at=t + 0.001 + light_needed_in), t + 0.001)
    return flux, heavy, light, flux.decide(t + 0.002)


def test_flux_v2_keeps_cruxs_order_when_nobody_would_stall():
    flux, heavy, light, rules = _steal_world(heavy_needed_in=2.0, light_needed_in=2.0)
    assert flux.base[heavy.index] > flux.base[light.index]
    assert job_class(rules, heavy) == flux.base[heavy.index] and job_class(rules, light) == flux.base[light.index]
    assert flux.steals == 0 and max(d.priority_class for d in rules.values()) < 7


def test_flux_v2_lets_a_stalling_short_operation_steal_the_heavy_jobs_slack():
    flux, heavy, light, rules = _steal_world(heavy_needed_in=2.0, light_needed_in=0.0)
    assert job_class(rules, light, 3) == 7 and flux.steals == 1      # (a) stalls, (b) short, (c) heavy has slack
    assert job_class(rules, light, 0) == flux.base[light.index]       # its other buckets rest in the job's class
    assert job_class(rules, heavy, 3) == flux.base[heavy.index]
    # Decided once: the class holds while the operation lives, and ends with it.
    t = 10.5
    for rank in range(light.workers):
        flux.on_event(OperationEvent("done", light.index, rank, 0, 3, t), t)
    assert job_class(flux.decide(t), light, 3) == flux.base[light.index]
    assert flux.duration[(light.index, 3)] == pytest.approx(t - 10.001)


def test_flux_v2_does_not_steal_what_the_heavy_job_cannot_spare_or_a_long_operation():
    _, _, light, rules = _steal_world(heavy_needed_in=0.0, light_needed_in=0.0)       # (c) no slack to take
    assert job_class(rules, light, 3) < 7
    _, _, light, rules = _steal_world(heavy_needed_in=2.0, light_needed_in=0.0, steal_max_s=0.0)  # (b) too long
    assert job_class(rules, light, 3) < 7


def test_flux_v2_can_steal_when_a_worker_starts_waiting():
    from controller.schedulers.flux import FluxScheduler
    fabric = make_fabric(spines=1)
    heavy = make_job(0, [1, 5], HEAVY)
    light = make_job(1, [2, 6], make_model("light", buckets=4, bucket_bytes=20_000, forward_s=0.001,
                                           backward_s=0.002))
    t = 10.0
    for steal_on, expected in (("launch", False), ("wait", True)):
        flux = FluxScheduler(fabric, [heavy, light], {"steal_on": steal_on})
        feed(flux, launch(heavy, 3, t, needed_at=t + 2.0), t)
        feed(flux, launch(light, 3, t, needed_at=t + 1.0), t)        # plenty of slack at launch: no steal
        assert job_class(flux.decide(t), light, 3) < 7
        feed(flux, [OperationEvent("wait", light.index, 0, 0, 3, t + 0.9)], t + 0.9)
        assert (job_class(flux.decide(t + 0.9), light, 3) == 7) is expected, steal_on
    with pytest.raises(ValueError, match="steal_on"):
        FluxScheduler(fabric, [heavy, light], {"steal_on": "sometimes"})


def test_flux_v2_checks_the_steal_against_the_heavy_jobs_next_operations_too():
    """The heavy job's live operation has slack to spare, but its backward pass launches its last bucket (needed
    at once) while the steal would still hold the link: the chain check refuses what a check of the live
    operation alone allows."""
    from controller.schedulers.flux import FluxScheduler
    fabric = make_fabric(spines=1)
    # Heavy: bucket 2 launches 5 ms after bucket 1, and bucket 3 (the last, needed at launch) 5 ms later.
    heavy = make_job(0, [1, 5], make_model("heavy", buckets=4, bucket_bytes=40_000, forward_s=0.1,
                                           backward_s=0.005))
    light = make_job(1, [2, 6], make_model("light", buckets=4, bucket_bytes=20_000, forward_s=0.001,
                                           backward_s=0.002))
    t = 10.0
    outcomes = {}
    for margin in (1.0, 2.0):
        for heavy_bucket in (1, 3):
            flux = FluxScheduler(fabric, [heavy, light], {"margin": margin})
            assert flux.base[heavy.index] > flux.base[light.index]
            feed(flux, launch(heavy, heavy_bucket, t, needed_at=t + 2.0), t)
            feed(flux, launch(light, 3, t + 0.001, needed_at=t + 0.001), t + 0.001)
            outcomes[(margin, heavy_bucket)] = job_class(flux.decide(t + 0.002), light, 3) == 7
    # After bucket 3 the backward pass is over (the next starts after a 0.4 s forward pass): the steal fits.
    assert outcomes[(1.0, 3)] and outcomes[(2.0, 3)]
    # After bucket 1, buckets 2 and 3 follow within 10 ms and bucket 3 is needed at once: no steal.
    assert not outcomes[(1.0, 1)] and not outcomes[(2.0, 1)]
    with pytest.raises(ValueError, match="margin"):
        FluxScheduler(fabric, [heavy, light], {"margin": 0.5})


def test_flux_v2_estimates_a_steal_from_the_fastest_operation_of_its_size():
    flux, heavy, light, _ = _steal_world(heavy_needed_in=2.0, light_needed_in=2.0)
    per_rank = flux._per_rank(light, 3)
    line_s = per_rank * 8.0 / flux.rate_bps
    assert flux.expected_s(light, 3, stolen=True) == pytest.approx(line_s)    # nothing seen yet: line rate

    def finish(bucket, start, end):
        for rank in range(light.workers):
            flux.on_event(OperationEvent("done", light.index, rank, 0, bucket, end), end)
        return end - start

    slow = finish(3, 10.001, 10.5)                                 # bucket 3 waited behind the heavy job
    feed(flux, launch(light, 2, 11.0, needed_at=13.0), 11.0)
    fast = finish(2, 11.0, 11.0 + 2 * line_s)                      # bucket 2, same size, had the link
    # D (for "would it stall") is a bucket's last duration; S (what a steal costs) the fastest of its size.
    assert flux.expected_s(light, 3) == pytest.approx(slow)
    assert flux.expected_s(light, 3, stolen=True) == pytest.approx(fast)
    assert flux.best_ratio == pytest.approx(2.0)


def test_flux_v2_orders_layers_across_jobs_of_equal_intensity_and_jobs_otherwise():
    from controller.schedulers.flux import FluxScheduler
    fabric = make_fabric(spines=1)
    twins = [make_job(0, [1, 5], LIGHT), make_job(1, [2, 6], LIGHT)]
    flux = FluxScheduler(fabric, twins, {"layer_classes": 4})
    assert flux.bands == "layers"
    rules = flux.decide(0.0)
    for job in twins:   # no job above the other: each bucket's class comes from its layer position alone
        assert [job_class(rules, job, b) for b in range(4)] == [0, 1, 2, 3]
    rules = FluxScheduler(fabric, twins, {}).decide(0.0)
    for job in twins:   # by default two classes: the first-layer half above the last-layer half
        assert [job_class(rules, job, b) for b in range(4)] == [0, 0, 1, 1]
    mixed = [make_job(0, [1, 5], HEAVY), make_job(1, [2, 6], LIGHT)]
    flux = FluxScheduler(fabric, mixed, {})
    assert flux.bands == "jobs"
    rules = flux.decide(0.0)
    assert {job_class(rules, mixed[0], b) for b in range(4)} == {flux.base[0]}
    assert flux.base[0] != flux.base[1]
    assert FluxScheduler(fabric, twins, {"bands": "jobs"}).bands == "jobs"
    with pytest.raises(ValueError, match="bands"):
        FluxScheduler(fabric, twins, {"bands": "some"})


def test_flux_v2_layer_order_shares_a_class_rather_than_starve_a_live_operation_past_the_rto():
    """In the layer order a launching operation goes above live ones of lower classes; where what would then be
    above a live operation exceeds ``starve_max_s`` (off by default; e.g. TCP's minimum RTO), it shares that operation's
    class instead. Decided at launch; a job order is left alone."""
    from controller.schedulers.flux import FluxScheduler
    fabric = make_fabric(spines=1)
    twins = [make_job(0, [1, 5], LIGHT), make_job(1, [2, 6], LIGHT)]   # one bucket: 0.32 s at 10 Mbit/s
    t = 10.0
    placed = {}
    for starve_max_s in (0.0, 0.2, 1.0):
        flux = FluxScheduler(fabric, twins, {"starve_max_s": starve_max_s, "layer_classes": 4})
        feed(flux, launch(twins[0], 0, t, needed_at=t + 5.0), t)              # class 0, live
        feed(flux, launch(twins[1], 3, t + 0.01, needed_at=t + 5.0), t + 0.01)
        placed[starve_max_s] = (job_class(flux.decide(t + 0.02), twins[1], 3), flux.lowered)
    assert placed[0.0] == (3, 0)          # no guard: the layer order
    assert placed[1.0] == (3, 0)          # 0.32 s above a live operation is within a 1 s budget
    assert placed[0.2] == (0, 1)          # past 0.2 s: it shares class 0 with the live operation
    # Once the live operation is done, the bucket's flows go back to their layer class.
    flux = FluxScheduler(fabric, twins, {"starve_max_s": 0.2, "layer_classes": 4})
    feed(flux, launch(twins[0], 0, t, needed_at=t + 5.0), t)
    feed(flux, launch(twins[1], 3, t + 0.01, needed_at=t + 5.0), t + 0.01)
    for job in twins:
        bucket = 0 if job is twins[0] else 3
        for rank in range(job.workers):
            flux.on_event(OperationEvent("done", job.index, rank, 0, bucket, t + 1.0), t + 1.0)
    assert job_class(flux.decide(t + 1.0), twins[1], 3) == 3
    with pytest.raises(ValueError, match="starve_max_s"):
        FluxScheduler(fabric, twins, {"starve_max_s": -1})
    # A job order is Crux's: the guard does not touch it.
    mixed = [make_job(0, [1, 5], HEAVY), make_job(1, [2, 6], LIGHT)]
    flux = FluxScheduler(fabric, mixed, {"starve_max_s": 0.01})
    feed(flux, launch(mixed[1], 0, t, needed_at=t + 5.0), t)
    feed(flux, launch(mixed[0], 3, t + 0.01, needed_at=t + 5.0), t + 0.01)
    assert job_class(flux.decide(t + 0.02), mixed[0], 3) == flux.base[0] and flux.lowered == 0


def test_no_data_in_the_ack_class_except_flux_steals():
    """Class 7 carries every flow's ACKs: data there would hold them behind its queue (core/classes.py)."""
    fabric, heavy, light = _two_tenant_world()
    many = [make_job(i, [1 + i, 13 + i], make_model(bucket_bytes=50_000 * (i + 1))) for i in range(12)]
    for name, params in [("bytescheduler", {}), ("crux", {}), ("crux", {"compression": "contiguous"}),
                         ("flux-v1", {}), ("flux-v1", {"mode": "banded"}), ("flux", {"steal": False})]:
        for world, jobs in [(fabric, [heavy, light]), (make_fabric(spines=1, per_leaf=12), many)]:
            sched = make_scheduler(name, world, jobs, params)
            for job in jobs:
                feed(sched, launch(job, len(job.model.buckets) - 1, 0.0, needed_at=0.0), 0.0)
            classes = {d.priority_class for d in sched.decide(0.01).values()}
            assert classes and max(classes) < ACK_CLASS, (name, params, sorted(classes))


def test_pairwise_factor_does_not_depend_on_the_time_unit():
    """The same two jobs measured in seconds or in hours give the same k (long horizons used to strand link
    time in floating-point leftovers)."""
    a, b = IterationShape(1.3, 0.7, 0.9), IterationShape(0.8, 0.5, 0.4)
    k = pairwise_factor(a, b)
    for scale in (600.0, 3600.0, 1e5):
        scaled = [IterationShape(s.compute_s * scale, s.ready_s * scale, s.comm_s * scale) for s in (a, b)]
        assert pairwise_factor(*scaled) == pytest.approx(k, rel=1e-6)


# -- online tenants -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["crux", "flux"])
def test_online_orders_only_the_jobs_running(name):
    """With online=true the policy has no rules for a job before its first event, orders the heavy job above the
    light one while both run, and drops a job's rules once its last operation is done; the control loop tells
    it of each and decides again."""
    from controller.loop import ControlLoop
    fabric, heavy, light = _two_tenant_world()
    sched = make_scheduler(name, fabric, [heavy, light], {"online": True})
    loop = ControlLoop(sched, [f for j in (heavy, light) for b in range(4) for f in j.flows(b)])
    assert sched.hears_jobs and loop.listens and sched.decide(0.0) == {}
    assert loop.on_events(1.0, launch(light, 0, 1.0, needed_at=2.0)[:1]) is True    # its first event: it arrived
    alone = sched.decide(1.0)
    assert job_class(alone, light) is not None and heavy.flow(0, 0) not in alone
    loop.on_events(2.0, launch(heavy, 0, 2.0, needed_at=3.0)[:1])
    both = sched.decide(2.0)
    # Bucket 1 has no live operation (Flux keeps a live one in the class it launched in).
    assert job_class(both, heavy, 1) > job_class(both, light, 1)
    done = [OperationEvent("done", heavy.index, r, heavy.iterations - 1, b, 9.0)
            for b in range(4) for r in range(heavy.workers)]
    assert loop.on_events(9.0, done[:-1]) is (name == "flux")     # flux decides on "done" anyway; crux waits
    assert loop.on_events(9.0, done[-1:]) is True                 # the last done: the job has left
    assert heavy.flow(0, 0) not in sched.decide(9.0) and loop.departed == {heavy.index}
    assert sched.reorders == 3


def test_offline_crux_orders_every_job_from_the_start_and_hears_nothing():
    fabric, heavy, light = _two_tenant_world()
    sched = CruxScheduler(fabric, [heavy, light])
    assert not sched.hears_jobs and job_class(sched.decide(0.0), heavy) > job_class(sched.decide(0.0), light)


@pytest.mark.parametrize("name", ["crux", "flux"])
def test_online_takes_true_or_false_only(name):
    fabric, heavy, light = _two_tenant_world()
    with pytest.raises(ValueError, match="online must be true or false"):
        make_scheduler(name, fabric, [heavy, light], parse_params(["online=maybe"]))


def test_flux_places_a_path_per_flow_where_crux_places_one_per_job():
    fabric = make_fabric()
    ring = make_job(1, [1, 5, 2, 6], make_model())
    flux = make_scheduler("flux", fabric, [ring])
    crux = CruxScheduler(fabric, [ring])
    assert {flux.paths[(1, r)] for r in range(4)} == {0, 1}
    assert len({crux.paths[(1, r)] for r in range(4)}) == 1
    assert len({make_scheduler("flux", fabric, [ring], {"paths": "job"}).paths[(1, r)] for r in range(4)}) == 1


def test_flux_online_moves_live_operations_to_the_new_order_only_when_asked():
    fabric = make_fabric(spines=1)
    light = make_job(0, [1, 5], make_model("light", forward_s=0.001, backward_s=0.001))
    heavy = make_job(1, [2, 6], make_model("heavy", forward_s=0.05, backward_s=0.05))
    classes = {}
    for reorder in (False, True):
        params = {"online": True, "reorder_live": reorder, "steal": False}
        flux = make_scheduler("flux", fabric, [light, heavy], params)
        flux.on_job_arrival(light, 0.0)
        for ev in launch(light, 0, 0.0, needed_at=5.0):
            flux.on_event(ev, 0.0)
        alone = flux.decide(0.0)[light.flow(0, 0)].priority_class
        flux.on_job_arrival(heavy, 0.1)   # the more intensive job arrives: the light job's order falls
        classes[reorder] = (alone, flux.decide(0.1)[light.flow(0, 0)].priority_class,
                            flux.base[light.index])
    kept, moved = classes[False], classes[True]
    assert kept[1] == kept[0]                      # the live operation keeps the class it launched in
    assert moved[1] == flux.band_class(light, 0) and moved[1] != moved[0]
    with pytest.raises(ValueError, match="reorder_live"):
        make_scheduler("flux", fabric, [light], {"reorder_live": "yes"})


def test_the_contended_order_charges_a_ring_for_every_shared_uplink_it_crosses():
    # One spine at 10 Mbit/s under 4 hosts per leaf at 5: alone, each ring's busiest link takes 16 ms per
    # iteration (a host link, or A's uplink), so Crux ranks them equal; together they need 1.2 uplinks, and A's
    # ring crosses it twice each way where B's crosses it once.
    from controller.schedulers.crux import contended_intensities
    model = make_model("m", buckets=1, bucket_bytes=6_667, forward_s=0.01, backward_s=0.01)
    a, b = make_job(0, [1, 5, 2, 6], model), make_job(1, [3, 4, 7, 8], model)
    fabric = make_fabric(spines=1, per_leaf=4, host_mbps=5.0, fabric_mbps=10.0)
    crux = {j.index: job_intensity(fabric, j, paths="hop") for j in (a, b)}
    assert crux[0].priority == pytest.approx(crux[1].priority)
    ranked = contended_intensities(fabric, [a, b], crux)
    assert ranked[1].priority == pytest.approx(2 * ranked[0].priority)
    flux = make_scheduler("flux", fabric, [a, b], {"order": "contended", "bands": "jobs", "steal": False})
    assert flux.base[1] > flux.base[0]                      # a higher class is served first
    # Uplinks four times as fast: no link binds, and the order is Crux's.
    roomy = make_fabric(spines=1, per_leaf=4, host_mbps=5.0, fabric_mbps=40.0)
    alone = {j.index: job_intensity(roomy, j, paths="hop") for j in (a, b)}
    assert contended_intensities(roomy, [a, b], alone) == alone
    with pytest.raises(ValueError, match="order"):
        make_scheduler("flux", fabric, [a], {"order": "lp"})


def test_the_in_place_order_reorders_only_the_priced_jobs_among_their_places():
    # The two rings above on a third leaf's fabric, and C on that leaf alone: its ring crosses no uplink and its
    # host links keep slack (19.2 ms of every 20), so the program leaves it unpriced. Crux ranks C last (more bytes
    # on the same links); the contended order lifts it above both, in place it stays last while B, priced lower,
    # moves above A.
    from controller.schedulers.crux import contended_in_place, contended_intensities
    model = make_model("m", buckets=1, bucket_bytes=6_667, forward_s=0.01, backward_s=0.01)
    heavier = make_model("h", buckets=1, bucket_bytes=8_000, forward_s=0.01, backward_s=0.01)
    a, b = make_job(0, [1, 5, 2, 6], model), make_job(1, [3, 4, 7, 8], model)
    c = make_job(2, [9, 10, 11, 12], heavier)
    fabric = make_fabric(spines=1, leaves=3, per_leaf=4, host_mbps=5.0, fabric_mbps=10.0)
    crux = {j.index: job_intensity(fabric, j, paths="hop") for j in (a, b, c)}

    def order(priorities):
        return sorted(priorities, key=lambda i: (-priorities[i].priority, i))

    assert order(crux) == [0, 1, 2]
    assert order(contended_intensities(fabric, [a, b, c], crux)) == [2, 1, 0]
    in_place = contended_in_place(fabric, [a, b, c], crux)
    assert order(in_place) == [1, 0, 2]
    for i in (0, 1, 2):  # each place keeps Crux's magnitude
        assert in_place[i].priority == pytest.approx(crux[i].priority, rel=1e-5)
    flux = make_scheduler("flux", fabric, [a, b, c], {"order": "contended-in-place", "bands": "jobs",
                                                      "steal": False})
    assert flux.base[1] > flux.base[0]   # C shares no link with them: the compression may put it anywhere
    roomy = make_fabric(spines=1, leaves=3, per_leaf=4, host_mbps=5.0, fabric_mbps=40.0)
    alone = {j.index: job_intensity(roomy, j, paths="hop") for j in (a, b, c)}
    assert contended_in_place(roomy, [a, b, c], alone) == alone


def test_pricing_on_shared_links_only_leaves_a_job_bound_by_its_own_host_links_in_crux_s_place():
    # A and B share the one uplink as above (8 hosts per leaf now); D's ring of 8 stays on the third leaf and sends
    # more than its host links carry in a compute time (24 ms of every 20). Crux ranks D first (8 GPUs over 24 ms
    # against 4 over 16). The program prices D's host links, and priced on every link D falls to last; priced on
    # the fabric's links only, D is unpriced and keeps Crux's place, and B still rises above A.
    from controller.schedulers.crux import contended_costs, contended_in_place
    model = make_model("m", buckets=1, bucket_bytes=6_667, forward_s=0.01, backward_s=0.01)
    bound = make_model("b", buckets=1, bucket_bytes=8_571, forward_s=0.01, backward_s=0.01)
    a, b = make_job(0, [1, 9, 2, 10], model), make_job(1, [3, 4, 11, 12], model)
    d = make_job(2, list(range(17, 25)), bound)
    fabric = make_fabric(spines=1, leaves=3, per_leaf=8, host_mbps=5.0, fabric_mbps=10.0)
    crux = {j.index: job_intensity(fabric, j, paths="hop") for j in (a, b, d)}
    every, shared = contended_costs(fabric, [a, b, d]), contended_costs(fabric, [a, b, d], shared_only=True)
    assert every[2] > 0 and shared[2] == 0 and shared[0] == pytest.approx(every[0])

    def order(priorities):
        return sorted(priorities, key=lambda i: (-priorities[i].priority, i))

    assert order(crux) == [2, 0, 1]
    assert order(contended_in_place(fabric, [a, b, d], crux)) == [1, 0, 2]
    assert order(contended_in_place(fabric, [a, b, d], crux, shared_only=True)) == [2, 1, 0]
    flux = make_scheduler("flux", fabric, [a, b, d], {"order": "shared-in-place", "bands": "jobs", "steal": False})
    assert flux.base[1] > flux.base[0]
