"""The flow-level twin: rate allocation on hand-computed cases, the ring against its analytic time, the engine
with the project's schedulers, and the results folder it writes."""
import json
from dataclasses import replace

import numpy as np
import pytest

import twin
from controller.schedulers.base import Scheduler
from core.fabric import FabricLayout, FabricSpec
from core.model import Bucket, Decision, JobSpec, ModelProfile
from core.ring import ring_steps
from experiment.plan import RunPlan, TwinSettings
from twin.engine import chunk_bytes, step_chunk
from twin.model import IDEAL, ModelParams
from twin.network import Network, allocate, hashed_path, ovs_hash_map

MBIT = 1e6
LAYOUT = FabricLayout.from_spec(FabricSpec(2, 4, 4, 10.0, 10.0))
HOSTS = LAYOUT.host_tuples()


def job(index, nbytes, workers=4, hosts=None, forward=0.0, backward=0.0, iterations=1, semantics="overlap"):
    hosts = hosts if hosts is not None else HOSTS[index::4][:workers]
    profile = ModelProfile(f"m{index}", "t", 1, (Bucket(0, nbytes, forward, backward),))
    return JobSpec(index, f"j{index}", profile, workers, iterations, semantics=semantics,
                   hosts=tuple(h[0] for h in hosts), addresses=tuple(h[1] for h in hosts))


def rank_bytes(nbytes, workers):
    chunks = chunk_bytes(nbytes, workers)
    return [sum(chunks[step_chunk(r, s, workers)] + 8 for s in range(ring_steps(workers))) for r in range(workers)]


# ------------------------------------------------------------------------------------------------ allocation
def test_strict_priority_and_max_min_by_hand():
    # Links 0 and 1 of 10 Mbit/s. A (class 7) on 0; B (class 3) on 0 and 1; C and D (class 3) on 1.
    routes = np.array([[0, -1], [0, 1], [1, -1], [1, -1]])
    cap = np.array([10.0, 10.0])
    # One class: link 1 has three flows (10/3 each), A then takes what B leaves on link 0.
    assert allocate(routes, np.array([3, 3, 3, 3]), cap) == pytest.approx([20 / 3, 10 / 3, 10 / 3, 10 / 3])
    # A above: link 0 is A's alone, B starves, C and D split link 1.
    assert allocate(routes, np.array([7, 3, 3, 3]), cap) == pytest.approx([10, 0, 5, 5])
    # With a 1% floor per lower class present, B keeps 0.1 and C, D share the rest of link 1.
    assert allocate(routes, np.array([7, 3, 3, 3]), cap, floor=0.01) == pytest.approx([9.9, 0.1, 4.95, 4.95])
    # B above C and D: B gets link 1 first but link 0 holds it to what A leaves (nothing).
    assert allocate(routes, np.array([7, 5, 3, 3]), cap) == pytest.approx([10, 0, 5, 5])
    assert allocate(routes, np.array([0, 5, 3, 3]), cap) == pytest.approx([0, 10, 0, 0])


def test_weighted_max_min_inside_a_class_by_hand():
    # One link of 9: weights 1 and 2 give 3 and 6.
    assert allocate(np.array([[0], [0]]), np.array([3, 3]), np.array([9.0]), weight=np.array([1.0, 2.0])) == \
        pytest.approx([3, 6])
    # A (weight 1) on link 0 of 1; B (weight 1) on links 0 and 1; C (weight 2) on link 1 of 10: link 0 is the
    # bottleneck of A and B (0.5 each), C takes the rest of link 1.
    routes = np.array([[0, -1], [0, 1], [1, -1]])
    assert allocate(routes, np.array([3, 3, 3]), np.array([1.0, 10.0]), weight=np.array([1.0, 1.0, 2.0])) == \
        pytest.approx([0.5, 0.5, 9.5])
    # Weights act inside a class, not across: class 7 still takes the link first.
    assert allocate(np.array([[0], [0], [0]]), np.array([7, 3, 3]), np.array([9.0]),
                    weight=np.array([1.0, 1.0, 2.0])) == pytest.approx([9, 0, 0])


def test_first_come_first_served_inside_a_class_by_hand():
    # A (arrived at 2) and B (at 1) on link 0 of 9; C (at 0) on links 0 and 1, link 1 of 4. In arrival order: C
    # takes 4 (link 1), B the 5 left on link 0, A nothing. Half of it mixed with max-min (3 each on link 0: C is
    # held to 3 there): A 1.5, B 4, C 3.5.
    routes = np.array([[0, -1], [0, -1], [0, 1]])
    cap, classes, order = np.array([9.0, 4.0]), np.array([2, 2, 2]), np.array([2.0, 1.0, 0.0])
    assert allocate(routes, classes, cap, order=order, order_share=1.0) == pytest.approx([0, 5, 4])
    assert allocate(routes, classes, cap, order=order, order_share=0.5) == pytest.approx([1.5, 4, 3.5])
    assert allocate(routes, classes, cap, order=order, order_share=0.0) == pytest.approx([3, 3, 3])
    # Ties by index; a flow crossing a link twice takes half of it; classes still come first.
    assert allocate(np.array([[0, 0], [0, -1]]), np.array([0, 0]), np.array([9.0]), order=np.zeros(2),
                    order_share=1.0) == pytest.approx([4.5, 0])
    assert allocate(np.array([[0], [0]]), np.array([1, 5]), np.array([9.0]), order=np.array([0.0, 1.0]),
                    order_share=1.0) == pytest.approx([0, 9])
    with pytest.raises(ValueError):
        ModelParams(fifo_order=1.5)


def test_alpha_fair_sharing_on_a_parking_lot_by_hand():
    # A long flow crosses L links of 1; each link also has a short flow of its own. Max-min: 1/2 each.
    # Proportional fairness (alpha 1): the long flow 1/(L+1). Minimum potential delay (alpha 2): minimise
    # 1/x + L/(1-x), so x = 1/(1+sqrt(L)). Large alpha approaches max-min.
    for links in (2, 4, 9):
        routes = np.array([list(range(links))] + [[j] + [-1] * (links - 1) for j in range(links)])
        classes, cap = np.zeros(links + 1, dtype=int), np.ones(links)
        assert allocate(routes, classes, cap) == pytest.approx([0.5] * (links + 1))
        long_1 = 1 / (links + 1)
        assert allocate(routes, classes, cap, alpha=1) == pytest.approx([long_1] + [1 - long_1] * links, rel=3e-3)
        long_2 = 1 / (1 + links ** 0.5)
        assert allocate(routes, classes, cap, alpha=2) == pytest.approx([long_2] + [1 - long_2] * links, rel=3e-3)
        assert allocate(routes, classes, cap, alpha=32)[0] == pytest.approx(0.5, rel=0.05)
    # Strict priority still comes first: A (class 7) takes link 0, so B (class 3) gets nothing there and C takes
    # all of link 1. With one class, weights 1, 1 and 3 and alpha 1, the sharing is solved by hand below.
    routes = np.array([[0, -1], [0, 1], [1, -1]])
    rates = allocate(routes, np.array([7, 3, 3]), np.array([10.0, 8.0]), weight=np.array([1.0, 1.0, 3.0]),
                     alpha=1)
    assert rates == pytest.approx([10, 0, 8], abs=1e-6)
    rates = allocate(routes, np.array([3, 3, 3]), np.array([10.0, 8.0]), weight=np.array([1.0, 1.0, 3.0]),
                     alpha=1)
    # Both links full: A = 10 - B, C = 8 - B, and B's price is the sum of both links' prices (1/A and 3/C), so
    # 1/B = 1/(10 - B) + 3/(8 - B), whose root in (0, 8) is found by bisection.
    lo, hi = 1e-9, 8 - 1e-9
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 / mid > 1 / (10 - mid) + 3 / (8 - mid) else (lo, mid)
    assert 1.6 < lo < 1.75
    assert rates == pytest.approx([10 - lo, lo, 8 - lo], rel=3e-3)
    # Warm start: the prices of one allocation start the next, with the same result.
    prices = np.zeros((8, 2))
    first = allocate(routes, np.zeros(3, dtype=int), np.array([10.0, 8.0]), alpha=2, prices=prices)
    assert prices[0].max() > 0
    again = allocate(routes, np.zeros(3, dtype=int), np.array([10.0, 8.0]), alpha=2, prices=prices)
    assert again == pytest.approx(first, rel=3e-3)
    for rates in (first, again):
        assert rates[0] + rates[1] <= 10 * (1 + 1e-9) and rates[1] + rates[2] <= 8 * (1 + 1e-9)


