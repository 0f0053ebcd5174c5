"""The scenario suite (workloads/scenarios/suite/): its scenarios, the fabric each runs on, the variants
(scheduler plus parameters) it compares, and each job's figures in a suite folder's summary tables."""
from __future__ import annotations

import os
from typing import Dict, List, Optional

import numpy as np

from analysis.schedulers import folder_label, scheduler_classes
from experiment.results import CLUSTER, SUMMARY_CSV, read_summary_csv

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SUITE_DIR = os.path.join(PROJECT_DIR, "workloads", "scenarios", "suite")

#: Mbit/s on every link: the capacity the fidelity benchmark found for 16 hosts (docs/fidelity.md).
DEFAULT_RATE = 5.0

#: Fabric flags per scenario (each file's header says why). Pairs run on one spine so that they share links:
#: on two spines Crux's path placement would give each job a spine of its own and leave nothing to schedule.
FABRIC: Dict[str, List[str]] = {
    "headline": [], "same-model": [],
    "stress-8": ["--leaves", "2", "--hosts-per-leaf", "8", "--spines", "1"],
}

PAIR_FABRIC = ["--spines", "1"]

#: Variant -> (scheduler, --set axes for sweep.py)
VARIANTS: Dict[str, tuple] = {
    "ecmp": ("ecmp", []),
    "bytescheduler": ("bytescheduler", []),
    "crux": ("crux", []),
    "crux-contiguous": ("crux", ["param.compression=contiguous"]),
    "crux-overlap": ("crux", ["param.correction=overlap"]),
    "flux-v1": ("flux-v1", []),
    "flux": ("flux", []),
    "flux-jobs": ("flux", ["param.bands=jobs"]),
    "flux-contended": ("flux", ["param.order=contended"]),
    "flux-in-place": ("flux", ["param.order=contended-in-place"]),
    "flux-shared": ("flux", ["param.order=shared-in-place"]),
}


def scenario_names() -> List[str]:
    return sorted(os.path.splitext(f)[0] for f in os.listdir(SUITE_DIR) if f.endswith(".yaml"))


def fabric_flags(scenario: str, rate: float = DEFAULT_RATE, min_packets: Optional[float] = None) -> List[str]:
    budget = [] if min_packets is None else ["--min-packets", f"{min_packets:g}"]
    return ["--host-rate", f"{rate:g}", "--fabric-rate", f"{rate:g}"] + budget + FABRIC.get(scenario, PAIR_FABRIC)


def job_values(folder: str, column: str = "gpu_utilization") -> Dict[str, List[float]]:
    """A figure (GPU utilisation unless told) of each job in each completed run of one sweep folder (its
    summary.csv); runs that leave the column empty are left out."""
    path = os.path.join(folder, SUMMARY_CSV)
    if not os.path.exists(path):
        return {}
    rows, _ = read_summary_csv(path)
    values: Dict[str, List[float]] = {}
    for row in rows:
        if row.get("job") in (None, "", CLUSTER) or row.get("ok") != "True" or not row.get(column):
            continue
        values.setdefault(row["job"], []).append(float(row[column]))
    return values


def means(values: Dict[str, List[float]]) -> Dict[str, float]:
    return {job: float(np.mean(v)) for job, v in values.items()}


def job_means(folder: str) -> Dict[str, float]:
    """Mean GPU utilisation of each job over the completed runs of one sweep folder (its summary.csv)."""
    return means(job_values(folder))


def variant_spec(name: str) -> tuple:
    """(scheduler, --set axes for sweep.py) of a variant: one of VARIANTS, or any scheduler the runner takes (an
    installed entry point, ``package.module:ClassName``) with its defaults. ValueError (one line) for others."""
    if name in VARIANTS:
        return VARIANTS[name]
    scheduler_classes([name])
    return name, []


def variant_folder(name: str) -> str:
    """The folder of a variant under ``<suite>/<scenario>/``: its name, made one safe path component."""
    return folder_label(name)
