"""The scheduler app (Ryu, OpenFlow 1.3): forwarding rules, the per-flow scheduling stage, events and decisions.

It stays thin around a pure scheduler (controller/schedulers): events and timers go in, ``decide()`` comes out,
controller/rules.py turns decisions into rules, and only the ingress rules whose decision changed are rewritten.
Forwarding is proactive, from the fabric layout the runner hands over (no discovery, no packet-ins). Per-flow
rules exist under every scheduler (ECMP included, where they do what the default rule would) so that flow
counters, and therefore the reconstruction of GPU idle time, are the same for every policy.

Channels: workers' operation events arrive as JSON datagrams on a Unix socket (a filesystem path reachable from
every namespace, so events never cross the data-plane queues); the runner talks to the app through a second
Unix socket (status, pinning a flow to a class, statistics). Every change is a batch confirmed by barriers
(controller/batches.py); "reaction latency" is trigger (event received / timer) -> last barrier reply.

Counter polling is another process's job (controller/monitor_app.py), so that parsing large stats replies never
delays a reaction. Outputs in the run directory (results/README.md): events.csv, reactions.csv, decisions.csv,
controller_stats.json.
"""
from __future__ import annotations

import logging
import os
import statistics
import time
from typing import Dict, Tuple

from ryu.controller import ofp_event
from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from ryu.lib import hub

from controller import ofp
from controller.batches import Batch, ChangeBatches
from controller.channels import ControlServer, Csv
from controller.fabric_app import FabricApp
from controller.rules import PIN_COOKIE, changed_decisions, flow_cookie
from controller.schedulers.registry import make_scheduler
from core.model import Decision, FlowKey
from core.stats import percentile
from workloads.events import EventReceiver

LOG = logging.getLogger("flux.controller")


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
        self.installed: Dict[FlowKey, Decision] = {}
        self.pins: Dict[FlowKey, Decision] = {}
        self.batches = ChangeBatches()
        self.stats = {"events": 0, "event_latency_s": [], "flowmods": 0, "reactions": [], "decide_calls": 0}

        self.event_csv = Csv(os.path.join(self.out, "events.csv"),
                             ["sent", "received", "kind", "job", "rank", "iteration", "bucket", "bytes_done"])
        self.reaction_csv = Csv(os.path.join(self.out, "reactions.csv"),
                                ["time", "trigger", "flowmods", "latency_s", "decide_and_send_s"])
        self.decision_csv = Csv(os.path.join(self.out, "decisions.csv"),
                                ["time", "job", "bucket", "rank", "priority_class", "path"])
        self.event_receiver = EventReceiver(cfg.events_socket)  # (RyuApp uses self.events)
        self.control = ControlServer(cfg.control_socket, {
            "status": self._status, "pin": self._pin,
            "stats": lambda req, requester: {"ok": True, **self.summary()}})
        # Events and the periodic timer both reconcile; sending flow-mods can yield to the other green thread,
        # which must not interleave an older decision with a newer one.
        self._reconciling = hub.BoundedSemaphore(1)
        for loop in (self._worker_event_loop, self.control.serve_forever, self._periodic_decide_loop,
                     self.stats_file_loop):
            self.spawn(loop)
        LOG.info("scheduler %s, %d jobs, %d flows", self.scheduler.name, len(cfg.jobs), len(self.flows))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _switch_features(self, ev):
        dp = ev.msg.datapath
        if dp.id not in self.rules.name_of:
            LOG.warning("switch %016x is not part of the fabric; ignoring it", dp.id)
            return
        for msg in ofp.clear_switch(dp):
            dp.send_msg(msg)
        for group in self.rules.groups(dp.id):
            dp.send_msg(ofp.select_group_add(dp, group))
        rules = self.rules.switch_rules(dp.id)
        wanted = self._wanted(time.time())
        for flow, (job, bucket, rank) in self.flows.items():
            decision = wanted.get(flow, Decision())
            rules += self.rules.flow_rules(flow, decision, flow_cookie(job, bucket, rank, False),
                                           flow_cookie(job, bucket, rank, True), at_dpid=dp.id)
            self.installed[flow] = decision
        for flow, decision in self.pins.items():
            rules += self.rules.flow_rules(flow, decision, PIN_COOKIE, PIN_COOKIE, at_dpid=dp.id)
        add = dp.ofproto.OFPFC_ADD
        for rule in rules:
            dp.send_msg(ofp.flow_mod(dp, rule, add))
        self._confirm(self.batches.open("setup", time.time()), [dp])

    def _send(self, rules, stale, touched: dict, modify_ingress: bool = True) -> int:
        """Send a flow's rules (its ingress rule modified in place, so that its counters survive; transit rules
        added) and delete its stale transit rules. Returns the number of flow-mods sent."""
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
    def _wanted(self, now: float) -> Dict[FlowKey, Decision]:
        self.stats["decide_calls"] += 1
        try:
            return self.scheduler.decide(now)
        except Exception:
            LOG.exception("scheduler %s failed to decide; keeping the installed rules", self.scheduler.name)
            return dict(self.installed)

    def _reconcile(self, trigger: str, t0: float) -> None:
        with self._reconciling:
            self._reconcile_now(trigger, t0)

    def _reconcile_now(self, trigger: str, t0: float) -> None:
        if not self.ready:
            return
        changed = changed_decisions(self.flows, self.installed, self._wanted(time.time()))
        if not changed:
            return
        touched, mods, rows, now = {}, 0, [], time.time()
        for flow, d in changed.items():
            job, bucket, rank = self.flows[flow]
            cookie = flow_cookie(job, bucket, rank, False)
            try:
                rules = self.rules.flow_rules(flow, d, cookie, reverse=False)
            except ValueError as exc:  # a policy bug: keep the flow as it is and say so
                LOG.error("%s", exc)
                continue
            mods += self._send(rules, self.rules.stale_transit_rules(flow, d, cookie), touched)
            self.installed[flow] = d
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
            LOG.info("switch %016x ready (%d/%d)", ev.msg.datapath.id, len(self.ready), len(self.rules.dpids))
            return
        if not complete:
            return
        latency = time.time() - batch.t0
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
                self.scheduler.on_event(ev, received)
                trigger = trigger or ev.kind in self.scheduler.reconcile_on
            self.event_csv.write_many(rows)
            if trigger:
                self._reconcile("event", batch[0].received_at)

    def _periodic_decide_loop(self):
        period = getattr(self.scheduler, "period_s", None)
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
        first = flow not in self.pins
        self.pins[flow] = decision
        touched: dict = {}
        mods = self._send(self.rules.flow_rules(flow, decision, PIN_COOKIE, PIN_COOKIE),
                          self.rules.stale_transit_rules(flow, decision, PIN_COOKIE), touched, modify_ingress=not first)
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
            "decide_calls": self.stats["decide_calls"],
            "class_changes": getattr(self.scheduler, "changes", None),
            "switches_ready": len(self.ready),
            "elapsed_s": elapsed,
        }
