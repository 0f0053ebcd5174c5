"""The compiled rules as behaviour: packets walked through a fake OpenFlow 1.3 fabric (tests/fakeoftable.py) that
holds exactly what the controller installs, on a leaf-spine and a fat-tree. No switch, no root.

What is checked is where packets go and what they carry, not what the rules look like: every host reaches every
other on the forwarding rules alone; every scheduler's decisions put each data flow on its chosen path (or on
every equal-cost path when hashed) in its class, and its ACKs in the ACK class; path changes and failed links
leave nothing behind that misroutes a packet; and the fake fabric itself catches misrouted, looping, dropped and
mis-marked packets.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import pytest

from controller.loop import DEFAULT_DECISION, ControlLoop
from controller.rules import FLOW_COOKIE, IPV4, PRIO_DEFAULT, Rule, RuleCompiler, SelectGroup, flow_cookie
from controller.schedulers.registry import make_scheduler, scheduler_names
from core.classes import ACK_CLASS, class_to_dscp
from core.fabric import FabricLayout, FabricSpec, leaf_dpid, leaf_name, pick_path, spine_dpid
from core.model import Decision, FlowKey, OperationEvent
from tests.fakeoftable import FakeFabric, Walk, check_rule, flow_walks, packet_of, paths_of
from workloads.scenario import load_scenario

LEAFSPINE = FabricLayout.from_spec(FabricSpec())              # 2 spines, 4 leaves, 4 hosts per leaf
FATTREE = FabricLayout.from_spec(FabricSpec.fattree(4))       # 4 pods, 8 edges, 8 aggregation, 4 cores, 16 hosts
LAYOUTS = {"leafspine": LEAFSPINE, "fattree": FATTREE}
UNSCHEDULED = (5001, 80)   # ports of no data flow: what the forwarding rules alone carry


def host_of(layout: FabricLayout, ip: str):
    return next(h for h in layout.hosts if h.ip == ip)


def flow_problems(fabric: FakeFabric, flow: FlowKey, decision: Decision, sent_dscp: int = 0,
                  layout: Optional[FabricLayout] = None) -> List[str]:
    """What is wrong with the way ``flow``'s packets go under ``decision``, empty if nothing: every way a packet
    can take must end at the destination host, enter at the source's leaf, carry the decision's DSCP from the
    ingress leaf's output on, and the ways must be the decision's path (or, hashed, every equal-cost path of
    ``layout``, the live one)."""
    layout = layout or fabric.layout
    src, dst = host_of(layout, flow.src_ip), host_of(layout, flow.dst_ip)
    want = class_to_dscp(decision.priority_class)
    walks = flow_walks(fabric, flow, sent_dscp)
    out = []
    for w in walks:
        if w.host != dst.name:
            out.append(f"{flow}: {w.describe()} (should reach {dst.name})")
            continue
        if w.hops[0].switch != leaf_name(src.leaf):
            out.append(f"{flow}: enters at {w.hops[0].switch}, not {leaf_name(src.leaf)}")
        carried = [w.hops[0].dscp_out] + [d for h in w.hops[1:] for d in (h.dscp_in, h.dscp_out)]
        if any(d != want for d in carried):
            out.append(f"{flow}: DSCP {carried} on {w.describe()}, wanted {want} (class {decision.priority_class})")
    paths = layout.paths(src.leaf, dst.leaf)
    chosen = set(paths) if decision.path is None else {pick_path(paths, decision.path)}
    if not out and (paths_of(walks) != chosen or len(walks) != len(chosen)):
        out.append(f"{flow} under {decision}: goes {sorted(paths_of(walks))}, wanted {sorted(chosen)}")
    return out


def forward_and_ack_problems(fabric: FakeFabric, flow: FlowKey, decision: Decision, **kw) -> List[str]:
    return flow_problems(fabric, flow, decision, **kw) + \
        flow_problems(fabric, flow.reversed(), Decision(ACK_CLASS, None), **kw)


def rewrite(fabric: FakeFabric, compiler: RuleCompiler, flow: FlowKey, decision: Decision, cookie: int,
            reverse_cookie: Optional[int] = None) -> None:
    """What SchedulerApp._rewrite sends: the ingress rule modified in place, transit rules added, the flow's
    stale transit rules deleted."""
    rules = compiler.flow_rules(flow, decision, cookie, reverse_cookie or 0, reverse=reverse_cookie is not None)
    for rule in rules:
        fabric.flow_mod(rule, "add" if rule.transit else "modify")
    for rule in compiler.stale_transit_rules(flow, decision, cookie):
        fabric.flow_mod(rule, "delete")


def all_pairs(layout: FabricLayout):
    return [(a, b) for a in layout.hosts for b in layout.hosts if a != b]


# -- forwarding alone ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("topology", sorted(LAYOUTS))
def test_every_host_reaches_every_other_on_every_hashed_path_in_class_0(topology):
    """A packet of no scheduled flow, sent with DSCP 46 (EF), leaves its leaf marked class 0 and, whichever
    bucket each group picks, arrives at its destination; the buckets cover exactly the equal-cost paths."""
    layout = LAYOUTS[topology]
    fabric = FakeFabric.from_compiler(RuleCompiler(layout))
    for a, b in all_pairs(layout):
        flow = FlowKey(a.ip, b.ip, *UNSCHEDULED)
        assert flow_problems(fabric, flow, DEFAULT_DECISION, sent_dscp=46) == []
        assert fabric.is_output(packet_of(flow), a.name, b.name)


@pytest.mark.parametrize("topology", sorted(LAYOUTS))
def test_every_single_group_choice_delivers_too(topology):
    """The same with the switch's hash stood in for by a callback: the last bucket everywhere."""
    layout = LAYOUTS[topology]
    fabric = FakeFabric.from_compiler(RuleCompiler(layout))
    last = []

    def choose(switch, group, ports):
        last.append((switch, group))
        return ports[-1]

    for a, b in all_pairs(layout):
        walk = fabric.walk(packet_of(FlowKey(a.ip, b.ip, *UNSCHEDULED)), a.name, choose)
        assert walk.host == b.name, walk.describe()
        assert walk.path == layout.paths(a.leaf, b.leaf)[-1]
    assert last


