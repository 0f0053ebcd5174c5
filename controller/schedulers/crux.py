"""Crux: job-level priority by GPU intensity, least-loaded paths, and priority compression.

Crux (SIGCOMM 2024) gives every flow of a job the same priority, ranked by how much GPU work the job's
communication holds up. All quantities are per training iteration and computed from the placed jobs and the
fabric alone, so the policy is static: ``decide`` returns the same rules for every flow of every bucket from the
start, and no operation events are needed.

Traffic model. Job j has N_j workers in a ring and G_j gradient bytes per iteration. Each rank sends
B_j = 2 (N_j - 1) / N_j * G_j bytes to the next rank (ring all-reduce). A hop uses host->leaf, the links of its
path between the two leaves (``FabricView.paths``: through one spine on a leaf-spine, up to a core and down on
a fat-tree), and leaf->host. With bytes_{j,e} the bytes of job j on link e (rate C_e):

    t_j = max_e bytes_{j,e} * 8 / C_e                      communication time at the job's bottleneck link
    W_j = compute_s_j * N_j                                GPU-seconds of computation per iteration
    I_j = W_j / t_j                                        GPU intensity (GPU-seconds per communication-second)

t_j is an isolated estimate (no other job on the fabric) with the job's own path rule: path 0 for all its hops
under ``paths=job`` (equal-cost paths are symmetric, so which one does not matter), and each hop's bytes spread
evenly over its paths under ``paths=hop`` or ``paths=hashed``. It therefore depends on the job and
its placement, never on the other jobs.

Correction factor. P_j = k_j * I_j. With ``correction=pairwise`` (the default, as the paper defines it) the job
with the most network traffic has k = 1 and every other job's k_j comes from a pairwise comparison with it
(controller/schedulers/correction.py). ``correction=overlap`` is the earlier, single-job estimate below.

Overlap correction. DDP hides part of the communication behind computation: bucket 0 starts when its
gradients are ready, and the rest of the backward pass runs while it is sent; with ``overlap`` semantics the
next forward pass also starts as soon as the first layers' bucket has arrived. The window that can hide
communication is

    H_j = (backward_s - backward_s of bucket 0) [+ (forward_s - forward_s of the last bucket) if overlap]

and the fraction of the communication that stays exposed (the GPU waits for it) is

    k_j = max(min_exposed, 1 - overlap_scale * H_j / t_j),        P_j = k_j * I_j.

A job whose communication hides behind its computation loses little when it is delayed, so it ranks lower;
``min_exposed`` keeps such jobs ordered by intensity rather than collapsing them all to 0, and
``overlap_scale = 0`` turns the correction off (P_j = I_j; with ``correction=overlap``).

Paths. Jobs in decreasing P_j take paths greedily. The load of a link is the sum of the seconds per iteration
already assigned to it (bytes * 8 / rate). ``paths=job``: the job puts all its hops with a choice of path on
path index c (modulo each hop's number of paths) for the c that minimises (largest resulting load on the
switch-to-switch links it would use, their total load, c); on a leaf-spine, one spine per job keeps a ring's
hops on equal paths. ``paths=hop``: the same choice made per ring hop, which balances better when a job has
many such hops. ``paths=hashed``: path None (ECMP), priority only.

Online. With ``online=true`` the order covers only the jobs that are running: the control loop tells the policy
of each job's arrival (its first event) and departure (its last operation done), and paths and classes are
placed again over the jobs running then; a job not yet arrived has no rules (its flows take the default).
Every reordering can change the class of live flows, as a cluster scheduler that re-runs Crux at each job event
would. ``online=false`` (the default) orders every job of the scenario from the start.

Classes. Two jobs contend when their link sets (with the chosen paths; hashed hops count on every path)
intersect. ``compression=published`` (the default) follows the paper: every job has a unique priority (P_j, then
the job index, breaks ties), contending jobs form a DAG from higher to lower priority, and the jobs are cut into
the 7 data classes (0..6; class 7 carries ACKs, core/classes.py) along a topological order of that DAG so
that as many contending pairs as possible (weighted by how much their priorities differ) sit in different
classes: a maximum K-cut, searched over 32 seeded random topological orders (``compression.compress_kcut``).
Equal-intensity jobs that share links therefore interleave instead of sharing a class.
``compression=contiguous`` is the earlier variant: P_j compressed with ``compression.compress``, in which equal
priorities share a class and merges fall between jobs that never meet or that differ least.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from controller.schedulers.base import Scheduler
from controller.schedulers.compression import compress, compress_kcut, count_changes
from controller.schedulers.correction import pairwise_factors
from core.classes import DATA_CLASSES
from core.fabric import FabricView
from core.model import Decision, FlowKey, JobSpec
from core.ring import ring_bytes_per_rank

PATH_MODES = ("job", "hop", "hashed")

#: (job index, rank) -> path of the hop from that rank to the next (None: hashed, or the hop has one path).
PathMap = Dict[Tuple[int, int], Optional[int]]

#: A directed link: (from, to), hosts named by IP and switches by name (``lf1``, ``sp2``, ``ag3``, ``co4``).
Link = Tuple[str, str]


@dataclass(frozen=True)
class JobIntensity:
    """Crux's numbers for one job (per iteration)."""

    job: int
    compute_gpu_s: float   # W_j
    comm_s: float          # t_j, isolated bottleneck estimate
    intensity: float       # I_j = W_j / t_j (inf when the job sends nothing over the network)
    exposed: float         # k_j
    priority: float        # P_j = k_j * I_j


