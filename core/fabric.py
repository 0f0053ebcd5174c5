"""The fabric: its shape and rates as a graph, and every name, address, DPID, port and path derived from it.

Two families are built by position, so that the controller, the workloads and the analysis agree on the fabric
without discovery:

* ``leafspine`` (the default): spines ``sp1..spS`` (DPID 0x100+i) and leaves ``lf1..lfL`` (DPID 0x200+i); on a
  leaf, ports 1..K face its hosts and ports K+1..K+S the spines 1..S; on a spine, port l faces leaf l.
* ``fattree`` (k-ary, 3 tiers): k pods of k/2 edge switches (leaves ``lf*``, DPID 0x200+i) and k/2 aggregation
  switches (``ag*``, DPID 0x300+i), and (k/2)^2 cores (``co*``, DPID 0x400+i); k/2 hosts per edge, k^3/4 hosts.
* ``file``: racks and pods read from a topology file (core/topology_file.py; Crux's production topology is
  workloads/topologies/alibaba-lingjun-2023.csv), racks of any size. With ``aggregation_per_pod`` A > 0, three
  tiers: every rack links to the A aggregation switches of its pod, and aggregation switch a of every pod to the
  cores of plane a (``spines`` cores in all, spines / A per plane), as in a fat-tree; with A = 0, two tiers: every
  rack links to every one of ``spines`` spines. The flow-level twin's only (more hosts than the emulation holds).

In both, hosts ``h1..hN`` are numbered leaf by leaf (host ``hk``: IP 10.0.0.k/8, MAC 00:00:00:00:00:kk), and the
switches hosts hang off are the *leaves*. ``FabricLayout`` holds the graph (switches, switch-to-switch links with
their ports, hosts with their leaf port); everything else (egress ports and rates, next hops towards a leaf,
the equal-cost paths between two leaves) is computed from that graph alone, never from the family's formulas.
Names and ports are numbered from 1, as Mininet and OpenFlow do; ``FabricView`` is what a scheduler sees (leaves
from 0, paths as tuples of switch names, indexed from 0). ``FabricLayout.view()`` is the one conversion between
the two. The Mininet graph built from a layout is testbed/topo.py.
"""
from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from core.model import FlowKey
from core.topology_file import read_racks

MAX_HOSTS = 250  # one /8 with last-octet addressing and 2-hex-digit MACs


TOPOLOGIES = ("leafspine", "fattree", "file")
DEFAULT_FATTREE_K = 4

# Every switch name and switch-port interface name the fabric uses (``sp1``, ``lf2-eth3``, ``ag3``, ``co4``).
FABRIC_NAME = re.compile(r"(sp|lf|ag|co)\d+(-eth\d+)?")

TIER_LEAF, TIER_MIDDLE, TIER_TOP = 0, 1, 2  # leaves / spines or aggregation switches / fat-tree cores


def spine_name(i: int) -> str:
    return f"sp{i}"


def leaf_name(i: int) -> str:
    return f"lf{i}"


def aggregation_name(i: int) -> str:
    return f"ag{i}"


def core_name(i: int) -> str:
    return f"co{i}"


def host_name(k: int) -> str:
    return f"h{k}"


def host_ip(k: int) -> str:
    """10.0.0.k for the emulation's hosts (k <= MAX_HOSTS); larger fabrics (the flow-level twin's) go on into
    the next octets."""
    return f"10.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}"


