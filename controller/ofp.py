"""Plain rules (controller/rules.py) to OpenFlow 1.3 messages, and the messages both apps send."""
from __future__ import annotations

from controller.rules import FLOW_COOKIE, TRANSIT_COOKIE, Rule, SelectGroup


def command(dp, name: str) -> int:
    """The flow-mod command of a name: "add", "modify" (strict) or "delete" (strict)."""
    ofp = dp.ofproto
    return {"add": ofp.OFPFC_ADD, "modify": ofp.OFPFC_MODIFY_STRICT, "delete": ofp.OFPFC_DELETE_STRICT}[name]


def flow_mod(dp, rule: Rule, command: int):
    parser, ofp = dp.ofproto_parser, dp.ofproto
    actions = []
    for kind, value in rule.actions:
        if kind == "dscp":
            actions.append(parser.OFPActionSetField(ip_dscp=value))
        elif kind == "output":
            actions.append(parser.OFPActionOutput(value))
        elif kind == "group":
            actions.append(parser.OFPActionGroup(value))
        else:
            raise ValueError(f"unknown action {kind!r}")
    instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
    if rule.goto_table is not None:
        instructions.append(parser.OFPInstructionGotoTable(rule.goto_table))
    # (A delete filters on out_port and out_group: "any" both, or it would match nothing.)
    return parser.OFPFlowMod(dp, table_id=rule.table, priority=rule.priority, match=parser.OFPMatch(**dict(rule.match)),
                             cookie=rule.cookie, command=command, instructions=instructions,
                             out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)


def select_group(dp, group: SelectGroup, modify: bool = False):
    """Add (or rewrite) a select group. Each bucket watches its port, so the switch itself stops hashing onto a
    port whose link is down, before the controller has recompiled anything."""
    parser, ofp = dp.ofproto_parser, dp.ofproto
    buckets = [parser.OFPBucket(weight=1, watch_port=p, watch_group=ofp.OFPG_ANY,
                                actions=[parser.OFPActionOutput(p)]) for p in group.ports]
    return parser.OFPGroupMod(dp, command=ofp.OFPGC_MODIFY if modify else ofp.OFPGC_ADD, type_=ofp.OFPGT_SELECT,
                              group_id=group.group_id, buckets=buckets)


def port_desc_request(dp):
    return dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0)


def clear_switch(dp):
    """Delete every flow and group: a restarted controller must not inherit stale rules."""
    parser, ofp = dp.ofproto_parser, dp.ofproto
    return [parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                              out_group=ofp.OFPG_ANY),
            parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL)]


def barrier(dp):
    """A barrier request with its xid already set (the reply carries the same xid)."""
    req = dp.ofproto_parser.OFPBarrierRequest(dp)
    dp.set_xid(req)
    return req


def port_stats_request(dp):
    return dp.ofproto_parser.OFPPortStatsRequest(dp, 0, dp.ofproto.OFPP_ANY)


def flow_stats_request(dp):
    """Counters of the per-flow ingress rules only (selected by their cookie; transit rules left out)."""
    parser, ofp = dp.ofproto_parser, dp.ofproto
    return parser.OFPFlowStatsRequest(dp, 0, 0, ofp.OFPP_ANY, ofp.OFPG_ANY, FLOW_COOKIE, FLOW_COOKIE | TRANSIT_COOKIE,
                                      parser.OFPMatch())
