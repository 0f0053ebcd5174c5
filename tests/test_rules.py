"""The controller's pure parts: the rule compiler (decisions to rules), the decision diff and the change batches
confirmed by barriers. No root, no switch."""
import json
import os
import subprocess
import sys

import pytest

from controller.batches import ChangeBatches
from controller.loop import changed_decisions
from controller.rules import (
    ACK_CLASS,
    FLOW_COOKIE,
    PRIO_FLOW,
    TRANSIT_COOKIE,
    RuleCompiler,
    decode_cookie,
    flow_cookie,
)
from core.classes import class_to_dscp
from core.fabric import FabricLayout, FabricSpec, aggregation_dpid, core_dpid, leaf_dpid, spine_dpid
from core.model import Decision, FlowKey

LAYOUT = FabricLayout.from_spec(FabricSpec(spines=2, leaves=2, hosts_per_leaf=2))
RULES = RuleCompiler(LAYOUT)
CROSS = FlowKey("10.0.0.1", "10.0.0.3", 20001, 10000)   # h1 (leaf 1) -> h3 (leaf 2)
LOCAL = FlowKey("10.0.0.1", "10.0.0.2", 20002, 10000)   # h1 -> h2, both on leaf 1


def test_cookies_round_trip():
    for job, bucket, rank, reverse in [(0, 0, 0, False), (63, 63, 127, True), (5, 1, 3, True)]:
        cookie = flow_cookie(job, bucket, rank, reverse)
        assert cookie & FLOW_COOKIE and decode_cookie(cookie) == (job, bucket, rank, int(reverse))
    assert decode_cookie(12345) is None


def test_spines_send_every_host_address_towards_its_leaf():
    rules = RULES.switch_rules(spine_dpid(1))
    groups = {g.group_id: g.ports for g in RULES.groups(spine_dpid(1))}
    assert groups == {1: (1,), 2: (2,)}                            # one way down to each leaf
    out = {dict(r.match)["ipv4_dst"]: r.actions for r in rules if r.table == 1}
    assert out == {h.ip: (("group", h.leaf),) for h in LAYOUT.hosts}
    table0 = [r for r in rules if r.table == 0]
    assert all(r.goto_table == 1 and r.actions == () for r in table0)  # the DSCP from the ingress leaf is kept


def test_leaves_mark_host_traffic_class_0_and_hash_remote_destinations():
    dpid = leaf_dpid(1)
    (group,) = RULES.groups(dpid)
    assert group.group_id == 2 and group.ports == (3, 4)            # towards leaf 2: ECMP over the spines
    rules = RULES.switch_rules(dpid)
    from_hosts = [r for r in rules if dict(r.match).get("in_port") in (1, 2)]
    assert len(from_hosts) == 2
    assert all(r.actions == (("dscp", 0),) and r.goto_table == 1 for r in from_hosts)
    table1 = {dict(r.match)["ipv4_dst"]: r.actions for r in rules if r.table == 1}
    assert table1["10.0.0.2"] == (("output", 2),)                 # local host: its port
    assert table1["10.0.0.3"] == (("group", group.group_id),)     # remote: ECMP over the spines


def test_a_decision_becomes_one_rule_at_the_ingress_leaf_and_its_acks_ride_the_top_class():
    rules = RULES.flow_rules(CROSS, Decision(5, 1), cookie=11, reverse_cookie=12)
    forward, ack = rules
    assert forward.dpid == leaf_dpid(1) and forward.priority == PRIO_FLOW and forward.cookie == 11
    assert forward.actions == (("dscp", class_to_dscp(5)), ("output", LAYOUT.port("lf1", "sp2")))
    assert forward.goto_table is None and not forward.transit
    assert ack.dpid == leaf_dpid(2) and ack.cookie == 12
    assert ack.actions == (("dscp", class_to_dscp(ACK_CLASS)),) and ack.goto_table == 1
    assert dict(ack.match)["ipv4_src"] == CROSS.dst_ip and dict(ack.match)["tcp_dst"] == CROSS.src_port
    # Only the forward rule changes later; a path does not apply inside a leaf; a spine has nothing to choose.
    assert len(RULES.flow_rules(CROSS, Decision(2), 11, reverse=False)) == 1
    assert RULES.stale_transit_rules(CROSS, Decision(2), 11) == []
    (local,) = RULES.flow_rules(LOCAL, Decision(3, 0), 13, reverse=False)
    assert local.actions == (("dscp", class_to_dscp(3)),) and local.goto_table == 1
    assert [r.dpid for r in RULES.flow_rules(CROSS, Decision(), 1, 2, at_dpid=leaf_dpid(2))] == [leaf_dpid(2)]


