"""What every switch holds, as plain data: the rule compiler (decisions -> rules) and the decision diff.

No OpenFlow here: a ``Rule`` names its match fields and actions the way Ryu's OpenFlow 1.3 parser does, and
controller/ofp.py turns it into a flow-mod. Everything is computed from the fabric's graph (core.fabric), so
the same compiler serves every topology family:

* every switch, table 1 (forwarding): one rule per host address: on the host's leaf, its port; elsewhere the
  select group of the host's leaf (group id = leaf number), whose buckets are the ports towards the neighbours
  on shortest paths to that leaf (ECMP; one bucket where there is one way). When links fail, only the groups'
  buckets change: the rules that point to them stay;
* every switch, table 0 (the scheduling stage):
    - priority 100, at the ingress leaf, one rule per data flow (5-tuple) of every job: set DSCP to the flow's
      class, then either output towards the chosen path or go to table 1 (hashed path); and one for its reverse
      direction (pure ACKs), always in the top class on a hashed path, written once;
    - priority 100, *transit* rules of a flow with a chosen path at every later switch of the path that has a
      choice of next hop (none on a leaf-spine, where a spine has one way down; the aggregation switches of a
      fat-tree's source pod), output towards the path's next switch (the DSCP is kept);
    - priority 10, packets from a host port: DSCP := class 0, go to table 1 (everything not scheduled);
    - priority 10, packets from a switch port: go to table 1 (the DSCP written at the ingress leaf is kept).

A flow's class is decided at its ingress leaf only; its counters are read there (transit rules carry
TRANSIT_COOKIE so that flow statistics leave them out).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from core.classes import ACK_CLASS, class_to_dscp
from core.fabric import TIER_LEAF, FabricLayout, leaf_name, pick_path
from core.model import Decision, FlowKey

FLOW_COOKIE = 1 << 40          # marks per-flow scheduling rules (flow stats are requested with this mask)
PIN_COOKIE = 1 << 41           # flows pinned by the runner (traffic checks, benchmarks)
TRANSIT_COOKIE = 1 << 42       # a chosen path's rules beyond the ingress leaf (no counters wanted)
PRIO_FLOW, PRIO_DEFAULT = 100, 10
IPV4 = 0x0800


def flow_cookie(job: int, bucket: int, rank: int, reverse: bool) -> int:
    return FLOW_COOKIE | (job << 24) | (bucket << 16) | (rank << 1) | int(reverse)


def decode_cookie(cookie: int) -> Optional[Tuple[int, int, int, int]]:
    """(job, bucket, rank, reverse) of an ingress per-flow rule's cookie, or None for any other rule."""
    if not cookie & FLOW_COOKIE or cookie & TRANSIT_COOKIE:
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

    @property
    def transit(self) -> bool:
        return bool(self.cookie & TRANSIT_COOKIE)


@dataclass(frozen=True)
class SelectGroup:
    """An ECMP group: one bucket per port, chosen by the switch's hash."""

    dpid: int
    group_id: int
    ports: Tuple[int, ...]


def flow_match(flow: FlowKey) -> Tuple[Tuple[str, object], ...]:
    return (("eth_type", IPV4), ("ip_proto", flow.proto), ("ipv4_src", flow.src_ip), ("ipv4_dst", flow.dst_ip),
            ("tcp_src", flow.src_port), ("tcp_dst", flow.dst_port))


