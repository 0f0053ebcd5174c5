"""How the twin (or a repeat of the emulation) is judged against the emulation: the agreement bands, the pairs
of variants two folders order differently, and the emulation's agreement with itself (research/agreement_floor.py;
docs/twin-log.md)."""
from __future__ import annotations

import os
import statistics
from typing import Dict, List, Optional, Tuple

from analysis.seeds import Runs, completed_runs
from experiment.results import CLUSTER, SUMMARY_CSV

#: The agreement cli/suite.py's compare() counts: cluster utilisation within CLUSTER_BAND, every job within
#: JOB_BAND.
CLUSTER_BAND, JOB_BAND = 0.03, 0.05

#: Two variants whose mean utilisations differ by more than this count as ordered (docs/twin-log.md's ranking).
RANK_MARGIN = 0.01


def discordant_pairs(pairs, margin=None) -> list:
    """Pairs of variants of a scenario that the runs here separate by more than ``margin`` (a difference the
    seeds resolve) and the other folder orders the other way."""
    margin = RANK_MARGIN if margin is None else margin
    out = []
    for scenario in dict.fromkeys(p["scenario"] for p in pairs):
        mine = sorted((p for p in pairs if p["scenario"] == scenario), key=lambda p: -p["u"])
        for i, a in enumerate(mine):
            for b in mine[i + 1:]:
                if a["u"] - b["u"] > margin and a["u_other"] < b["u_other"]:
                    out.append({"scenario": scenario, "a": a["variant"], "b": b["variant"], "u_a": a["u"],
                                "u_b": b["u"], "other_a": a["u_other"], "other_b": b["u_other"]})
    return out


Figures = Dict[str, float]      # job (or CLUSTER) -> GPU utilisation


def mean_figures(runs: List[Figures]) -> Figures:
    """Each job's (and the cluster's) mean over runs that all have it."""
    common = set.intersection(*(set(r) for r in runs))
    return {job: statistics.mean(r[job] for r in runs) for job in common}


def judge(figures: Figures, reference: Figures) -> Tuple[float, float]:
    """The cluster's difference and the largest absolute difference of a job, figures minus reference."""
    jobs = [j for j in reference if j != CLUSTER and j in figures]
    worst = max((abs(figures[j] - reference[j]) for j in jobs), default=0.0)
    return figures[CLUSTER] - reference[CLUSTER], worst


class Tally:
    """Trials of one kind for one variant: how many fall within the bands, and the mean absolute differences."""

    def __init__(self) -> None:
        self.cluster: List[float] = []
        self.worst_job: List[float] = []

    def add(self, figures: Figures, reference: Figures) -> None:
        cluster, worst = judge(figures, reference)
        self.cluster.append(cluster)
        self.worst_job.append(worst)

    def to_dict(self) -> dict:
        both = sum(abs(c) <= CLUSTER_BAND and w <= JOB_BAND for c, w in zip(self.cluster, self.worst_job))
        n = len(self.cluster)
        return {"trials": n,
                "cluster_within": sum(abs(c) <= CLUSTER_BAND for c in self.cluster),
                "jobs_within": sum(w <= JOB_BAND for w in self.worst_job),
                "both_within": both,
                "mean_abs_cluster": statistics.mean(abs(c) for c in self.cluster) if n else None,
                "mean_abs_worst_job": statistics.mean(self.worst_job) if n else None}


def run_id(key: str) -> str:
    """completed_runs() keys a run by '<folder>:<run id>'; the run id is what two folders share."""
    return key.rsplit(":", 1)[1]


def scenarios_and_variants(folder: str) -> List[Tuple[str, str]]:
    pairs = []
    for scenario in sorted(os.listdir(folder)):
        if not os.path.isdir(os.path.join(folder, scenario)):
            continue
        for variant in sorted(os.listdir(os.path.join(folder, scenario))):
            if os.path.exists(os.path.join(folder, scenario, variant, SUMMARY_CSV)):
                pairs.append((scenario, variant))
    return pairs