def host_mac(k: int) -> str:
    return "00:00:00:00:{:02x}:{:02x}".format(k // 256, k % 256)


def spine_dpid(i: int) -> int:
    return 0x100 + i


def leaf_dpid(i: int) -> int:
    return 0x200 + i


def aggregation_dpid(i: int) -> int:
    return 0x300 + i


def core_dpid(i: int) -> int:
    return 0x400 + i


@dataclass(frozen=True)
class FabricSpec:
    """The shape and rates of a fabric.

    For ``leafspine`` the shape is ``spines`` x ``leaves`` x ``hosts_per_leaf``. For ``fattree`` it is ``k``
    alone, and ``leaves`` (edge switches, k^2/2), ``hosts_per_leaf`` (k/2) and ``spines`` (cores, (k/2)^2) are
    derived from it: build one with ``FabricSpec.fattree``."""

    spines: int = 2
    leaves: int = 4
    hosts_per_leaf: int = 4
    host_rate_mbps: float = 10.0
    fabric_rate_mbps: float = 10.0
    topology: str = "leafspine"
    k: int = 0  # fat-tree arity (0 for leaf-spine)
    topology_file: str = ""      # file: the racks and pods (core/topology_file.py)
    aggregation_per_pod: int = 0  # file: aggregation switches per pod (0: two tiers, racks to spines)

    @classmethod
    def fattree(cls, k: int = 4, host_rate_mbps: float = 10.0, fabric_rate_mbps: float = 10.0) -> "FabricSpec":
        half = k // 2
        return cls(half * half, k * half, half, host_rate_mbps, fabric_rate_mbps, "fattree", k)

    @classmethod
    def from_file(cls, path: str, spines: int, aggregation_per_pod: int = 0, host_rate_mbps: float = 10.0,
                  fabric_rate_mbps: float = 10.0) -> "FabricSpec":
        """A fabric from a topology file: ``spines`` top-tier switches (cores, or spines with two tiers);
        ``leaves`` and ``hosts_per_leaf`` (the largest rack) follow from the file."""
        racks = read_racks(path).racks
        return cls(spines, len(racks), max(n for _p, _r, n in racks), host_rate_mbps, fabric_rate_mbps, "file", 0,
                   path, aggregation_per_pod)

    @property
    def hosts(self) -> int:
        if self.topology == "file":
            return read_racks(self.topology_file).hosts
        return self.leaves * self.hosts_per_leaf

    @property
    def oversubscription(self) -> float:
        """Host bandwidth into a leaf over the leaf's uplink bandwidth."""
        uplinks = self.k // 2 if self.topology == "fattree" else self.spines
        if self.topology == "file" and self.aggregation_per_pod:
            uplinks = self.aggregation_per_pod
        return (self.hosts_per_leaf * self.host_rate_mbps) / (uplinks * self.fabric_rate_mbps)

    def describe(self) -> str:
        if self.topology == "file":
            tiers = (f"{self.aggregation_per_pod} aggregation switches per pod, {self.spines} cores"
                     if self.aggregation_per_pod else f"{self.spines} spines")
            return f"{os.path.basename(self.topology_file)} ({self.leaves} racks, {tiers})"
        if self.topology == "fattree":
            return f"fat-tree k={self.k} ({self.leaves} edge, {self.leaves} aggregation, {self.spines} core switches)"
        return f"leaf-spine ({self.spines} spines, {self.leaves} leaves)"

    def validate(self, max_hosts: int = MAX_HOSTS) -> None:
        """Raise ValueError naming the first impossible parameter. ``max_hosts`` is the emulation's addressing
        limit by default; the flow-level twin passes its own (twin.MAX_HOSTS)."""
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"--topology must be one of {', '.join(TOPOLOGIES)} (got {self.topology!r})")
        if self.topology == "file":
            racks = read_racks(self.topology_file).racks
            if self.spines < 1:
                raise ValueError(f"--spines must be >= 1 (got {self.spines})")
            if self.aggregation_per_pod < 0:
                raise ValueError(f"--aggregation-per-pod must be >= 0 (got {self.aggregation_per_pod})")
            if self.aggregation_per_pod and self.spines % self.aggregation_per_pod:
                raise ValueError(f"--spines {self.spines}: the cores split into planes, one per aggregation switch "
                                 f"of a pod: a multiple of --aggregation-per-pod {self.aggregation_per_pod}")
            if (self.leaves, self.hosts_per_leaf) != (len(racks), max(n for _p, _r, n in racks)):
                raise ValueError("a file fabric's racks follow from its file: build it with FabricSpec.from_file")
        elif self.topology == "fattree":
            if self.k < 2 or self.k % 2:
                raise ValueError(f"--k must be an even number >= 2 (got {self.k})")
            if self != FabricSpec.fattree(self.k, self.host_rate_mbps, self.fabric_rate_mbps):
                raise ValueError("a fat-tree's shape follows from --k alone")
        else:
            if self.spines < 1:
                raise ValueError(f"--spines must be >= 1 (got {self.spines})")
            if self.leaves < 1:
                raise ValueError(f"--leaves must be >= 1 (got {self.leaves})")
            if self.hosts_per_leaf < 1:
                raise ValueError(f"--hosts-per-leaf must be >= 1 (got {self.hosts_per_leaf})")
        if self.hosts > max_hosts:
            raise ValueError(f"{self.hosts} hosts exceed the addressing limit of {max_hosts}")
        if self.hosts < 2:
            raise ValueError("the fabric needs at least 2 hosts")
        for flag, rate in (("--host-rate", self.host_rate_mbps), ("--fabric-rate", self.fabric_rate_mbps)):
            if not 0.1 <= rate <= 10000:
                raise ValueError(f"{flag} must be between 0.1 and 10000 Mbit/s (got {rate})")


