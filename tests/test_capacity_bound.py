"""The capacity-aware bound (analysis/bounds.py) on cases whose answer is known by hand."""
import dataclasses

import pytest

from analysis.bounds import GOODPUT, capacity_bound, crossing_bytes, cuts, regions
from core.fabric import FabricLayout, FabricSpec
from core.model import Bucket, JobSpec, ModelProfile

RATE = 10.0                       # Mbit/s, host and fabric links
BYTES_PER_S = RATE * 1e6 / 8


def job(index, hosts, layout, nbytes, compute_s=1.0):
    """A job on the named hosts with one bucket of ``nbytes`` and ``compute_s`` of compute per iteration."""
    by_name = {h.name: h for h in layout.hosts}
    model = ModelProfile(f"m{index}", "none", 1, (Bucket(0, int(nbytes), compute_s / 2, compute_s / 2),))
    return JobSpec(index, f"j{index}", model, len(hosts), 10, hosts=tuple(hosts),
                   addresses=tuple(by_name[h].ip for h in hosts))


def leafspine(spines):
    return FabricLayout.from_spec(FabricSpec(spines=spines, leaves=2, hosts_per_leaf=2, host_rate_mbps=RATE,
                                             fabric_rate_mbps=RATE))


def test_the_regions_are_each_leaf_and_on_a_fat_tree_each_pod():
    assert sorted(sorted(r) for r in regions(leafspine(2))) == [["lf1"], ["lf2"]]
    fat = FabricLayout.from_spec(FabricSpec.fattree(4, RATE, RATE))
    groups = regions(fat)
    assert len(groups) == 8 + 4 and frozenset({"lf1", "lf2", "ag1", "ag2"}) in groups
    # A pod's cut: 2 aggregation switches with 2 cores each; a leaf's: its 2 aggregation switches.
    capacity = {name: cap for name, (_hosts, cap) in cuts(fat).items()}
    assert capacity[("region", "ag1", "ag2", "lf1", "lf2")] == 4 * BYTES_PER_S
    assert capacity[("region", "lf1")] == 2 * BYTES_PER_S and capacity[("host", "h1")] == BYTES_PER_S


def test_two_jobs_across_one_uplink_share_it():
    """Each job's two workers sit on different leaves, so each of its two ring hops crosses the single spine's
    links: per iteration S bytes each way, with S / C = 0.75 x the uplink's payload rate. Side by side for ever
    (steady): u_a + u_b <= 4/3. Ten iterations each from time 0 (finite): the first job can end at its solo span
    10 / 0.9 = 11.1 s, the second no earlier than the 20 iterations' bytes take, 20 x 0.75 = 15 s: utilisations
    0.9 and 10/15."""
    layout = leafspine(spines=1)
    nbytes = 0.75 * GOODPUT * BYTES_PER_S
    a, b = job(0, ("h1", "h3"), layout, nbytes), job(1, ("h2", "h4"), layout, nbytes)
    inside = cuts(layout)[("region", "lf1")][0]
    assert crossing_bytes(a, inside) == pytest.approx((nbytes, nbytes))
    steady = capacity_bound(layout, [a, b], {"j0": 0.9, "j1": 0.9}, exact_max_jobs=0)
    assert steady["method"] == "steady" and steady["cluster_u_bound"] == pytest.approx(2 / 3)
    assert sum(steady["jobs"].values()) == pytest.approx(4 / 3)
    assert "lf1 out" in steady["binding"] and "lf2 in" in steady["binding"]
    finite = capacity_bound(layout, [a, b], {"j0": 0.9, "j1": 0.9})
    assert finite["method"] == "finite"
    assert sorted(finite["jobs"].values()) == pytest.approx([10 / 15, 0.9])
    assert finite["cluster_u_bound"] == pytest.approx((0.9 + 10 / 15) / 2)
    assert "lf1 out" in finite["binding"]