def test_a_flow_crossing_a_link_twice_counts_twice():
    assert allocate(np.array([[0, 0], [0, -1]]), np.array([0, 0]), np.array([9.0])) == pytest.approx([3, 3])


def test_weighted_classes_share_by_two_to_the_class():
    cap = np.array([10.0])
    # Classes 7 and 0 busy on one link: 128 : 1.
    assert allocate(np.array([[0], [0]]), np.array([7, 0]), cap, mode="weighted") == \
        pytest.approx([10 * 128 / 129, 10 / 129])
    # All eight classes busy: class c gets 2^c / 255.
    rates = allocate(np.arange(8)[:, None] * 0, np.arange(8), cap, mode="weighted")
    assert rates == pytest.approx([10 * 2 ** c / 255 for c in range(8)])
    # What a class cannot use (held back on another link) goes to the others.
    routes = np.array([[0, -1], [0, 1], [1, -1]])
    rates = allocate(routes, np.array([7, 0, 7]), np.array([10.0, 10.0]), mode="weighted")
    assert rates[1] == pytest.approx(10 / 129) and rates[0] == pytest.approx(10 - 10 / 129)
    with pytest.raises(ValueError):
        allocate(routes, np.array([7, 0, 7]), np.array([10.0, 10.0]), mode="fair")


def test_hashed_paths_are_stable_and_salted_ones_depend_on_the_seed():
    flows = [job(0, 1000).flow(r, 0) for r in range(4)]
    paths = [[hashed_path(f, 8, seed, "salted") for f in flows] for seed in range(20)]
    assert paths[3] == [hashed_path(f, 8, 3, "salted") for f in flows]
    assert len({tuple(p) for p in paths}) > 10
    assert all(hashed_path(f, 1, 5, model) == 0 for f in flows for model in ("ovs", "salted"))
    assert [hashed_path(f, 8, 1) for f in flows] == [hashed_path(f, 8, 9) for f in flows]   # ovs: no seed
    with pytest.raises(ValueError):
        hashed_path(flows[0], 2, 1, "crc")


def test_the_ovs_hash_model_predicts_the_byte_split_measured_on_the_switches():
    """Headline under ECMP: each leaf's data group sent these shares of its bytes to the first spine, the same
    under seeds 1 and 2 (results/fidelity/ecmp-hash/). Open vSwitch's hash, applied to the testbed's fixed
    5-tuples, must predict them; a salted hash does not."""
    import os
    from collections import defaultdict

    from analysis.suite import SUITE_DIR, fabric_flags
    from cli import run as runner
    from core.ring import ring_bytes_per_rank
    args = runner.build_parser().parse_args(["--scenario", os.path.join(SUITE_DIR, "headline.yaml"),
                                             "--engine", "fluid", *fabric_flags("headline")])
    resolved = runner.validate(args)
    view = resolved.layout.view()
    measured = {(0, 1): 0.397, (1, 2): 0.289, (2, 3): 0.394, (3, 0): 0.371}

    def shares(model, seed=1):
        load = defaultdict(lambda: [0.0, 0.0])
        for j in resolved.jobs:
            for b, bucket in enumerate(j.model.buckets):
                for rank in range(j.workers):
                    flow = j.flow(rank, b)
                    pair = (view.leaf_of(flow.src_ip), view.leaf_of(flow.dst_ip))
                    if pair[0] != pair[1]:
                        path = hashed_path(flow, len(view.paths(flow.src_ip, flow.dst_ip)), seed, model)
                        load[pair][path] += ring_bytes_per_rank(bucket.nbytes, j.workers) * j.iterations
        return {pair: first / (first + second) for pair, (first, second) in load.items()}
    assert shares("ovs") == pytest.approx(measured, abs=0.01)
    assert shares("ovs") == shares("ovs", seed=7)
    assert any(shares("salted", seed) != pytest.approx(measured, abs=0.01) for seed in (1, 2, 3))


def test_ovs_hash_table_follows_webster_for_equal_buckets():
    assert ovs_hash_map(2) == (0, 1) * 8
    assert ovs_hash_map(3) == (0, 1, 2) * 5 + (0,)
    assert len(ovs_hash_map(20)) == 32


def test_the_hash_seed_changes_which_flows_collide_not_only_the_path_names():
    """Two paths: a seed must regroup the flows, not merely swap the two paths' names (an affine hash such as
    CRC-32 does only that, so every seed gave the same collisions)."""
    flows = [job(j, 1000).flow(r, b) for j in range(2) for b in range(6) for r in range(4)]

    def partition(seed):
        paths = [hashed_path(f, 2, seed, "salted") for f in flows]
        return frozenset(frozenset(i for i, p in enumerate(paths) if p == side) for side in (0, 1))
    partitions = {partition(seed) for seed in range(1, 11)}
    assert len(partitions) == 10
    shares = [sum(hashed_path(f, 2, seed, "salted") for f in flows) / len(flows) for seed in range(1, 11)]
    assert 0.35 < sum(shares) / len(shares) < 0.65


def test_network_routes_follow_the_fabric():
    net = Network(LAYOUT)
    a, b = HOSTS[0][1], HOSTS[4][1]          # leaf 1 -> leaf 2
    r0, r1 = net.route(a, b, 0), net.route(a, b, 1)
    assert [net.names[i] for i in r0] == [(a, "lf1"), ("lf1", "sp1"), ("sp1", "lf2"), ("lf2", b)]
    assert net.names[r1[1]] == ("lf1", "sp2") and net.n_paths(a, b) == 2
    assert [net.names[i] for i in net.route(a, HOSTS[1][1], 0)] == [(a, "lf1"), ("lf1", HOSTS[1][1])]
    assert net.capacity[r0[0]] == 10 * MBIT


# ------------------------------------------------------------------------------------------------ the ring
@pytest.mark.parametrize("ring_model", ["steps", "pipelined"])
@pytest.mark.parametrize("workers,nbytes", [(2, 100_000), (4, 400_000), (4, 1_001)])
def test_single_job_alone_matches_the_analytic_ring_time(ring_model, workers, nbytes):
    # Alone on the fabric every hop has a host link to itself: each rank's bytes (2(N-1)/N of the bucket,
    # rounded to float32 chunks, plus one 8-byte header per step) at line rate.
    r = twin.simulate(LAYOUT, [job(0, nbytes, workers)], "ecmp", model=IDEAL, ring_model=ring_model)
    if ring_model == "pipelined":
        expected = max(rank_bytes(nbytes, workers)) * 8 / (10 * MBIT)
    else:
        # Step s of rank r follows its own step s-1 and rank r-1's: the longest chain of chunks decides.
        chunks, n = chunk_bytes(nbytes, workers), workers
        done = [0.0] * n
        for s in range(ring_steps(n)):
            done = [max(done[r], done[(r - 1) % n]) + (chunks[step_chunk(r, s, n)] + 8) * 8 / (10 * MBIT)
                    for r in range(n)]
        expected = max(max(done[r], done[(r - 1) % n]) for r in range(n))
    assert r.completed and r.sim_time_s == pytest.approx(expected, rel=1e-9)
    analytic = (2 * (workers - 1) / workers * nbytes + 8 * ring_steps(workers)) * 8 / (10 * MBIT)
    assert expected == pytest.approx(analytic, rel=0.01)


