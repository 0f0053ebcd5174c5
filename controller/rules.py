"""What every switch holds, as plain data: the rule compiler (decisions -> rules) and the decision diff.

No OpenFlow here: a ``Rule`` names its match fields and actions the way Ryu's OpenFlow 1.3 parser does, and
controller/ofp.py turns it into a flow-mod. That keeps the forwarding design testable without a switch:

* spine, table 0: one rule per host address -> the port of the host's leaf;
* leaf, table 0 (the scheduling stage):
    - priority 100, one rule per data flow (5-tuple) of every job: set DSCP to the flow's class, then either
      output to the chosen spine or go to table 1 (hashed path); and one for its reverse direction (pure ACKs),
      always in the top class on a hashed path, written once;
    - priority 10, packets from a host port: DSCP := class 0, go to table 1 (everything not scheduled);
    - priority 10, packets from a spine port: go to table 1 (the DSCP written at the ingress leaf is kept);
* leaf, table 1: one rule per host address: local host -> its port; remote -> the select group over all spines.

A flow's rules live at its ingress leaf only: that is where its class and path are decided.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from core.classes import class_to_dscp
from core.fabric import FabricLayout, leaf_dpid, spine_dpid
from core.model import Decision, FlowKey

FLOW_COOKIE = 1 << 40          # marks per-flow scheduling rules (flow stats are requested with this mask)
PIN_COOKIE = 1 << 41           # flows pinned by the runner (traffic checks, benchmarks)
PRIO_FLOW, PRIO_DEFAULT = 100, 10
SELECT_GROUP = 1
ACK_CLASS = 7                  # class of the ACK direction of every data flow
DEFAULT_DECISION = Decision()  # class 0, hashed path: what a flow gets when the policy does not name it
IPV4 = 0x0800


def flow_cookie(job: int, bucket: int, rank: int, reverse: bool) -> int:
    return FLOW_COOKIE | (job << 24) | (bucket << 16) | (rank << 1) | int(reverse)


def decode_cookie(cookie: int) -> Optional[Tuple[int, int, int, int]]:
    """(job, bucket, rank, reverse) of a per-flow rule's cookie, or None for any other rule."""
    if not cookie & FLOW_COOKIE:
        return None
    return (cookie >> 24) & 0xFFFF, (cookie >> 16) & 0xFF, (cookie >> 1) & 0x7FFF, cookie & 1


@dataclass(frozen=True)
class Rule:
    """One flow entry. ``match`` holds OFPMatch keyword arguments; ``actions`` are ("dscp", value),
    ("output", port) or ("group", group id), applied in order, then ``goto_table`` if set."""

    dpid: int
    priority: int
    match: Tuple[Tuple[str, object], ...]
    actions: Tuple[Tuple[str, int], ...] = ()
    goto_table: Optional[int] = None
    table: int = 0
    cookie: int = 0


@dataclass(frozen=True)
class SelectGroup:
    """The leaf's ECMP group: one bucket per uplink port, chosen by the switch's hash."""

    dpid: int
    group_id: int
    ports: Tuple[int, ...]


