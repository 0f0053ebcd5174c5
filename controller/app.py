"""The testbed's Ryu application (OpenFlow 1.3): forwarding, per-flow scheduling stage, counter poller.

It stays thin around a pure scheduler (controller/schedulers): events and timers go in, ``decide()`` comes out,
and only the ingress rules whose decision changed are rewritten.

Forwarding is proactive, from the fabric layout the runner hands over (no discovery, no packet-ins):

* spine, table 0: one rule per host address -> the port of the host's leaf;
* leaf, table 0 (the scheduling stage):
    - priority 100, one rule per data flow (5-tuple) of every job: set DSCP to the flow's class, then either
      output to the chosen spine or go to table 1 (hashed path); and one for its reverse direction (pure ACKs),
      always in the top class on a hashed path, written once;
    - priority 10, packets from a host port: DSCP := class 0, go to table 1 (everything not scheduled);
    - priority 10, packets from a spine port: go to table 1 (the DSCP written at the ingress leaf is kept);
* leaf, table 1: one rule per host address: local host -> its port; remote -> select group over all spines.

Per-flow rules exist under every scheduler (ECMP included, where they do what the default rule would) so that
flow counters, and therefore the reconstruction of GPU idle time, are the same for every policy.

Channels: workers' operation events arrive as JSON datagrams on a Unix socket (a filesystem path reachable from
every namespace, so events never cross the data-plane queues); the runner talks to the controller through a
second Unix socket (status, pinning a flow to a class, statistics). Every decision change is confirmed with a
barrier; "reaction latency" is trigger (event received / timer) -> last barrier reply.

The app runs as two processes with two OpenFlow connections to every switch: the "scheduler" (rules, events,
decisions) and the "monitor" (counter polling only), so that parsing large stats replies never delays a
reaction to an event.

Outputs in the run directory (see results/README.md): port_stats.csv, flow_stats.csv, monitor_stats.json (the
monitor); events.csv, reactions.csv, decisions.csv, controller_stats.json (the scheduler).
"""
from __future__ import annotations

import csv
import json
import logging
import os
import signal
import socket
import statistics
import time
from typing import Dict, List, Optional, Tuple

from ryu.base import app_manager
from ryu.controller import ofp_event
from ryu.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from ryu.lib import hub
from ryu.ofproto import ofproto_v1_3

from controller.schedulers.registry import make_scheduler
from core.classes import class_to_dscp
from core.config import ControllerConfig
from core.fabric import leaf_dpid, spine_dpid
from core.model import Decision, FlowKey, OperationEvent
from core.stats import percentile

LOG = logging.getLogger("flux.controller")

FLOW_COOKIE = 1 << 40          # marks per-flow scheduling rules (flow stats are requested with this mask)
PIN_COOKIE = 1 << 41           # flows pinned by the runner (traffic checks, benchmarks)
PRIO_FLOW, PRIO_DEFAULT = 100, 10
SELECT_GROUP = 1
ACK_CLASS = 7                  # class of the ACK direction of every data flow
DEFAULT_DECISION = Decision()  # class 0, hashed path: what a flow gets when the policy does not name it
MAX_COUNTER = 2 ** 64 - 1      # ports being deleted report all ones


def flow_cookie(job: int, bucket: int, rank: int, reverse: bool) -> int:
    return FLOW_COOKIE | (job << 24) | (bucket << 16) | (rank << 1) | int(reverse)


def decode_cookie(cookie: int) -> Optional[Tuple[int, int, int, int]]:
    if not cookie & FLOW_COOKIE:
        return None
    return (cookie >> 24) & 0xFFFF, (cookie >> 16) & 0xFF, (cookie >> 1) & 0x7FFF, cookie & 1


class _Csv:
    """A CSV file that is flushed on every write, so a killed controller still leaves complete rows."""

    def __init__(self, path: str, header: List[str]):
        self._f = open(path, "w", newline="")
        self._w = csv.writer(self._f)
        self._w.writerow(header)

    def write(self, row) -> None:
        self._w.writerow(row)
        self._f.flush()

    def write_many(self, rows) -> None:
        self._w.writerows(rows)
        self._f.flush()