def test_step_latency_adds_once_per_dependent_step():
    params = IDEAL.with_(step_latency_s=0.01)
    for ring_model in ("steps", "pipelined"):
        r = twin.simulate(LAYOUT, [job(0, 400_000)], "ecmp", model=params, ring_model=ring_model)
        assert r.sim_time_s == pytest.approx(max(rank_bytes(400_000, 4)) * 8 / 1e7 + 6 * 0.01, rel=1e-9)


@pytest.mark.parametrize("ring_model", ["steps", "pipelined"])
def test_step_latency_varies_with_the_seed_around_its_mean(ring_model):
    base = max(rank_bytes(400_000, 4)) * 8 / 1e7

    def extra(params, seed):
        r = twin.simulate(LAYOUT, [job(0, 400_000)], "ecmp", model=params, ring_model=ring_model, seed=seed)
        return r.sim_time_s - base

    fixed = IDEAL.with_(step_latency_s=0.01)
    assert extra(fixed, 1) == pytest.approx(extra(fixed, 2), rel=1e-9)   # no variability: the seed is unused
    noisy = fixed.with_(step_latency_cv=1.0)
    draws = [extra(noisy, seed) for seed in range(1, 201)]
    assert len({round(d, 9) for d in draws}) == len(draws)                 # every seed its own timing
    assert extra(noisy, 7) == extra(noisy, 7)                                # and the same one each time
    # Six dependent steps of exponential latency (cv 1): their sum (the critical path of the pipelined ring,
    # and a lower bound of the stepped ring's, which waits for the slowest rank) has mean 0.06 and standard
    # deviation 0.0245; the mean of 200 draws lies within 0.007 of that with overwhelming probability.
    mean = sum(draws) / len(draws)
    if ring_model == "pipelined":
        assert mean == pytest.approx(0.06, abs=0.007)
    else:
        assert mean > 0.06 - 0.007 and min(draws) > 0


def test_goodput_scales_the_links():
    r = twin.simulate(LAYOUT, [job(0, 400_000)], "ecmp", model=IDEAL.with_(goodput=0.5))
    assert r.sim_time_s == pytest.approx(2 * max(rank_bytes(400_000, 4)) * 8 / 1e7, rel=1e-9)


def test_iteration_program_and_gpu_utilisation():
    # wait_all, one bucket: every iteration computes 0.3 s and then waits for the whole all-reduce.
    j = job(0, 400_000, forward=0.1, backward=0.2, iterations=3, semantics="wait_all")
    r = twin.simulate(LAYOUT, [j], "ecmp", model=IDEAL)
    comm = max(rank_bytes(400_000, 4)) * 8 / 1e7
    assert r.sim_time_s == pytest.approx(3 * (0.3 + comm), rel=1e-9)
    figures = twin.summarize([j], r)
    assert figures["jobs"][0]["gpu_utilization"] == pytest.approx(0.3 / (0.3 + comm), rel=1e-9)
    assert figures["jobs"][0]["iteration_times_s"] == pytest.approx([0.3, 0.3 + comm, 0.3 + 2 * comm], rel=1e-9)


class _Fixed(Scheduler):
    """Job 0's flows in class 7, job 1's in class 1, all on path 0."""

    name = "fixed"

    def decide(self, now):
        return {j.flow(r, 0): Decision(7 if j.index == 0 else 1, 0) for j in self.jobs for r in range(j.workers)}


def _two_jobs_on_the_same_hosts_links(compute=0.0):
    # Jobs 0 and 1 use hosts on the same leaves and one spine path, so they share every leaf-spine link.
    a = job(0, 400_000, hosts=[HOSTS[0], HOSTS[4], HOSTS[8], HOSTS[12]], backward=compute)
    b = job(1, 400_000, hosts=[HOSTS[1], HOSTS[5], HOSTS[9], HOSTS[13]], backward=compute)
    return a, b


@pytest.mark.parametrize("ring_model", ["steps", "pipelined"])
def test_priority_between_two_jobs_in_the_engine(ring_model):
    a, b = _two_jobs_on_the_same_hosts_links()
    view = LAYOUT.view()
    net = Network(LAYOUT, view)
    from twin.engine import FluidSim
    sim = FluidSim(net, [a, b], _Fixed(view, [a, b]), IDEAL, ring_model=ring_model)
    r = sim.run()
    alone = max(rank_bytes(400_000, 4)) * 8 / 1e7
    times = {j: t for j, ops in r.op_times.items() for _it, _b, t in ops}
    assert times[0] == pytest.approx(alone, rel=1e-6)          # class 7 does not see class 1
    assert times[1] == pytest.approx(2 * alone, rel=1e-6)      # class 1 gets the links after it
    # Without priorities the two share every link: both take twice as long.
    r = twin.simulate(LAYOUT, [a, b], "crux", {"paths": "hashed"}, model=IDEAL, ring_model=ring_model)
    assert r.completed


def test_project_schedulers_run_and_their_decisions_take_effect():
    a, b = _two_jobs_on_the_same_hosts_links(compute=0.05)
    results = {s: twin.simulate(LAYOUT, [a, b], s, model=IDEAL) for s in ("ecmp", "bytescheduler", "crux", "flux")}
    assert all(r.completed for r in results.values())
    assert results["ecmp"].decide_calls == 1 and results["ecmp"].flow_changes == 0
    assert results["crux"].flow_changes == 8                   # one rule per flow, installed once
    assert results["flux"].events > 0 and results["flux"].decide_calls > 1


def test_starvation_timeouts_cost_time_and_are_counted():
    a, b = _two_jobs_on_the_same_hosts_links()
    view = LAYOUT.view()
    from twin.engine import FluidSim
    params = IDEAL.with_(rto_s=0.2)
    r = FluidSim(Network(LAYOUT, view), [a, b], _Fixed(view, [a, b]), params).run()
    alone = max(rank_bytes(400_000, 4)) * 8 / 1e7            # 0.48 s: job 1 starves that long
    assert sum(r.timeouts.values()) > 0
    # Job 1 resumes at the first timer after job 0 is done (0.2 + 0.4 = 0.6 s), not at 0.48 s.
    times = {j: t for j, ops in r.op_times.items() for _it, _b, t in ops}
    assert times[1] == pytest.approx(0.6 + alone, rel=1e-6)
    # Every one of them is the starvation rule's, and its 4 flows were starved from 0 until job 0 was done.
    assert r.starvation_timeouts == r.timeouts and r.starvation_timeouts[0] == 0
    assert r.starved_flow_s == pytest.approx({0: 0.0, 1: 4 * alone}, rel=1e-6)
    # Without backoff (TCP's RTO grew with the RTT under the floor): one timeout per starved connection, and job 1
    # goes on the moment job 0 is done.
    r = FluidSim(Network(LAYOUT, view), [a, b], _Fixed(view, [a, b]), params.with_(rto_backoff=0.0)).run()
    times = {j: t for j, ops in r.op_times.items() for _it, _b, t in ops}
    assert r.timeouts[1] == 4 and r.timeouts[0] == 0
    assert times[1] == pytest.approx(2 * alone, rel=1e-6)