# -- every scheduler's decisions ----------------------------------------------------------------------------------


def _scenario_jobs(layout: FabricLayout, name: str):
    return load_scenario(name).resolve(layout.host_tuples(), layout.spec.host_rate_mbps).jobs


def _events(jobs, t: float) -> List[OperationEvent]:
    """Every job launches its first and last buckets, due soon; job 0's rank 0 then waits on its first."""
    out = []
    for job in jobs:
        for bucket in {0, len(job.model.buckets) - 1}:
            out += [OperationEvent("launch", job.index, r, 0, bucket, t, nbytes=job.model.buckets[bucket].nbytes,
                                   needed_at=t + 0.05 * (job.index + 1)) for r in range(job.workers)]
    out.append(OperationEvent("wait", jobs[0].index, 0, 0, 0, t + 0.01))
    return out


class Controller:
    """What SchedulerApp does to the switches, on a fake fabric: every switch set up at once with the loop's first
    decisions (_switch_features), changed decisions rewritten after events (_reconcile_now), everything rewritten
    for the links left after a failure (_fabric_changed)."""

    def __init__(self, layout: FabricLayout, name: str, jobs, now: float = 0.0):
        self.layout, self.compiler = layout, RuleCompiler(layout)
        self.flows = {job.flow(r, b): (job.index, b, r)
                      for job in jobs for b in range(len(job.model.buckets)) for r in range(job.workers)}
        self.loop = ControlLoop(make_scheduler(name, layout.view(), jobs, {}), list(self.flows))
        decisions = self.loop.install_all(now)
        rules = []
        for flow, (job, bucket, rank) in self.flows.items():
            rules += self.compiler.flow_rules(flow, decisions[flow], flow_cookie(job, bucket, rank, False),
                                              flow_cookie(job, bucket, rank, True))
        self.fabric = FakeFabric.from_compiler(self.compiler, rules)

    def events(self, now: float, events) -> int:
        if self.loop.on_events(now, events) or self.loop.period_s:
            changed = self.loop.reconcile(now)
            self._rewrite(changed)
            return len(changed)
        return 0

    def link_fails(self, link, now: float) -> None:
        self.fabric.fail(link)
        self.layout = self.fabric.layout.without(self.fabric_down_links())
        self.compiler = RuleCompiler(self.layout)
        decisions = self.loop.fabric_change(now, self.layout.view())
        for dpid in self.compiler.dpids:
            for group in self.compiler.groups(dpid):
                self.fabric.set_group(group)
        self._rewrite(decisions)

    def fabric_down_links(self) -> set:
        return {link for link in self.fabric.layout.links if (link.a, link.a_port) in self.fabric.down}

    def _rewrite(self, decisions: Dict[FlowKey, Decision]) -> None:
        for flow, decision in decisions.items():
            job, bucket, rank = self.flows[flow]
            rewrite(self.fabric, self.compiler, flow, decision, flow_cookie(job, bucket, rank, False))

    def problems(self) -> List[str]:
        return [p for flow in self.flows for p in forward_and_ack_problems(
            self.fabric, flow, self.loop.installed[flow], layout=self.layout)]


