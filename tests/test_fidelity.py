"""The fidelity measurements' pure parts (testbed/fidelity.py, testbed/qos.py), without root: parsing tc's
statistics, the OVS CPU peak, the emulator's wait and what the verdict makes of it, the timeout share and packets
per operation."""
import statistics

import pytest

from core.model import Bucket, JobSpec, ModelProfile
from testbed import qos
from experiment.results import RunFolder
from testbed.fidelity import (EMULATOR_WAIT_LIMIT, RTO_SHARE_LIMIT, FidelityMonitor, emulator_wait, frame_time_s,
                              packets_per_op, rto_share, verdict)
from testbed.ovs import FRAME_BYTES, PACKET_TRUESIZE

TC = """qdisc htb 1: dev lf1-eth3 root refcnt 3 r2q 10 default 0x10 direct_packets_stat 0 direct_qlen 1000
 Sent 2063280 bytes 2496 pkt (dropped 0, overlimits 1187 requeues 0)
 backlog 0b 0p requeues 0
qdisc pfifo 100: dev lf1-eth3 parent 1:10 limit 41p
 Sent 63710 bytes 53 pkt (dropped 7, overlimits 0 requeues 0)
 backlog 3028b 2p requeues 0
qdisc pfifo 107: dev lf1-eth3 parent 1:17 limit 41p
 Sent 9000 bytes 9 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 12Kb 8p requeues 0
qdisc pfifo_fast 0: dev eth0 root refcnt 2 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1
 Sent 4364413 bytes 37332 pkt (dropped 3, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
"""


def test_class_fifo_statistics_are_read_per_port_and_class():
    stats = qos.parse_qdisc_stats(TC)
    assert stats == {("lf1-eth3", 0): (63710, 7, 3028), ("lf1-eth3", 7): (9000, 0, 12 * 1024)}


def test_the_ovs_cpu_peak_is_the_busiest_two_second_window():
    monitor = FidelityMonitor(tb=None)
    # 10 s sampled every 0.5 s: idle, then 2 s at a full core, then idle.
    cpu, t = 0.0, 0.0
    for _ in range(21):
        monitor.cpu.append((t, cpu))
        t += 0.5
        cpu += 0.5 if 4.0 <= t <= 6.0 else 0.05
    result = monitor.ovs_cpu()
    assert result["peak"] == pytest.approx(1.0, abs=0.06)
    assert result["mean"] == pytest.approx(monitor.cpu[-1][1] / 10.0)


def test_the_timeout_share_and_packets_per_operation():
    assert rto_share(30, 10, 1.0, 0.2) == pytest.approx(0.6)
    assert rto_share(30, 10, None, 0.2) is None
    assert 0.70 < RTO_SHARE_LIMIT < 0.88   # between the invariant and the broken runs of docs/fidelity.md
    model = ModelProfile("m", "gpu", 1, (Bucket(0, 14480, 0.1, 0.1), Bucket(1, 144800, 0.1, 0.1)))
    job = JobSpec(0, "j", model, 2, 3, hosts=("h1", "h2"), addresses=("10.0.0.1", "10.0.0.2"))
    ppo = packets_per_op([job])["j"]
    assert ppo["min"] == pytest.approx(10.0) and ppo["median"] == pytest.approx(55.0)


def test_the_emulators_wait_is_littles_law_over_the_workload():
    # One full-size frame always waiting while the switches forward 1,000 frames a second: 1 ms each.
    assert emulator_wait([PACKET_TRUESIZE] * 5, 1000 * FRAME_BYTES, 1.0) == pytest.approx(1e-3)
    assert emulator_wait([0, 2 * PACKET_TRUESIZE], 2000 * FRAME_BYTES, 2.0) == pytest.approx(1e-3)
    assert emulator_wait([], 1000, 1.0) is None
    assert emulator_wait([100], 0, 1.0) is None
    assert frame_time_s(5.0) == pytest.approx(FRAME_BYTES * 8 / 5e6)


class _Layout:
    def egress_ports(self):
        return [("lf1-eth1", 1, 1, 5.0), ("sp1-eth1", 2, 1, 5.0)]


class _Testbed:
    layout = _Layout()


def _monitor(wait_frames: float, cpu_per_tick: float) -> FidelityMonitor:
    """A 10-s workload whose switches forwarded 1,000 frames a second, with packets waiting ``wait_frames`` of a
    frame's time at 5 Mbit/s on average, and ovs-vswitchd busy ``cpu_per_tick`` of a core throughout."""
    monitor = FidelityMonitor(tb=None)
    monitor.t0, monitor.t1 = 0.0, 10.0
    monitor.qdisc0 = {("lf1-eth1", 0): (0, 0, 0)}
    monitor.qdisc1 = {("lf1-eth1", 0): (10 * 1000 * FRAME_BYTES, 0, 0)}
    wait_s = wait_frames * frame_time_s(5.0)
    monitor.receive_backlog = [int(round(wait_s * 1000 * PACKET_TRUESIZE))] * 20
    monitor.cpu = [(0.5 * i, 0.5 * i * cpu_per_tick) for i in range(21)]
    monitor.tcp0 = monitor.tcp1 = {}
    return monitor


def test_the_wait_s_standard_error_comes_from_the_samples_spread():
    monitor = _monitor(0.0, 0.5)
    monitor.receive_backlog = [0, 2 * PACKET_TRUESIZE] * 10       # one full-size packet waiting on average
    rate = 1000 * PACKET_TRUESIZE                                   # bytes (truesize) forwarded per second
    assert monitor.emulator_wait_s() == pytest.approx(PACKET_TRUESIZE / rate)
    spread = statistics.stdev(monitor.receive_backlog) / 20 ** 0.5
    assert monitor.emulator_wait_se_s() == pytest.approx(spread / rate)
    monitor.receive_backlog = [PACKET_TRUESIZE]
    assert monitor.emulator_wait_se_s() is None


def test_the_verdict_judges_the_wait_and_keeps_a_busy_switch_as_a_note(tmp_path):
    folder = RunFolder(str(tmp_path))
    busy_but_prompt = verdict(folder, _Testbed(), _monitor(0.5 * EMULATOR_WAIT_LIMIT, 0.95), [])
    assert busy_but_prompt["faithful"]
    assert busy_but_prompt["emulator_wait_frames"] == pytest.approx(0.5 * EMULATOR_WAIT_LIMIT, rel=0.01)
    assert any("ovs-vswitchd used 95%" in n for n in busy_but_prompt["notes"])
    late = verdict(folder, _Testbed(), _monitor(2 * EMULATOR_WAIT_LIMIT, 0.5), [])
    assert not late["faithful"] and "Open vSwitch to forward them" in late["warnings"][0]
    # Where the wait cannot be read (the kernel datapath), a busy ovs-vswitchd still flags the run.
    unread = _monitor(0.0, 0.95)
    unread.receive_backlog = []
    blind = verdict(folder, _Testbed(), unread, [])
    assert blind["emulator_wait_ms"] is None and not blind["faithful"]