@dataclass(frozen=True)
class HostInfo:
    name: str
    ip: str
    mac: str
    leaf: int          # 1-based leaf number
    leaf_port: int     # port on the leaf that faces the host


@dataclass(frozen=True)
class SwitchInfo:
    name: str
    dpid: int
    tier: int          # TIER_LEAF, TIER_MIDDLE or TIER_TOP


@dataclass(frozen=True)
class LinkInfo:
    """A link between two switches, with the port it uses on each (rate: the fabric rate)."""

    a: str
    a_port: int
    b: str
    b_port: int


Path = Tuple[str, ...]  # switch names from the source leaf to the destination leaf


def pick_path(paths: Sequence[Path], index: int) -> Path:
    """The path a decision's ``path`` index names: taken modulo the number of paths, so that one index can serve
    hops with different numbers of equal-cost paths (and a fabric that lost some)."""
    return paths[index % len(paths)]


@dataclass(frozen=True)
class FabricLayout:
    """The fabric's graph, derived from a FabricSpec alone, and everything computed from it."""

    spec: FabricSpec
    hosts: Tuple[HostInfo, ...]
    switches: Tuple[SwitchInfo, ...] = ()
    links: Tuple[LinkInfo, ...] = ()

    @classmethod
    def from_spec(cls, spec: FabricSpec) -> "FabricLayout":
        if spec.topology == "file":
            return cls(spec, *_from_file(spec))
        build = _fattree if spec.topology == "fattree" else _leafspine
        switches, links = build(spec)
        hosts = []
        for leaf in range(1, spec.leaves + 1):
            for j in range(1, spec.hosts_per_leaf + 1):
                k = (leaf - 1) * spec.hosts_per_leaf + j
                hosts.append(HostInfo(host_name(k), host_ip(k), host_mac(k), leaf, j))
        return cls(spec, tuple(hosts), tuple(switches), tuple(links))

    # -- the graph
    @cached_property
    def neighbours(self) -> Dict[str, Tuple[Tuple[int, str], ...]]:
        """Switch name -> ((port, neighbouring switch), ...), in port order."""
        out: Dict[str, List[Tuple[int, str]]] = {s.name: [] for s in self.switches}
        for link in self.links:
            out[link.a].append((link.a_port, link.b))
            out[link.b].append((link.b_port, link.a))
        return {name: tuple(sorted(ports)) for name, ports in out.items()}

    @cached_property
    def dpid_of(self) -> Dict[str, int]:
        return {s.name: s.dpid for s in self.switches}

    @cached_property
    def leaf_names(self) -> Tuple[str, ...]:
        """Leaf switch names by leaf number (index 0 is leaf 1)."""
        return tuple(leaf_name(i) for i in range(1, self.spec.leaves + 1))

    def port(self, switch: str, towards: str) -> int:
        """The port on ``switch`` that faces the neighbouring switch ``towards``."""
        for port, name in self.neighbours[switch]:
            if name == towards:
                return port
        raise KeyError(f"{switch} has no link to {towards}")

    @cached_property
    def _distance_to_leaf(self) -> Dict[str, Dict[str, int]]:
        """Leaf name -> {switch name: hops to that leaf} (breadth-first over the switch graph)."""
        out = {}
        for leaf in self.leaf_names:
            dist, todo = {leaf: 0}, deque([leaf])
            while todo:
                node = todo.popleft()
                for _port, nxt in self.neighbours[node]:
                    if nxt not in dist:
                        dist[nxt] = dist[node] + 1
                        todo.append(nxt)
            out[leaf] = dist
        return out

    def next_hops(self, switch: str, leaf: int) -> Tuple[Tuple[int, str], ...]:
        """(port, switch) of every neighbour of ``switch`` on a shortest path to leaf ``leaf`` (1-based); none
        when failed links cut ``switch`` off from it."""
        dist = self._distance_to_leaf[leaf_name(leaf)]
        here = dist.get(switch)
        if here is None:
            return ()
        return tuple((port, nxt) for port, nxt in self.neighbours[switch] if dist.get(nxt) == here - 1)

    def paths(self, src_leaf: int, dst_leaf: int) -> Tuple[Path, ...]:
        """Every shortest path between two leaves (1-based), ordered by the egress ports taken hop by hop: for a
        leaf-spine, path i goes through spine i+1 (none when failed links cut the two apart)."""
        return self._paths[(src_leaf, dst_leaf)]

    @cached_property
    def _paths(self) -> Dict[Tuple[int, int], Tuple[Path, ...]]:
        out = {}
        for src in range(1, self.spec.leaves + 1):
            for dst in range(1, self.spec.leaves + 1):
                found: List[Path] = []

                def extend(path: Path) -> None:
                    if path[-1] == leaf_name(dst):
                        found.append(path)
                        return
                    for _port, nxt in self.next_hops(path[-1], dst):
                        extend(path + (nxt,))

                if leaf_name(src) in self._distance_to_leaf[leaf_name(dst)]:
                    extend((leaf_name(src),))
                out[(src, dst)] = tuple(found)
        return out

    # -- what the testbed and the controller read
    def egress_ports(self) -> List[Tuple[str, int, int, float]]:
        """(switch name, dpid, port, configured rate in Mbit/s) of every switch port: the one place that says
        which ports face hosts (host rate) and which face other switches (fabric rate)."""
        spec, out = self.spec, []
        for h in self.hosts:
            leaf = leaf_name(h.leaf)
            out.append((leaf, self.dpid_of[leaf], h.leaf_port, spec.host_rate_mbps))
        for s in self.switches:
            out += [(s.name, s.dpid, port, spec.fabric_rate_mbps) for port, _nxt in self.neighbours[s.name]]
        return sorted(out, key=lambda e: (e[1], e[2]))

    def peer_ports(self) -> Dict[Tuple[int, int], Tuple[int, int]]:
        """(dpid, port) -> (dpid, port) at the other end, for every link between switches."""
        out = {}
        for link in self.links:
            a, b = (self.dpid_of[link.a], link.a_port), (self.dpid_of[link.b], link.b_port)
            out[a], out[b] = b, a
        return out

    def host_ports(self, switch: str) -> Tuple[int, ...]:
        """Ports of ``switch`` that face hosts (none on switches that are not leaves)."""
        return tuple(h.leaf_port for h in self.hosts if leaf_name(h.leaf) == switch)

    def switch_dpids(self) -> Dict[str, int]:
        return dict(self.dpid_of)

    def link_between(self, a: str, b: str) -> LinkInfo:
        """The link between switches ``a`` and ``b`` (either order); KeyError if there is none."""
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        raise KeyError(f"no link between {a} and {b}")

    def links_of(self, switch: str) -> Tuple[LinkInfo, ...]:
        return tuple(link for link in self.links if switch in (link.a, link.b))

    def without(self, down: Iterable[LinkInfo]) -> "FabricLayout":
        """The same fabric with the links ``down`` failed: every next hop and path is recomputed from what is
        left (names, ports and DPIDs do not change)."""
        gone = set(down)
        return replace(self, links=tuple(link for link in self.links if link not in gone))

    def view(self) -> "FabricView":
        """The scheduler's view: leaves numbered from 0, paths between leaves as switch names."""
        spec, n = self.spec, self.spec.leaves
        paths = tuple(tuple(self.paths(a, b) for b in range(1, n + 1)) for a in range(1, n + 1))
        return FabricView(tuple((h.ip, h.leaf - 1) for h in self.hosts), spec.host_rate_mbps,
                          spec.fabric_rate_mbps, paths, self.leaf_names)

    def host_tuples(self) -> List[Tuple[str, str, int]]:
        """(name, ip, leaf index from 0) in fabric order, as the scenario placement expects."""
        return [(h.name, h.ip, h.leaf - 1) for h in self.hosts]

    def to_dict(self) -> dict:
        return {"spec": asdict(self.spec), "hosts": [asdict(h) for h in self.hosts],
                "dpids": self.switch_dpids()}

    @classmethod
    def from_dict(cls, d: dict) -> "FabricLayout":
        """The layout of a recorded run (runs recorded before the topology field are leaf-spines)."""
        return cls.from_spec(FabricSpec(**d["spec"]))


