"""The controller's configuration: what the runner hands to the controller processes, typed.

The runner (testbed/fabric.py) builds a ``ControllerConfig`` and writes it as JSON into the run folder; each
controller app (controller/scheduler_app.py, controller/monitor_app.py) reads it back. Defaults that several
layers share live here once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import List

from core.fabric import FabricLayout
from core.model import JobSpec

DEFAULT_POLL_INTERVAL_S = 0.1  # the controller's counter polling interval
# Set to "1" in the environment of a controller the runner restarts: it takes over the switches' rules instead
# of clearing them, and appends to its predecessor's output files.
RESYNC_ENV = "FLUX_CONTROLLER_RESYNC"


@dataclass(frozen=True)
class ControllerConfig:
    layout: FabricLayout
    jobs: List[JobSpec]
    scheduler: str
    out_dir: str
    events_socket: str
    control_socket: str
    monitor_socket: str
    scheduler_params: dict = field(default_factory=dict)
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S

    def to_json(self) -> str:
        return json.dumps({
            "layout": self.layout.to_dict(), "jobs": [j.to_dict() for j in self.jobs], "scheduler": self.scheduler,
            "scheduler_params": self.scheduler_params, "poll_interval_s": self.poll_interval_s,
            "out_dir": self.out_dir, "events_socket": self.events_socket, "control_socket": self.control_socket,
            "monitor_socket": self.monitor_socket,
        }, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "ControllerConfig":
        d = json.loads(text)
        return cls(layout=FabricLayout.from_dict(d["layout"]), jobs=[JobSpec.from_dict(j) for j in d["jobs"]],
                   scheduler=d["scheduler"], out_dir=d["out_dir"], events_socket=d["events_socket"],
                   control_socket=d["control_socket"], monitor_socket=d["monitor_socket"],
                   scheduler_params=d.get("scheduler_params") or {},
                   poll_interval_s=float(d.get("poll_interval_s", DEFAULT_POLL_INTERVAL_S)))