def test_the_lossless_profiles_timer_floor_spares_a_starvation_shorter_than_it():
    """The lossless profile's ``rto_min`` (5 s on every route): job 1's 0.48 s starvation costs no timeout, and
    job 1 goes on the moment job 0 is done; the recorded profile reaches simulate() through fifo_settings()."""
    a, b = _two_jobs_on_the_same_hosts_links()
    view = LAYOUT.view()
    from twin.engine import FluidSim
    alone = max(rank_bytes(400_000, 4)) * 8 / 1e7
    r = FluidSim(Network(LAYOUT, view), [a, b], _Fixed(view, [a, b]), IDEAL.with_(rto_s=0.2), rto_min_s=5.0).run()
    times = {j: t for j, ops in r.op_times.items() for _it, _b, t in ops}
    assert sum(r.timeouts.values()) == 0
    assert times[1] == pytest.approx(2 * alone, rel=1e-6)
    from core.transport import PROFILES
    settings = twin.fifo_settings({"transport": PROFILES["lossless"].to_dict()})
    assert settings["lossless"] and settings["window_packets"] == 8 and settings["rto_min_s"] == 5.0
    assert twin.fifo_settings({"transport": PROFILES["tcp"].to_dict()})["rto_min_s"] is None


class _RaiseJob1(Scheduler):
    """Job 0 in class 7 and job 1 in class 1 until ``at``; then job 1 in class 7 and job 0 in class 1."""

    name = "raise-job-1"
    at = 0.1
    period_s = 0.1

    def decide(self, now):
        raised = now >= self.at - 1e-9
        return {j.flow(r, 0): Decision((7 if j.index == 0 else 1) if not raised else (1 if j.index == 0 else 7), 0)
                for j in self.jobs for r in range(j.workers)}


class _RaiseJob1Early(_RaiseJob1):
    at = 0.01
    period_s = 0.01


def test_a_live_class_change_costs_only_a_flow_raised_out_of_a_class_that_starved_it():
    """bench_class_change.py: a flow raised out of a busy class loses class_change_s when more of its step
    follows its stranded bytes, and waits for them to drain (or for its timer) when they are the step's tail;
    the change of a flow that was not starved, and a raise out of an idle class, cost nothing."""
    view = LAYOUT.view()
    from twin.engine import FluidSim

    def finish(jobs, params, scheduler=_RaiseJob1, **kw):
        r = FluidSim(Network(LAYOUT, view), jobs, scheduler(view, jobs), params, **kw).run()
        return r, {j: t for j, ops in r.op_times.items() for _it, _b, t in ops}

    base = IDEAL.with_(rto_s=0.3)     # job 1's short starvation earns no timer of its own
    strands = base.with_(class_change_strands=1, class_change_s=0.25)
    # 100 kB steps, more than the FIFO holds: later packets repair the stranded ones, job 1 loses 0.25 s, and
    # job 0, not starved when it moved down, sends on.
    a, b = _two_jobs_on_the_same_hosts_links()
    free, free_times = finish([a, b], base)
    assert free.live_class_changes == 8          # both jobs' four connections, mid-operation
    charged, times = finish([a, b], strands)
    assert times[1] == pytest.approx(free_times[1] + 0.25, rel=1e-6)
    assert times[0] == pytest.approx(free_times[0], rel=1e-6)
    assert charged.timeouts == free.timeouts
    # 10 kB steps under the lossless profile: job 1's whole step (its tail) waits in class 1 and drains at the
    # class floor (1% of 10 Mbit/s) from the raise (0.015 s: the decision at 0.01 and the reaction), before
    # its 5 s timer.
    a = job(0, 40_000, hosts=[HOSTS[0], HOSTS[4], HOSTS[8], HOSTS[12]])
    b = job(1, 40_000, hosts=[HOSTS[1], HOSTS[5], HOSTS[9], HOSTS[13]])
    lossless = dict(class_floor=0.01, lossless=True, window_packets=8, rto_min_s=5.0)
    free, free_times = finish([a, b], base, _RaiseJob1Early, **lossless)
    charged, times = finish([a, b], strands, _RaiseJob1Early, **lossless)
    floor = 0.01 * 1e7 / 8
    step = max(chunk_bytes(40_000, 4)) + 8
    assert times[1] - free_times[1] == pytest.approx((step - 0.015 * floor) / floor, abs=0.01)
    assert charged.timeouts == free.timeouts
    # Without class_change_strands the tail costs what a bulk flow's stranded packets do.
    _, times = finish([a, b], base.with_(class_change_s=0.25), _RaiseJob1Early, **lossless)
    assert times[1] - free_times[1] == pytest.approx(0.25, abs=1e-3)
    # Without a floor the tail never drains: the timer fires (0.3 s), one timeout per connection.
    free, free_times = finish([a, b], base, _RaiseJob1Early)
    charged, times = finish([a, b], strands, _RaiseJob1Early)
    assert times[1] == pytest.approx(free_times[1] + 0.3, rel=1e-6)
    assert charged.timeouts[1] == free.timeouts.get(1, 0) + 4
    # Alone, job 1 is raised out of an idle class: nothing to pay.
    _, alone_free = finish([b], base)
    _, alone = finish([b], strands)
    assert alone[1] == pytest.approx(alone_free[1], rel=1e-9)


def test_the_backoff_rule_applies_only_to_flows_that_share_their_starved_fifo():
    a, b = _two_jobs_on_the_same_hosts_links()
    c = job(2, 400_000, hosts=[HOSTS[2], HOSTS[6], HOSTS[10], HOSTS[14]])
    view = LAYOUT.view()
    from twin.engine import FluidSim
    alone = max(rank_bytes(400_000, 4)) * 8 / 1e7
    params = IDEAL.with_(rto_s=0.2, starve_backoff_flows=2)

    def finish(jobs, p):
        r = FluidSim(Network(LAYOUT, view), jobs, _Fixed(view, jobs), p).run()
        return r, {j: t for j, ops in r.op_times.items() for _it, _b, t in ops}

    # Job 1's flows are alone in class 1 on each leaf uplink: one timeout each, and no wait for a timer.
    r, times = finish([a, b], params)
    assert r.timeouts[1] == 4 and times[1] == pytest.approx(2 * alone, rel=1e-6)
    assert r.starvations == {1: 4}
    # Jobs 1 and 2 share class 1's FIFO on every leaf uplink: both wait for the first timer after job 0 is done
    # (0.6 s), then share the links (2 x alone).
    r, times = finish([a, b, c], params)
    assert times[1] == pytest.approx(0.6 + 2 * alone, rel=1e-6) and times[2] == pytest.approx(times[1], rel=1e-6)
    assert r.starvations == {2: 8}
    # Counted as alone below a threshold of 3: they go on the moment job 0 is done.
    r, times = finish([a, b, c], params.with_(starve_backoff_flows=3))
    assert times[1] == pytest.approx(3 * alone, rel=1e-6) and r.timeouts[1] == r.timeouts[2] == 4


