"""The fabric as a pure Mininet topology graph, built from core.fabric's layout (leaf-spine or fat-tree).

``FabricTopo`` only adds nodes and links (with their rates as link options), so it can be built and inspected
without root. Nodes, DPIDs, addresses, links and their port numbers are copied from ``core.fabric.FabricLayout``,
the one description of the graph that the controller and the analysis also read.

Also usable as ``sudo mn --custom testbed/topo.py --topo leafspine,2,4,4 --switch ovs,datapath=user --controller none``
(or ``--topo fattree,4``).
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # loaded by ``mn --custom testbed/topo.py``: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from core.fabric import FabricLayout, FabricSpec, leaf_name  # noqa: E402

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


class FabricTopo(Topo):
    """The graph of a ``FabricSpec``: switches, hosts on their leaves, switch-to-switch links on their ports.

    Link options carry ``bw`` (Mbit/s) for reference; the testbed shapes links with its own priority trees
    (testbed/qos.py) rather than TCLink's, so plain links are used.
    """

    def build(self, spec: FabricSpec = FabricSpec()):
        spec.validate()
        self.spec = spec
        self.layout = layout = FabricLayout.from_spec(spec)
        for switch in layout.switches:
            self.addSwitch(switch.name, dpid="%016x" % switch.dpid, protocols="OpenFlow13")
        for h in layout.hosts:
            self.addHost(h.name, ip=h.ip + "/8", mac=h.mac)
            self.addLink(h.name, leaf_name(h.leaf), port2=h.leaf_port, bw=spec.host_rate_mbps)
        for link in layout.links:
            self.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port, bw=spec.fabric_rate_mbps)


def leafspine(spines=2, leaves=4, hosts_per_leaf=4, host_rate_mbps=10.0, fabric_rate_mbps=10.0) -> FabricTopo:
    return FabricTopo(FabricSpec(int(spines), int(leaves), int(hosts_per_leaf), float(host_rate_mbps),
                                 float(fabric_rate_mbps)))


def fattree(k=4, host_rate_mbps=10.0, fabric_rate_mbps=10.0) -> FabricTopo:
    return FabricTopo(FabricSpec.fattree(int(k), float(host_rate_mbps), float(fabric_rate_mbps)))


topos = {"leafspine": leafspine, "fattree": fattree}
