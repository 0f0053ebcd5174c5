"""The schedulers by name, for the controller and the experiment runner.

``make_scheduler("flux", fabric, jobs, parse_params(["alpha=0.7"]))`` builds a policy from command-line style
``key=value`` parameters; each scheduler class lists its parameters and defaults in ``defaults`` and rejects
names it does not know.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Type

from controller.schedulers.base import EcmpScheduler, Scheduler
from controller.schedulers.bytescheduler import ByteScheduler
from controller.schedulers.crux import CruxScheduler
from controller.schedulers.flux import FluxScheduler
from controller.schedulers.flux_v1 import FluxV1Scheduler
from core.fabric import FabricView
from core.model import JobSpec

SCHEDULERS: Dict[str, Type[Scheduler]] = {
    "ecmp": EcmpScheduler,
    "bytescheduler": ByteScheduler,
    "crux": CruxScheduler,
    "flux": FluxScheduler,
    "flux-v1": FluxV1Scheduler,
}


def scheduler_names() -> List[str]:
    return sorted(SCHEDULERS)


def make_scheduler(name: str, fabric: FabricView, jobs: Sequence[JobSpec],
                   params: Optional[Mapping[str, Any]] = None) -> Scheduler:
    """A new scheduler of the given name; ValueError for an unknown name or parameter."""
    cls = SCHEDULERS.get(name)
    if cls is None:
        raise ValueError(f"unknown scheduler {name!r}; known: {', '.join(scheduler_names())}")
    return cls(fabric, jobs, params)


def _convert(text: str) -> Any:
    """int, then float, then true/false/none, else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_params(items: Iterable[str]) -> Dict[str, Any]:
    """``["alpha=0.5", "paths=hop"]`` -> ``{"alpha": 0.5, "paths": "hop"}`` (later items win)."""
    out: Dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"parameter {item!r} is not of the form name=value")
        out[key] = _convert(value)
    return out
