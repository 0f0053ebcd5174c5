"""The schedulers by name, for the controller and the experiment runner.

``make_scheduler("flux", fabric, jobs, parse_params(["alpha=0.7"]))`` builds a policy from command-line style
``key=value`` parameters; each scheduler class lists its parameters and defaults in ``defaults`` and rejects
names it does not know.

A name is one of the shipped schedulers, a name that an installed package registers in the entry point group
``flux_testbed.schedulers``, or ``package.module:ClassName``: a subclass of ``Scheduler`` importable from the
Python path (docs/writing-a-scheduler.md).
"""
from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import entry_points
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


ENTRY_POINT_GROUP = "flux_testbed.schedulers"


def _registered() -> Dict[str, Any]:
    """Entry points of installed packages, by name (the shipped names win)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in SCHEDULERS}


def scheduler_names() -> List[str]:
    """The shipped schedulers and those installed packages register."""
    return sorted(set(SCHEDULERS) | set(_registered()))


def _check_class(name: str, obj: Any) -> Type[Scheduler]:
    if not (isinstance(obj, type) and issubclass(obj, Scheduler)):
        raise ValueError(f"scheduler {name!r} is not a subclass of controller.schedulers.base.Scheduler")
    return obj


def scheduler_class(name: str) -> Type[Scheduler]:
    """The class a scheduler name stands for: shipped, registered by an entry point, or ``module:Class``.
    ValueError, in one line, for anything else."""
    if name in SCHEDULERS:
        return SCHEDULERS[name]
    registered = _registered()
    if name in registered:
        try:
            return _check_class(name, registered[name].load())
        except ImportError as exc:
            raise ValueError(f"scheduler {name!r}: its package failed to import: {exc}")
    module_name, sep, class_name = name.partition(":")
    if not sep:
        raise ValueError(f"unknown scheduler {name!r}; known: {', '.join(scheduler_names())}, "
                         "or package.module:ClassName")
    if not module_name or not class_name.isidentifier():
        raise ValueError(f"scheduler {name!r}: write package.module:ClassName")
    # As ``python -m`` does, the directory the command was started from is searched too (after the rest).
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"scheduler {name!r}: cannot import {module_name!r} ({exc})")
    except Exception as exc:  # the user's module raised while importing: say so in one line
        raise ValueError(f"scheduler {name!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}")
    if not hasattr(module, class_name):
        raise ValueError(f"scheduler {name!r}: {module_name!r} has no {class_name!r}")
    return _check_class(name, getattr(module, class_name))


def module_root(name: str) -> str:
    """For ``package.module:Class``, the directory its top-level package is imported from (for child processes'
    PYTHONPATH); "" for a shipped or registered name."""
    if name in SCHEDULERS or ":" not in name:
        return ""
    top = sys.modules.get(name.partition(":")[0].split(".")[0])
    path = getattr(top, "__file__", None)
    if not path:
        return ""
    path = os.path.dirname(os.path.abspath(path))   # a module's folder, or a package's own folder
    return os.path.dirname(path) if hasattr(top, "__path__") else path


def make_scheduler(name: str, fabric: FabricView, jobs: Sequence[JobSpec],
                   params: Optional[Mapping[str, Any]] = None) -> Scheduler:
    """A new scheduler of the given name; ValueError for an unknown name or parameter."""
    return scheduler_class(name)(fabric, jobs, params)


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