def test_pipelined_and_step_rings_agree_on_a_shipped_scenario():
    from workloads.scenario import load_scenario
    layout = FabricLayout.from_spec(FabricSpec(2, 4, 4, 5.0, 5.0))
    jobs = load_scenario("default").resolve(layout.host_tuples(), 5.0).jobs
    util = {m: twin.summarize(jobs, twin.simulate(layout, jobs, "crux", model="ideal", class_floor=0.01,
                                                  ring_model=m))["cluster"]["gpu_utilization"]
            for m in ("steps", "pipelined")}
    assert util["steps"] == pytest.approx(util["pipelined"], abs=0.005)


# ------------------------------------------------------------------------------------------------ the results
def test_run_fluid_writes_a_results_folder(tmp_path):
    from experiment.results import RunFolder, collect
    from workloads.scenario import load_scenario
    spec = FabricSpec(2, 4, 4, 10.0, 10.0)
    layout = FabricLayout.from_spec(spec)
    scenario = load_scenario("smoke").resolve(layout.host_tuples(), 10.0)
    plan = RunPlan(spec=spec, layout=layout, scenario=scenario, jobs=scenario.jobs, scheduler="crux",
                   scenario_path="smoke.yaml", quiet=True, flags={"engine": "fluid"})
    out = tmp_path / "run"
    assert twin.run_fluid(replace(plan, out=str(out))) == 0
    folder = RunFolder(str(out))
    summary = folder.summary()
    assert folder.config()["engine"] == "fluid" and summary.engine == "fluid" and summary.ok
    assert 0 < summary.cluster["gpu_utilization"] <= 1 and summary.cluster["gpus"] == 2
    assert summary.jobs[0].gpu_utilization and summary.jobs[0].iteration_time_mean_s > 0
    assert summary.controller["flowmods"] == 2                 # one bucket, two ranks: two flows, one rule each
    written = json.load(open(out / "summary.json"))
    assert written["config"]["twin"]["params"]["goodput"] < 1
    assert isinstance(written["twin"]["starvations_by_fifo_flows"], dict)
    assert written["jobs"][0]["starvation_timeouts"] == 0 and written["jobs"][0]["starved_flow_s"] == 0
    # A starved job is named in the run's notes with its starvation timeouts; a run without one says nothing.
    starved = twin.starvation_notes([{"name": "gpt2", "starvation_timeouts": 12.0, "starved_flow_s": 3.25},
                                     {"name": "bert", "starvation_timeouts": 0.0, "starved_flow_s": 0.0}])
    assert len(starved) == 1 and "gpt2 (12 timeouts, 3.2 s starved" in starved[0] and "bert" not in starved[0]
    assert twin.starvation_notes([{"name": "bert", "starvation_timeouts": 0.0, "starved_flow_s": 0.0}]) == []
    # The calibrated overflow rule is a time of the link, checked from 2.5 to 10 Mbit/s: at 10 Mbit/s the summary
    # has nothing to say; counted in packets (the form that did not carry to 2.5 Mbit/s), it names the rule, and
    # outside the checked rates it says the run is.
    from twin.model import CALIBRATION_RATE_MBPS, calibration_notes
    assert written["twin"]["notes"] == []
    at_fit, in_packets = CALIBRATION_RATE_MBPS, twin.calibrated().with_(fifo_flow_rate_mbps=0)
    assert twin.calibrated().fifo_flow_rate_mbps == at_fit
    for rates in ((at_fit, at_fit), (2.5, 2.5), (at_fit, 10.0), (3.5, 3.5)):
        assert calibration_notes(twin.calibrated(), *rates) == []
    assert calibration_notes(in_packets, at_fit, at_fit) == []
    assert any("overflow-timeout rule" in n for n in calibration_notes(in_packets, 2.5, 2.5))
    assert calibration_notes(in_packets, 2.5, 2.5, lossless=True) == []
    outside = calibration_notes(twin.calibrated(), at_fit, 40.0)
    assert len(outside) == 1 and "40 Mbit/s" in outside[0] and "outside" in outside[0]
    assert calibration_notes(IDEAL, 1.0, 1.0) == [] and calibration_notes(IDEAL, 2.5, 2.5) == []
    assert twin.run_fluid(replace(plan, out=str(tmp_path / "packets"),
                                  twin=TwinSettings(overrides=("fifo_flow_rate_mbps=0",)))) == 0
    notes = json.load(open(tmp_path / "packets" / "summary.json"))["twin"]["notes"]
    assert any("overflow-timeout rule" in n for n in notes)
    assert written["versions"]["git_commit"] and written["versions"]["engine"] == "fluid"
    path, rows = collect(str(tmp_path))
    assert any(r["job"] == "__cluster__" and r["ok"] for r in rows)
    assert all(r["starvation_timeouts"] == 0 for r in rows if r["run_id"] == summary.run_id)
    # A term set over the model is the one the run used, and the summary says so.
    assert twin.run_fluid(replace(plan, out=str(tmp_path / "set"),
                                  twin=TwinSettings(overrides=("progress_weight=2", "goodput=0.9")))) == 0
    recorded = json.load(open(tmp_path / "set" / "summary.json"))["config"]["twin"]
    assert recorded["overrides"] == ["progress_weight=2", "goodput=0.9"]
    assert recorded["params"]["progress_weight"] == 2 and recorded["params"]["goodput"] == 0.9
    assert recorded["params"]["queue_backlog"] == twin.calibrated().queue_backlog   # the rest as calibrated
    # A run with faults is refused, not silently run without them.
    assert twin.run_fluid(replace(plan, out=str(tmp_path / "f"), faults=["x"])) == 1


def test_model_parameters_are_checked():
    with pytest.raises(ValueError):
        ModelParams(goodput=1.5)
    with pytest.raises(ValueError):
        ModelParams.from_dict({"latency": 1})
    assert twin.calibrated().goodput < 1 and IDEAL.rto_s == 0


class _OneClassOnePath(Scheduler):
    """Every flow of every bucket of every job in class 1 on path 0: everything shares one FIFO per link."""

    name = "one-class"

    def decide(self, now):
        return {j.flow(r, b): Decision(1, 0) for j in self.jobs for b in range(len(j.model.buckets))
                for r in range(j.workers)}


@pytest.mark.parametrize("ring_model", ["steps", "pipelined"])
def test_queueing_is_charged_behind_another_jobs_flow_not_behind_ones_own(ring_model):
    from twin.engine import FluidSim
    view = LAYOUT.view()
    queueing = IDEAL.with_(queue_delay_s=0.01)

    def run(jobs, params):
        return FluidSim(Network(LAYOUT, view), jobs, _OneClassOnePath(view, jobs), params, ring_model=ring_model).run()
    # One job, two buckets in flight together on the same links: the fluid model shares the links between them
    # already, and no queueing is charged on top.
    hosts = [HOSTS[0], HOSTS[4], HOSTS[8], HOSTS[12]]
    profile = ModelProfile("two", "t", 1, (Bucket(0, 400_000, 0.0, 0.0), Bucket(1, 400_000, 0.0, 0.0)))
    one = JobSpec(0, "j0", profile, 4, 1, hosts=tuple(h[0] for h in hosts), addresses=tuple(h[1] for h in hosts))
    assert run([one], queueing).sim_time_s == pytest.approx(run([one], IDEAL).sim_time_s, rel=1e-9)
    # Two jobs in that class on those links: each one's steps wait behind the other's queue.
    a, b = _two_jobs_on_the_same_hosts_links()
    assert run([a, b], queueing).sim_time_s > run([a, b], IDEAL).sim_time_s + 0.5 * ring_steps(4) * 0.01