@pytest.mark.parametrize("scenario", ["default", "headline"])
@pytest.mark.parametrize("topology", sorted(LAYOUTS))
@pytest.mark.parametrize("name", scheduler_names())
def test_every_schedulers_decisions_hold_in_the_data_plane(name, topology, scenario):
    """The scheduler's first decisions as installed when the switches connect, then its changed decisions after
    a few operation events: each data flow arrives on its chosen path, or hashed over all of them, in its class
    after the ingress leaf, and its ACKs come back hashed in the ACK class."""
    layout = LAYOUTS[topology]
    jobs = _scenario_jobs(layout, scenario)
    assert len(jobs) >= 2
    ctl = Controller(layout, name, jobs)
    assert ctl.problems() == []
    ctl.events(0.03, _events(jobs, 0.01))
    assert ctl.problems() == []
    if name == "crux":   # the check is not empty: crux pins flows to paths where there is a choice
        view = layout.view()
        assert any(d.path is not None and view.has_path_choice(f.src_ip, f.dst_ip)
                   for f, d in ctl.loop.installed.items())


@pytest.mark.parametrize("topology,link_ends", [("leafspine", ("lf1", "sp1")), ("fattree", ("lf1", "ag1"))])
@pytest.mark.parametrize("name", scheduler_names())
def test_every_schedulers_flows_move_off_a_failed_link(name, topology, link_ends):
    """The same after a link fails under running flows: the scheduler re-places its paths on what is left and
    every flow is rewritten; each packet arrives on the paths of the fabric without the link."""
    layout = LAYOUTS[topology]
    jobs = _scenario_jobs(layout, "headline")
    ctl = Controller(layout, name, jobs)
    ctl.events(0.03, _events(jobs, 0.01))
    ctl.link_fails(layout.link_between(*link_ends), 0.05)
    assert ctl.problems() == []


# -- path changes -------------------------------------------------------------------------------------------------

# h1 -> h5: on the fat-tree from lf1 (pod 0) to lf3 (pod 1), 4 paths; on the leaf-spine from lf1 to lf2, 2 paths.
INTER_POD = CROSS = FlowKey("10.0.0.1", "10.0.0.5", 20000, 10000)


def _installed(layout: FabricLayout, flow: FlowKey, decision: Decision) -> FakeFabric:
    compiler = RuleCompiler(layout)
    return FakeFabric.from_compiler(compiler, compiler.flow_rules(flow, decision, FLOW_COOKIE, FLOW_COOKIE | 1))


@pytest.mark.parametrize("topology", sorted(LAYOUTS))
def test_a_flow_follows_every_path_change(topology):
    """From each path (or hashed) to each other: the ingress rule modified in place, transit rules added, stale
    ones deleted; the packet then takes exactly the new path (all of them when hashed), in the new class."""
    layout = LAYOUTS[topology]
    compiler = RuleCompiler(layout)
    flow = INTER_POD if topology == "fattree" else CROSS
    n = len(layout.paths(1, host_of(layout, flow.dst_ip).leaf))
    assert n == (4 if topology == "fattree" else 2)
    choices = [None] + list(range(n))
    for before in choices:
        for after in choices:
            fabric = _installed(layout, flow, Decision(2, before))
            assert forward_and_ack_problems(fabric, flow, Decision(2, before)) == []
            rewrite(fabric, compiler, flow, Decision(5, after), FLOW_COOKIE)
            assert forward_and_ack_problems(fabric, flow, Decision(5, after)) == [], (before, after)
            transit = [r for r in fabric.rules() if r.transit]
            assert len(transit) == (0 if after is None or topology == "leafspine" else 1)