class FluxController(app_manager.RyuApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.environ["FLUX_CONTROLLER_CONFIG"]) as f:
            cfg = ControllerConfig.from_json(f.read())
        self.cfg = cfg
        # Two processes run this app: the "scheduler" owns the rules and reacts to events; the "monitor" only
        # polls counters over its own OpenFlow connection, so that parsing stats replies (tens of ms of Python
        # per round) never delays a reaction.
        self.role = os.environ.get("FLUX_CONTROLLER_ROLE", "scheduler")
        self.layout = cfg.layout
        spec = self.layout.spec
        self.jobs = list(cfg.jobs)
        self.view = self.layout.view()
        self.scheduler = make_scheduler(cfg.scheduler, self.view, self.jobs, cfg.scheduler_params)
        self.poll_s = cfg.poll_interval_s
        self.out = cfg.out_dir
        self.host_by_ip = {h.ip: h for h in self.layout.hosts}
        self.leaf_dpids = {leaf_dpid(i) for i in range(1, spec.leaves + 1)}
        self.spine_dpids = {spine_dpid(i) for i in range(1, spec.spines + 1)}

        # Every data flow of every job: flow -> (job, bucket, rank).
        self.flows: Dict[FlowKey, Tuple[int, int, int]] = {}
        for job in self.jobs:
            for b in range(len(job.model.buckets)):
                for r in range(job.workers):
                    self.flows[job.flow(r, b)] = (job.index, b, r)
        self.installed: Dict[FlowKey, Decision] = {}
        self.pins: Dict[FlowKey, Decision] = {}

        self.datapaths: Dict[int, object] = {}
        self.ready: set = set()
        self.pending: Dict[Tuple[int, int], int] = {}          # (dpid, xid) -> change group
        self.groups: Dict[int, dict] = {}                      # change group -> bookkeeping
        self._next_group = 0

        self.stats = {"events": 0, "event_latency_s": [], "flowmods": 0, "reactions": [],
                      "decide_calls": 0, "poll_rounds": 0, "started_at": time.time()}
        signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.role == "monitor":
            self.port_csv = _Csv(os.path.join(self.out, "port_stats.csv"),
                                 ["time", "dpid", "port", "rx_bytes", "tx_bytes", "rx_packets", "tx_packets",
                                  "tx_dropped"])
            self.flow_csv = _Csv(os.path.join(self.out, "flow_stats.csv"),
                                 ["time", "dpid", "job", "bucket", "rank", "reverse", "packets", "bytes"])
            self.control_sock = self._bind_unix(cfg.monitor_socket)
            loops = (self._counter_poll_loop, self._runner_control_loop, self._stats_file_loop)
            LOG.info("monitor: polling %d flows and all ports every %.3f s", len(self.flows), self.poll_s)
        else:
            self.event_csv = _Csv(os.path.join(self.out, "events.csv"),
                                  ["sent", "received", "kind", "job", "rank", "iteration", "bucket", "bytes_done"])
            self.reaction_csv = _Csv(os.path.join(self.out, "reactions.csv"),
                                     ["time", "trigger", "flowmods", "latency_s", "decide_and_send_s"])
            self.decision_csv = _Csv(os.path.join(self.out, "decisions.csv"),
                                     ["time", "job", "bucket", "rank", "priority_class", "spine"])
            self.events_sock = self._bind_unix(cfg.events_socket)
            self.control_sock = self._bind_unix(cfg.control_socket)
            loops = (self._worker_event_loop, self._runner_control_loop, self._periodic_decide_loop,
                     self._stats_file_loop)
            LOG.info("scheduler %s, %d jobs, %d flows", self.scheduler.name, len(self.jobs), len(self.flows))
        for loop in loops:
            hub.spawn(self._guarded, loop)

    # ---------------------------------------------------------------------------------------------- plumbing
    @staticmethod
    def _bind_unix(path: str) -> socket.socket:
        if os.path.exists(path):
            os.unlink(path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(path)
        os.chmod(path, 0o666)
        return s

    def _guarded(self, loop):
        try:
            loop()
        except Exception:  # a dying loop must be visible in the log, not silent
            LOG.exception("controller loop %s failed", loop.__name__)

    def _on_sigterm(self, signum, frame):
        self._write_stats()
        os._exit(0)

    # ------------------------------------------------------------------------------------------ switch setup
    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev):
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER:
            self.datapaths[dp.id] = dp
        elif ev.state == DEAD_DISPATCHER and dp.id in self.datapaths:
            del self.datapaths[dp.id]
            self.ready.discard(dp.id)

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _switch_features(self, ev):
        dp = ev.msg.datapath
        parser, ofp = dp.ofproto_parser, dp.ofproto
        if self.role == "monitor":  # read-only: never touches the rules
            self._barrier(dp, self._new_group("setup", time.time(), 0, None))
            return
        # Start from a clean switch: a restarted controller must not inherit stale rules.
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))
        if dp.id in self.spine_dpids:
            self._setup_spine(dp)
        elif dp.id in self.leaf_dpids:
            self._setup_leaf(dp)
        else:
            LOG.warning("switch %016x is not part of the fabric; ignoring it", dp.id)
            return
        group = self._new_group("setup", time.time(), 0, None)
        self._barrier(dp, group)

    def _add(self, dp, priority, match, instructions, table_id=0, cookie=0, command=None):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        dp.send_msg(parser.OFPFlowMod(dp, table_id=table_id, priority=priority, match=match, cookie=cookie,
                                      command=ofp.OFPFC_ADD if command is None else command,
                                      instructions=instructions))

    @staticmethod
    def _apply(dp, actions):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        return parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)

    def _setup_spine(self, dp):
        parser = dp.ofproto_parser
        for h in self.layout.hosts:
            self._add(dp, PRIO_DEFAULT, parser.OFPMatch(eth_type=0x0800, ipv4_dst=h.ip),
                      [self._apply(dp, [parser.OFPActionOutput(self.layout.spine_port(h.leaf))])])

    def _leaf_number(self, dpid: int) -> int:
        return dpid - leaf_dpid(0)

    def _setup_leaf(self, dp):
        parser, ofp = dp.ofproto_parser, dp.ofproto
        spec = self.layout.spec
        leaf = self._leaf_number(dp.id)
        uplinks = [self.layout.leaf_uplink_port(s) for s in range(1, spec.spines + 1)]
        buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY, watch_group=ofp.OFPG_ANY,
                                    actions=[parser.OFPActionOutput(p)]) for p in uplinks]
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_SELECT,
                                       group_id=SELECT_GROUP, buckets=buckets))
        goto1 = parser.OFPInstructionGotoTable(1)
        for port in range(1, spec.hosts_per_leaf + 1):
            self._add(dp, PRIO_DEFAULT, parser.OFPMatch(in_port=port, eth_type=0x0800),
                      [self._apply(dp, [parser.OFPActionSetField(ip_dscp=0)]), goto1])
        for port in uplinks:
            self._add(dp, PRIO_DEFAULT, parser.OFPMatch(in_port=port, eth_type=0x0800), [goto1])
        for h in self.layout.hosts:
            action = (parser.OFPActionOutput(h.leaf_port) if h.leaf == leaf
                      else parser.OFPActionGroup(SELECT_GROUP))
            self._add(dp, PRIO_DEFAULT, parser.OFPMatch(eth_type=0x0800, ipv4_dst=h.ip),
                      [self._apply(dp, [action])], table_id=1)
        wanted = self._wanted(time.time())
        for flow, (job, bucket, rank) in self.flows.items():
            decision = wanted.get(flow, Decision())
            self._write_flow(dp, flow, decision, flow_cookie(job, bucket, rank, False), ofp.OFPFC_ADD,
                             reverse_cookie=flow_cookie(job, bucket, rank, True))
            self.installed[flow] = decision
        for flow, decision in self.pins.items():
            self._write_flow(dp, flow, decision, PIN_COOKIE, ofp.OFPFC_ADD, reverse_cookie=PIN_COOKIE)

    def _write_flow(self, dp, flow: FlowKey, decision: Decision, cookie: int, command: int,
                    reverse_cookie: int, reverse: bool = True) -> int:
        """Write the rule for ``flow`` on leaf ``dp`` if it enters there, and (``reverse``) its ACK direction.

        The ACK direction always gets ACK_CLASS on a hashed path: pure ACKs are a few percent of the bytes, and a
        starved ACK stalls its data flow whatever the data flow's class. It is written once, so a decision
        change costs one flow-mod per flow. Returns the number of flow-mods sent."""
        parser = dp.ofproto_parser
        leaf = self._leaf_number(dp.id)
        src, dst = self.host_by_ip.get(flow.src_ip), self.host_by_ip.get(flow.dst_ip)
        if src is None or dst is None:
            return 0
        sent = 0
        directions = [(flow, src, dst, cookie, decision)]
        if reverse:
            directions.append((flow.reversed(), dst, src, reverse_cookie, Decision(ACK_CLASS, None)))
        for key, ingress, egress, ck, decision in directions:
            if ingress.leaf != leaf:
                continue
            dscp = class_to_dscp(decision.priority_class)
            match = parser.OFPMatch(eth_type=0x0800, ip_proto=flow.proto, ipv4_src=key.src_ip,
                                    ipv4_dst=key.dst_ip, tcp_src=key.src_port, tcp_dst=key.dst_port)
            actions = [parser.OFPActionSetField(ip_dscp=dscp)]
            if decision.spine is not None and egress.leaf != leaf:
                spine = decision.spine % self.layout.spec.spines
                actions.append(parser.OFPActionOutput(self.layout.leaf_uplink_port(spine + 1)))
                instructions = [self._apply(dp, actions)]
            else:
                instructions = [self._apply(dp, actions), parser.OFPInstructionGotoTable(1)]
            self._add(dp, PRIO_FLOW, match, instructions, cookie=ck, command=command)
            sent += 1
        return sent

    # ------------------------------------------------------------------------------------------- decisions
    def _wanted(self, now: float) -> Dict[FlowKey, Decision]:
        self.stats["decide_calls"] += 1
        try:
            return self.scheduler.decide(now)
        except Exception:
            LOG.exception("scheduler %s failed to decide; keeping the installed rules", self.scheduler.name)
            return dict(self.installed)

    def _reconcile(self, trigger: str, t0: float) -> None:
        if not self.ready:
            return
        wanted = self._wanted(time.time())
        changed = {}
        installed = self.installed
        for flow in self.flows:
            d = wanted.get(flow, DEFAULT_DECISION)
            current = installed.get(flow)
            if current is not d and current != d:  # identity first: policies reuse Decision objects
                changed[flow] = d
        if not changed:
            return
        touched = {}
        mods = 0
        now = time.time()
        rows = []
        for flow, d in changed.items():
            job, bucket, rank = self.flows[flow]
            for dpid in (leaf_dpid(self.host_by_ip[flow.src_ip].leaf),):
                dp = self.datapaths.get(dpid)
                if dp is None or dpid not in self.ready:
                    continue
                n = self._write_flow(dp, flow, d, flow_cookie(job, bucket, rank, False),
                                     dp.ofproto.OFPFC_MODIFY_STRICT,
                                     reverse_cookie=flow_cookie(job, bucket, rank, True), reverse=False)
                if n:
                    touched[dpid] = dp
                    mods += n
            self.installed[flow] = d
            rows.append([f"{now:.6f}", job, bucket, rank, d.priority_class, "" if d.spine is None else d.spine])
        self.decision_csv.write_many(rows)
        self.stats["flowmods"] += mods
        group = self._new_group(trigger, t0, mods, None)
        self.groups[group]["sent"] = time.time()
        for dp in touched.values():
            self._barrier(dp, group)

    def _new_group(self, trigger: str, t0: float, mods: int, reply_to) -> int:
        self._next_group += 1
        self.groups[self._next_group] = {"trigger": trigger, "t0": t0, "mods": mods, "waiting": set(),
                                         "reply_to": reply_to}
        return self._next_group

    def _barrier(self, dp, group: int) -> None:
        req = dp.ofproto_parser.OFPBarrierRequest(dp)
        dp.set_xid(req)
        self.groups[group]["waiting"].add((dp.id, req.xid))
        self.pending[(dp.id, req.xid)] = group
        dp.send_msg(req)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier_reply(self, ev):
        key = (ev.msg.datapath.id, ev.msg.xid)
        group_id = self.pending.pop(key, None)
        if group_id is None:
            return
        group = self.groups[group_id]
        group["waiting"].discard(key)
        if group["trigger"] == "setup":
            self.ready.add(ev.msg.datapath.id)
            LOG.info("switch %016x ready (%d/%d)", ev.msg.datapath.id, len(self.ready),
                     len(self.leaf_dpids) + len(self.spine_dpids))
        if group["waiting"]:
            return
        del self.groups[group_id]
        if group["trigger"] == "setup":
            return
        latency = time.time() - group["t0"]
        self.stats["reactions"].append(latency)
        sent = group.get("sent")
        self.reaction_csv.write([f"{time.time():.6f}", group["trigger"], group["mods"], f"{latency:.6f}",
                                 "" if sent is None else f"{sent - group['t0']:.6f}"])
        if group["reply_to"]:
            self._reply(group["reply_to"], {"ok": True, "latency_s": latency, "flowmods": group["mods"]})

    # ------------------------------------------------------------------------------------------------ loops
    def _counter_poll_loop(self):
        while True:
            started = time.time()
            for dpid, dp in list(self.datapaths.items()):
                if dpid not in self.ready:
                    continue
                parser, ofp = dp.ofproto_parser, dp.ofproto
                dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                if dpid in self.leaf_dpids:
                    dp.send_msg(parser.OFPFlowStatsRequest(dp, 0, 0, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                                           FLOW_COOKIE, FLOW_COOKIE, parser.OFPMatch()))
            self.stats["poll_rounds"] += 1
            hub.sleep(max(0.0, self.poll_s - (time.time() - started)))

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev):
        now = f"{time.time():.6f}"
        dpid = ev.msg.datapath.id
        rows = []
        for s in ev.msg.body:
            if s.port_no > 0xffffff00 or s.tx_bytes == MAX_COUNTER or s.rx_bytes == MAX_COUNTER:
                continue
            rows.append([now, dpid, s.port_no, s.rx_bytes, s.tx_bytes, s.rx_packets, s.tx_packets, s.tx_dropped])
        self.port_csv.write_many(rows)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats(self, ev):
        now = f"{time.time():.6f}"
        dpid = ev.msg.datapath.id
        rows = []
        for s in ev.msg.body:
            ids = decode_cookie(s.cookie)
            if ids is None:
                continue
            rows.append([now, dpid, *ids, s.packet_count, s.byte_count])
        self.flow_csv.write_many(rows)

    def _drain(self, sock) -> List[Tuple[bytes, object]]:
        """Block for one datagram, then take whatever else is already queued (events come in bursts)."""
        out = [sock.recvfrom(65536)]
        sock.setblocking(False)
        try:
            while len(out) < 1000:
                out.append(sock.recvfrom(65536))
        except (BlockingIOError, socket.error):
            pass
        finally:
            sock.setblocking(True)
        return out

    def _worker_event_loop(self):
        while True:
            batch = self._drain(self.events_sock)
            received = time.time()
            rows = []
            trigger = False
            for data, _addr in batch:
                try:
                    ev = OperationEvent.from_dict(json.loads(data))
                except (ValueError, KeyError, TypeError) as exc:
                    LOG.warning("dropping malformed event: %s", exc)
                    continue
                self.stats["events"] += 1
                self.stats["event_latency_s"].append(received - ev.time)
                rows.append([f"{ev.time:.6f}", f"{received:.6f}", ev.kind, ev.job, ev.rank, ev.iteration,
                             ev.bucket, ev.bytes_done])
                self.scheduler.on_event(ev, received)
                trigger = trigger or ev.kind in self.scheduler.reconcile_on
            self.event_csv.write_many(rows)
            if trigger:
                self._reconcile("event", received)

    def _periodic_decide_loop(self):
        period = getattr(self.scheduler, "period_s", None)
        if not period:
            return
        while True:
            hub.sleep(period)
            self._reconcile("periodic", time.time())

    def _stats_file_loop(self):
        while True:
            hub.sleep(1.0)
            self._write_stats()

    def _reply(self, addr, payload: dict) -> None:
        try:
            self.control_sock.sendto(json.dumps(payload).encode(), addr)
        except OSError as exc:
            LOG.warning("cannot answer %s: %s", addr, exc)

    def _runner_control_loop(self):
        while True:
            data, addr = self.control_sock.recvfrom(65536)
            try:
                req = json.loads(data)
                op = req.get("op")
                if op == "status":
                    self._reply(addr, {"ok": True, "connected": len(self.datapaths), "ready": len(self.ready),
                                       "expected": len(self.leaf_dpids) + len(self.spine_dpids),
                                       "scheduler": self.scheduler.name})
                elif op == "pin" and self.role != "monitor":
                    self._pin(req, addr)
                elif op == "stats":
                    self._reply(addr, {"ok": True, **self._summary()})
                else:
                    self._reply(addr, {"ok": False, "error": f"unknown op {op!r}"})
            except Exception as exc:  # a bad request must not kill the control loop
                LOG.exception("control request failed")
                self._reply(addr, {"ok": False, "error": str(exc)})

    def _pin(self, req: dict, addr) -> None:
        """Give one flow (both directions) a fixed class and path, confirmed by barrier before answering."""
        t0 = time.time()
        src, dst, sport, dport = req["flow"][:4]
        flow = FlowKey(src, dst, int(sport), int(dport))
        decision = Decision(int(req.get("class", 0)), req.get("spine"))
        first = flow not in self.pins
        self.pins[flow] = decision
        touched, mods = [], 0
        for ip in (flow.src_ip, flow.dst_ip):
            dp = self.datapaths.get(leaf_dpid(self.host_by_ip[ip].leaf))
            if dp is None or dp in touched:
                continue
            command = dp.ofproto.OFPFC_ADD if first else dp.ofproto.OFPFC_MODIFY_STRICT
            mods += self._write_flow(dp, flow, decision, PIN_COOKIE, command, reverse_cookie=PIN_COOKIE)
            touched.append(dp)
        self.stats["flowmods"] += mods
        group = self._new_group("pin", t0, mods, addr)
        for dp in touched:
            self._barrier(dp, group)

    # ---------------------------------------------------------------------------------------------- stats
    def _summary(self) -> dict:
        lat = self.stats["event_latency_s"]
        react = self.stats["reactions"]
        elapsed = max(time.time() - self.stats["started_at"], 1e-9)
        changes = getattr(self.scheduler, "changes", None)
        return {
            "scheduler": self.scheduler.name,
            "scheduler_params": self.scheduler.params,
            "poll_interval_s": self.poll_s,
            "poll_rounds": self.stats["poll_rounds"],
            "events_received": self.stats["events"],
            "event_latency_ms_median": None if not lat else 1e3 * statistics.median(lat),
            "event_latency_ms_p99": None if not lat else 1e3 * percentile(lat, 99),
            "flowmods": self.stats["flowmods"],
            "flowmods_per_s": self.stats["flowmods"] / elapsed,
            "reactions": len(react),
            "reaction_latency_ms_median": None if not react else 1e3 * statistics.median(react),
            "reaction_latency_ms_p99": None if not react else 1e3 * percentile(react, 99),
            "decide_calls": self.stats["decide_calls"],
            "class_changes": changes,
            "switches_ready": len(self.ready),
            "elapsed_s": elapsed,
        }

    def _write_stats(self) -> None:
        path = os.path.join(self.out, "monitor_stats.json" if self.role == "monitor" else "controller_stats.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self._summary(), f, indent=2, default=str)
        os.replace(tmp, path)
