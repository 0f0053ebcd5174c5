"""The fabric: its shape and rates, and every name, address, DPID and port number derived from them.

A leaf-spine fabric is fixed by position, so that the controller, the workloads and the analysis agree on it
without discovery:

* spines ``sp1..spS`` with DPID 0x100+i, leaves ``lf1..lfL`` with DPID 0x200+i;
* hosts ``h1..hN`` numbered leaf by leaf (lf1 holds h1..hK), host ``hk`` has IP 10.0.0.k/8 and MAC 00:00:00:00:00:kk;
* on a leaf, ports 1..K go to its hosts and ports K+1..K+S to spines 1..S; on a spine, port l goes to leaf l.

Oversubscription at a leaf = (K x host rate) / (S x fabric rate). ``FabricLayout`` holds all of it (names and
ports numbered from 1, as Mininet and OpenFlow do); ``FabricView`` is what a scheduler sees (leaves and spines
numbered from 0). ``FabricLayout.view()`` is the one conversion between the two. The Mininet graph built from a
layout is testbed/topo.py.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Dict, List, Tuple

from core.model import FlowKey

MAX_HOSTS = 250  # one /8 with last-octet addressing and 2-hex-digit MACs


# Every switch name and switch-port interface name the fabric uses (``sp1``, ``lf2-eth3``).
FABRIC_NAME = re.compile(r"(sp|lf)\d+(-eth\d+)?")


def spine_name(i: int) -> str:
    return f"sp{i}"


def leaf_name(i: int) -> str:
    return f"lf{i}"


def host_name(k: int) -> str:
    return f"h{k}"


def host_ip(k: int) -> str:
    return f"10.0.0.{k}"


def host_mac(k: int) -> str:
    return "00:00:00:00:{:02x}:{:02x}".format(k // 256, k % 256)


@dataclass(frozen=True)
class FabricSpec:
    """The shape and rates of a leaf-spine fabric."""

    spines: int = 2
    leaves: int = 4
    hosts_per_leaf: int = 4
    host_rate_mbps: float = 10.0
    fabric_rate_mbps: float = 10.0

    @property
    def hosts(self) -> int:
        return self.leaves * self.hosts_per_leaf

    @property
    def oversubscription(self) -> float:
        return (self.hosts_per_leaf * self.host_rate_mbps) / (self.spines * self.fabric_rate_mbps)

    def validate(self) -> None:
        """Raise ValueError naming the first impossible parameter."""
        if self.spines < 1:
            raise ValueError(f"--spines must be >= 1 (got {self.spines})")
        if self.leaves < 1:
            raise ValueError(f"--leaves must be >= 1 (got {self.leaves})")
        if self.hosts_per_leaf < 1:
            raise ValueError(f"--hosts-per-leaf must be >= 1 (got {self.hosts_per_leaf})")
        if self.hosts > MAX_HOSTS:
            raise ValueError(f"{self.hosts} hosts exceed the addressing limit of {MAX_HOSTS}")
        if self.leaves * self.hosts_per_leaf < 2:
            raise ValueError("the fabric needs at least 2 hosts")
        for flag, rate in (("--host-rate", self.host_rate_mbps), ("--fabric-rate", self.fabric_rate_mbps)):
            if not 0.1 <= rate <= 10000:
                raise ValueError(f"{flag} must be between 0.1 and 10000 Mbit/s (got {rate})")


def spine_dpid(i: int) -> int:
    return 0x100 + i


def leaf_dpid(i: int) -> int:
    return 0x200 + i


@dataclass(frozen=True)
class HostInfo:
    name: str
    ip: str
    mac: str
    leaf: int          # 1-based leaf number
    leaf_port: int     # port on the leaf that faces the host


@dataclass(frozen=True)
class FabricLayout:
    """Everything the controller needs to know of the fabric, derived from a FabricSpec alone."""

    spec: FabricSpec
    hosts: Tuple[HostInfo, ...]

    @classmethod
    def from_spec(cls, spec: FabricSpec) -> "FabricLayout":
        hosts = []
        for leaf in range(1, spec.leaves + 1):
            for j in range(1, spec.hosts_per_leaf + 1):
                k = (leaf - 1) * spec.hosts_per_leaf + j
                hosts.append(HostInfo(host_name(k), host_ip(k), host_mac(k), leaf, j))
        return cls(spec, tuple(hosts))

    def leaf_uplink_port(self, spine: int) -> int:
        """Port on any leaf that goes to spine ``spine`` (1-based)."""
        return self.spec.hosts_per_leaf + spine

    def spine_port(self, leaf: int) -> int:
        """Port on any spine that goes to leaf ``leaf`` (1-based)."""
        return leaf

    def egress_ports(self) -> List[Tuple[str, int, int, float]]:
        """(switch name, dpid, port, configured rate in Mbit/s) of every switch port: the one place that says
        which ports face hosts (host rate) and which face other switches (fabric rate)."""
        spec, out = self.spec, []
        for leaf in range(1, spec.leaves + 1):
            for port in range(1, spec.hosts_per_leaf + spec.spines + 1):
                rate = spec.host_rate_mbps if port <= spec.hosts_per_leaf else spec.fabric_rate_mbps
                out.append((leaf_name(leaf), leaf_dpid(leaf), port, rate))
        for spine in range(1, spec.spines + 1):
            for port in range(1, spec.leaves + 1):
                out.append((spine_name(spine), spine_dpid(spine), port, spec.fabric_rate_mbps))
        return out

    def switch_dpids(self) -> Dict[str, int]:
        d = {spine_name(i): spine_dpid(i) for i in range(1, self.spec.spines + 1)}
        d.update({leaf_name(i): leaf_dpid(i) for i in range(1, self.spec.leaves + 1)})
        return d

    def view(self) -> "FabricView":
        """The scheduler's view: leaves numbered from 0."""
        spec = self.spec
        return FabricView(spec.spines, spec.leaves, tuple((h.ip, h.leaf - 1) for h in self.hosts),
                          spec.host_rate_mbps, spec.fabric_rate_mbps)

    def uplink_port_of_spine_index(self, spine: int) -> int:
        """Port on any leaf towards the spine a scheduler calls ``spine`` (from 0)."""
        return self.leaf_uplink_port(spine + 1)

    def host_tuples(self) -> List[Tuple[str, str, int]]:
        """(name, ip, leaf index from 0) in fabric order, as the scenario placement expects."""
        return [(h.name, h.ip, h.leaf - 1) for h in self.hosts]

    def to_dict(self) -> dict:
        return {"spec": asdict(self.spec), "hosts": [asdict(h) for h in self.hosts],
                "dpids": self.switch_dpids()}

    @classmethod
    def from_dict(cls, d: dict) -> "FabricLayout":
        return cls(FabricSpec(**d["spec"]), tuple(HostInfo(**h) for h in d["hosts"]))


@dataclass(frozen=True)
class FabricView:
    """What a scheduler knows of the fabric: which leaf each host address hangs off (from 0), and the link rates."""

    spines: int
    leaves: int
    host_leaf: Tuple[Tuple[str, int], ...]  # (ip, leaf index from 0)
    host_rate_mbps: float
    fabric_rate_mbps: float

    def leaf_of(self, ip: str) -> int:
        for addr, leaf in self.host_leaf:
            if addr == ip:
                return leaf
        raise KeyError(ip)

    def crosses_spine(self, flow: FlowKey) -> bool:
        return self.leaf_of(flow.src_ip) != self.leaf_of(flow.dst_ip)