def test_without_deleting_stale_transit_rules_a_hashed_flow_stays_pinned():
    """Why stale_transit_rules exists: a fat-tree flow moved from path 0 to hashed keeps its transit rule at the
    aggregation switch of path 0 unless it is deleted, and every packet hashed there goes path 0's way."""
    compiler = RuleCompiler(FATTREE)
    fabric = _installed(FATTREE, INTER_POD, Decision(2, 0))
    fabric.apply(compiler.flow_rules(INTER_POD, Decision(2), FLOW_COOKIE, reverse=False), "modify")
    (problem,) = flow_problems(fabric, INTER_POD, Decision(2))
    assert "goes" in problem
    fabric.apply(compiler.stale_transit_rules(INTER_POD, Decision(2), FLOW_COOKIE), "delete")
    assert flow_problems(fabric, INTER_POD, Decision(2)) == []


# -- failed links -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("topology", sorted(LAYOUTS))
def test_every_pair_still_arrives_on_the_hashed_paths_left_after_any_one_link_fails(topology):
    """The rules compiled for the fabric without one link (each link in turn), on switches whose link is down:
    every pair arrives, on exactly the equal-cost paths that remain."""
    layout = LAYOUTS[topology]
    for link in layout.links:
        live = layout.without(frozenset({link}))
        compiler = RuleCompiler(live)
        fabric = FakeFabric(layout, groups=[g for d in compiler.dpids for g in compiler.groups(d)])
        fabric.apply([r for d in compiler.dpids for r in compiler.switch_rules(d)])
        fabric.fail(link)
        for a, b in all_pairs(layout):
            assert live.paths(a.leaf, b.leaf), (link, a.name, b.name)   # one failure never cuts a pair apart
            problems = flow_problems(fabric, FlowKey(a.ip, b.ip, *UNSCHEDULED), DEFAULT_DECISION, layout=live)
            assert problems == [], link


def test_a_leaf_cut_off_drops_at_an_empty_group_and_its_own_hosts_still_talk():
    single = FabricLayout.from_spec(FabricSpec(spines=1, leaves=2, hosts_per_leaf=2))
    compiler = RuleCompiler(single.without(single.links_of("sp1")))
    fabric = FakeFabric.from_compiler(compiler)
    (walk,) = flow_walks(fabric, FlowKey("10.0.0.1", "10.0.0.3", *UNSCHEDULED))
    assert not walk.delivered and "empty group" in walk.drop and walk.path == ()
    assert fabric.is_output(packet_of(FlowKey("10.0.0.1", "10.0.0.2", *UNSCHEDULED)), "h1", "h2")


def _recompile_after_failure(layout: FabricLayout, link, decisions: Dict[FlowKey, Decision],
                             after: Optional[Dict[FlowKey, Decision]] = None):
    """Flows installed with ``decisions`` before ``link`` fails, then what SchedulerApp._fabric_changed sends:
    every group rewritten and every flow rewritten (for ``after``, by default the same decisions) for the fabric
    without the link."""
    compiler = RuleCompiler(layout)
    rules = []
    for i, (flow, d) in enumerate(decisions.items()):
        rules += compiler.flow_rules(flow, d, flow_cookie(0, 0, i, False), flow_cookie(0, 0, i, True))
    fabric = FakeFabric.from_compiler(compiler, rules)
    fabric.fail(link)
    live = layout.without(frozenset({link}))
    compiler = RuleCompiler(live)
    for dpid in compiler.dpids:
        for group in compiler.groups(dpid):
            fabric.set_group(group)
    for i, flow in enumerate(decisions):
        rewrite(fabric, compiler, flow, (after or decisions)[flow], flow_cookie(0, 0, i, False))
    return fabric, live


@pytest.mark.parametrize("topology,link_ends", [("leafspine", ("lf1", "sp1")), ("leafspine", ("lf2", "sp2")),
                                                ("fattree", ("lf1", "ag1")), ("fattree", ("ag3", "lf3"))])
