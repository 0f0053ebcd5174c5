"""The plan of one run, typed: what the run command checked (cli/run.py) and what either engine needs to run it.

Both engines take a ``RunPlan`` (testbed/emulation.py ``run``, twin ``run_fluid``) and record it in the run's
``config.json`` through ``RunPlan.config``, so the keys common to both are written in one place; each engine
adds only its own (``EmulationSettings``, ``TwinSettings``).
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from core.config import DEFAULT_POLL_INTERVAL_S
from core.fabric import FabricLayout, FabricSpec
from core.faults import Fault
from core.model import JobSpec
from core.queues import DEFAULT_FLOOR, DEFAULT_QUEUE_MS
from core.transport import DEFAULT_PROFILE, PROFILES, TransportProfile

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class EmulationSettings:
    """What only the emulation uses."""

    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    controller_recovery: str = "restart"    # a controller that dies mid-run: "restart" it, or "fail" the run
    controller_framework: str = "ryu"       # what the controller apps run on: ryu or os-ken (controller/framework.py)
    datapath: str = "auto"                  # Open vSwitch datapath: auto, kernel or user
    skip_checks: bool = False
    no_workload: bool = False


@dataclass(frozen=True)
class TwinSettings:
    """What only the twin uses (twin/model.py names the models and terms)."""

    model: Any = "calibrated"               # a model's name, a JSON file, or ModelParams / a mapping of terms
    overrides: Tuple[str, ...] = ()         # "term=value" over the model's
    hash_model: str = "ovs"
    hash_seed: Optional[int] = None         # the salted hash's seed (None: the run's seed)
    ring_model: str = "auto"


@dataclass
class RunPlan:
    """One run: the fabric, the jobs as placed and scaled, the scheduler, and the run's settings."""

    spec: FabricSpec
    layout: FabricLayout
    scenario: Any                           # workloads.scenario.ResolvedScenario
    jobs: List[JobSpec]
    scheduler: str = "ecmp"
    scheduler_params: Dict[str, Any] = field(default_factory=dict)
    scenario_path: Optional[str] = None
    faults: List[Fault] = field(default_factory=list)
    transport: TransportProfile = PROFILES[DEFAULT_PROFILE]
    seed: int = 1
    class_floor: float = DEFAULT_FLOOR
    class_mode: str = "strict"
    queue_ms: float = DEFAULT_QUEUE_MS
    time_limit_s: float = 900.0
    iterations_override: Optional[int] = None
    run_id: str = ""
    out: str = ""
    command: str = ""
    flags: Dict[str, Any] = field(default_factory=dict)    # every flag by name, for sweeps to read back
    quiet: bool = False
    emulation: EmulationSettings = EmulationSettings()
    twin: TwinSettings = TwinSettings()

    def named(self, run_id: Optional[str] = None, out: Optional[str] = None) -> "RunPlan":
        """Give the run its id (default: time, scheduler, scenario, seed) and folder (default results/<id>)."""
        self.run_id = run_id or default_run_id(self.scheduler, self.scenario.name, self.seed)
        self.out = os.path.abspath(out or os.path.join(PROJECT_DIR, "results", self.run_id))
        return self

    def config(self, engine: str, **engine_keys: Any) -> Dict[str, Any]:
        """The run's config.json: the keys both engines record, then ``engine_keys``."""
        return {
            "engine": engine,
            "run_id": self.run_id, "scheduler": self.scheduler, "scheduler_params": self.scheduler_params,
            "scenario_file": self.scenario_path, "scenario": self.scenario.to_dict(), "seed": self.seed,
            "fabric": vars(self.spec) | {"oversubscription": self.spec.oversubscription},
            "class_floor": self.class_floor, "class_mode": self.class_mode, "queue_ms": self.queue_ms,
            "transport": self.transport.to_dict() if self.transport else None,
            "time_limit_s": self.time_limit_s,
            **engine_keys,
            "command": self.command,
            "flags": dict(self.flags),
        }

    def emulation_config(self) -> Dict[str, Any]:
        e = self.emulation
        return self.config("emulation", poll_interval_s=e.poll_interval_s,
                           iterations_override=self.iterations_override,
                           faults=[f.text for f in self.faults], controller_recovery=e.controller_recovery,
                           controller_framework=e.controller_framework)


def default_run_id(scheduler: str, scenario_name: str, seed: int) -> str:
    """Time, scheduler, scenario and seed (a ``module:Class`` scheduler's punctuation made safe for a folder)."""
    safe = re.sub(r"[^A-Za-z0-9_+-]+", "-", scheduler)
    return "{}-{}-{}-s{}".format(time.strftime("%Y%m%d-%H%M%S"), safe, scenario_name, seed)