def check_placed(job: JobSpec) -> None:
    """Policies build flows from addresses, so a job must be placed before a scheduler sees it."""
    if job.workers >= 2 and len(job.addresses) < job.workers:
        raise ValueError(f"job {job.index} ({job.name}) has {job.workers} workers but "
                         f"{len(job.addresses)} addresses: place it before scheduling")


def per_rank_bytes(job: JobSpec) -> float:
    """Bytes each rank sends per iteration in a ring all-reduce: 2 (N-1)/N * G."""
    return ring_bytes_per_rank(job.model.gradient_bytes, job.workers)


def ring_hops(job: JobSpec) -> List[Tuple[int, str, str]]:
    """(rank, source IP, destination IP) of every hop of the job's ring."""
    if job.workers < 2:
        return []
    return [(r, job.addresses[r], job.addresses[(r + 1) % job.workers]) for r in range(job.workers)]


def hop_links(fabric: FabricView, src_ip: str, dst_ip: str, path: Optional[int]) -> List[Tuple[Link, float]]:
    """Links of one hop with the share of its bytes each carries; path None spreads evenly over its paths."""
    if src_ip == dst_ip:
        return []  # same host: never reaches a switch
    return fabric.hop_links(src_ip, dst_ip, path)


def job_link_bytes(fabric: FabricView, job: JobSpec, paths: Optional[Mapping[Tuple[int, int], Optional[int]]] = None,
                   path: Optional[int] = None) -> Dict[Link, float]:
    """bytes_{j,e}: per-iteration bytes of the job on every link it uses.

    The path of rank r's hop is ``paths[(job, r)]`` when ``paths`` is given, else ``path`` (None: spread).
    """
    out: Dict[Link, float] = {}
    nbytes = per_rank_bytes(job)
    for rank, src, dst in ring_hops(job):
        p = paths.get((job.index, rank)) if paths is not None else path
        for link, share in hop_links(fabric, src, dst, p):
            out[link] = out.get(link, 0.0) + share * nbytes
    return out


def bottleneck_time(fabric: FabricView, link_bytes: Mapping[Link, float]) -> float:
    """max_e bytes_e * 8 / C_e in seconds (0 when no link is used)."""
    return max((b * 8.0 / fabric.link_rate_bps(e) for e, b in link_bytes.items()), default=0.0)


