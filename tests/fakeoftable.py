"""A fake OpenFlow 1.3 fabric: the controller's compiled rules (controller/rules.py) applied to switches that
exist only as tables, and packets walked through them hop by hop, without Mininet, Open vSwitch or root.

Modelled on faucet's clib/fakeoftable.py. What it models, as an OpenFlow 1.3 switch (and Open vSwitch) does:

* per switch, tables by id; a packet starts in table 0 and follows ``goto_table`` (which must go forward); in a
  table the matching entry of highest priority wins (two matching entries of that priority are reported as
  ambiguous, since the switch's choice is undefined); a match is the conjunction of its fields, ``in_port`` and
  ``ip_dscp`` included; no matching entry drops the packet (the compiled rules install no table-miss entry);
* apply-actions in order: set DSCP, output to a port (a copy of the packet as it is at that point), or a select
  group: one bucket, chosen by a ``choose`` callback or, when walking every choice, each in turn; a bucket whose
  watched port is down is never chosen (controller/ofp.py sets each bucket's watch port to its own port);
* flow-mods: ``add`` (replaces an entry of the same table, priority and match), ``modify`` and ``delete``
  (strict: the entry of the same table, priority and match, or nothing: an OpenFlow 1.3 modify never adds);
  a rule whose match lacks a field's prerequisites (ipv4_* without eth_type IPv4, tcp_* without ip_proto 6,
  setting the DSCP without eth_type IPv4) is refused, as the switch would refuse it;
* the wiring from the FabricLayout: a switch port leads to the neighbouring switch's port, a leaf's host port to
  its host; output to the port a packet came in on is dropped (OpenFlow needs OFPP_IN_PORT for that), and so is
  output to a port whose link is down or that leads nowhere.

``FakeFabric.walks(packet, src_host)`` follows a packet from its source host's leaf and returns one ``Walk`` per
combination of group choices: the hops (switch, in port, out port, DSCP in and out), the host where it left the
fabric, or the reason it was dropped. A walk is bounded (``ttl`` switches, and a switch entered twice in the same
state is a loop), so a forwarding loop is reported rather than followed forever.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from controller.rules import IPV4, Rule, RuleCompiler, SelectGroup
from core.fabric import FabricLayout, LinkInfo, leaf_name
from core.model import FlowKey

TCP = 6
DEFAULT_TTL = 16

# A group choice: (switch name, group id, live bucket ports) -> the port taken.
Choose = Callable[[str, int, Tuple[int, ...]], int]

_NEEDS_IPV4 = ("ip_proto", "ipv4_src", "ipv4_dst", "ip_dscp")
_NEEDS_TCP = ("tcp_src", "tcp_dst")


def packet_of(flow: FlowKey, dscp: int = 0) -> Dict[str, object]:
    """The header fields of a packet of ``flow`` as its source host sends it."""
    return {"eth_type": IPV4, "ip_proto": flow.proto, "ipv4_src": flow.src_ip, "ipv4_dst": flow.dst_ip,
            "tcp_src": flow.src_port, "tcp_dst": flow.dst_port, "ip_dscp": dscp}


def first_bucket(_switch: str, _group: int, ports: Tuple[int, ...]) -> int:
    return ports[0]


@dataclass(frozen=True)
class Hop:
    """One switch a packet went through: where it came in and went out, and its DSCP on the way in and out."""

    switch: str
    in_port: int
    out_port: int
    dscp_in: int
    dscp_out: int


@dataclass(frozen=True)
class Walk:
    """A packet's way through the fabric: its hops, then the host it was delivered to or why it was dropped
    (``drop`` names the switch and the reason)."""

    hops: Tuple[Hop, ...]
    host: Optional[str] = None
    drop: Optional[str] = None

    @property
    def delivered(self) -> bool:
        return self.host is not None

    @property
    def path(self) -> Tuple[str, ...]:
        """The switch names, from the ingress leaf on (as core.fabric names a path)."""
        return tuple(h.switch for h in self.hops)

    def describe(self) -> str:
        way = " -> ".join(f"{h.switch}[{h.in_port}>{h.out_port} dscp {h.dscp_out}]" for h in self.hops)
        return f"{way} => {self.host if self.delivered else 'DROP: ' + str(self.drop)}"


@dataclass(frozen=True)
class _Entry:
    priority: int
    match: FrozenSet[Tuple[str, object]]
    actions: Tuple[Tuple[str, int], ...]
    goto_table: Optional[int]
    cookie: int
    rule: Rule


class _Dropped(Exception):
    pass


def check_rule(rule: Rule) -> None:
    """ValueError for a rule an OpenFlow 1.3 switch would refuse (bad prerequisites, goto backwards, unknown
    action)."""
    match = dict(rule.match)
    if len(match) != len(rule.match):
        raise ValueError(f"{rule}: a match field appears twice")
    ipv4 = match.get("eth_type") == IPV4
    for name in _NEEDS_IPV4:
        if name in match and not ipv4:
            raise ValueError(f"{rule}: matching {name} needs eth_type=0x0800")
    for name in _NEEDS_TCP:
        if name in match and match.get("ip_proto") != TCP:
            raise ValueError(f"{rule}: matching {name} needs ip_proto=6")
    for kind, value in rule.actions:
        if kind == "dscp":
            if not ipv4:
                raise ValueError(f"{rule}: setting ip_dscp needs eth_type=0x0800 in the match")
            if not 0 <= value < 64:
                raise ValueError(f"{rule}: DSCP {value} outside 0..63")
        elif kind in ("output", "group"):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{rule}: bad {kind} {value!r}")
        else:
            raise ValueError(f"{rule}: unknown action {kind!r}")
    if rule.goto_table is not None and rule.goto_table <= rule.table:
        raise ValueError(f"{rule}: goto_table must go to a later table")


class FakeFabric:
    """Every switch of ``layout`` as flow tables and select groups, wired as the layout says."""

    def __init__(self, layout: FabricLayout, rules: Iterable[Rule] = (), groups: Iterable[SelectGroup] = (),
                 ttl: int = DEFAULT_TTL):
        self.layout = layout
        self.ttl = ttl
        self.name_of = {s.dpid: s.name for s in layout.switches}
        # (switch, port) -> ("switch", neighbour, its port) or ("host", host name, 0)
        self.wiring: Dict[Tuple[str, int], Tuple[str, str, int]] = {}
        for link in layout.links:
            self.wiring[(link.a, link.a_port)] = ("switch", link.b, link.b_port)
            self.wiring[(link.b, link.b_port)] = ("switch", link.a, link.a_port)
        for h in layout.hosts:
            self.wiring[(leaf_name(h.leaf), h.leaf_port)] = ("host", h.name, 0)
        self.hosts = {h.name: h for h in layout.hosts}
        self.host_by_ip = {h.ip: h.name for h in layout.hosts}
        self.down: set = set()   # (switch, port) of failed links
        self.tables: Dict[int, Dict[int, Dict[Tuple, _Entry]]] = {dpid: {} for dpid in self.name_of}
        self.groups: Dict[int, Dict[int, Tuple[int, ...]]] = {dpid: {} for dpid in self.name_of}
        for group in groups:
            self.set_group(group)
        self.apply(rules, "add")

    @classmethod
    def from_compiler(cls, compiler: RuleCompiler, rules: Iterable[Rule] = (), **kw) -> "FakeFabric":
        """The switches as the controller sets them up: every group, every switch's rules, then ``rules``."""
        fabric = cls(compiler.layout, groups=[g for dpid in compiler.dpids for g in compiler.groups(dpid)], **kw)
        fabric.apply([r for dpid in compiler.dpids for r in compiler.switch_rules(dpid)], "add")
        fabric.apply(rules, "add")
        return fabric

    # -- what the controller sends
    def set_group(self, group: SelectGroup) -> None:
        """Add or rewrite a select group (OFPGC_ADD / OFPGC_MODIFY)."""
        self._dpid(group.dpid)
        self.groups[group.dpid][group.group_id] = tuple(group.ports)

    def apply(self, rules: Iterable[Rule], command: str = "add") -> None:
        for rule in rules:
            self.flow_mod(rule, command)

    def flow_mod(self, rule: Rule, command: str = "add") -> None:
        """``command``: "add", "modify" (strict) or "delete" (strict), as controller/ofp.py sends them."""
        table = self.tables[self._dpid(rule.dpid)].setdefault(rule.table, {})
        key = (rule.priority, frozenset(rule.match))
        if command == "delete":
            table.pop(key, None)
            return
        check_rule(rule)
        entry = _Entry(rule.priority, key[1], tuple(rule.actions), rule.goto_table, rule.cookie, rule)
        if command == "add":
            table[key] = entry
        elif command == "modify":
            old = table.get(key)
            if old is not None:   # OpenFlow 1.3: a modify that matches nothing adds nothing; the cookie stays
                table[key] = _Entry(old.priority, old.match, entry.actions, entry.goto_table, old.cookie, rule)
        else:
            raise ValueError(f"unknown flow-mod command {command!r}")

    def rules(self, dpid: Optional[int] = None) -> List[Rule]:
        """The rules installed (at one switch, or everywhere), as last written."""
        dpids = [dpid] if dpid is not None else sorted(self.tables)
        return [e.rule for d in dpids for t in sorted(self.tables[d]) for e in self.tables[d][t].values()]

    # -- the physical fabric
    def fail(self, link: LinkInfo) -> None:
        """Take a link down: output onto it is dropped and group buckets that watch its ports are skipped."""
        self.down |= {(link.a, link.a_port), (link.b, link.b_port)}

    def _dpid(self, dpid: int) -> int:
        if dpid not in self.name_of:
            raise KeyError(f"no switch with DPID {dpid:#x} in the fabric")
        return dpid

    # -- packets
    def walk(self, packet: Mapping[str, object], src_host: str, choose: Choose = first_bucket) -> Walk:
        """The one way ``packet`` goes from ``src_host`` with groups choosing by ``choose``."""
        (one,) = self.walks(packet, src_host, choose)
        return one

    def walks(self, packet: Mapping[str, object], src_host: str, choose: Optional[Choose] = None) -> List[Walk]:
        """Every way ``packet`` can go from ``src_host``: one walk per combination of group choices (or the one
        ``choose`` makes)."""
        host = self.hosts[src_host]
        fields = dict(packet)
        fields.setdefault("ip_dscp", 0)
        out: List[Walk] = []
        self._follow(leaf_name(host.leaf), host.leaf_port, fields, (), frozenset(), choose, out)
        return out

    def is_output(self, packet: Mapping[str, object], src_host: str, dst_host: str) -> bool:
        """Whether every way ``packet`` can go from ``src_host`` ends at ``dst_host`` (faucet's is_output)."""
        walks = self.walks(packet, src_host)
        return bool(walks) and all(w.host == dst_host for w in walks)

    def _follow(self, switch: str, in_port: int, fields: Dict[str, object], hops: Tuple[Hop, ...],
                seen: FrozenSet, choose: Optional[Choose], out: List[Walk]) -> None:
        state = (switch, in_port, tuple(sorted(fields.items())))
        if state in seen:
            out.append(Walk(hops, drop=f"{switch}: loop (entered again on port {in_port} with the same headers)"))
            return
        if len(hops) >= self.ttl:
            out.append(Walk(hops, drop=f"{switch}: loop (TTL of {self.ttl} switches exceeded)"))
            return
        for result in self._pipeline(switch, in_port, fields, choose):
            if isinstance(result, str):
                out.append(Walk(hops, drop=f"{switch}: {result}"))
                continue
            port, after = result
            hop = Hop(switch, in_port, port, int(fields["ip_dscp"]), int(after["ip_dscp"]))
            way = hops + (hop,)
            if port == in_port:
                out.append(Walk(way, drop=f"{switch}: output to the packet's in_port {port}"))
            elif (switch, port) in self.down:
                out.append(Walk(way, drop=f"{switch}: output to port {port}, whose link is down"))
            elif (switch, port) not in self.wiring:
                out.append(Walk(way, drop=f"{switch}: output to port {port}, which leads nowhere"))
            else:
                kind, name, peer_port = self.wiring[(switch, port)]
                if kind == "host":
                    out.append(Walk(way, host=name))
                else:
                    self._follow(name, peer_port, after, way, seen | {state}, choose, out)

    def _pipeline(self, switch: str, in_port: int, fields: Dict[str, object], choose: Optional[Choose]):
        """The switch's alternatives for one packet: (out port, headers after) or the reason for a drop."""
        dpid = self.layout.dpid_of[switch]
        # Each alternative: (outputs so far, headers, table to go to or None when done)
        alternatives: List[Tuple[Tuple[Tuple[int, Dict[str, object]], ...], Dict[str, object], Optional[int]]]
        alternatives = [((), dict(fields), 0)]
        results = []
        while alternatives:
            outputs, headers, table = alternatives.pop(0)
            if table is None:
                if not outputs:
                    results.append("no output action (the packet is dropped)")
                elif len(outputs) > 1:
                    results.append(f"packet copied to ports {[p for p, _ in outputs]}")
                else:
                    results.append(outputs[0])
                continue
            try:
                entry = self._lookup(dpid, table, in_port, headers)
            except _Dropped as exc:
                results.append(str(exc))
                continue
            branches = [(outputs, headers)]
            for kind, value in entry.actions:
                nxt = []
                for outs, hdr in branches:
                    if kind == "dscp":
                        nxt.append((outs, {**hdr, "ip_dscp": value}))
                    elif kind == "output":
                        nxt.append((outs + ((value, dict(hdr)),), hdr))
                    else:
                        ports = self._live_buckets(switch, dpid, value)
                        if isinstance(ports, str):
                            results.append(ports)
                            continue
                        picked = ports if choose is None else (choose(switch, value, ports),)
                        nxt += [(outs + ((p, dict(hdr)),), hdr) for p in picked]
                branches = nxt
            for outs, hdr in branches:
                if entry.goto_table is not None and entry.goto_table <= table:
                    results.append(f"goto_table {entry.goto_table} from table {table}")
                else:
                    alternatives.append((outs, hdr, entry.goto_table))
        return results

    def _live_buckets(self, switch: str, dpid: int, group_id: int):
        ports = self.groups[dpid].get(group_id)
        if ports is None:
            return f"group {group_id} does not exist"
        if not ports:
            return f"empty group {group_id} (no buckets)"
        live = tuple(p for p in ports if (switch, p) not in self.down)
        return live or f"group {group_id}: every bucket's port is down"

    def _lookup(self, dpid: int, table: int, in_port: int, headers: Mapping[str, object]) -> _Entry:
        fields = {**headers, "in_port": in_port}
        best: List[_Entry] = []
        for entry in self.tables[dpid].get(table, {}).values():
            if all(k in fields and fields[k] == v for k, v in entry.match):
                if not best or entry.priority > best[0].priority:
                    best = [entry]
                elif entry.priority == best[0].priority:
                    best.append(entry)
        if not best:
            raise _Dropped(f"no matching rule in table {table}")
        if len(best) > 1:
            raise _Dropped(f"ambiguous: {len(best)} rules of priority {best[0].priority} match in table {table}")
        return best[0]


def flow_walks(fabric: FakeFabric, flow: FlowKey, dscp: int = 0) -> List[Walk]:
    """Every way a packet of ``flow`` (sent with ``dscp``) goes, from the host that owns its source address."""
    return fabric.walks(packet_of(flow, dscp), fabric.host_by_ip[flow.src_ip])


def paths_of(walks: Sequence[Walk]) -> set:
    return {w.path for w in walks}
