"""Pure tests of the fabric graph, the DSCP-to-class map and the runner's input validation (no root needed)."""
import pytest

from core import classes, queues
from core.fabric import FabricLayout, FabricSpec, leaf_dpid, spine_dpid
from testbed import qos
from testbed.topo import FabricTopo, fattree, leafspine


def test_leafspine_graph_counts_and_ports():
    topo = leafspine(spines=2, leaves=3, hosts_per_leaf=4, host_rate_mbps=10, fabric_rate_mbps=20)
    assert len(topo.hosts()) == 12
    assert sorted(topo.switches()) == ["lf1", "lf2", "lf3", "sp1", "sp2"]
    # every leaf is linked to every spine exactly once, each host to one leaf
    links = topo.links(withInfo=True)
    assert len(links) == 12 + 3 * 2
    layout = FabricLayout.from_spec(topo.spec)
    for a, b, info in links:
        if a.startswith("lf") and b.startswith("sp"):
            assert info["port1"] == 4 + int(b[2:])     # leaf ports after its 4 hosts, by spine number
            assert info["port2"] == int(a[2:])         # spine port l faces leaf l
            assert layout.port(a, b) == info["port1"] and layout.port(b, a) == info["port2"]
            assert info["bw"] == 20
        if a.startswith("h"):
            assert info["bw"] == 10
    assert topo.spec.oversubscription == pytest.approx(4 * 10 / (2 * 20))


def test_fattree_graph_has_k_pods_and_every_port_once():
    topo = fattree(4, 10, 10)
    layout = topo.layout
    assert len(topo.hosts()) == 16 and len(topo.switches()) == 20
    assert topo.spec.oversubscription == pytest.approx(1.0)
    links = topo.links(withInfo=True)
    assert len(links) == 16 + 16 + 16        # hosts-edge, edge-aggregation, aggregation-core
    ports = [(a, info["port1"]) for a, b, info in links] + [(b, info["port2"]) for a, b, info in links]
    assert len(set(ports)) == len(ports)     # no port used twice
    # Every switch has k = 4 ports; every core reaches every pod once.
    per_switch = {}
    for name, _port in ports:
        per_switch[name] = per_switch.get(name, 0) + 1
    assert all(per_switch[s] == 4 for s in topo.switches())
    assert sorted(nxt for _p, nxt in layout.neighbours["co1"]) == ["ag1", "ag3", "ag5", "ag7"]
    assert len(layout.egress_ports()) == 80 and len(layout.peer_ports()) == 64
    assert FabricLayout.from_dict(layout.to_dict()) == layout
    with pytest.raises(ValueError, match="--k"):
        FabricTopo(FabricSpec.fattree(3))


def test_layout_addresses_and_dpids_are_unique():
    layout = FabricLayout.from_spec(FabricSpec(4, 8, 8, 10, 10))
    ips = [h.ip for h in layout.hosts]
    macs = [h.mac for h in layout.hosts]
    assert len(set(ips)) == len(ips) == 64
    assert len(set(macs)) == 64
    dpids = layout.switch_dpids()
    assert len(set(dpids.values())) == 12
    assert dpids["sp1"] == spine_dpid(1) and dpids["lf8"] == leaf_dpid(8)
    assert layout.hosts[8].leaf == 2 and layout.hosts[8].leaf_port == 1
    assert FabricLayout.from_dict(layout.to_dict()) == layout


@pytest.mark.parametrize("kwargs, word", [
    (dict(spines=0), "--spines"), (dict(leaves=0), "--leaves"), (dict(hosts_per_leaf=0), "--hosts-per-leaf"),
    (dict(host_rate_mbps=0), "--host-rate"), (dict(fabric_rate_mbps=1e6), "--fabric-rate"),
    (dict(leaves=1, hosts_per_leaf=1), "at least 2 hosts"), (dict(leaves=20, hosts_per_leaf=20), "addressing"),
])
def test_impossible_fabrics_are_rejected(kwargs, word):
    with pytest.raises(ValueError, match=word):
        FabricSpec(**kwargs).validate()


def test_dscp_class_map_roundtrip_and_order():
    for c in range(8):
        assert classes.dscp_to_class(classes.class_to_dscp(c)) == c
        assert classes.tos_byte(c) == classes.class_to_dscp(c) << 2
    # class 7 is served first: lowest HTB prio number
    assert [qos.htb_prio(c) for c in range(8)] == [7, 6, 5, 4, 3, 2, 1, 0]
    assert classes.dscp_to_class(46) == 0  # EF is not a class selector: best effort like tc's default class
    with pytest.raises(ValueError):
        classes.class_to_dscp(8)


def test_tree_commands_shape():
    cmds = qos.tree_commands("lf1-eth1", 10.0)
    text = [" ".join(c) for c in cmds]
    assert text[0].startswith("tc qdisc replace dev lf1-eth1 root handle 1: htb default 10")
    assert any("classid 1:1 htb rate 10000kbit ceil 10000kbit" in t for t in text)
    filters = [t for t in text if " filter " in t]
    assert len(filters) == 7  # class 0 is the default class, no filter needed
    assert any("match ip tos 0xe0 0xfc flowid 1:17" in t for t in filters)
    fifos = [t for t in text if "pfifo limit" in t]
    assert len(fifos) == 8 and all(t.endswith(f"limit {queues.queue_packets(10.0)}") for t in fifos)
    with pytest.raises(ValueError):
        qos.tree_commands("x", 10, floor=0.2)


def test_parse_class_stats():
    out = """class htb 1:1 root rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b
 Sent 5000 bytes 40 pkt (dropped 0, overlimits 0 requeues 0)
class htb 1:17 parent 1:1 leaf 107: prio 0 rate 100Kbit ceil 10Mbit burst 1600b cburst 1600b
 Sent 4000 bytes 30 pkt (dropped 0, overlimits 0 requeues 0)
class htb 1:11 parent 1:1 leaf 101: prio 6 rate 100Kbit ceil 10Mbit burst 1600b cburst 1600b
 Sent 1000 bytes 10 pkt (dropped 0, overlimits 0 requeues 0)
"""
    assert qos.parse_class_stats(out) == {7: (4000, 30), 1: (1000, 10)}


def test_weighted_classes_share_by_powers_of_two():
    rates = queues.class_rates(10.0, queues.DEFAULT_FLOOR, "weighted")
    assert sum(rates) == pytest.approx(10.0)
    assert rates[7] == pytest.approx(2 * rates[6]) and rates[1] == pytest.approx(2 * rates[0])
    text = [" ".join(c) for c in qos.tree_commands("d", 10.0, mode="weighted")]
    assert all(" prio 0 " in t for t in text if "classid 1:1" in t and "parent 1:1" in t)
    strict = [" ".join(c) for c in qos.tree_commands("d", 10.0)]
    assert any("classid 1:10 htb rate 100kbit" in t and " prio 7 " in t for t in strict)
    with pytest.raises(ValueError, match="class mode"):
        queues.class_rates(10.0, 0.01, "fair")
