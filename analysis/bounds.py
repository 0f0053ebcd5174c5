"""The capacity-aware bound: what the jobs of a scenario could reach together when they share the fabric.

The solo bound (cli/bounds.py) runs each job alone: no schedule makes a job faster than that, but it ignores that
the jobs share links. This bound adds the links: every route between a host inside a cut and one outside crosses
it, whatever the scheduler does. The cuts are each host's link in each direction and the uplinks and downlinks of
every group of switches below the top tier that is connected on its own (each leaf; on a fat-tree also each pod).
A ring all-reduce of S bytes over N workers sends 2(N-1)/N x S over each of its N hops (core/ring.py); a hop
crosses a cut when its two hosts are on either side. ``goodput`` is the share of a link's bytes that is TCP
payload (1448 of every 1514 bytes of a full frame). Job j computes C_j per iteration (its profile), sends b_jr
bytes per iteration across cut r, and its utilisation u_j is at most its solo bound U_j.

Two forms, both solved exactly:

* ``finite`` (up to EXACT_MAX_JOBS jobs, what a scenario's runs are): each job runs I_j iterations from its start
  s_j; the jobs that have ended by any time sent all their bytes across every cut by then, so the k-th job to end
  ends no earlier than its solo span and than the first k jobs' bytes take on the busiest cut. The bound is the
  best GPU-weighted utilisation over every order of the ends (a dynamic program over sets of jobs). It credits a
  job that outlasts the others with the room they leave.
* ``steady`` (more jobs): every job running side by side throughout, sum_j b_jr u_j / C_j <= capacity_r on every
  cut, a linear program (scipy's HiGHS). It bounds the jobs' steady state; finite runs whose jobs end at
  different times can go above it in their tails.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, FrozenSet, List, Mapping, Sequence, Tuple

import numpy as np

from core.fabric import TIER_TOP, FabricLayout, leaf_name
from core.model import JobSpec
from core.queues import MTU_BYTES
from core.ring import ring_bytes_per_rank
from core.transport import TCP_PAYLOAD

#: Up to this many jobs the finite runs' bound is exact over every order of their ends (2^n sets of jobs).
EXACT_MAX_JOBS = 16
#: TCP payload per byte a link carries (a 1500-byte packet is a 1514-byte frame to the switch's queues).
GOODPUT = TCP_PAYLOAD / (MTU_BYTES + 14)


def regions(layout: FabricLayout) -> List[FrozenSet[str]]:
    """Groups of switches every route between a host inside and one outside must leave: for each tier below the
    top, the groups of switches of that tier and below that are connected among themselves, short of the whole
    fabric (a leaf-spine: each leaf; a fat-tree: each leaf and each pod)."""
    tier = {s.name: s.tier for s in layout.switches}
    switch_links = [(link.a, link.b) for link in layout.links if link.a in tier and link.b in tier]
    out: List[FrozenSet[str]] = []
    for top in sorted({t for t in tier.values() if t < TIER_TOP}):
        members = {name for name, t in tier.items() if t <= top}
        parent = {name: name for name in members}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for a, b in switch_links:
            if a in members and b in members:
                parent[find(a)] = find(b)
        groups = defaultdict(set)
        for name in members:
            groups[find(name)].add(name)
        for group in groups.values():
            if len(group) < len(tier) and frozenset(group) not in out:
                out.append(frozenset(group))
    return out


def cuts(layout: FabricLayout) -> Dict[Tuple[str, ...], Tuple[FrozenSet[str], float]]:
    """Every cut as (name) -> (the hosts on its inner side, its capacity in bytes/s one way): each host's link
    (its one host inside), and each region's links to switches outside it (every such link at the fabric rate)."""
    out: Dict[Tuple[str, ...], Tuple[FrozenSet[str], float]] = {}
    for h in layout.hosts:
        out[("host", h.name)] = (frozenset({h.name}), layout.spec.host_rate_mbps * 1e6 / 8)
    for group in regions(layout):
        hosts = frozenset(h.name for h in layout.hosts if leaf_name(h.leaf) in group)
        crossing = sum(1 for link in layout.links if (link.a in group) != (link.b in group))
        if hosts and crossing:
            out[("region",) + tuple(sorted(group))] = (hosts, crossing * layout.spec.fabric_rate_mbps * 1e6 / 8)
    return out


def crossing_bytes(job: JobSpec, inside: FrozenSet[str]) -> Tuple[float, float]:
    """Bytes per iteration the job's rings send out of and into a cut's inner side."""
    per_hop = sum(ring_bytes_per_rank(b.nbytes, job.workers) for b in job.model.buckets)
    out = into = 0.0
    for rank in range(job.workers):
        src, dst = job.hosts[rank], job.hosts[(rank + 1) % job.workers]
        if (src in inside) and (dst not in inside):
            out += per_hop
        elif (dst in inside) and (src not in inside):
            into += per_hop
    return out, into


def _cut_matrix(layout: FabricLayout, jobs: Sequence[JobSpec], goodput: float):
    """(bytes per iteration each job sends across each used cut and direction, each one's payload capacity in
    bytes/s, their names): only cuts some job crosses."""
    rows, limits, labels = [], [], []
    for name, (inside, capacity) in cuts(layout).items():
        out_row, in_row = zip(*(crossing_bytes(job, inside) for job in jobs)) if jobs else ((), ())
        for direction, row in (("out", out_row), ("in", in_row)):
            if any(row):
                rows.append(list(row))
                limits.append(goodput * capacity)
                labels.append("/".join(name[1:]) + f" {direction}")
    return np.array(rows, dtype=float).reshape(len(rows), len(jobs)), np.array(limits, dtype=float), labels