def test_a_later_start_is_not_counted_in_the_jobs_span():
    """The second job starts 5 s late: it may end at 15 s (the bytes) but its span is 10 s, at most its solo 0.9;
    the bound orders the ends so as to give it the best."""
    layout = leafspine(spines=1)
    nbytes = 0.75 * GOODPUT * BYTES_PER_S
    a = job(0, ("h1", "h3"), layout, nbytes)
    b = dataclasses.replace(job(1, ("h2", "h4"), layout, nbytes), start_offset_s=5.0)
    out = capacity_bound(layout, [a, b], {"j0": 0.9, "j1": 0.9})
    # Orders: a then b: a ends 11.1 (0.9), b at max(5 + 11.1, 15) = 16.1 (10 / 11.1 = 0.9): both at their solo.
    assert out["jobs"] == pytest.approx({"j0": 0.9, "j1": 0.9}) and out["binding"] == []


def test_with_twice_the_uplinks_the_solo_bounds_bind():
    layout = leafspine(spines=2)
    nbytes = 0.75 * GOODPUT * BYTES_PER_S
    a, b = job(0, ("h1", "h3"), layout, nbytes), job(1, ("h2", "h4"), layout, nbytes)
    for limit in (0, 16):
        out = capacity_bound(layout, [a, b], {"j0": 0.9, "j1": 0.8}, exact_max_jobs=limit)
        assert out["cluster_u_bound"] == pytest.approx(0.85) and out["binding"] == []


def test_jobs_inside_one_leaf_cross_no_fabric_cut():
    layout = leafspine(spines=1)
    nbytes = 5 * BYTES_PER_S          # far more than the uplink, but it never leaves the leaf
    a, b = job(0, ("h1", "h2"), layout, nbytes), job(1, ("h3", "h4"), layout, nbytes)
    # Each host link carries S per iteration: u <= C x goodput x rate / S.
    for limit in (0, 16):
        out = capacity_bound(layout, [a, b], {"j0": 1.0, "j1": 1.0}, exact_max_jobs=limit)
        assert out["jobs"]["j0"] == pytest.approx(GOODPUT * BYTES_PER_S / nbytes)
        assert out["binding"] and all(name.startswith("h") for name in out["binding"])


def test_the_larger_job_keeps_the_shared_capacity():
    """A 4-worker and a 2-worker job share one uplink each way; in steady state the program gives it to the job
    with more GPUs per byte crossing; over finite runs the small job ends first and the big one after both
    jobs' bytes."""
    layout = FabricLayout.from_spec(FabricSpec(spines=1, leaves=2, hosts_per_leaf=3, host_rate_mbps=RATE,
                                               fabric_rate_mbps=RATE))
    nbytes = GOODPUT * BYTES_PER_S     # per hop the 4-job sends 1.5 S, the 2-job S
    big = job(0, ("h1", "h2", "h4", "h5"), layout, nbytes)
    small = job(1, ("h3", "h6"), layout, nbytes)
    inside = cuts(layout)[("region", "lf1")][0]
    assert crossing_bytes(big, inside)[0] == pytest.approx(1.5 * nbytes)
    out = capacity_bound(layout, [big, small], {"j0": 1.0, "j1": 1.0}, exact_max_jobs=0)
    # 1.5 u_big + u_small <= 1: GPUs per unit of capacity, 4 / 1.5 > 2 / 1, so the big job takes it all.
    assert out["jobs"]["j0"] == pytest.approx(2 / 3) and out["jobs"]["j1"] == pytest.approx(0.0, abs=1e-9)
    assert out["cluster_u_bound"] == pytest.approx(4 * (2 / 3) / 6)
    # Finite, 10 iterations: the big job alone needs 15 s of the uplink, the small one 10 s, both 25 s. Big
    # first: 4 x 10/15 + 2 x 10/25; small first: 2 x 10/10 + 4 x 10/25. The bound takes the better order.
    finite = capacity_bound(layout, [big, small], {"j0": 1.0, "j1": 1.0})
    assert finite["cluster_u_bound"] == pytest.approx(max(4 * 10 / 15 + 2 * 10 / 25, 2 * 1 + 4 * 10 / 25) / 6)
