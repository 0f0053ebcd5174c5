"""The scheduler app (Ryu or os-ken, OpenFlow 1.3): forwarding rules, the per-flow scheduling stage, events and
decisions.

It stays thin around the pure control loop (controller/loop.py, the one the twin drives too): events and timers
go in, the decisions that changed come out, controller/rules.py turns them into rules, and only the ingress rules
whose decision changed are rewritten.
Forwarding is proactive, from the fabric layout the runner hands over (no discovery, no packet-ins). Per-flow
rules exist under every scheduler (ECMP included, where they do what the default rule would) so that flow
counters, and therefore the reconstruction of GPU idle time, are the same for every policy.

Channels: workers' operation events arrive as JSON datagrams on a Unix socket (a filesystem path reachable from
every namespace, so events never cross the data-plane queues); the runner talks to the app through a second
Unix socket (status, pinning a flow to a class, statistics). Every change is a batch confirmed by barriers
(controller/batches.py); "reaction latency" is trigger (event received / timer) -> last barrier reply.

Faults: a port going down or up (OFPT_PORT_STATUS, and the port descriptions read when a switch connects)
changes the fabric the rules are compiled for: the groups' buckets are rewritten from the links that are left,
the scheduler is told (``on_fabric_change``) and places its paths again, and every flow's rules are rewritten.
A controller restarted by the runner (``FLUX_CONTROLLER_RESYNC=1``) takes over the switches without clearing
them (they kept forwarding in secure fail mode): it rewrites every rule in place, which keeps flow counters.

Counter polling is another process's job (controller/monitor_app.py), so that parsing large stats replies never
delays a reaction. Outputs in the run directory (results/README.md): events.csv, reactions.csv, decisions.csv,
controller_stats.json.
"""
from __future__ import annotations

import logging
import os
import statistics
import time
from typing import Dict, FrozenSet, Optional, Set, Tuple

from controller import ofp
from controller.batches import Batch, ChangeBatches
from controller.channels import ControlServer, Csv
from controller.fabric_app import FabricApp
from controller.framework import CONFIG_DISPATCHER, MAIN_DISPATCHER, hub, ofp_event, set_ev_cls
from controller.loop import ControlLoop
from controller.rules import PIN_COOKIE, RuleCompiler, flow_cookie
from controller.schedulers.registry import make_scheduler
from core.config import RESYNC_ENV
from core.model import Decision, FlowKey
from core.stats import percentile
from workloads.events import EventReceiver

LOG = logging.getLogger("flux.controller")
# Port changes closer together than this are one fabric change (a switch's ports go down one by one).
FABRIC_SETTLE_S = 0.01