def capacity_bound(layout: FabricLayout, jobs: Sequence[JobSpec], solo: Mapping[str, float],
                   goodput: float = GOODPUT, exact_max_jobs: int = EXACT_MAX_JOBS) -> dict:
    """The bound: {"cluster_u_bound", "jobs": {name: u_j}, "binding": cuts at capacity, "method"}. ``solo`` maps
    each job's name to its solo bound. Up to ``exact_max_jobs`` jobs the finite runs' bound (``finite_bound``);
    beyond, the steady state's (``steady_bound``)."""
    per_iteration, limits, labels = _cut_matrix(layout, jobs, goodput)
    upper = np.array([min(1.0, float(solo[j.name])) for j in jobs])
    if len(jobs) <= exact_max_jobs:
        out = finite_bound(jobs, per_iteration, limits, upper)
    else:
        out = steady_bound(jobs, per_iteration, limits, upper)
    return dict(out, binding=[labels[i] for i in out.pop("binding_rows")], goodput=goodput)


def steady_bound(jobs: Sequence[JobSpec], per_iteration: np.ndarray, limits: np.ndarray,
                 upper: np.ndarray) -> dict:
    """Every job running side by side throughout: maximise sum_j g_j u_j subject to u_j <= U_j and, on every
    cut, sum_j b_jr u_j / C_j <= its capacity (a linear program)."""
    from scipy.optimize import linprog
    gpus = np.array([j.workers for j in jobs], dtype=float)
    rates = per_iteration / np.array([j.model.compute_s for j in jobs])
    result = linprog(-gpus / gpus.sum(), A_ub=rates if len(limits) else None,
                     b_ub=limits if len(limits) else None, bounds=list(zip([0.0] * len(jobs), upper)),
                     method="highs")
    if not result.success:
        raise ValueError(f"the capacity bound's program has no solution: {result.message}")
    u = result.x
    binding = [i for i in range(len(limits)) if rates[i] @ u >= limits[i] * (1 - 1e-9)]
    return {"method": "steady", "cluster_u_bound": float(gpus @ u / gpus.sum()),
            "jobs": {j.name: float(x) for j, x in zip(jobs, u)}, "binding_rows": binding}


def finite_bound(jobs: Sequence[JobSpec], per_iteration: np.ndarray, limits: np.ndarray,
                 upper: np.ndarray) -> dict:
    """Finite runs: job j starts at s_j, needs I_j C_j of compute and sends W_jr = I_j b_jr across cut r. Whatever
    the schedule, the jobs that have ended by a time t sent all their bytes by then, so the k-th job to end
    ends no earlier than its solo span allows (s_k + I_k C_k / U_k) nor than the bytes of the first k jobs take
    on the busiest cut (max_r sum W_jr / capacity_r). Over every order of the ends (a dynamic program over the
    sets of jobs ended, exact for a few jobs), the largest sum_j g_j I_j C_j / (e_j - s_j) bounds the cluster."""
    n = len(jobs)
    gpus = np.array([j.workers for j in jobs], dtype=float)
    work = np.array([j.iterations * j.model.compute_s for j in jobs])          # I_j C_j
    start = np.array([j.start_offset_s for j in jobs]) - min(j.start_offset_s for j in jobs)
    earliest = start + work / np.maximum(upper, 1e-12)                         # s_j + solo span
    total = per_iteration * np.array([j.iterations for j in jobs])             # W_jr
    sets = 1 << n
    # Time the bytes of every set of jobs need on its busiest cut.
    cum = np.zeros((sets, len(limits)))
    for s in range(1, sets):
        low = s & -s
        cum[s] = cum[s ^ low] + total[:, low.bit_length() - 1]
    need = (cum / limits).max(axis=1) if len(limits) else np.zeros(sets)
    value = np.full(sets, -np.inf)
    value[0] = 0.0
    choice = np.zeros(sets, dtype=np.int64)
    weight = gpus * work / gpus.sum()
    for s in range(1, sets):
        best, pick = -np.inf, -1
        for k in range(n):
            if s >> k & 1:
                end = max(earliest[k], need[s])
                v = value[s ^ (1 << k)] + weight[k] / (end - start[k])
                if v > best:
                    best, pick = v, k
        value[s], choice[s] = best, pick
    ends, s, binding = np.zeros(n), sets - 1, set()
    while s:
        k = int(choice[s])
        ends[k] = max(earliest[k], need[s])
        if need[s] > earliest[k]:      # this end was set by a cut's capacity, not by the job alone
            binding.update(int(i) for i in np.flatnonzero(cum[s] / limits >= need[s] * (1 - 1e-9)))
        s ^= 1 << k
    u = work / (ends - start)
    binding = sorted(binding)
    return {"method": "finite", "cluster_u_bound": float(value[sets - 1]),
            "jobs": {j.name: float(x) for j, x in zip(jobs, u)}, "binding_rows": binding,
            "end_order": [jobs[k].name for k in np.argsort(ends, kind="stable")]}