def _leafspine(spec: FabricSpec) -> Tuple[List[SwitchInfo], List[LinkInfo]]:
    switches = [SwitchInfo(spine_name(i), spine_dpid(i), TIER_MIDDLE) for i in range(1, spec.spines + 1)]
    switches += [SwitchInfo(leaf_name(i), leaf_dpid(i), TIER_LEAF) for i in range(1, spec.leaves + 1)]
    links = [LinkInfo(leaf_name(leaf), spec.hosts_per_leaf + spine, spine_name(spine), leaf)
             for leaf in range(1, spec.leaves + 1) for spine in range(1, spec.spines + 1)]
    return switches, links


def _fattree(spec: FabricSpec) -> Tuple[List[SwitchInfo], List[LinkInfo]]:
    """Pod p (from 0) holds edges (leaves) p*k/2+1 .. and aggregation switches p*k/2+1 ..; core (i, j) is
    ``co{i*k/2+j+1}`` and links to aggregation switch i of every pod. Edge ports: hosts 1..k/2, then its pod's
    aggregation switches; aggregation ports: its pod's edges 1..k/2, then its cores; core port p+1: pod p."""
    k, half = spec.k, spec.k // 2
    switches = [SwitchInfo(core_name(i), core_dpid(i), TIER_TOP) for i in range(1, half * half + 1)]
    switches += [SwitchInfo(aggregation_name(i), aggregation_dpid(i), TIER_MIDDLE) for i in range(1, k * half + 1)]
    switches += [SwitchInfo(leaf_name(i), leaf_dpid(i), TIER_LEAF) for i in range(1, k * half + 1)]
    links = []
    for pod in range(k):
        for e in range(half):
            for a in range(half):
                links.append(LinkInfo(leaf_name(pod * half + e + 1), half + a + 1,
                                      aggregation_name(pod * half + a + 1), e + 1))
        for a in range(half):
            for j in range(half):
                links.append(LinkInfo(aggregation_name(pod * half + a + 1), half + j + 1,
                                      core_name(a * half + j + 1), pod + 1))
    return switches, links