class RuleCompiler:
    """Rules of one fabric layout."""

    def __init__(self, layout: FabricLayout):
        self.layout = layout
        spec = layout.spec
        self.host_by_ip = {h.ip: h for h in layout.hosts}
        self.leaf_dpids = {leaf_dpid(i): i for i in range(1, spec.leaves + 1)}
        self.spine_dpids = {spine_dpid(i): i for i in range(1, spec.spines + 1)}

    @property
    def dpids(self) -> List[int]:
        return sorted(self.leaf_dpids) + sorted(self.spine_dpids)

    def ingress_dpid(self, ip: str) -> int:
        """The leaf where traffic from ``ip`` enters the fabric."""
        return leaf_dpid(self.host_by_ip[ip].leaf)

    # -- rules that never change
    def spine_rules(self, dpid: int) -> List[Rule]:
        return [Rule(dpid, PRIO_DEFAULT, (("eth_type", IPV4), ("ipv4_dst", h.ip)),
                     (("output", self.layout.spine_port(h.leaf)),))
                for h in self.layout.hosts]

    def leaf_group(self, dpid: int) -> SelectGroup:
        spines = self.layout.spec.spines
        return SelectGroup(dpid, SELECT_GROUP, tuple(self.layout.leaf_uplink_port(s) for s in range(1, spines + 1)))

    def leaf_rules(self, dpid: int) -> List[Rule]:
        """A leaf's rules apart from the per-flow ones (its select group must exist first)."""
        leaf, spec = self.leaf_dpids[dpid], self.layout.spec
        rules = [Rule(dpid, PRIO_DEFAULT, (("in_port", port), ("eth_type", IPV4)), (("dscp", 0),), goto_table=1)
                 for port in range(1, spec.hosts_per_leaf + 1)]
        rules += [Rule(dpid, PRIO_DEFAULT, (("in_port", port), ("eth_type", IPV4)), goto_table=1)
                  for port in self.leaf_group(dpid).ports]
        for h in self.layout.hosts:
            action = ("output", h.leaf_port) if h.leaf == leaf else ("group", SELECT_GROUP)
            rules.append(Rule(dpid, PRIO_DEFAULT, (("eth_type", IPV4), ("ipv4_dst", h.ip)), (action,), table=1))
        return rules

    # -- the scheduling stage
    def flow_rules(self, flow: FlowKey, decision: Decision, cookie: int, reverse_cookie: int = 0,
                   reverse: bool = True, at_dpid: Optional[int] = None) -> List[Rule]:
        """The rule for ``flow`` at its ingress leaf and, with ``reverse``, its ACK direction's at the other end
        (only those at ``at_dpid`` when given).

        The ACK direction always gets ACK_CLASS on a hashed path: pure ACKs are a few percent of the bytes, and
        a starved ACK stalls its data flow whatever the data flow's class. It is written once, so a decision
        change costs one flow-mod per flow. A spine outside the fabric is a policy bug: ValueError."""
        src, dst = self.host_by_ip.get(flow.src_ip), self.host_by_ip.get(flow.dst_ip)
        if src is None or dst is None:
            return []
        spine = decision.spine
        if spine is not None and not 0 <= spine < self.layout.spec.spines:
            raise ValueError(f"spine {spine} outside 0..{self.layout.spec.spines - 1} for {flow}")
        directions = [(flow, src, dst, cookie, decision)]
        if reverse:
            directions.append((flow.reversed(), dst, src, reverse_cookie, Decision(ACK_CLASS, None)))
        rules = []
        for key, ingress, egress, ck, d in directions:
            dpid = leaf_dpid(ingress.leaf)
            if at_dpid is not None and dpid != at_dpid:
                continue
            match = (("eth_type", IPV4), ("ip_proto", key.proto), ("ipv4_src", key.src_ip),
                     ("ipv4_dst", key.dst_ip), ("tcp_src", key.src_port), ("tcp_dst", key.dst_port))
            actions: Tuple[Tuple[str, int], ...] = (("dscp", class_to_dscp(d.priority_class)),)
            if d.spine is not None and egress.leaf != ingress.leaf:
                rules.append(Rule(dpid, PRIO_FLOW, match,
                                  actions + (("output", self.layout.uplink_port_of_spine_index(d.spine)),),
                                  cookie=ck))
            else:
                rules.append(Rule(dpid, PRIO_FLOW, match, actions, goto_table=1, cookie=ck))
        return rules


def changed_decisions(flows: Iterable[FlowKey], installed: Mapping[FlowKey, Decision],
                      wanted: Mapping[FlowKey, Decision]) -> Dict[FlowKey, Decision]:
    """The flows whose wanted decision differs from the installed one (a flow the policy does not name wants
    DEFAULT_DECISION)."""
    changed = {}
    for flow in flows:
        d = wanted.get(flow, DEFAULT_DECISION)
        current = installed.get(flow)
        if current is not d and current != d:  # identity first: policies reuse Decision objects
            changed[flow] = d
    return changed
