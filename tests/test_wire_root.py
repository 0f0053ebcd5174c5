"""What really happens on the wire (root): a scheduler's decision is seen in the packets' DSCP by a capture at
a switch port and in the port's tc class counters, and a ring all-reduce under a rate limit takes the analytic
2(N-1)/N x S / B."""

import pytest

from controller.schedulers.registry import make_scheduler
from core.classes import class_to_dscp
from core.fabric import FabricLayout, FabricSpec
from core.model import Bucket, JobSpec, ModelProfile
from core.ring import ring_time_s
from experiment.results import RunFolder
from testbed.fabric import Testbed
from tests.wire import flow_dscps

pytestmark = pytest.mark.root


def view_of(spec):
    layout = FabricLayout.from_spec(spec)
    return layout, layout.view()


def test_bytescheduler_decision_is_visible_on_the_wire(tmp_path):
    spec = FabricSpec(spines=1, leaves=2, hosts_per_leaf=2)
    layout, view = view_of(spec)
    src, dst = layout.hosts[0], layout.hosts[2]  # different leaves: h1 on lf1, h3 on lf2
    model = ModelProfile("wire", "none", 1, tuple(Bucket(b, 100_000, 0.01, 0.01) for b in range(4)))
    job = JobSpec(0, "wire", model, 2, 1, hosts=(src.name, dst.name), addresses=(src.ip, dst.ip))
    expected = make_scheduler("bytescheduler", view, [job]).decide(0.0)
    with Testbed(spec, str(tmp_path), scheduler="bytescheduler", jobs=[job]) as tb:
        egress = f"lf{dst.leaf}-eth{dst.leaf_port}"  # the switch port that sends to the receiver
        for bucket in (3, 0):
            flow = job.flow(0, bucket)
            want = class_to_dscp(expected[flow].priority_class)
            before = tb.class_stats(egress).get(expected[flow].priority_class, (0, 0))[0]
            dscps = flow_dscps(tb, src, dst, flow)
            assert len(dscps) >= 10
            assert set(dscps) == {want}, (bucket, want)
            after = tb.class_stats(egress).get(expected[flow].priority_class, (0, 0))[0]
            assert after - before > 500_000  # the bulk of 2 s at 10 Mbit/s went through that class
    assert expected[job.flow(0, 3)].priority_class > expected[job.flow(0, 0)].priority_class


def test_allreduce_runs_at_the_shaped_link_rate(tmp_path):
    from testbed import jobs as training

    spec = FabricSpec(spines=1, leaves=1, hosts_per_leaf=4, host_rate_mbps=10)
    layout, _ = view_of(spec)
    size = 1_000_000
    model = ModelProfile("one-bucket", "none", 1, (Bucket(0, size, 0.001, 0.001),))
    hosts = layout.hosts[:4]
    job = JobSpec(0, "ring", model, 4, 3, semantics="wait_all", hosts=tuple(h.name for h in hosts),
                  addresses=tuple(h.ip for h in hosts))
    with Testbed(spec, str(tmp_path), scheduler="ecmp", jobs=[job]) as tb:
        res = training.run_jobs(tb, [job], RunFolder(str(tmp_path)), seed=1, time_limit_s=120, progress=False)
    assert not res["workload_failed"], res
    n = job.workers
    analytic = ring_time_s(size, n, spec.host_rate_mbps * 1e6)
    measured = res["jobs"][0]["op_time_p50_s"]
    assert res["jobs"][0]["check_failures"] == 0
    # The shaper holds (no all-reduce beats the link) and the ring runs at the link rate, not at a fraction of it.
    # How close it comes (1.08 x analytic, 5% of it headers) is a fidelity figure: bench/fabric.py
    # measures it, since a timed bound this tight would fail on a busy machine without anything being wrong.
    assert 0.95 * analytic <= measured <= 1.5 * analytic, (measured, analytic)