@pytest.mark.parametrize("ring_model", ["steps", "pipelined"])
def test_an_overflowing_fifo_costs_each_step_its_expected_timeouts(ring_model):
    from twin.engine import FluidSim
    view = LAYOUT.view()
    # FIFOs of 10 packets (queue_ms 1 at 10 Mbit/s: the testbed's minimum); at 10 packets per flow a FIFO holds
    # one flow, at 5 two.
    overflow = IDEAL.with_(rto_s=0.1, overflow_timeouts=1.0, fifo_flow_packets=10.0)

    def run(jobs, params, lossless=False):
        return FluidSim(Network(LAYOUT, view), jobs, _OneClassOnePath(view, jobs), params, ring_model=ring_model,
                        queue_ms=1.0, lossless=lossless).run()
    a, b = _two_jobs_on_the_same_hosts_links()
    ideal = run([a, b], IDEAL)
    # Two jobs' flows in one FIFO of every leaf-spine link, all the time: each of the 6 dependent steps waits
    # one timeout of 0.1 s, and each rank's connection is charged one timeout per step.
    r = run([a, b], overflow)
    assert r.sim_time_s == pytest.approx(ideal.sim_time_s + ring_steps(4) * 0.1, rel=1e-6)
    assert r.timeouts == pytest.approx({0: 4 * ring_steps(4), 1: 4 * ring_steps(4)})
    assert r.starvation_timeouts == {0: 0, 1: 0}              # none of them is the starvation rule's
    # A FIFO that holds both flows, the lossless profile, or one job alone: nothing is charged.
    assert run([a, b], overflow.with_(fifo_flow_packets=5.0)).sim_time_s == pytest.approx(ideal.sim_time_s)
    assert run([a, b], overflow, lossless=True).sim_time_s == pytest.approx(ideal.sim_time_s)
    assert run([a], overflow).sim_time_s == pytest.approx(run([a], IDEAL).sim_time_s)
    # The threshold stated as a time of the link: 10 packets at 20 Mbit/s are 5 at these links' 10 Mbit/s, so
    # the FIFO holds both flows; stated at the links' own rate it is the same as in packets.
    assert run([a, b], overflow.with_(fifo_flow_rate_mbps=20.0)).sim_time_s == pytest.approx(ideal.sim_time_s)
    assert run([a, b], overflow.with_(fifo_flow_rate_mbps=10.0)).sim_time_s == pytest.approx(r.sim_time_s)


def test_a_pipelined_ring_waits_out_its_overflow_timeouts_between_pieces_out_of_the_fifo(monkeypatch):
    import twin.engine
    from twin.engine import FluidSim
    view = LAYOUT.view()
    # Three jobs of different sizes on the same leaf-spine links, in FIFOs that hold two flows (5 packets each of
    # 10): whenever one ring waits out a timeout the other two fit. Rings that stay in the FIFO until their
    # transfer ends and pay all their timeouts after it overflow it the whole time.
    overflow = IDEAL.with_(rto_s=0.1, overflow_timeouts=1.0, fifo_flow_packets=5.0)
    jobs = [job(i, nbytes, hosts=[HOSTS[i], HOSTS[4 + i], HOSTS[8 + i], HOSTS[12 + i]])
            for i, nbytes in enumerate((400_000, 300_000, 200_000))]

    def run(ring_model):
        return FluidSim(Network(LAYOUT, view), jobs, _OneClassOnePath(view, jobs), overflow,
                        ring_model=ring_model, queue_ms=1.0).run()
    steps, pipelined = run("steps"), run("pipelined")
    ideal = FluidSim(Network(LAYOUT, view), jobs, _OneClassOnePath(view, jobs), IDEAL, queue_ms=1.0).run()
    assert steps.sim_time_s > ideal.sim_time_s + 0.05
    assert pipelined.sim_time_s == pytest.approx(steps.sim_time_s, rel=0.1)
    assert sum(pipelined.timeouts.values()) == pytest.approx(sum(steps.timeouts.values()), rel=0.1)
    monkeypatch.setattr(twin.rings, "OVERFLOW_PIECES", 1)
    assert run("pipelined").sim_time_s > 1.2 * steps.sim_time_s


@pytest.mark.parametrize("ring_model", ["steps", "pipelined"])
def test_only_the_ranks_whose_hop_crosses_an_overflowing_fifo_time_out(ring_model):
    from twin.engine import FluidSim
    view = LAYOUT.view()
    overflow = IDEAL.with_(rto_s=0.1, overflow_timeouts=1.0, fifo_flow_packets=10.0)
    # Each ring has two ranks on leaf 0 and two on leaf 1: two of its four hops cross the leaf-spine links the
    # two jobs share (FIFOs that hold one flow), two stay inside a leaf. Every step waits one timeout; the two
    # ranks on the uplinks are charged one each.
    a = job(0, 400_000, hosts=[HOSTS[0], HOSTS[1], HOSTS[4], HOSTS[5]])
    b = job(1, 400_000, hosts=[HOSTS[2], HOSTS[3], HOSTS[6], HOSTS[7]])

    def run(params):
        return FluidSim(Network(LAYOUT, view), [a, b], _OneClassOnePath(view, [a, b]), params,
                        ring_model=ring_model, queue_ms=1.0).run()
    r = run(overflow)
    assert r.sim_time_s == pytest.approx(run(IDEAL).sim_time_s + ring_steps(4) * 0.1, rel=1e-6)
    assert r.timeouts == pytest.approx({0: 2 * ring_steps(4), 1: 2 * ring_steps(4)})


@pytest.mark.parametrize("ring_model", ["steps", "pipelined"])
def test_a_job_fifo_order_serves_the_older_operation_first(ring_model):
    from twin.engine import FluidSim
    view = LAYOUT.view()
    # One job of two workers, two equal buckets launched together (bucket 0 first): every link carries one flow of
    # each bucket, so each step of S bytes takes 2S/C when the two share the link.
    nbytes = 100_000
    hosts = [HOSTS[0], HOSTS[4]]
    profile = ModelProfile("two", "t", 1, (Bucket(0, nbytes, 0.0, 0.0), Bucket(1, nbytes, 0.0, 0.0)))
    one = JobSpec(0, "j0", profile, 2, 1, hosts=tuple(h[0] for h in hosts), addresses=tuple(h[1] for h in hosts))
    step = (chunk_bytes(nbytes, 2)[0] + 8) * 8 / (10 * MBIT)

    def op_times(order):
        params = IDEAL.with_(job_fifo_order=order)
        r = FluidSim(Network(LAYOUT, view), [one], _OneClassOnePath(view, [one]), params, ring_model=ring_model).run()
        assert r.completed and r.sim_time_s == pytest.approx(4 * step, rel=1e-9)  # the link is never idle
        return {bucket: t for _it, bucket, t in r.op_times[0]}

    # Fair sharing: both operations end together. First come, first served: bucket 0's two steps at full rate,
    # then bucket 1's. Half of it: bucket 0 at 3C/4 while bucket 1 is sending (2 x 4/3 S/C), bucket 1 at C/4
    # meanwhile (2/3 of a step), then alone.
    assert op_times(0) == pytest.approx({0: 4 * step, 1: 4 * step}, rel=1e-9)
    assert op_times(1) == pytest.approx({0: 2 * step, 1: 4 * step}, rel=1e-9)
    assert op_times(0.5) == pytest.approx({0: 8 / 3 * step, 1: 4 * step}, rel=1e-9)
    with pytest.raises(ValueError, match="job_fifo_order"):
        IDEAL.with_(job_fifo_order=1.5)