def test_flows_installed_before_a_failure_move_off_the_failed_link(topology, link_ends):
    """Every pinned path index and hashed, rewritten after a link fails: each packet arrives on the paths left."""
    layout = LAYOUTS[topology]
    flow = INTER_POD if topology == "fattree" else CROSS
    link = layout.link_between(*link_ends)
    n = len(layout.paths(1, host_of(layout, flow.dst_ip).leaf))
    for path in [None] + list(range(n)):
        fabric, live = _recompile_after_failure(layout, link, {flow: Decision(3, path)})
        assert forward_and_ack_problems(fabric, flow, Decision(3, path), layout=live) == [], path


@pytest.mark.parametrize("after", [0, None])
@pytest.mark.parametrize("link_ends", [("ag1", "co1"), ("ag3", "co1")])
def test_a_transit_rule_at_a_switch_the_failure_leaves_one_way_on_is_deleted(link_ends, after):
    """A transit rule written before a failure at a switch the failure leaves with one way on (ag1) is no
    longer rewritten, so it must be deleted, or it keeps sending the flow to co1. A flow pinned through
    lf1-ag1-co1-ag3-lf3 (a transit rule at ag1, output to co1) when a link of that path beyond ag1 fails;
    rewritten for the fabric without the link, its packets must arrive on the paths left."""
    assert FATTREE.paths(1, 3)[0] == ("lf1", "ag1", "co1", "ag3", "lf3")
    fabric, live = _recompile_after_failure(FATTREE, FATTREE.link_between(*link_ends), {INTER_POD: Decision(3, 0)},
                                            {INTER_POD: Decision(3, after)})
    assert len(live.next_hops("ag1", 3)) == 1     # the condition: one way on from ag1 is left
    assert flow_problems(fabric, INTER_POD, Decision(3, after), layout=live) == []


# -- the fake fabric catches what a wrong compiler would do ---------------------------------------------------------

H5 = host_of(LEAFSPINE, "10.0.0.5")   # on lf2, port 1


def _forwarding_rule(dpid: int, ip: str, action) -> Rule:
    return Rule(dpid, PRIO_DEFAULT, (("eth_type", IPV4), ("ipv4_dst", ip)), (action,), table=1)


def _leafspine_fabric(flow_decision: Optional[Decision] = None) -> FakeFabric:
    compiler = RuleCompiler(LEAFSPINE)
    rules = compiler.flow_rules(CROSS, flow_decision, FLOW_COOKIE, FLOW_COOKIE | 1) if flow_decision else []
    return FakeFabric.from_compiler(compiler, rules)


def test_a_wrong_output_port_delivers_to_the_wrong_host():
    fabric = _leafspine_fabric()
    fabric.flow_mod(_forwarding_rule(leaf_dpid(2), H5.ip, ("output", 2)))   # h6's port, not h5's
    (problem, *_) = flow_problems(fabric, CROSS, DEFAULT_DECISION)
    assert "=> h6" in problem and "should reach h5" in problem
    assert not fabric.is_output(packet_of(CROSS), "h1", "h5")


def test_a_forwarding_loop_is_reported_not_followed():
    """lf1 -> sp1 -> lf3 -> sp2 -> lf1 -> ... for h5's address."""
    fabric = _leafspine_fabric()
    fabric.apply([_forwarding_rule(leaf_dpid(1), H5.ip, ("output", 5)),      # towards sp1
                  _forwarding_rule(spine_dpid(1), H5.ip, ("output", 3)),     # towards lf3
                  _forwarding_rule(leaf_dpid(3), H5.ip, ("output", 6)),      # towards sp2
                  _forwarding_rule(spine_dpid(2), H5.ip, ("output", 1))])    # towards lf1
    (walk,) = flow_walks(fabric, CROSS)
    assert not walk.delivered and "loop" in walk.drop
    assert walk.path == ("lf1", "sp1", "lf3", "sp2", "lf1")
    short = FakeFabric.from_compiler(RuleCompiler(LEAFSPINE), fabric.rules(), ttl=3)
    (walk,) = flow_walks(short, CROSS)
    assert "TTL" in walk.drop and len(walk.hops) == 3