def overlap_window(job: JobSpec) -> float:
    """H_j: computation that can run while the job communicates (see the module docstring)."""
    buckets = job.model.buckets
    if not buckets:
        return 0.0
    window = job.model.backward_s - buckets[0].backward_s
    if job.semantics == "overlap":
        window += job.model.forward_s - buckets[-1].forward_s
    return max(window, 0.0)


def job_intensity(fabric: FabricView, job: JobSpec, overlap_scale: float = 1.0, min_exposed: float = 0.1,
                  paths: str = "job") -> JobIntensity:
    """I_j, k_j and P_j of one job, with t_j estimated in isolation under the given path rule."""
    t = bottleneck_time(fabric, job_link_bytes(fabric, job, path=0 if paths == "job" else None))
    w = job.model.compute_s * job.workers
    if t <= 0.0:
        return JobIntensity(job.index, w, 0.0, math.inf, 1.0, math.inf)
    exposed = max(min_exposed, 1.0 - overlap_scale * overlap_window(job) / t)
    exposed = min(exposed, 1.0)
    return JobIntensity(job.index, w, t, w / t, exposed, exposed * w / t)


CORRECTIONS = ("pairwise", "overlap")


def job_intensities(fabric: FabricView, jobs: Sequence[JobSpec], overlap_scale: float = 1.0,
                    min_exposed: float = 0.1, paths: str = "job",
                    correction: str = "overlap") -> Dict[int, JobIntensity]:
    """I_j, k_j and P_j of every job. ``correction=overlap``: k_j is the job's exposed fraction
    (``job_intensity``); ``pairwise``: k_j from the comparison with the job with the most traffic, as the paper
    defines it (controller/schedulers/correction.py)."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, not {correction!r}")
    alone = {j.index: job_intensity(fabric, j, overlap_scale, min_exposed, paths) for j in jobs}
    if correction == "overlap":
        return alone
    _, factors = pairwise_factors(jobs, {i: ji.comm_s for i, ji in alone.items()},
                                  {j.index: per_rank_bytes(j) for j in jobs})
    out = {}
    for i, ji in alone.items():
        k = factors.get(i)
        out[i] = ji if k is None else JobIntensity(i, ji.compute_gpu_s, ji.comm_s, ji.intensity, k,
                                                   k * ji.intensity)
    return out


def contended_costs(fabric: FabricView, jobs: Sequence[JobSpec], shared_only: bool = False) -> Dict[int, float]:
    """Per job, sum_e lambda_e * (its share of link e at u_j = 1): the priced capacity it uses, from the shadow
    prices lambda_e of the fluid program of ``contended_intensities`` (0 for a job on no priced link; empty when
    the program has no solution or there is no job). ``shared_only``: the sum over the fabric's links only; a
    host link carries one job, and its price says that job is limited by its own link, which Crux's intensity
    already counts."""
    from scipy.optimize import linprog
    if not jobs:
        return {}
    loads = {j.index: job_link_bytes(fabric, j) for j in jobs}
    links = sorted({e for load in loads.values() for e in load})
    if not links:
        return {j.index: 0.0 for j in jobs}
    rows = [[loads[j.index].get(e, 0.0) * 8.0 / (j.model.compute_s * fabric.link_rate_bps(e)) for j in jobs]
            for e in links]
    result = linprog([-float(j.workers) for j in jobs], A_ub=rows, b_ub=[1.0] * len(links),
                     bounds=[(0.0, 1.0)] * len(jobs), method="highs")
    if not result.success:
        return {}
    prices = [max(0.0, -m) for m in result.ineqlin.marginals]
    if shared_only:
        prices = [0.0 if fabric.is_host_link(e) else p for e, p in zip(links, prices)]
    return {j.index: sum(p * row[k] for p, row in zip(prices, rows)) for k, j in enumerate(jobs)}


def _priced_values(fabric: FabricView, jobs: Sequence[JobSpec], intensities: Mapping[int, JobIntensity],
                   shared_only: bool = False) -> Tuple[List[JobSpec], Dict[int, float]]:
    """The jobs with traffic and compute, and the value of each one the fluid program prices: k_j * W_j over the
    priced capacity it uses (``contended_costs``); jobs on no priced link have no value."""
    networked = [j for j in jobs if intensities[j.index].comm_s > 0 and j.model.compute_s > 0]
    cost = contended_costs(fabric, networked, shared_only)
    return networked, {j.index: intensities[j.index].exposed * j.workers / cost[j.index] for j in networked
                       if cost.get(j.index, 0.0) > 1e-12}


def contended_intensities(fabric: FabricView, jobs: Sequence[JobSpec],
                          intensities: Mapping[int, JobIntensity]) -> Dict[int, JobIntensity]:
    """The jobs' priorities P_j measured against the links they contend for together, not each alone.

    t_j above is a job's busiest link with the fabric to itself; with many jobs on oversubscribed uplinks the links
    that limit the cluster are others, and a job's claim on them is not its own bottleneck's. The fluid relaxation
    of the jobs together (each hop's bytes spread over its paths) is a linear program: maximise sum_j N_j u_j
    subject to sum_j bytes_{j,e} * 8 * u_j / compute_s_j <= C_e on every link e, 0 <= u_j <= 1 (the capacity-aware
    bound's steady form, on links). Its shadow prices lambda_e value each link's capacity, and a job's priority
    becomes k_j * W_j / sum_e lambda_e * bytes_{j,e} * 8: GPU work per unit of contended capacity, the ratio by
    which the program itself fills the links. Jobs on no link with a price rank above all others, in Crux's order
    among themselves; where no link binds, the order is Crux's."""
    networked, value = _priced_values(fabric, jobs, intensities)
    if not value:
        return dict(intensities)
    # Unpriced jobs above every priced one, in Crux's order: shift their priorities past the largest value.
    top = max(value.values())
    unpriced = [j.index for j in networked if j.index not in value]
    crux_top = max(intensities[i].priority for i in unpriced) if unpriced else 1.0
    out = dict(intensities)
    for j in networked:
        ji = intensities[j.index]
        p = value[j.index] if j.index in value else top * (2.0 + ji.priority / crux_top)
        out[j.index] = JobIntensity(ji.job, ji.compute_gpu_s, ji.comm_s, ji.intensity, ji.exposed, p)
    return out


def contended_in_place(fabric: FabricView, jobs: Sequence[JobSpec], intensities: Mapping[int, JobIntensity],
                       shared_only: bool = False) -> Dict[int, JobIntensity]:
    """Crux's order with the priced jobs reordered among their own places in it.

    ``contended_intensities`` lifts every job the fluid program leaves unpriced above all priced ones; at 2:1 that
    moved whole rings whose links are shared in the runs above the jobs that pay for them (docs/scale.md). Here
    every unpriced job keeps its place in Crux's order, and the priced jobs fill the places Crux gave them, best
    value first (GPU work per unit of priced capacity, as ``contended_intensities`` values them). A job's priority
    keeps its place's magnitude, so what compares magnitudes (Flux's equal-intensity test, the class compression)
    sees Crux's; a factor of at most 1 + 1e-6 makes the new order strict where Crux's had ties. ``shared_only``:
    jobs priced on the fabric's links only (``contended_costs``)."""
    networked, value = _priced_values(fabric, jobs, intensities, shared_only)
    if not value:
        return dict(intensities)
    crux_order = sorted(networked, key=lambda j: (-intensities[j.index].priority, j.index))
    by_value = iter(sorted((j for j in networked if j.index in value), key=lambda j: (-value[j.index], j.index)))
    order = [next(by_value) if j.index in value else j for j in crux_order]
    out = dict(intensities)
    n = len(order)
    for place, (slot, job) in enumerate(zip(crux_order, order)):
        ji = intensities[job.index]
        p = intensities[slot.index].priority * (1.0 + 1e-6 * (n - place) / n)
        out[job.index] = JobIntensity(ji.job, ji.compute_gpu_s, ji.comm_s, ji.intensity, ji.exposed, p)
    return out


def select_paths(fabric: FabricView, jobs: Sequence[JobSpec], priority: Mapping[int, float],
                 mode: str = "job") -> PathMap:
    """Path of every ring hop: jobs in decreasing priority each take the least-loaded path(s)."""
    if mode not in PATH_MODES:
        raise ValueError(f"unknown path mode {mode!r}; known: {', '.join(PATH_MODES)}")
    paths: PathMap = {}
    load: Dict[Link, float] = {}  # seconds per iteration already assigned
    order = sorted(jobs, key=lambda j: (-priority.get(j.index, 0.0), j.index))
    for job in order:
        hops = ring_hops(job)
        choice = [(r, s, d) for r, s, d in hops if fabric.has_path_choice(s, d)]
        for r, _, _ in hops:
            paths[(job.index, r)] = None
        if mode == "hashed" or not choice:
            continue
        nbytes = per_rank_bytes(job)
        groups = [choice] if mode == "job" else [[h] for h in choice]
        for group in groups:
            best_key, best_path, best_own = None, 0, {}
            for candidate in range(max(len(fabric.paths(s, d)) for _, s, d in group)):
                own: Dict[Link, float] = {}
                for _, src, dst in group:
                    for link, share in hop_links(fabric, src, dst, candidate):
                        if not fabric.is_host_link(link):
                            own[link] = own.get(link, 0.0) + share * nbytes * 8.0 / fabric.link_rate_bps(link)
                after = [load.get(e, 0.0) + v for e, v in own.items()]
                key = (max(after), sum(after), candidate)
                if best_key is None or key < best_key:
                    best_key, best_path, best_own = key, candidate, own
            for link, v in best_own.items():
                load[link] = load.get(link, 0.0) + v
            for r, _, _ in group:
                paths[(job.index, r)] = best_path
    return paths


def place_paths(fabric: FabricView, jobs: Sequence[JobSpec], intensities: Mapping[int, JobIntensity],
                mode: str) -> Tuple[PathMap, Set[FrozenSet[int]]]:
    """The paths of every ring hop (jobs in decreasing P_j, ``select_paths``) and the pairs of jobs that then
    contend (``contending_jobs``): what Crux and both Flux versions place at start and again when the fabric
    changes."""
    paths = select_paths(fabric, jobs, {i: ji.priority for i, ji in intensities.items()}, mode)
    return paths, contending_jobs(fabric, jobs, paths)


def contending_jobs(fabric: FabricView, jobs: Sequence[JobSpec], paths: PathMap) -> Set[FrozenSet[int]]:
    """Pairs of jobs whose link sets intersect under the given paths (hashed hops count on every path)."""
    users: Dict[Link, List[int]] = {}
    for job in jobs:
        for link, b in job_link_bytes(fabric, job, paths=paths).items():
            if b > 0:
                users.setdefault(link, []).append(job.index)
    pairs: Set[FrozenSet[int]] = set()
    for idx in users.values():
        for i, a in enumerate(idx):
            for b in idx[i + 1:]:
                if a != b:
                    pairs.add(frozenset((a, b)))
    return pairs


def pairs_of(pairs: Iterable[FrozenSet]) -> List[Tuple]:
    """Frozenset pairs as tuples, the form ``compress`` takes."""
    return [tuple(p) for p in pairs if len(p) == 2]


def validate_path_params(params: Mapping) -> None:
    if params["paths"] not in PATH_MODES:
        raise ValueError(f"paths must be one of {', '.join(PATH_MODES)}, not {params['paths']!r}")


class OnlineOrder:
    """What Crux and Flux share online (``online=true``): the jobs running, and their order (the policy's
    ``_order``) placed again at each arrival and departure. Offline every job of the scenario is active."""

    def _init_online(self) -> None:
        if not isinstance(self.params["online"], bool):
            raise ValueError(f"online must be true or false, not {self.params['online']!r}")
        self.hears_jobs = self.params["online"]
        self.active: Set[int] = set() if self.hears_jobs else {j.index for j in self.jobs}
        self.reorders = 0
        self._order()

    def active_jobs(self) -> List[JobSpec]:
        return [j for j in self.jobs if j.index in self.active]

    def on_job_arrival(self, job: JobSpec, now: float) -> None:
        if self.hears_jobs and job.index not in self.active:
            self.active.add(job.index)
            self.reorders += 1
            self._order()

    def on_job_departure(self, job: JobSpec, now: float) -> None:
        if self.hears_jobs and job.index in self.active:
            self.active.discard(job.index)
            self.reorders += 1
            self._order()


class CruxScheduler(OnlineOrder, Scheduler):
    """Job-level priority P_j = k_j * I_j, least-loaded path per job, contention-aware compression."""

    name = "crux"
    period_s = None  # static: nothing changes after the first decision
    reconcile_on = ()
    defaults = {
        "overlap_scale": 1.0,   # weight of the overlap window H_j in k_j (0: no correction, P_j = I_j)
        "min_exposed": 0.1,     # floor of k_j, keeps fully hidden jobs ordered by intensity
        "paths": "job",         # job | hop | hashed
        "compression": "published",  # published (unique priorities, K-cut of the contention DAG) | contiguous
        "correction": "pairwise",    # k_j: pairwise (against the job with the most traffic, as published) | overlap
        "online": False,        # True: order only the jobs running (heard of at arrival), again at each arrival
                                # and departure; False: every job of the scenario from the start
    }

    def __init__(self, fabric: FabricView, jobs: Sequence[JobSpec], params: Optional[Mapping] = None):
        super().__init__(fabric, jobs, params)
        validate_path_params(self.params)
        if float(self.params["overlap_scale"]) < 0:
            raise ValueError("overlap_scale must be >= 0")
        if not 0 < float(self.params["min_exposed"]) <= 1:
            raise ValueError("min_exposed must be in (0, 1]")
        for job in self.jobs:
            check_placed(job)
        self.intensities: Dict[int, JobIntensity] = job_intensities(
            fabric, self.jobs, float(self.params["overlap_scale"]), float(self.params["min_exposed"]),
            self.params["paths"], str(self.params["correction"]))
        if self.params["compression"] not in ("published", "contiguous"):
            raise ValueError(f"compression must be published or contiguous, not {self.params['compression']!r}")
        self.changes = 0
        self._init_online()
        self._last: Dict[FlowKey, Decision] = {}

    def _order(self) -> None:
        """Paths and classes of the active jobs, and the rules that follow."""
        jobs = self.active_jobs()
        self.paths, self.contention = place_paths(self.fabric, jobs, self.intensities, self.params["paths"])
        networked = {j.index: self.intensities[j.index].priority for j in jobs
                     if self.intensities[j.index].comm_s > 0}
        if not networked:
            self.classes: Dict[int, int] = {}
        elif self.params["compression"] == "published":
            self.classes = compress_kcut(networked, pairs_of(self.contention), levels=DATA_CLASSES)
        else:
            self.classes = compress(networked, levels=DATA_CLASSES, contention=pairs_of(self.contention))
        self._rules = self._build_rules()

    def on_fabric_change(self, fabric: FabricView) -> None:
        """Paths placed again over what is left, in the same priority order; intensities (isolated estimates on
        the intact fabric) and classes stay, so that no live flow changes class because a link failed."""
        super().on_fabric_change(fabric)
        self.paths, _ = place_paths(fabric, self.active_jobs(), self.intensities, self.params["paths"])
        self._rules = self._build_rules()

    def _build_rules(self) -> Dict[FlowKey, Decision]:
        rules: Dict[FlowKey, Decision] = {}
        for job in self.jobs:
            if job.index not in self.classes:
                continue
            cls = self.classes[job.index]
            for bucket in range(len(job.model.buckets)):
                for rank in range(job.workers):
                    rules[job.flow(rank, bucket)] = Decision(cls, self.paths.get((job.index, rank)))
        return rules

    def decide(self, now: float) -> Dict[FlowKey, Decision]:
        rules = dict(self._rules)
        self.changes += count_changes(self._last, rules)
        self._last = rules
        return rules