class RuleCompiler:
    """Rules of one fabric layout."""

    def __init__(self, layout: FabricLayout):
        self.layout = layout
        self.host_by_ip = {h.ip: h for h in layout.hosts}
        self.name_of = {s.dpid: s.name for s in layout.switches}
        self.leaf_dpids = {s.dpid for s in layout.switches if s.tier == TIER_LEAF}
        self._whole: Optional[FabricLayout] = None

    @property
    def whole_layout(self) -> FabricLayout:
        """The fabric with every link up (the layout itself when none failed)."""
        if self._whole is None:
            self._whole = FabricLayout.from_spec(self.layout.spec)
            if len(self._whole.links) == len(self.layout.links):
                self._whole = self.layout
        return self._whole

    @property
    def dpids(self) -> List[int]:
        return sorted(self.name_of)

    def ingress_dpid(self, ip: str) -> int:
        """The leaf where traffic from ``ip`` enters the fabric."""
        return self.layout.dpid_of[leaf_name(self.host_by_ip[ip].leaf)]

    # -- rules that never change
    def groups(self, dpid: int) -> List[SelectGroup]:
        """The switch's select groups, one per leaf it can forward towards (they must exist before
        ``switch_rules``); a leaf cut off by failed links gets a group without buckets (its packets are dropped)."""
        name = self.name_of[dpid]
        return [SelectGroup(dpid, leaf, tuple(port for port, _nxt in self.layout.next_hops(name, leaf)))
                for leaf in range(1, self.layout.spec.leaves + 1) if leaf_name(leaf) != name]

    def switch_rules(self, dpid: int) -> List[Rule]:
        """A switch's rules apart from the per-flow ones."""
        name = self.name_of[dpid]
        host_ports = self.layout.host_ports(name)
        rules = [Rule(dpid, PRIO_DEFAULT, (("in_port", port), ("eth_type", IPV4)), (("dscp", 0),), goto_table=1)
                 for port in host_ports]
        rules += [Rule(dpid, PRIO_DEFAULT, (("in_port", port), ("eth_type", IPV4)), goto_table=1)
                  for port, _nxt in self.layout.neighbours[name]]
        return rules + self._forwarding(dpid)

    def _forwarding(self, dpid: int) -> List[Rule]:
        name = self.name_of[dpid]
        return [Rule(dpid, PRIO_DEFAULT, (("eth_type", IPV4), ("ipv4_dst", h.ip)),
                     (("output", h.leaf_port) if leaf_name(h.leaf) == name else ("group", h.leaf),), table=1)
                for h in self.layout.hosts]

    # -- the scheduling stage
    def flow_rules(self, flow: FlowKey, decision: Decision, cookie: int, reverse_cookie: int = 0,
                   reverse: bool = True, at_dpid: Optional[int] = None) -> List[Rule]:
        """The rules of ``flow`` (its ingress rule, then its path's transit rules) and, with ``reverse``, its ACK
        direction's at the other end (only those at ``at_dpid`` when given).

        The ACK direction always gets ACK_CLASS on a hashed path: pure ACKs are a few percent of the bytes, and
        a starved ACK stalls its data flow whatever the data flow's class. It is written once, so a class change
        costs one flow-mod per flow. A path index below 0 is a policy bug: ValueError; any other index is taken
        modulo the flow's number of paths."""
        src, dst = self.host_by_ip.get(flow.src_ip), self.host_by_ip.get(flow.dst_ip)
        if src is None or dst is None:
            return []
        if decision.path is not None and decision.path < 0:
            raise ValueError(f"path {decision.path} below 0 for {flow}")
        rules = self._direction(flow, src, dst, cookie, decision)
        if reverse:
            rules += self._direction(flow.reversed(), dst, src, reverse_cookie, Decision(ACK_CLASS, None))
        return [r for r in rules if at_dpid is None or r.dpid == at_dpid]

    def _direction(self, key: FlowKey, src, dst, cookie: int, decision: Decision) -> List[Rule]:
        dpid_of, match = self.layout.dpid_of, flow_match(key)
        dscp = (("dscp", class_to_dscp(decision.priority_class)),)
        path = self._chosen_path(src.leaf, dst.leaf, decision)
        if path is None:
            return [Rule(dpid_of[leaf_name(src.leaf)], PRIO_FLOW, match, dscp, goto_table=1, cookie=cookie)]
        rules = []
        for here, nxt in zip(path, path[1:]):
            if len(self.layout.next_hops(here, dst.leaf)) < 2 and rules:
                continue  # one way on: the forwarding table already takes it
            action = (("output", self.layout.port(here, nxt)),)
            if rules:
                rules.append(Rule(dpid_of[here], PRIO_FLOW, match, action, cookie=cookie | TRANSIT_COOKIE))
            else:
                rules.append(Rule(dpid_of[here], PRIO_FLOW, match, dscp + action, cookie=cookie))
        return rules

    def _chosen_path(self, src_leaf: int, dst_leaf: int, decision: Decision):
        """The switch path a decision pins, or None where the forwarding table decides (hashed, or no choice)."""
        paths = self.layout.paths(src_leaf, dst_leaf)
        if decision.path is None or len(paths) < 2:
            return None
        return pick_path(paths, decision.path)

    def stale_transit_rules(self, flow: FlowKey, decision: Decision, cookie: int) -> List[Rule]:
        """Transit rules ``flow`` may hold from an earlier decision and does not hold under ``decision`` (to be
        deleted when a flow's path changes; none on a leaf-spine)."""
        src, dst = self.host_by_ip.get(flow.src_ip), self.host_by_ip.get(flow.dst_ip)
        if src is None or dst is None:
            return []
        kept = {r.dpid for r in self._direction(flow, src, dst, cookie, decision) if r.transit}
        out, match = [], flow_match(flow)
        # Where a rule may be left is where the whole fabric has a choice: a failure can leave a switch with one
        # way on, where no rule is written any more but the one written before it still points at the lost way.
        whole = self.whole_layout
        for path in whole.paths(src.leaf, dst.leaf):
            for here in path[1:-1]:
                dpid = whole.dpid_of[here]
                if dpid not in kept and len(whole.next_hops(here, dst.leaf)) > 1:
                    kept.add(dpid)
                    out.append(Rule(dpid, PRIO_FLOW, match, cookie=cookie | TRANSIT_COOKIE))
        return out
