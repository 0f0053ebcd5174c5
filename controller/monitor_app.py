"""The monitor app (Ryu or os-ken, OpenFlow 1.3): polls port and flow counters over its own connection to every switch.

It never touches a rule. It runs as its own process beside the scheduler app (controller/scheduler_app.py), so
that parsing stats replies (tens of ms of Python per round) never delays a reaction to an event. Outputs in the
run directory (results/README.md): port_stats.csv, flow_stats.csv, monitor_stats.json.
"""
from __future__ import annotations

import logging
import os
import time

from controller import ofp
from controller.batches import ChangeBatches
from controller.channels import ControlServer, Csv
from controller.fabric_app import FabricApp
from controller.framework import CONFIG_DISPATCHER, MAIN_DISPATCHER, hub, ofp_event, set_ev_cls
from controller.rules import decode_cookie
from core.config import RESYNC_ENV

LOG = logging.getLogger("flux.controller")
MAX_COUNTER = 2 ** 64 - 1  # ports being deleted report all ones


class MonitorApp(FabricApp):
    STATS_FILE = "monitor_stats.json"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        self.poll_s = cfg.poll_interval_s
        self.batches = ChangeBatches()
        self.poll_rounds = 0
        # A restarted monitor (the runner's recovery) goes on with its predecessor's series.
        resync = os.environ.get(RESYNC_ENV) == "1"
        self.port_csv = Csv(os.path.join(self.out, "port_stats.csv"),
                            ["time", "dpid", "port", "rx_bytes", "tx_bytes", "rx_packets", "tx_packets",
                             "tx_dropped"], append=resync)
        self.flow_csv = Csv(os.path.join(self.out, "flow_stats.csv"),
                            ["time", "dpid", "job", "bucket", "rank", "reverse", "packets", "bytes"], append=resync)
        self.control = ControlServer(cfg.monitor_socket, {
            "status": self.status, "stats": lambda req, requester: {"ok": True, **self.summary()}})
        for loop in (self._counter_poll_loop, self.control.serve_forever, self.stats_file_loop):
            self.spawn(loop)
        LOG.info("monitor: polling all flows and ports every %.3f s", self.poll_s)

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _switch_features(self, ev):
        # A switch is polled once its connection has answered a barrier.
        dp = ev.msg.datapath
        req = ofp.barrier(dp)
        self.batches.expect(self.batches.open("setup", time.time()), dp.id, req.xid)
        dp.send_msg(req)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier_reply(self, ev):
        if self.batches.on_reply(ev.msg.datapath.id, ev.msg.xid) is not None:
            self.ready.add(ev.msg.datapath.id)

    def _counter_poll_loop(self):
        while True:
            started = time.time()
            for dpid, dp in list(self.datapaths.items()):
                if dpid not in self.ready:
                    continue
                dp.send_msg(ofp.port_stats_request(dp))
                if dpid in self.rules.leaf_dpids:  # per-flow rules live at the leaves
                    dp.send_msg(ofp.flow_stats_request(dp))
            self.poll_rounds += 1
            hub.sleep(max(0.0, self.poll_s - (time.time() - started)))

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev):
        now = f"{time.time():.6f}"
        dpid = ev.msg.datapath.id
        rows = [[now, dpid, s.port_no, s.rx_bytes, s.tx_bytes, s.rx_packets, s.tx_packets, s.tx_dropped]
                for s in ev.msg.body
                if s.port_no <= 0xffffff00 and s.tx_bytes != MAX_COUNTER and s.rx_bytes != MAX_COUNTER]
        self.port_csv.write_many(rows)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats(self, ev):
        now = f"{time.time():.6f}"
        dpid = ev.msg.datapath.id
        rows = []
        for s in ev.msg.body:
            ids = decode_cookie(s.cookie)
            if ids is not None:
                rows.append([now, dpid, *ids, s.packet_count, s.byte_count])
        self.flow_csv.write_many(rows)

    def summary(self) -> dict:
        return {"poll_interval_s": self.poll_s, "poll_rounds": self.poll_rounds,
                "switches_ready": len(self.ready), "elapsed_s": time.time() - self.started_at}
