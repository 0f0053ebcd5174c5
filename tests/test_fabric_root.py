"""Live fabric tests (root, Open vSwitch): reachability through the controller, priority isolation on a
congested port, single-flow link-rate fidelity, and what the switches and the controller really do."""
import subprocess

import pytest

from core.fabric import FabricSpec
from core.model import FlowKey
from testbed.fabric import Testbed

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    out = tmp_path_factory.mktemp("fabric")
    with Testbed(FabricSpec(spines=2, leaves=2, hosts_per_leaf=3, host_rate_mbps=10, fabric_rate_mbps=10),
                 str(out), scheduler="ecmp") as tb:
        yield tb


def test_all_pairs_reachable_through_controller(fabric):
    assert fabric.check_reachability() == []


def test_every_switch_port_has_eight_classes(fabric):
    for dev, rate in fabric.port_rates().items():
        out = subprocess.run(["tc", "class", "show", "dev", dev], capture_output=True, text=True).stdout
        assert all(f"1:{10 + c} " in out for c in range(8)), dev
        assert f"rate {int(rate)}Mbit ceil {int(rate)}Mbit" in out.replace("000Kbit", "Mbit") or "Mbit" in out


def test_single_flow_reaches_link_rate(fabric):
    res = fabric.single_flow(duration=4, cross_leaf=True)
    assert 0.90 <= res["fraction"] <= 1.02, res


def test_priority_isolation_on_congested_port(fabric):
    res = fabric.priority_pair(high_class=7, low_class=1, duration=4)
    assert res["high_share"] >= 0.9, res
    assert res["port_utilisation"] >= 0.85, res
    # the tc counters of the congested port agree: class 7 carried most bytes
    dev = "lf1-eth3"
    stats = fabric.class_stats(dev)
    assert stats[7][0] > 5 * stats[1][0], stats


def test_pin_reaction_is_confirmed_by_barrier(fabric):
    flow = FlowKey("10.0.0.1", "10.0.0.4", 43000, 5300)
    reply = fabric.pin(flow, 5, path=1)
    assert reply["ok"] and reply["flowmods"] == 2  # forward rule at lf1, ACK-direction rule at lf2
    assert reply["latency_s"] < 0.5
    dump = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", "lf1"], capture_output=True,
                          text=True).stdout
    line = next(row for row in dump.splitlines() if "tp_src=43000" in row)
    assert "set_field:40->ip_dscp" in line or "mod_nw_tos:160" in line
    assert "output:5" in line  # spine index 1 = second spine = leaf port hosts_per_leaf + 2


def test_open_vswitch_can_hold_every_fifo_at_once(fabric):
    # The userspace datapath sends through one socket whose buffer bounds what all FIFOs may hold together;
    # below that, packets vanish inside the switch with no drop counter anywhere.
    from testbed import ovs
    if fabric.datapath == "kernel":
        pytest.skip("the kernel datapath queues in the kernel: no shared send socket")
    held = fabric.ovs_send_buffer
    assert held["ok"] and held["bytes"] >= held["needed"] > 0, held
    fd_inode = ovs.send_socket_inode()
    assert fd_inode is not None
    fd = fd_inode.split(":")[0]
    out = subprocess.run(["ss", "-f", "link", "-a", "-m", "-p"], capture_output=True, text=True).stdout
    line = next(row for row in out.splitlines() if f"fd={fd})" in row and "ovs-vswitchd" in row)
    assert int(line.split(",tb")[1].split(",")[0]) >= held["needed"], line
