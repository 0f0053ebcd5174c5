"""Leaf-spine fabric as a pure Mininet topology graph, built from core.fabric's layout.

``LeafSpine`` only adds nodes and links (with their rates as link options), so it can be built and inspected
without root. Every leaf connects to every spine; hosts hang off leaves. Names, DPIDs, addresses and port numbers
come from ``core.fabric.FabricLayout``; links are added in the order that gives those port numbers.

Also usable as ``sudo mn --custom testbed/topo.py --topo leafspine,2,4,4 --switch ovs,datapath=user --controller none``.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # loaded by ``mn --custom testbed/topo.py``: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from core.fabric import FabricLayout, FabricSpec, leaf_dpid, leaf_name, spine_dpid, spine_name  # noqa: E402

try:  # The graph is importable without mininet (e.g. in tests of pure code).
    from mininet.topo import Topo
except ImportError:  # pragma: no cover
    class Topo:  # type: ignore[no-redef]
        def __init__(self, *args, **params):
            self._nodes, self._links = {}, []
            self.build(*args, **params)

        def addSwitch(self, name, **opts):
            self._nodes[name] = dict(opts, isSwitch=True)
            return name

        def addHost(self, name, **opts):
            self._nodes[name] = dict(opts)
            return name

        def addLink(self, a, b, **opts):
            self._links.append((a, b, opts))


class LeafSpine(Topo):
    """Leaf-spine topology: every leaf linked to every spine, ``hosts_per_leaf`` hosts on each leaf.

    Link options carry ``bw`` (Mbit/s) for reference; the testbed shapes links with its own priority trees
    (testbed/qos.py) rather than TCLink's, so plain links are used.
    """

    def build(self, spines=2, leaves=4, hosts_per_leaf=4, host_rate_mbps=10.0, fabric_rate_mbps=10.0):
        spec = FabricSpec(int(spines), int(leaves), int(hosts_per_leaf), float(host_rate_mbps),
                          float(fabric_rate_mbps))
        spec.validate()
        self.spec = spec
        layout = FabricLayout.from_spec(spec)
        self.layout = layout
        spine_names = [self.addSwitch(spine_name(i), dpid="%016x" % spine_dpid(i), protocols="OpenFlow13")
                       for i in range(1, spec.spines + 1)]
        leaf_names = [self.addSwitch(leaf_name(i), dpid="%016x" % leaf_dpid(i), protocols="OpenFlow13")
                      for i in range(1, spec.leaves + 1)]
        # Host links first, so leaf ports 1..K face hosts (FabricLayout relies on this order).
        for h in layout.hosts:
            self.addHost(h.name, ip=h.ip + "/8", mac=h.mac)
            self.addLink(h.name, leaf_names[h.leaf - 1], port2=h.leaf_port, bw=spec.host_rate_mbps)
        for li, leaf in enumerate(leaf_names, start=1):
            for si, spine in enumerate(spine_names, start=1):
                self.addLink(leaf, spine, port1=layout.leaf_uplink_port(si), port2=layout.spine_port(li),
                             bw=spec.fabric_rate_mbps)


topos = {"leafspine": LeafSpine}