def agreement(emulation: str, twin: Optional[str], repeat: Optional[str],
              variants: Optional[List[str]] = None, faithful_only: bool = False) -> dict:
    """The three measures (research/agreement_floor.py's docstring: leave one out, repeat, retest) for every
    (scenario, variant) pair of the emulation's suite folder that has at least two completed runs, per variant;
    with ``faithful_only``, emulation runs the fidelity verdict calls unfaithful are left out (in both emulation
    folders)."""
    kinds = ["leave_one_out", "twin_leave_one_out", "twin", "repeat", "retest"]
    tallies: Dict[str, Dict[str, Tally]] = {}
    ranked: Dict[str, list] = {"twin": [], "repeat": []}
    unfaithful: Dict[str, int] = {}
    twin_misses: List[dict] = []
    for scenario, variant in scenarios_and_variants(emulation):
        if variants and variant not in variants:
            continue
        runs: Runs = completed_runs([emulation], scenario, variant, faithful_only)[0]
        if len(runs) < 2:
            continue
        t = tallies.setdefault(variant, {k: Tally() for k in kinds})
        suite_mean = mean_figures(list(runs.values()))
        twin_figures = None
        if twin:
            twin_runs = completed_runs([twin], scenario, variant, faithful_only=False)[0]
            twin_figures = mean_figures(list(twin_runs.values())) if twin_runs else None
        own, twins = Tally(), Tally()
        for key, figures in runs.items():
            others = mean_figures([r for k, r in runs.items() if k != key])
            own.add(figures, others)
            t["leave_one_out"].add(figures, others)
            if twin_figures:
                twins.add(twin_figures, others)
                t["twin_leave_one_out"].add(twin_figures, others)
        if twin_figures:
            t["twin"].add(twin_figures, suite_mean)
            cluster, worst = judge(twin_figures, suite_mean)
            if abs(cluster) > CLUSTER_BAND or worst > JOB_BAND:
                # Beside each miss, the twin and each emulation run against the same references (the mean of
                # the pair's other runs): where one emulation run falls as far, the miss is within what the
                # emulation reproduces.
                twin_misses.append({"scenario": scenario, "variant": variant, "cluster": cluster,
                                    "worst_job": worst, "runs": len(runs),
                                    "twin_max_abs_cluster": max(abs(c) for c in twins.cluster),
                                    "twin_max_worst_job": max(twins.worst_job),
                                    "emulation_max_abs_cluster": max(abs(c) for c in own.cluster),
                                    "emulation_max_worst_job": max(own.worst_job)})
            ranked["twin"].append({"scenario": scenario, "variant": variant, "u": suite_mean[CLUSTER],
                                   "u_other": twin_figures[CLUSTER]})
        if repeat:
            again = completed_runs([repeat], scenario, variant, faithful_only)[0]
            originals = {run_id(k): r for k, r in runs.items()}
            for key, figures in again.items():
                t["repeat"].add(figures, suite_mean)
                if run_id(key) in originals:
                    t["retest"].add(figures, originals[run_id(key)])
            if again:
                ranked["repeat"].append({"scenario": scenario, "variant": variant, "u": suite_mean[CLUSTER],
                                         "u_other": mean_figures(list(again.values()))[CLUSTER]})
            # completed_runs() counts the runs it leaves out as unfaithful.
            left_out = completed_runs([repeat], scenario, variant, faithful_only=True)[1]
            unfaithful[variant] = unfaithful.get(variant, 0) + left_out
    out = {"bands": {"cluster": CLUSTER_BAND, "job": JOB_BAND}, "faithful_only": faithful_only,
           "emulation": emulation, "twin": twin, "repeat": repeat,
           "variants": {v: {k: t.to_dict() for k, t in kinds_.items() if t.cluster}
                        for v, kinds_ in tallies.items()},
           "discordant_pairs": {k: len(discordant_pairs(v)) for k, v in ranked.items() if v},
           "discordant_pair_list": {k: discordant_pairs(v) for k, v in ranked.items() if v},
           "twin_misses": twin_misses}
    if repeat:
        out["repeat_runs_unfaithful"] = unfaithful
    return out