@pytest.mark.parametrize("corrupt,reason", [
    (lambda f: f.flow_mod(_forwarding_rule(leaf_dpid(2), H5.ip, ("output", 1)), "delete"), "no matching rule"),
    (lambda f: f.set_group(SelectGroup(leaf_dpid(1), 2, ())), "empty group"),
    (lambda f: f.flow_mod(_forwarding_rule(leaf_dpid(1), H5.ip, ("group", 9))), "group 9 does not exist"),
    (lambda f: f.flow_mod(_forwarding_rule(leaf_dpid(2), H5.ip, ("output", 5))), "in_port"),
    (lambda f: f.flow_mod(_forwarding_rule(leaf_dpid(2), H5.ip, ("output", 9))), "leads nowhere"),
    (lambda f: f.fail(LEAFSPINE.link_between("lf1", "sp1")) or f.flow_mod(
        _forwarding_rule(leaf_dpid(1), H5.ip, ("output", 5))), "link is down"),
    (lambda f: f.flow_mod(Rule(spine_dpid(1), PRIO_DEFAULT + 1, (("in_port", 1), ("eth_type", IPV4)),
                               (("dscp", 0),), goto_table=1)), "DSCP"),            # a spine re-marks class 0
    (lambda f: f.flow_mod(Rule(spine_dpid(1), PRIO_DEFAULT, (("in_port", 1), ("eth_type", IPV4), ("ip_proto", 6)),
                               goto_table=1)), "ambiguous"),                     # overlaps at the same priority
])
def test_the_walk_catches_a_corrupted_rule(corrupt, reason):
    """One corrupted entry at a time on a correct leaf-spine (a hashed flow in class 5): the check that passes
    on the compiler's rules fails, and says why."""
    decision = Decision(5)
    fabric = _leafspine_fabric(decision)
    assert flow_problems(fabric, CROSS, decision) == []
    corrupt(fabric)
    problems = flow_problems(fabric, CROSS, decision)
    assert problems and reason in problems[0], problems


def test_a_modify_of_a_missing_rule_adds_nothing():
    """OpenFlow 1.3 semantics (SchedulerApp._rewrite modifies ingress rules in place): a modify that matches no
    entry leaves the flow unscheduled, which the check reports."""
    compiler = RuleCompiler(LEAFSPINE)
    fabric = FakeFabric.from_compiler(compiler)
    fabric.apply(compiler.flow_rules(CROSS, Decision(5, 1), FLOW_COOKIE, reverse=False), "modify")
    assert not [r for r in fabric.rules() if r.cookie & FLOW_COOKIE]
    problems = flow_problems(fabric, CROSS, Decision(5, 1))
    assert problems and all("DSCP" in p for p in problems)


def test_rules_a_switch_would_refuse_are_refused():
    fabric = FakeFabric(LEAFSPINE)
    for bad in (Rule(leaf_dpid(1), 1, (("tcp_dst", 80),), (("output", 1),)),                      # no ip_proto
                Rule(leaf_dpid(1), 1, (("in_port", 1),), (("dscp", 8),)),                         # no eth_type
                Rule(leaf_dpid(1), 1, (("eth_type", IPV4),), goto_table=0),                       # goes back
                Rule(leaf_dpid(1), 1, (("eth_type", IPV4),), (("flood", 0),))):                   # unknown
        with pytest.raises(ValueError):
            check_rule(bad)
        with pytest.raises(ValueError):
            fabric.flow_mod(bad)
    with pytest.raises(KeyError):
        fabric.flow_mod(Rule(0x999, 1, (("eth_type", IPV4),), (("output", 1),)))
    for dpid in RuleCompiler(FATTREE).dpids:   # everything the compiler writes passes
        for rule in RuleCompiler(FATTREE).switch_rules(dpid):
            check_rule(rule)


def test_a_walk_describes_itself():
    fabric = _leafspine_fabric()
    walk = fabric.walk(packet_of(CROSS), "h1")
    assert isinstance(walk, Walk) and walk.delivered and walk.path == ("lf1", "sp1", "lf2")
    assert walk.describe() == "lf1[1>5 dscp 0] -> sp1[1>2 dscp 0] -> lf2[5>1 dscp 0] => h5"
