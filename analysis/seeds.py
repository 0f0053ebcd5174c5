"""Completed runs of one (scenario, variant) pair gathered over several suite folders (more seeds of the same
pairs), with the fidelity verdict's unfaithful runs left out on request."""
from __future__ import annotations

import os
from typing import Dict, List, Tuple

from experiment.results import SUMMARY_CSV, read_summary_csv

Runs = Dict[str, Dict[str, float]]      # run id -> job (or CLUSTER) -> GPU utilisation


def completed_runs(folders: List[str], scenario: str, variant: str, faithful_only: bool) -> Tuple[Runs, int]:
    """The completed runs of a pair in every folder, and how many of them were left out as unfaithful."""
    runs: Runs = {}
    left_out = set()
    for top in folders:
        path = os.path.join(top, scenario, variant, SUMMARY_CSV)
        if not os.path.exists(path):
            continue
        rows, _ = read_summary_csv(path)
        for row in rows:
            if row.get("ok") != "True" or not row.get("gpu_utilization"):
                continue
            run = f"{top}:{row['run_id']}"
            if faithful_only and row.get("faithful") == "False":
                left_out.add(run)
                continue
            runs.setdefault(run, {})[row["job"]] = float(row["gpu_utilization"])
    return runs, len(left_out)