def test_progress_weight_gives_the_operation_further_along_more_of_its_class():
    from twin.engine import FluidSim
    view = LAYOUT.view()
    # One job of two workers, two buckets launched together on one path: A's steps twice B's (2 S against S).
    small = 100_000
    large = 2 * (2 * (chunk_bytes(small, 2)[0] + 8) - 8)     # chunks of 2 S less a header: steps of 2 S
    hosts = [HOSTS[0], HOSTS[4]]
    profile = ModelProfile("two", "t", 1, (Bucket(0, large, 0.0, 0.0), Bucket(1, small, 0.0, 0.0)))
    one = JobSpec(0, "j0", profile, 2, 1, hosts=tuple(h[0] for h in hosts), addresses=tuple(h[1] for h in hosts))
    unit = (chunk_bytes(small, 2)[0] + 8) * 8 / (10 * MBIT)
    assert chunk_bytes(large, 2)[0] + 8 == 2 * (chunk_bytes(small, 2)[0] + 8)

    def op_times(weight):
        params = IDEAL.with_(progress_weight=weight)
        r = FluidSim(Network(LAYOUT, view), [one], _OneClassOnePath(view, [one]), params, ring_model="steps").run()
        assert r.completed and r.sim_time_s == pytest.approx(6 * unit, rel=1e-9)  # the link is never idle
        return {bucket: t for _it, bucket, t in r.op_times[0]}

    # Max-min: B's first step ends at 2 units, its second with A's first at 4, A's second alone at 6. With weight
    # 2, B, half done after its first step, weighs 2 against A's 1: its second step at 2/3 of the link ends at
    # 3.5, A's first at 4 as before.
    assert op_times(0) == pytest.approx({0: 6 * unit, 1: 4 * unit}, rel=1e-9)
    assert op_times(2) == pytest.approx({0: 6 * unit, 1: 3.5 * unit}, rel=1e-9)


def test_share_cv_draws_each_steps_weight_so_equal_steps_no_longer_end_together():
    from twin.engine import FluidSim
    view = LAYOUT.view()
    # One job of two workers, two equal buckets launched together on one path: under max-min their steps share the
    # link evenly and the two operations end together; with drawn weights one ends first. The link is never idle
    # either way, so the last one ends when all the bytes are through.
    size = 100_000
    hosts = [HOSTS[0], HOSTS[4]]
    profile = ModelProfile("two", "t", 1, (Bucket(0, size, 0.0, 0.0), Bucket(1, size, 0.0, 0.0)))
    one = JobSpec(0, "j0", profile, 2, 1, hosts=tuple(h[0] for h in hosts), addresses=tuple(h[1] for h in hosts))
    total = 4 * (chunk_bytes(size, 2)[0] + 8) * 8 / (10 * MBIT)     # two steps of two buckets on one link

    def op_times(cv, seed=1):
        params = IDEAL.with_(share_cv=cv)
        r = FluidSim(Network(LAYOUT, view), [one], _OneClassOnePath(view, [one]), params, ring_model="steps",
                     seed=seed).run()
        assert r.completed and r.sim_time_s == pytest.approx(total, rel=1e-9)
        return tuple(t for _it, _bucket, t in sorted(r.op_times[0], key=lambda x: x[1]))

    even = op_times(0.0)
    assert even[0] == pytest.approx(even[1], rel=1e-9) == pytest.approx(total, rel=1e-9)
    drawn = op_times(0.6)
    assert min(drawn) < 0.95 * total and max(drawn) == pytest.approx(total, rel=1e-9)
    assert op_times(0.6) == drawn                                   # the run's seed draws the weights
    assert any(op_times(0.6, seed) != drawn for seed in (2, 3, 4))


@pytest.mark.parametrize("ring_model", ["steps", "pipelined"])
def test_a_step_waits_behind_what_its_fifo_holds_ahead_of_it(ring_model):
    from twin.engine import FluidSim
    view = LAYOUT.view()
    # One job of two workers, a small bucket and a large one launched together, every flow in one class: on every
    # link of its path the small bucket's step finds the large one's (1 MB a step) ahead of it, more than a FIFO
    # of 10 packets (queue_ms 1 at 10 Mbit/s) holds, so it waits for a full FIFO: 15,000 bytes, 12 ms.
    small, large = 20_000, 2_000_000
    hosts = [HOSTS[0], HOSTS[4]]
    profile = ModelProfile("two", "t", 1, (Bucket(0, small, 0.0, 0.0), Bucket(1, large, 0.0, 0.0)))
    one = JobSpec(0, "j0", profile, 2, 1, hosts=tuple(h[0] for h in hosts), addresses=tuple(h[1] for h in hosts))

    def small_op_time(weight):
        params = IDEAL.with_(queue_backlog=weight)
        r = FluidSim(Network(LAYOUT, view), [one], _OneClassOnePath(view, [one]), params, ring_model=ring_model,
                     queue_ms=1.0).run()
        assert r.completed
        return {bucket: t for _it, bucket, t in r.op_times[0]}[0]

    # Each of its two steps shares the links with the large bucket (half the rate), then waits weight x 12 ms.
    shared = 2 * (chunk_bytes(small, 2)[0] + 8) * 8 / (10 * MBIT)
    assert small_op_time(0.0) == pytest.approx(2 * shared, rel=1e-9)
    assert small_op_time(0.5) == pytest.approx(2 * (shared + 0.5 * 0.012), rel=1e-9)
    assert small_op_time(1.0) == pytest.approx(2 * (shared + 0.012), rel=1e-9)


@pytest.mark.parametrize("ring_model", ["steps", "pipelined"])
def test_under_a_window_clamp_a_step_waits_behind_the_windows_ahead_of_it(ring_model):
    """The lossless profile: a FIFO holds every flow's window, and a flow has at most its window queued. The small
    bucket's steps wait behind the large one's window (8 x 1448 bytes, 9.3 ms at 10 Mbit/s), not behind the
    testbed FIFO's 10 packets (12 ms) nor the large step's remaining megabyte."""
    from twin.engine import FluidSim
    view = LAYOUT.view()
    small, large = 20_000, 2_000_000
    hosts = [HOSTS[0], HOSTS[4]]
    profile = ModelProfile("two", "t", 1, (Bucket(0, small, 0.0, 0.0), Bucket(1, large, 0.0, 0.0)))
    one = JobSpec(0, "j0", profile, 2, 1, hosts=tuple(h[0] for h in hosts), addresses=tuple(h[1] for h in hosts))

    def small_op_time(**transport):
        r = FluidSim(Network(LAYOUT, view), [one], _OneClassOnePath(view, [one]), IDEAL.with_(queue_backlog=1.0),
                     ring_model=ring_model, queue_ms=1.0, **transport).run()
        assert r.completed
        return {bucket: t for _it, bucket, t in r.op_times[0]}[0]

    shared = 2 * (chunk_bytes(small, 2)[0] + 8) * 8 / (10 * MBIT)
    window = 8 * 1448 * 8 / (10 * MBIT)
    assert small_op_time(lossless=True, window_packets=8) == pytest.approx(2 * (shared + window), rel=1e-9)
    assert small_op_time(window_packets=8) == pytest.approx(2 * (shared + window), rel=1e-9)  # under the FIFO
    # Without a clamp, a lossless FIFO holds the large step's whole remainder (about 1 MB while the small step
    # sends): the wait is close to that, far beyond a testbed FIFO.
    whole = 1_000_008 * 8 / (10 * MBIT)
    assert 2 * (shared + 0.95 * whole) < small_op_time(lossless=True) <= 2 * (shared + whole)


