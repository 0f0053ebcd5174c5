"""What both controller apps do alike: load the run's configuration, track the switches' OpenFlow connections,
keep a statistics file current, and write it one last time on SIGTERM (the runner's way of stopping them)."""
from __future__ import annotations

import os
import signal
import time
from typing import Dict, List

from controller.framework import (DEAD_DISPATCHER, MAIN_DISPATCHER, App, hub, ofp_event, ofproto_v1_3,
                                  set_ev_cls)
from controller.channels import guarded, load_config, write_stats
from controller.rules import RuleCompiler


class FabricApp(App):
    """Base of the scheduler and monitor apps (the framework instantiates only the classes defined in an app's
    module)."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    STATS_FILE = ""  # in the run directory

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = load_config()
        self.out = self.cfg.out_dir
        self.rules = RuleCompiler(self.cfg.layout)
        self.datapaths: Dict[int, object] = {}
        self.ready: set = set()
        self.started_at = time.time()
        self.failed_loops: List[str] = []  # background loops that died; reported in every status answer
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def spawn(self, loop) -> None:
        hub.spawn(guarded, loop, self.failed_loops)

    def status(self, req: dict, requester) -> dict:
        """The runner's liveness check: switches connected, and loops that died (either fails the run)."""
        return {"ok": True, "connected": len(self.datapaths), "ready": len(self.ready),
                "expected": len(self.rules.dpids), "failed_loops": list(self.failed_loops)}

    def summary(self) -> dict:
        raise NotImplementedError

    def write_stats(self) -> None:
        write_stats(os.path.join(self.out, self.STATS_FILE), self.summary())

    def _on_sigterm(self, signum, frame):
        self.write_stats()
        os._exit(0)

    def stats_file_loop(self):
        while True:
            hub.sleep(1.0)
            self.write_stats()

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev):
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER:
            self.datapaths[dp.id] = dp
        elif ev.state == DEAD_DISPATCHER and self.datapaths.get(dp.id) is dp:
            # (A late goodbye of an old connection must not drop the switch's new one.)
            del self.datapaths[dp.id]
            self.ready.discard(dp.id)