def _from_file(spec: FabricSpec) -> Tuple[Tuple[HostInfo, ...], Tuple[SwitchInfo, ...], Tuple[LinkInfo, ...]]:
    """Hosts, switches and links of a ``file`` fabric (module docstring). Rack ports: its hosts, then its uplinks
    (aggregation switches, or spines); aggregation ports: its pod's racks, then its plane's cores; core and
    spine port i: pod i, or rack i."""
    racks = read_racks(spec.topology_file)
    hosts: List[HostInfo] = []
    for leaf, (_pod, _rack, n) in enumerate(racks.racks, 1):
        for j in range(1, n + 1):
            k = len(hosts) + 1
            hosts.append(HostInfo(host_name(k), host_ip(k), host_mac(k), leaf, j))
    switches = [SwitchInfo(leaf_name(i), leaf_dpid(i), TIER_LEAF) for i in range(1, len(racks.racks) + 1)]
    links: List[LinkInfo] = []
    a_count = spec.aggregation_per_pod
    if not a_count:
        switches += [SwitchInfo(spine_name(i), spine_dpid(i), TIER_MIDDLE) for i in range(1, spec.spines + 1)]
        for leaf, (_pod, _rack, n) in enumerate(racks.racks, 1):
            links += [LinkInfo(leaf_name(leaf), n + s, spine_name(s), leaf) for s in range(1, spec.spines + 1)]
        return tuple(hosts), tuple(switches), tuple(links)
    per_plane = spec.spines // a_count
    switches += [SwitchInfo(core_name(i), core_dpid(i), TIER_TOP) for i in range(1, spec.spines + 1)]
    for p, pod in enumerate(racks.pods):
        aggs = [p * a_count + a + 1 for a in range(a_count)]
        switches += [SwitchInfo(aggregation_name(i), aggregation_dpid(i), TIER_MIDDLE) for i in aggs]
        members = [(leaf, n) for leaf, (q, _r, n) in enumerate(racks.racks, 1) if q == pod]
        for position, (leaf, n) in enumerate(members, 1):
            links += [LinkInfo(leaf_name(leaf), n + a + 1, aggregation_name(agg), position)
                      for a, agg in enumerate(aggs)]
        for a, agg in enumerate(aggs):
            links += [LinkInfo(aggregation_name(agg), len(members) + j + 1, core_name(a * per_plane + j + 1), p + 1)
                      for j in range(per_plane)]
    return tuple(hosts), tuple(switches), tuple(links)


