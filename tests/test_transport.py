"""Transport profiles and the packets-per-operation budget, without root: what each profile asks of the hosts
and switches, and how buckets are merged and the time scale raised so that operations are packet-rich."""
import pytest

from core import queues
from core.ring import packets_per_hop
from core.transport import PROFILES, profile
from workloads.profiles import coarsen
from workloads.scaling import Scaling, granularity_time_scale, merge_small_buckets
from workloads.scenario import load_scenario


def test_the_tcp_profile_names_its_congestion_control_and_drops_at_queue_ms():
    tcp = profile("tcp")
    # Only the congestion control is set (on the route: a namespace would inherit the machine's default).
    assert tcp.host_commands("h1-eth0", "10.0.0.1") == [
        "ip route replace 10.0.0.0/8 dev h1-eth0 proto kernel scope link src 10.0.0.1 congctl cubic"]
    assert tcp.worker_args() == []
    assert tcp.queue_limit(10.0, 50.0, data_flows=500) == queues.queue_packets(10.0, 50.0)


def test_the_lossless_profile_bounds_windows_and_sizes_fifos_for_all_of_them():
    lossless = PROFILES["lossless"]
    cmds = lossless.host_commands("h1-eth0", "10.0.0.1")
    assert "sysctl -qw net.ipv4.tcp_reordering=127" in cmds
    (route,) = [c for c in cmds if c.startswith("ip route replace")]
    assert "rto_min 5000ms" in route and "congctl cubic" in route and "src 10.0.0.1" in route
    # The window bound is the receiver's, set by the workers on their listening sockets.
    assert lossless.worker_args() == ["--window-clamp", str(8 * 1448)]
    # 96 data flows of 8 packets and their ACKs: no FIFO can overflow.
    assert lossless.queue_limit(5.0, 50.0, data_flows=96) == 96 * (8 + 2)
    assert lossless.queue_limit(5.0, 50.0, data_flows=1) == queues.queue_packets(5.0, 50.0)
    with pytest.raises(ValueError, match="unknown transport profile"):
        profile("rdma")


def test_small_buckets_merge_until_every_operation_has_its_packets():
    sc = load_scenario("headline")
    scaling = Scaling(100.0, 5.0, 4.0)
    for job in sc.jobs:
        coarse = coarsen(job.profile, sc.max_buckets)
        merged = merge_small_buckets(coarse, job.workers, scaling, 20)
        assert merged.gradient_bytes == coarse.gradient_bytes
        assert merged.compute_s == pytest.approx(coarse.compute_s)
        assert [b.index for b in merged.buckets] == list(range(len(merged.buckets)))
        per_op = [packets_per_hop(scaling.scale_bytes(b.nbytes, job.workers), job.workers) for b in merged.buckets]
        assert len(merged.buckets) == 1 or min(per_op) >= 20
    # GPT-2's buckets are large: nothing to merge.
    gpt2 = next(j for j in sc.jobs if j.profile.name.startswith("gpt2"))
    coarse = coarsen(gpt2.profile, sc.max_buckets)
    assert len(merge_small_buckets(coarse, gpt2.workers, scaling, 20).buckets) == len(coarse.buckets)


def test_the_time_scale_rises_only_as_far_as_the_smallest_gradient_needs():
    sc = load_scenario("headline")
    scaling = sc.scaling(5.0)
    profiles = [coarsen(j.profile, sc.max_buckets) for j in sc.jobs]
    workers = [j.workers for j in sc.jobs]
    tau = granularity_time_scale(profiles, workers, scaling, 20)
    assert tau > scaling.time_scale
    raised = Scaling(scaling.real_link_gbps, 5.0, tau)
    smallest = min(packets_per_hop(p.gradient_bytes * raised.byte_factor, n) for p, n in zip(profiles, workers))
    assert smallest == pytest.approx(20, rel=1e-6)
    assert granularity_time_scale(profiles, workers, scaling, 1) == scaling.time_scale


def test_a_resolved_scenario_reports_what_the_budget_cost():
    sc = load_scenario("headline")
    hosts = [(f"h{k}", f"10.0.0.{k}", (k - 1) // 4) for k in range(1, 17)]
    resolved = sc.resolve(hosts, 5.0)
    g = resolved.granularity
    assert g["met"] and g["min_packets_per_op"] == 20 and g["wall_time_factor"] > 1
    assert min(g["smallest_packets_per_op"].values()) >= 20 - 1e-9
    off = sc.resolve(hosts, 5.0, min_packets=0)
    assert off.granularity["wall_time_factor"] == 1 and off.scaling.time_scale < resolved.scaling.time_scale
    assert min(off.granularity["smallest_packets_per_op"].values()) < 5   # ResNet-50's tiny buckets, unmerged


def test_a_congestion_control_replaces_the_profiles_and_reaches_the_route():
    bbr = profile("lossless", "bbr")
    assert bbr.congestion_control == "bbr" and bbr.rto_min_ms == PROFILES["lossless"].rto_min_ms
    (route,) = [c for c in bbr.host_commands("h1-eth0", "10.0.0.1") if c.startswith("ip route replace")]
    assert "congctl bbr" in route
    assert profile("tcp", None) is PROFILES["tcp"]
    with pytest.raises(ValueError, match="unknown congestion control"):
        profile("tcp", "vegas")