@pytest.mark.parametrize("step_latency", [0.002, 0.004])
def test_a_step_waits_behind_a_lower_class_that_had_its_gap(step_latency):
    """``priority_hol_packets``: job 0 (class 7) and job 1 (class 1) share every link at 10 Mbit/s. Between job
    0's ring steps (``step_latency`` apart) job 1 takes the links; each of job 0's steps after its first waits that
    gap, at most 2.5 packet times (2.5 x 1.2 ms = 3 ms)."""
    from twin.engine import FluidSim
    a, b = _two_jobs_on_the_same_hosts_links()
    view = LAYOUT.view()

    def op_time(job, params):
        r = FluidSim(Network(LAYOUT, view), [a, b], _Fixed(view, [a, b]), params, ring_model="steps").run()
        assert r.completed
        return {j: t for j, ops in r.op_times.items() for _it, _b, t in ops}[job]

    base = IDEAL.with_(step_latency_s=step_latency)
    hol = base.with_(priority_hol_packets=2.5)
    steps = ring_steps(4)
    # The first step starts with both jobs: no lower class had the links before it.
    wait = min(step_latency, 2.5 * 1500 * 8 / (10 * MBIT))
    assert op_time(0, hol) - op_time(0, base) == pytest.approx((steps - 1) * wait, rel=1e-6)
    # A gap under priority_hol_min_packets (3 packet times: 3.6 ms) is too short for the lower class: no wait, or
    # priority_hol_floor_packets (0.2 packet times: 0.24 ms) with a floor.
    packet = 1500 * 8 / (10 * MBIT)
    short = hol.with_(priority_hol_min_packets=3.0)
    assert op_time(0, short) - op_time(0, base) == pytest.approx((steps - 1) * wait if step_latency > 0.0036 else 0.0,
                                                                 rel=1e-6, abs=1e-12)
    floor = short.with_(priority_hol_floor_packets=0.2)
    assert op_time(0, floor) - op_time(0, base) == pytest.approx(
        (steps - 1) * (wait if step_latency > 0.0036 else 0.2 * packet), rel=1e-6)
    # Job 1 has no lower class below it: it only gets the links later, by the time job 0 waited.
    assert op_time(1, hol) >= op_time(1, base) - 1e-9
    # Alone in its class, job 0 meets no lower class.
    alone = [job(0, 400_000, hosts=[HOSTS[0], HOSTS[4], HOSTS[8], HOSTS[12]])]
    r0 = FluidSim(Network(LAYOUT, view), alone, _Fixed(view, alone), base, ring_model="steps").run()
    r1 = FluidSim(Network(LAYOUT, view), alone, _Fixed(view, alone), hol, ring_model="steps").run()
    assert r1.sim_time_s == pytest.approx(r0.sim_time_s, rel=1e-12)


def test_no_wait_behind_a_lower_class_that_is_gone():
    """``priority_hol_packets``: job 1 (class 1) finishes its operation before job 0 (class 7) launches, after
    0.5 s of compute; nothing sends in between, so job 0's steps meet no lower class and wait for nothing."""
    from twin.engine import FluidSim
    hosts_a = [HOSTS[0], HOSTS[4], HOSTS[8], HOSTS[12]]
    hosts_b = [HOSTS[1], HOSTS[5], HOSTS[9], HOSTS[13]]
    a = job(0, 400_000, hosts=hosts_a, backward=0.5)
    b = job(1, 40_000, hosts=hosts_b)
    view = LAYOUT.view()

    def run(params):
        r = FluidSim(Network(LAYOUT, view), [a, b], _Fixed(view, [a, b]), params, ring_model="steps").run()
        assert r.completed
        return r

    base = IDEAL.with_(step_latency_s=0.004)
    without, with_hol = run(base), run(base.with_(priority_hol_packets=2.5))
    assert max(t for _i, _b, t in without.op_times[1]) < 0.5        # job 1 is done before job 0 launches
    times = [t for _i, _b, t in without.op_times[0]]
    assert [t for _i, _b, t in with_hol.op_times[0]] == pytest.approx(times, rel=1e-12)


def test_rto_rttvar_raises_the_timer_after_a_starvation_and_lowers_it_only_while_sending():
    """``rto_rttvar``: a starvation of 0.4 s raises a connection's timer to 2.5 x 0.4 = 1 s; idle, it stays; each
    round trip spent sending (its FIFOs' length at 10 Mbit/s) takes a quarter of its excess over ``rto_s``."""
    from twin.engine import FluidSim
    a = job(0, 400_000)
    view = LAYOUT.view()

    def sim(params):
        return FluidSim(Network(LAYOUT, view), [a], _Fixed(view, [a]), params, ring_model="steps")

    off = sim(IDEAL.with_(rto_s=0.2))
    off.now = 1.0
    off._sample_starvation(0, 0.4)
    assert off._timer(0) == 0.2
    s = sim(IDEAL.with_(rto_s=0.2, rto_rttvar=2.5))
    assert s._timer(0) == 0.2
    s.now = 1.0
    s._sample_starvation(0, 0.4)
    assert s._timer(0) == pytest.approx(1.0)
    s._decay_rttvar(0, stop=True)          # the connection stops sending: no round trips to count
    s.now = 5.0
    assert s._timer(0) == pytest.approx(1.0)
    links = s.routes[0][s.routes[0] >= 0]
    rtt = float((s.fifo_bytes[links] * 8.0 / s.net.capacity[links]).max())
    s.rttvar_mark[0] = s.now               # sending again
    s.now += 2 * rtt
    assert s._timer(0) == pytest.approx(0.2 + 0.8 * 0.75 ** 2)


def test_online_schedulers_hear_every_arrival_and_departure_in_the_twin(tmp_path):
    """Three tenants arriving one after another (Poisson): Crux and Flux with online=true reorder at each of the
    three arrivals and of the departures, which the control loop finds in the workers' events (the run ends with
    the last GPU, before the last job's final events reach the controller: its departure may go unheard)."""
    from controller.schedulers.registry import make_scheduler
    path = tmp_path / "churn.yaml"
    path.write_text("arrivals: {process: poisson, mean_interarrival_s: 1.0, seed: 3}\nplacement: spread\njobs:\n"
                    "  - {name: a, model: resnet50, workers: 2, iterations: 3}\n"
                    "  - {name: b, model: vgg16, workers: 2, iterations: 2}\n"
                    "  - {name: c, model: bert_large, workers: 2, iterations: 2}\n")
    plan = twin.prepare(str(path), FabricSpec(1, 2, 4, 5.0, 5.0))
    assert [j.start_offset_s for j in plan.jobs][0] == 0.0 and plan.jobs[2].start_offset_s > 0
    for name in ("crux", "flux"):
        result = twin.simulate(plan.layout, plan.jobs, name, {"online": True}, "calibrated")
        assert result.completed and result.scheduler.reorders in (5, 6), name
        assert len(result.scheduler.active) <= 1
    offline = twin.simulate(plan.layout, plan.jobs, "crux", {}, "calibrated")
    assert offline.completed and offline.scheduler.reorders == 0
    assert make_scheduler("crux", plan.layout.view(), plan.jobs, {"online": True}).decide(0.0) == {}


def test_a_lone_job_takes_its_whole_scenarios_ring_model():
    profile = ModelProfile("m", "g", 1, (Bucket(0, 1000, 0.01, 0.01),))
    jobs = [JobSpec(i, f"j{i}", profile, 40, 1) for i in range(4)]
    assert twin.ring_model_for(jobs) == "pipelined" and twin.ring_model_for(jobs[:1]) == "steps"
    assert twin.ring_model_for(jobs, "steps") == "steps"