class SchedulerApp(FabricApp):
    STATS_FILE = "controller_stats.json"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        self.scheduler = make_scheduler(cfg.scheduler, cfg.layout.view(), list(cfg.jobs), cfg.scheduler_params)
        # Every data flow of every job: flow -> (job, bucket, rank).
        self.flows: Dict[FlowKey, Tuple[int, int, int]] = {
            job.flow(r, b): (job.index, b, r)
            for job in cfg.jobs for b in range(len(job.model.buckets)) for r in range(job.workers)}
        self.loop = ControlLoop(self.scheduler, list(self.flows))
        self.batches = ChangeBatches()
        self.stats = {"events": 0, "event_latency_s": [], "flowmods": 0, "reactions": [],
                      "fabric_changes": []}
        self.resync = os.environ.get(RESYNC_ENV) == "1"
        self.down_ports: Set[Tuple[int, int]] = set()   # (dpid, port) reported down
        self.down_links: FrozenSet = frozenset()
        self._fabric_pending = None   # time of the first port change not yet acted on

        # A restarted controller appends to its predecessor's files.
        self.event_csv = Csv(os.path.join(self.out, "events.csv"),
                             ["sent", "received", "kind", "job", "rank", "iteration", "bucket", "bytes_done"],
                             append=self.resync)
        self.reaction_csv = Csv(os.path.join(self.out, "reactions.csv"),
                                ["time", "trigger", "flowmods", "latency_s", "decide_and_send_s"], append=self.resync)
        self.decision_csv = Csv(os.path.join(self.out, "decisions.csv"),
                                ["time", "job", "bucket", "rank", "priority_class", "path"], append=self.resync)
        self.event_receiver = EventReceiver(cfg.events_socket)  # (the framework's app uses self.events)
        self.control = ControlServer(cfg.control_socket, {
            "status": self._status, "pin": self._pin,
            "stats": lambda req, requester: {"ok": True, **self.summary()}})
        # Events and the periodic timer both reconcile; sending flow-mods can yield to the other green thread,
        # which must not interleave an older decision with a newer one.
        self._reconciling = hub.BoundedSemaphore(1)
        for loop in (self._worker_event_loop, self.control.serve_forever, self._periodic_decide_loop,
                     self.stats_file_loop):
            self.spawn(loop)
        LOG.info("scheduler %s, %d jobs, %d flows%s", self.scheduler.name, len(cfg.jobs), len(self.flows),
                 " (restarted: taking over the switches' rules)" if self.resync else "")

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _switch_features(self, ev):
        dp = ev.msg.datapath
        if dp.id not in self.rules.name_of:
            LOG.warning("switch %016x is not part of the fabric; ignoring it", dp.id)
            return
        if not self.resync:
            for msg in ofp.clear_switch(dp):
                dp.send_msg(msg)
        for group in self.rules.groups(dp.id):
            dp.send_msg(ofp.select_group(dp, group, modify=self.resync))
        # The ports' state now (a link may have failed before this connection): answered in _port_desc.
        dp.send_msg(ofp.port_desc_request(dp))
        rules = self.rules.switch_rules(dp.id)
        decisions = self.loop.install_all(time.time())
        for flow, (job, bucket, rank) in self.flows.items():
            rules += self.rules.flow_rules(flow, decisions[flow], flow_cookie(job, bucket, rank, False),
                                           flow_cookie(job, bucket, rank, True), at_dpid=dp.id)
        for flow, decision in self.loop.pins.items():
            rules += self.rules.flow_rules(flow, decision, PIN_COOKIE, PIN_COOKIE, at_dpid=dp.id)
        add = dp.ofproto.OFPFC_ADD
        for rule in rules:
            dp.send_msg(ofp.flow_mod(dp, rule, add))
        self._confirm(self.batches.open("setup", time.time()), [dp])

    # ---------------------------------------------------------------------------------------------- faults
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        msg, t0 = ev.msg, time.time()
        dp = msg.datapath
        down = msg.reason == dp.ofproto.OFPPR_DELETE or self._port_is_down(dp, msg.desc)
        self._set_port(dp.id, msg.desc.port_no, down)
        self._fabric_changed_soon(t0)

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def _port_desc(self, ev):
        t0, dp = time.time(), ev.msg.datapath
        for port in ev.msg.body:
            if port.port_no <= dp.ofproto.OFPP_MAX:
                self._set_port(dp.id, port.port_no, self._port_is_down(dp, port))
        self._fabric_changed(t0)

    @staticmethod
    def _port_is_down(dp, port) -> bool:
        return bool(port.state & dp.ofproto.OFPPS_LINK_DOWN or port.config & dp.ofproto.OFPPC_PORT_DOWN)

    def _set_port(self, dpid: int, port: int, down: bool) -> None:
        if down:
            self.down_ports.add((dpid, port))
        else:
            self.down_ports.discard((dpid, port))

    def _fabric_changed_soon(self, t0: float) -> None:
        """Recompile once for a burst of port changes (a switch going down reports every port, and each end of a
        link reports its own), FABRIC_SETTLE_S after the first of them."""
        if self._fabric_pending is None:
            self._fabric_pending = t0
            hub.spawn_after(FABRIC_SETTLE_S, self._fabric_settled)

    def _fabric_settled(self) -> None:
        t0, self._fabric_pending = self._fabric_pending, None
        self._fabric_changed(t0)

    def _fabric_changed(self, t0: float) -> None:
        """Recompile everything for the links that are up, if that set changed: groups' buckets, the scheduler's
        paths and every flow's rules, confirmed as one batch (its latency is the rerouting time)."""
        layout = self.cfg.layout
        down = frozenset(link for link in layout.links
                         if (layout.dpid_of[link.a], link.a_port) in self.down_ports
                         or (layout.dpid_of[link.b], link.b_port) in self.down_ports)
        if down == self.down_links:
            return
        self.down_links = down
        live = layout.without(down)
        self.rules = RuleCompiler(live)
        names = sorted(f"{link.a}-{link.b}" for link in down)
        LOG.warning("fabric changed: links down: %s", ", ".join(names) or "none")
        with self._reconciling:
            decisions = self.loop.fabric_change(time.time(), live.view())
            touched, mods = {}, 0
            for dpid, dp in self.datapaths.items():
                if dpid in self.ready:
                    for group in self.rules.groups(dpid):
                        dp.send_msg(ofp.select_group(dp, group, modify=True))
                        mods += 1
                    touched[dpid] = dp
            for flow, (job, bucket, rank) in self.flows.items():
                try:
                    mods += self._rewrite(flow, decisions[flow], flow_cookie(job, bucket, rank, False), touched)
                except ValueError as exc:
                    LOG.error("%s", exc)
                    self.loop.revert(flow, None)
            for flow, d in self.loop.pins.items():
                mods += self._rewrite(flow, d, PIN_COOKIE, touched)
            self.stats["flowmods"] += mods
            batch = self.batches.open("fabric", t0, mods)
            batch.sent_at = time.time()
            batch.note = {"time": t0, "links_down": names, "flowmods": mods}
            self._confirm(batch, touched.values())

    def _rewrite(self, flow: FlowKey, decision: Decision, cookie: int, touched: dict,
                 reverse_cookie: Optional[int] = None, modify_ingress: bool = True) -> int:
        """Send a flow's rules for ``decision`` (its ingress rule modified in place, so that its counters survive;
        transit rules added; with ``reverse_cookie`` its ACK direction's too) and delete its stale transit rules.
        Returns the number of flow-mods sent; ValueError for a decision the fabric cannot carry."""
        rules = self.rules.flow_rules(flow, decision, cookie, reverse_cookie or 0, reverse=reverse_cookie is not None)
        stale = self.rules.stale_transit_rules(flow, decision, cookie)
        mods = 0
        for rule, command in [(r, "modify" if modify_ingress and not r.transit else "add") for r in rules] + \
                [(r, "delete") for r in stale]:
            dp = self.datapaths.get(rule.dpid)
            if dp is None or rule.dpid not in self.ready:
                continue
            dp.send_msg(ofp.flow_mod(dp, rule, ofp.command(dp, command)))
            touched[rule.dpid] = dp
            mods += 1
        return mods

    # ------------------------------------------------------------------------------------------- decisions
    def _reconcile(self, trigger: str, t0: float) -> None:
        with self._reconciling:
            self._reconcile_now(trigger, t0)

    def _reconcile_now(self, trigger: str, t0: float) -> None:
        if not self.ready:
            return
        changed = self.loop.reconcile(time.time())
        if not changed:
            return
        touched, mods, rows, now = {}, 0, [], time.time()
        for flow, d in changed.items():
            job, bucket, rank = self.flows[flow]
            try:
                mods += self._rewrite(flow, d, flow_cookie(job, bucket, rank, False), touched)
            except ValueError as exc:  # a policy bug: keep the flow as it is, say so, and try again next time
                LOG.error("%s", exc)
                self.loop.revert(flow, None)
                continue
            rows.append([f"{now:.6f}", job, bucket, rank, d.priority_class, "" if d.path is None else d.path])
        self.decision_csv.write_many(rows)
        self.stats["flowmods"] += mods
        batch = self.batches.open(trigger, t0, mods)
        batch.sent_at = time.time()
        self._confirm(batch, touched.values())

    def _confirm(self, batch: Batch, datapaths) -> None:
        for dp in datapaths:
            req = ofp.barrier(dp)
            self.batches.expect(batch, dp.id, req.xid)
            dp.send_msg(req)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier_reply(self, ev):
        found = self.batches.on_reply(ev.msg.datapath.id, ev.msg.xid)
        if found is None:
            return
        batch, complete = found
        if batch.trigger == "setup":
            self.ready.add(ev.msg.datapath.id)
            if self.resync and len(self.ready) == len(self.rules.dpids):
                # Every switch's rules were rewritten in place: decisions made from here on are diffed against
                # what this controller installed, and the predecessor's are gone.
                LOG.info("taken over all %d switches", len(self.ready))
            LOG.info("switch %016x ready (%d/%d)", ev.msg.datapath.id, len(self.ready), len(self.rules.dpids))
            return
        if not complete:
            return
        latency = time.time() - batch.t0
        if batch.trigger == "fabric":
            self.stats["fabric_changes"].append(dict(batch.note, latency_s=latency))
        self.stats["reactions"].append(latency)
        self.reaction_csv.write([f"{time.time():.6f}", batch.trigger, batch.flowmods, f"{latency:.6f}",
                                 "" if batch.sent_at is None else f"{batch.sent_at - batch.t0:.6f}"])
        if batch.reply_to:
            self.control.reply(batch.reply_to, {"ok": True, "latency_s": latency, "flowmods": batch.flowmods})

    # ------------------------------------------------------------------------------------------------ loops
    def _worker_event_loop(self):
        while True:
            batch = self.event_receiver.recv_batch()
            rows, trigger = [], False
            for item in batch:
                ev, received = item.event, item.received_at
                self.stats["events"] += 1
                self.stats["event_latency_s"].append(received - ev.time)
                rows.append([f"{ev.time:.6f}", f"{received:.6f}", ev.kind, ev.job, ev.rank, ev.iteration,
                             ev.bucket, ev.bytes_done])
                trigger = self.loop.on_events(received, [ev]) or trigger
            self.event_csv.write_many(rows)
            if trigger:
                self._reconcile("event", batch[0].received_at)

    def _periodic_decide_loop(self):
        period = self.loop.period_s
        if not period:
            return
        while True:
            hub.sleep(period)
            self._reconcile("periodic", time.time())

    # ------------------------------------------------------------------------------------------ the runner
    def _status(self, req: dict, requester) -> dict:
        return dict(self.status(req, requester), scheduler=self.scheduler.name)

    def _pin(self, req: dict, requester) -> None:
        """Give one flow (both directions) a fixed class and path, confirmed by barrier before answering."""
        t0 = time.time()
        src, dst, sport, dport = req["flow"][:4]
        flow = FlowKey(src, dst, int(sport), int(dport))
        decision = Decision(int(req.get("class", 0)), req.get("path"))
        first = self.loop.pin(flow, decision)
        touched: dict = {}
        mods = self._rewrite(flow, decision, PIN_COOKIE, touched, reverse_cookie=PIN_COOKIE, modify_ingress=not first)
        self.stats["flowmods"] += mods
        self._confirm(self.batches.open("pin", t0, mods, reply_to=requester), touched.values())

    def summary(self) -> dict:
        lat, react = self.stats["event_latency_s"], self.stats["reactions"]
        elapsed = max(time.time() - self.started_at, 1e-9)
        return {
            "scheduler": self.scheduler.name,
            "scheduler_params": self.scheduler.params,
            "events_received": self.stats["events"],
            "event_latency_ms_median": None if not lat else 1e3 * statistics.median(lat),
            "event_latency_ms_p99": None if not lat else 1e3 * percentile(lat, 99),
            "flowmods": self.stats["flowmods"],
            "flowmods_per_s": self.stats["flowmods"] / elapsed,
            "reactions": len(react),
            "reaction_latency_ms_median": None if not react else 1e3 * statistics.median(react),
            "reaction_latency_ms_p99": None if not react else 1e3 * percentile(react, 99),
            "decide_calls": self.loop.decide_calls,
            "scheduler_errors": self.loop.errors,
            "class_changes": getattr(self.scheduler, "changes", None),
            "steals": getattr(self.scheduler, "steals", None),          # flux (v2): operations that stole slack
            "lowered": getattr(self.scheduler, "lowered", None),        # flux (v2): launches placed lower
            "reorders": getattr(self.scheduler, "reorders", None),      # online crux/flux: orders placed again
            "jobs_arrived": len(self.loop.arrived), "jobs_departed": len(self.loop.departed),
            "switches_ready": len(self.ready),
            "fabric_changes": self.stats["fabric_changes"],
            "resynchronised": self.resync,
            "elapsed_s": elapsed,
        }
