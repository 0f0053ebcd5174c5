"""Scheduler names as the sweep, the suite and the bounds take them: a shipped name (``crux``), an entry point of
``flux_testbed.schedulers``, or ``package.module:ClassName`` (controller/schedulers/registry.py), checked before
anything runs; and the safe folder-name part each one gets."""
from __future__ import annotations

import re
from typing import Dict, Sequence


def scheduler_classes(names: Sequence[str]) -> Dict[str, type]:
    """Name -> scheduler class for every name; ValueError with the registry's one-line message for the first name
    it does not know."""
    from controller.schedulers.registry import scheduler_class
    return {name: scheduler_class(name) for name in names}


def folder_label(name: str) -> str:
    """The scheduler's name as one safe folder-name part: ``mypkg.mine:MyScheduler`` -> ``mypkg-mine-MyScheduler``
    (shipped names are unchanged)."""
    return re.sub(r"[^A-Za-z0-9_+-]", "-", name) or "x"