def test_a_negative_path_is_refused_and_others_wrap_over_the_flows_paths():
    with pytest.raises(ValueError, match="path -1 below 0"):
        RULES.flow_rules(CROSS, Decision(1, -1), 1)
    (wrapped,) = RULES.flow_rules(CROSS, Decision(1, 3), 1, reverse=False)   # 2 spines: path 3 is path 1
    assert ("output", LAYOUT.port("lf1", "sp2")) in wrapped.actions


FAT = FabricLayout.from_spec(FabricSpec.fattree(4))
FAT_RULES = RuleCompiler(FAT)
INTER_POD = FlowKey("10.0.0.1", "10.0.0.5", 20001, 10000)   # h1 (lf1, pod 0) -> h5 (lf3, pod 1)
INTRA_POD = FlowKey("10.0.0.1", "10.0.0.3", 20001, 10000)   # h1 (lf1) -> h3 (lf2), both in pod 0


def test_fattree_forwarding_hashes_upwards_and_goes_straight_down():
    edge = {g.group_id: g.ports for g in FAT_RULES.groups(leaf_dpid(1))}
    assert edge == {leaf: (3, 4) for leaf in range(2, 9)}       # up to the pod's two aggregation switches
    agg = {g.group_id: g.ports for g in FAT_RULES.groups(aggregation_dpid(1))}
    assert agg[2] == (2,)                                      # down to lf2 (its port 2)
    assert agg[3] == (3, 4)                                    # up, hashed over ag1's two cores
    core = {g.group_id: g.ports for g in FAT_RULES.groups(core_dpid(1))}
    assert core[3] == core[4] == (2,)                          # pod 1 (lf3, lf4) hangs off core port 2
    table1 = {dict(r.match)["ipv4_dst"]: r.actions for r in FAT_RULES.switch_rules(aggregation_dpid(1))
              if r.table == 1}
    assert table1["10.0.0.5"] == (("group", 3),)
    assert len(FAT.paths(1, 3)) == 4 and len(FAT.paths(1, 2)) == 2 and FAT.paths(1, 1) == (("lf1",),)


def test_a_fattree_path_needs_a_transit_rule_where_the_path_still_has_a_choice():
    for index, path in enumerate(FAT.paths(1, 3)):
        rules = FAT_RULES.flow_rules(INTER_POD, Decision(4, index), cookie=FLOW_COOKIE, reverse=False)
        ingress, transit = rules
        assert ingress.dpid == leaf_dpid(1) and ingress.actions[0] == ("dscp", class_to_dscp(4))
        assert ingress.actions[1] == ("output", FAT.port("lf1", path[1]))
        assert transit.dpid == FAT.dpid_of[path[1]] and transit.transit
        assert transit.actions == (("output", FAT.port(path[1], path[2])),)   # the DSCP is not touched again
        assert decode_cookie(transit.cookie) is None and transit.cookie & TRANSIT_COOKIE
        # The other aggregation switch may hold a transit rule from an earlier path: it is deleted.
        (stale,) = FAT_RULES.stale_transit_rules(INTER_POD, Decision(4, index), FLOW_COOKIE)
        assert stale.dpid != transit.dpid and stale.dpid in (aggregation_dpid(1), aggregation_dpid(2))
    # Hashed: only the ingress rule, and both aggregation switches' transit rules go.
    assert len(FAT_RULES.flow_rules(INTER_POD, Decision(4), 1, reverse=False)) == 1
    assert {r.dpid for r in FAT_RULES.stale_transit_rules(INTER_POD, Decision(4), 1)} == \
        {aggregation_dpid(1), aggregation_dpid(2)}
    # Inside a pod the aggregation switch has one way down: no transit rule.
    assert len(FAT_RULES.flow_rules(INTRA_POD, Decision(4, 1), 1, reverse=False)) == 1