@dataclass(frozen=True)
class FabricView:
    """What a scheduler knows of the fabric: which leaf each host address hangs off (from 0), the link rates, and
    the equal-cost paths between leaves (``leaf_paths[a][b]``, switch names; index i is a decision's path i)."""

    host_leaf: Tuple[Tuple[str, int], ...]  # (ip, leaf index from 0)
    host_rate_mbps: float
    fabric_rate_mbps: float
    leaf_paths: Tuple[Tuple[Tuple[Path, ...], ...], ...]
    leaf_names: Tuple[str, ...]
    _leaf_by_ip: Dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        self._leaf_by_ip.update(dict(self.host_leaf))

    def leaf_of(self, ip: str) -> int:
        return self._leaf_by_ip[ip]

    def paths(self, src_ip: str, dst_ip: str) -> Tuple[Path, ...]:
        """The equal-cost switch paths between two hosts (one path, the shared leaf, within a leaf; none when
        failed links cut their leaves apart)."""
        return self.leaf_paths[self.leaf_of(src_ip)][self.leaf_of(dst_ip)]

    @property
    def max_paths(self) -> int:
        """The most equal-cost paths between any two leaves."""
        return max((len(p) for row in self.leaf_paths for p in row), default=1)

    def has_path_choice(self, src_ip: str, dst_ip: str) -> bool:
        return len(self.paths(src_ip, dst_ip)) > 1

    def crosses_leaves(self, flow: FlowKey) -> bool:
        return self.leaf_of(flow.src_ip) != self.leaf_of(flow.dst_ip)

    def hop_links(self, src_ip: str, dst_ip: str, path: Optional[int]) -> List[Tuple[Tuple[str, str], float]]:
        """The directed links (node names; hosts by IP) of one hop and the share of its bytes each carries: the
        hop's path ``path`` (taken modulo the hop's number of paths), or, with None, an even spread over all of
        them (what hashing does on average)."""
        choices = self.paths(src_ip, dst_ip)
        if not choices:
            return []
        chosen: Sequence[Path] = choices if path is None else (pick_path(choices, path),)
        share = 1.0 / len(chosen)
        out: Dict[Tuple[str, str], float] = {}
        for p in chosen:
            nodes = (src_ip,) + p + (dst_ip,)
            for link in zip(nodes, nodes[1:]):
                out[link] = out.get(link, 0.0) + share
        return list(out.items())

    def is_host_link(self, link: Tuple[str, str]) -> bool:
        return link[0] in self._leaf_by_ip or link[1] in self._leaf_by_ip

    def link_rate_bps(self, link: Tuple[str, str]) -> float:
        return (self.host_rate_mbps if self.is_host_link(link) else self.fabric_rate_mbps) * 1e6