def test_failed_links_change_only_group_buckets_and_the_paths_that_remain():
    down = LAYOUT.without([LAYOUT.link_between("lf2", "sp1")])
    live = RuleCompiler(down)
    assert {g.group_id: g.ports for g in live.groups(leaf_dpid(1))} == {2: (4,)}   # only via sp2 now
    assert {g.group_id: g.ports for g in live.groups(spine_dpid(1))} == {1: (1,), 2: (1,)}  # back via lf1
    assert live.switch_rules(leaf_dpid(1)) == RULES.switch_rules(leaf_dpid(1))      # rules untouched
    # A flow pinned to the dead path's index lands on the one path left.
    (forward,) = live.flow_rules(CROSS, Decision(5, 0), 1, reverse=False)
    assert forward.actions == (("dscp", class_to_dscp(5)),) and forward.goto_table == 1   # no choice left
    # Cut off entirely: a group without buckets drops; a flow's rule still marks its class.
    single = FabricLayout.from_spec(FabricSpec(spines=1, leaves=2, hosts_per_leaf=2))
    cut = RuleCompiler(single.without(single.links_of("sp1")))
    assert {g.group_id: g.ports for g in cut.groups(leaf_dpid(1))} == {2: ()}
    assert len(cut.flow_rules(CROSS, Decision(5, 0), 1, reverse=False)) == 1


def test_only_changed_decisions_are_rewritten():
    a, b = Decision(3), Decision(3)
    installed = {CROSS: a, LOCAL: Decision()}
    assert changed_decisions([CROSS, LOCAL], installed, {CROSS: b}) == {}          # equal, and LOCAL unnamed
    assert changed_decisions([CROSS, LOCAL], installed, {CROSS: Decision(4)}) == {CROSS: Decision(4)}
    assert changed_decisions([CROSS], {}, {}) == {CROSS: Decision()}                # never installed


def test_a_batch_completes_when_every_touched_switch_has_answered():
    batches = ChangeBatches()
    batch = batches.open("event", t0=1.0, flowmods=3)
    batches.expect(batch, 0x201, 7)
    batches.expect(batch, 0x202, 8)
    assert batches.on_reply(0x201, 99) is None                  # not ours
    assert batches.on_reply(0x201, 7) == (batch, False)
    assert batches.on_reply(0x202, 8) == (batch, True)
    assert len(batches) == 0 and batches.on_reply(0x202, 8) is None


PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Each app's handlers and the framework class it derives from, printed by a process of its own: the framework is
# chosen once per process (controller/framework.py).
HANDLERS = """
import inspect, json
from controller.monitor_app import MonitorApp
from controller.scheduler_app import SchedulerApp

def handlers(cls):
    return sorted(name for name, f in inspect.getmembers(cls) if hasattr(f, "callers"))
print(json.dumps({"scheduler": handlers(SchedulerApp), "monitor": handlers(MonitorApp),
                  "base": SchedulerApp.__mro__[2].__module__}))
"""


@pytest.mark.parametrize("framework, package", [("ryu", "ryu"), ("os-ken", "os_ken")])
def test_each_app_registers_its_own_and_the_shared_handlers_on_either_framework(framework, package):
    env = dict(os.environ, FLUX_CONTROLLER_FRAMEWORK=framework)
    r = subprocess.run([sys.executable, "-c", HANDLERS], capture_output=True, text=True, env=env, cwd=PROJECT_DIR,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    assert found["scheduler"] == ["_barrier_reply", "_port_desc", "_port_status", "_state_change",
                                  "_switch_features"]
    assert found["monitor"] == ["_barrier_reply", "_flow_stats", "_port_stats", "_state_change", "_switch_features"]
    assert found["base"] == f"{package}.base.app_manager"
    assert "DSA is deprecated" not in r.stderr


def test_a_framework_that_is_not_one_of_the_two_is_refused_in_one_line():
    from controller.framework import resolve
    assert resolve("auto") in ("ryu", "os-ken") and resolve("os-ken") == "os-ken"
    with pytest.raises(ValueError, match="one of ryu, os-ken"):
        resolve("pox")
