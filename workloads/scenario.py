"""Scenarios: which tenants train which model, on how many hosts, for how long, and how they are placed.

A scenario file is YAML (JSON is accepted too, since it is YAML)::

    name: default                  # optional, default: the file name without its suffix
    description: ...               # optional free text
    real_link_gbps: 100            # optional, default 100: per-worker link rate of the real cluster
    time_scale: auto               # optional, default auto: emulated seconds per real second, or a number > 0
    target_iteration_s: [0.5, 3.0] # optional: the range "auto" aims the emulated iterations at
    max_buckets: 6                 # optional, default 6: buckets per job after coarsening (1..64)
    min_packets_per_op: 20         # optional, default 20: data packets per ring hop of the smallest operation
                                   # (buckets merged, and under "auto" the time scale raised, to get them; 0: off)
    placement: {policy: spread, seed: 1}   # optional, default spread; "placement: packed" is short for it
    arrivals: {process: poisson, mean_interarrival_s: 5, seed: 1}   # optional: tenants arriving over time
    jobs:                          # 1..711 jobs (core/model.py MAX_JOBS); a job's index is its position in this list
      - name: resnet               # unique; letters, digits, '_', '.', '-'
        model: resnet50            # a shipped profile, or a profile file path relative to this file
        workers: 4                 # ring size >= 2; one worker per host
        iterations: 10             # >= 1
        start_offset_s: 0.0        # optional: emulated seconds after the run starts
        semantics: overlap         # optional: overlap | wait_all (see core.model.SEMANTICS)
        hosts: [h1, h5, h9, h13]   # optional: explicit hosts, rank order; overrides the placement policy
    faults:                        # optional: link, switch and controller faults (grammar: core/faults.py)
      - link lf1-sp1 down at 5     # seconds from the start of the workload

Unknown fields are errors; every error is a ``ScenarioError`` whose message names the file and the field, e.g.
``scenario.yaml: jobs[1].workers: must be an integer >= 2 (got 1)``.

``Scenario.resolve(hosts, emu_link_mbps)`` turns a scenario into what the testbed runs, given the fabric's hosts as
``(name, ip, leaf)`` tuples in fabric order and the emulated host link rate:

* scaling (``workloads.scaling``): one ``Scaling`` for all jobs; with ``time_scale: auto`` its time scale comes
  from ``suggest_time_scale`` over all jobs of the scenario, so that relative speeds are kept;
* each job's real profile is coarsened to ``max_buckets`` buckets (``workloads.profiles.coarsen``), then scaled;
* granularity: buckets are merged until every operation puts ``min_packets_per_op`` data packets on each ring
  hop, and under ``time_scale: auto`` the time scale is raised when a job's whole gradient is too small
  (``workloads.scaling``); ``ResolvedScenario.granularity`` says what that cost;
* placement: each host holds at most one worker (one GPU per host). Jobs with explicit ``hosts`` take those;
  the others, in file order, take the next free hosts of one ordering of the remaining hosts: ``packed`` fills
  leaves in order (a job shares as few leaves as possible), ``spread`` goes round-robin over the leaves (a job's
  ring crosses the spine at every hop it can: the contended case), ``random`` shuffles with ``seed``.
  Rank r of a job runs on the r-th host it was given.

``start_offset_s`` is not scaled: it is emulated time, as one reads it on the testbed's clock. It is a job's
arrival: a trace of arrivals is a list of jobs with their offsets. ``arrivals`` draws them instead: the first job
in the file arrives at 0 and each next one an exponential gap of mean ``mean_interarrival_s`` (emulated seconds)
after the one before (a Poisson process, drawn with ``seed``); jobs may not then give ``start_offset_s``. A job
leaves when its last iteration is done. Schedulers that hear of arrivals and departures (``online=true``) learn
of them from the jobs' events (controller/loop.py), in both engines.
"""
from __future__ import annotations

import dataclasses
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import yaml

from core.faults import parse_fault
from core.model import MAX_BUCKETS, MAX_JOBS, SEMANTICS, JobSpec, ModelProfile
from workloads.profiles import PROFILE_SUFFIXES, available_profiles, coarsen, load_profile
from core.ring import packets_per_hop
from workloads.scaling import (
    DEFAULT_MIN_PACKETS,
    DEFAULT_REAL_LINK_GBPS,
    DEFAULT_TARGET_ITERATION_S,
    Scaling,
    estimate_iteration_s,
    granularity_time_scale,
    merge_small_buckets,
    suggest_time_scale,
)

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
PLACEMENT_POLICIES = ("packed", "spread", "random")
DEFAULT_MAX_BUCKETS = 6
DEFAULT_POLICY = "spread"
JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_TOP_KEYS = ("name", "description", "real_link_gbps", "time_scale", "target_iteration_s", "max_buckets",
             "min_packets_per_op", "placement", "arrivals", "jobs", "faults")
ARRIVAL_PROCESSES = ("poisson",)
_JOB_KEYS = ("name", "model", "workers", "iterations", "start_offset_s", "semantics", "hosts")

Host = Tuple[str, str, int]


class ScenarioError(ValueError):
    """A scenario is malformed or cannot be placed; the message names the file and the field."""


@dataclass(frozen=True)
class Placement:
    """How jobs without explicit hosts are placed: ``packed``, ``spread`` or ``random`` (shuffled with ``seed``)."""

    policy: str = DEFAULT_POLICY
    seed: int = 0

    def to_dict(self) -> dict:
        return {"policy": self.policy, "seed": self.seed}


@dataclass(frozen=True)
class JobConfig:
    """One job as the scenario file states it; ``profile`` is the real (unscaled, uncoarsened) model."""

    name: str
    model: str
    profile: ModelProfile
    workers: int
    iterations: int
    start_offset_s: float = 0.0
    semantics: str = "overlap"
    hosts: Optional[Tuple[str, ...]] = None

    def to_dict(self) -> dict:
        d = {"name": self.name, "model": self.model, "workers": self.workers, "iterations": self.iterations,
             "start_offset_s": self.start_offset_s, "semantics": self.semantics}
        if self.hosts is not None:
            d["hosts"] = list(self.hosts)
        return d


@dataclass
class ResolvedScenario:
    """A scenario placed on a fabric and scaled to it: the jobs exactly as the testbed runs them."""

    name: str
    description: str
    source: str
    jobs: List[JobSpec]
    scaling: Scaling
    placement: Placement
    max_buckets: int
    spec: dict = field(default_factory=dict)           # Scenario.to_dict() of what was resolved
    real_models: Dict[str, ModelProfile] = field(default_factory=dict)   # job name -> real profile
    faults: Tuple[str, ...] = ()                        # as written (core/faults.py parses them)
    granularity: Dict[str, Any] = field(default_factory=dict)   # what the packets-per-operation budget did

    def estimated_iteration_s(self) -> Dict[str, float]:
        """Per job: emulated iteration length with no overlap and no contention (compute + ring at link rate)."""
        return {j.name: estimate_iteration_s(j.model, j.workers, self.scaling.emu_rate_bps) for j in self.jobs}

    def to_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description, "source": self.source,
            "scaling": self.scaling.to_dict(), "placement": self.placement.to_dict(),
            "max_buckets": self.max_buckets, "scenario": self.spec,
            "jobs": [j.to_dict() for j in self.jobs],
            "real_models": {name: p.to_dict() for name, p in self.real_models.items()},
            "granularity": self.granularity,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ResolvedScenario":
        placement = d.get("placement", {})
        return cls(name=d["name"], description=d.get("description", ""), source=d.get("source", ""),
                   jobs=[JobSpec.from_dict(j) for j in d["jobs"]], scaling=Scaling.from_dict(d["scaling"]),
                   placement=Placement(placement.get("policy", DEFAULT_POLICY), int(placement.get("seed", 0))),
                   max_buckets=int(d.get("max_buckets", DEFAULT_MAX_BUCKETS)), spec=d.get("scenario", {}),
                   real_models={k: ModelProfile.from_dict(v) for k, v in d.get("real_models", {}).items()})


@dataclass(frozen=True)
class Scenario:
    """A validated scenario file. ``time_scale`` None means "auto"."""

    name: str
    jobs: Tuple[JobConfig, ...]
    description: str = ""
    real_link_gbps: float = DEFAULT_REAL_LINK_GBPS
    time_scale: Optional[float] = None
    target_iteration_s: Tuple[float, float] = DEFAULT_TARGET_ITERATION_S
    max_buckets: int = DEFAULT_MAX_BUCKETS
    placement: Placement = Placement()
    source: str = "<scenario>"
    faults: Tuple[str, ...] = ()
    min_packets_per_op: float = DEFAULT_MIN_PACKETS
    arrivals: Optional[Dict[str, Any]] = None

    @property
    def total_workers(self) -> int:
        return sum(j.workers for j in self.jobs)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description, "real_link_gbps": self.real_link_gbps,
            "time_scale": "auto" if self.time_scale is None else self.time_scale,
            "target_iteration_s": list(self.target_iteration_s), "max_buckets": self.max_buckets,
            "min_packets_per_op": self.min_packets_per_op,
            "placement": self.placement.to_dict(), "jobs": [j.to_dict() for j in self.jobs],
            "faults": list(self.faults), **({"arrivals": dict(self.arrivals)} if self.arrivals else {}),
        }

    def scaling(self, emu_link_mbps: float) -> Scaling:
        """The scenario's scaling onto hosts with links of ``emu_link_mbps``."""
        if self.time_scale is not None:
            return Scaling(self.real_link_gbps, emu_link_mbps, self.time_scale)
        tau = suggest_time_scale([j.profile for j in self.jobs], emu_link_mbps=emu_link_mbps,
                                 real_link_gbps=self.real_link_gbps, target_iteration_s=self.target_iteration_s,
                                 workers=[j.workers for j in self.jobs])
        return Scaling(self.real_link_gbps, emu_link_mbps, tau)

    def place(self, hosts: Sequence[Any]) -> List[Tuple[str, ...]]:
        """Host names of every job's ranks, in job order (see the module docstring for the policies)."""
        fabric = _normalise_hosts(hosts)
        known = {h[0] for h in fabric}
        taken: Dict[str, str] = {}
        result: List[Optional[Tuple[str, ...]]] = [None] * len(self.jobs)
        for i, job in enumerate(self.jobs):
            if job.hosts is None:
                continue
            for k, host in enumerate(job.hosts):
                if host not in known:
                    self._fail(f"jobs[{i}].hosts[{k}]", f"unknown host {host!r} (the fabric has {len(fabric)} hosts: "
                                                        f"{_host_range(fabric)})")
                if host in taken:
                    self._fail(f"jobs[{i}].hosts[{k}]", f"host {host!r} is already used by job {taken[host]!r}")
                taken[host] = job.name
            result[i] = tuple(job.hosts)
        free = [h for h in fabric if h[0] not in taken]
        need = sum(j.workers for j in self.jobs if j.hosts is None)
        if need > len(free):
            self._fail("placement", f"the jobs without explicit hosts need {need} hosts but only {len(free)} of the "
                                    f"fabric's {len(fabric)} hosts are free ({len(taken)} taken by explicit hosts)")
        order = _order_hosts(free, self.placement)
        pos = 0
        for i, job in enumerate(self.jobs):
            if result[i] is None:
                result[i] = tuple(h[0] for h in order[pos:pos + job.workers])
                pos += job.workers
        return [r for r in result if r is not None]

    def resolve(self, hosts: Sequence[Any], emu_link_mbps: float,
                min_packets: Optional[float] = None) -> ResolvedScenario:
        """The jobs as the testbed runs them on ``hosts`` ((name, ip, leaf) in fabric order) at ``emu_link_mbps``.
        ``min_packets`` overrides the scenario's ``min_packets_per_op``."""
        fabric = _normalise_hosts(hosts)
        scaling = self.scaling(emu_link_mbps)
        placed = self.place(fabric)
        address = {name: ip for name, ip, _ in fabric}
        profiles = [coarsen(job.profile, self.max_buckets) for job in self.jobs]
        budget = self.min_packets_per_op if min_packets is None else min_packets
        granularity: Dict[str, Any] = {"min_packets_per_op": budget, "time_scale_before": scaling.time_scale}
        if budget > 0:
            workers = [job.workers for job in self.jobs]
            if self.time_scale is None:
                tau = granularity_time_scale(profiles, workers, scaling, budget)
                scaling = Scaling(self.real_link_gbps, emu_link_mbps, tau)
            merged = [merge_small_buckets(p, n, scaling, budget) for p, n in zip(profiles, workers)]
            granularity["buckets"] = {job.name: [len(p.buckets), len(m.buckets)]
                                      for job, p, m in zip(self.jobs, profiles, merged)}
            profiles = merged
        granularity["time_scale"] = scaling.time_scale
        granularity["wall_time_factor"] = scaling.time_scale / granularity["time_scale_before"]
        smallest = {job.name: min(packets_per_hop(scaling.scale_bytes(b.nbytes, job.workers), job.workers)
                                  for b in p.buckets)
                    for job, p in zip(self.jobs, profiles) if job.workers > 1 and p.buckets}
        granularity["smallest_packets_per_op"] = smallest
        granularity["met"] = all(v >= budget for v in smallest.values())
        jobs = []
        for i, (job, names, profile) in enumerate(zip(self.jobs, placed, profiles)):
            model = scaling.scale_profile(profile, job.workers)
            jobs.append(JobSpec(index=i, name=job.name, model=model, workers=job.workers, iterations=job.iterations,
                                start_offset_s=job.start_offset_s, semantics=job.semantics, hosts=names,
                                addresses=tuple(address[n] for n in names)))
        return ResolvedScenario(name=self.name, description=self.description, source=self.source, jobs=jobs,
                                scaling=scaling, placement=self.placement, max_buckets=self.max_buckets,
                                spec=self.to_dict(), real_models={j.name: j.profile for j in self.jobs},
                                faults=self.faults, granularity=granularity)

    def _fail(self, where: str, message: str):
        raise ScenarioError(f"{self.source}: {where}: {message}")


# --------------------------------------------------------------------------------------------------------------
# Loading


def default_scenario_path() -> Path:
    """The scenario that runs when none is given (and in CI)."""
    return SCENARIO_DIR / "default.yaml"


def available_scenarios() -> List[str]:
    """Names of the scenarios shipped in ``workloads/scenarios``."""
    if not SCENARIO_DIR.is_dir():
        return []
    return sorted(p.stem for p in SCENARIO_DIR.iterdir() if p.suffix in PROFILE_SUFFIXES and p.is_file())


def load_scenario(path: Union[str, Path]) -> Scenario:
    """Load and validate a scenario file; a shipped scenario can also be named ("default", "headline", ...)."""
    p = Path(path).expanduser()
    source = str(path)
    if not p.is_file() and source in available_scenarios():
        p = next(SCENARIO_DIR / f"{path}{s}" for s in PROFILE_SUFFIXES if (SCENARIO_DIR / f"{path}{s}").is_file())
        source = str(p)
    if not p.is_file():
        raise ScenarioError(f"{source}: no such scenario file (shipped: {', '.join(available_scenarios())})")
    try:
        with open(p, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{source}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise ScenarioError(f"{source}: cannot read: {exc}") from None
    return scenario_from_dict(data, source=source, base_dir=p.parent, default_name=p.stem)


def scenario_from_dict(data: Any, source: str = "<scenario>", base_dir: Union[str, Path, None] = None,
                       default_name: str = "scenario") -> Scenario:
    """Validate the parsed contents of a scenario file. Relative profile paths are taken from ``base_dir``."""
    v = _Checker(source)
    if not isinstance(data, dict):
        v.fail("(top level)", "must be a mapping of scenario fields")
    v.no_unknown(data, _TOP_KEYS, "")
    name = v.string(data.get("name", default_name), "name")
    description = data.get("description", "")
    if not isinstance(description, str):
        v.fail("description", "must be a string")
    real_link_gbps = v.number(data.get("real_link_gbps", DEFAULT_REAL_LINK_GBPS), "real_link_gbps", positive=True)
    time_scale = data.get("time_scale", "auto")
    if time_scale == "auto":
        time_scale = None
    else:
        time_scale = v.number(time_scale, "time_scale", positive=True, hint=' or "auto"')
    target = data.get("target_iteration_s", list(DEFAULT_TARGET_ITERATION_S))
    if not isinstance(target, (list, tuple)) or len(target) != 2:
        v.fail("target_iteration_s", f"must be a list [low, high] of seconds (got {target!r})")
    lo = v.number(target[0], "target_iteration_s[0]", positive=True)
    hi = v.number(target[1], "target_iteration_s[1]", positive=True)
    if lo > hi:
        v.fail("target_iteration_s", f"low must not exceed high (got {target!r})")
    max_buckets = v.integer(data.get("max_buckets", DEFAULT_MAX_BUCKETS), "max_buckets", 1, MAX_BUCKETS)
    min_packets = data.get("min_packets_per_op", DEFAULT_MIN_PACKETS)
    if min_packets != 0:
        min_packets = v.number(min_packets, "min_packets_per_op", positive=True, hint=" (or 0 to turn it off)")
    placement = v.placement(data.get("placement", DEFAULT_POLICY))

    jobs_data = data.get("jobs")
    if jobs_data is None:
        v.fail("jobs", "missing")
    if not isinstance(jobs_data, list) or not jobs_data:
        v.fail("jobs", "must be a non-empty list of jobs")
    if len(jobs_data) > MAX_JOBS:
        v.fail("jobs", f"at most {MAX_JOBS} jobs (got {len(jobs_data)})")
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    jobs: List[JobConfig] = []
    seen: Dict[str, int] = {}
    for i, item in enumerate(jobs_data):
        job = v.job(item, i, base)
        if job.name in seen:
            v.fail(f"jobs[{i}].name", f"duplicate job name {job.name!r} (also jobs[{seen[job.name]}])")
        seen[job.name] = i
        jobs.append(job)
    arrivals = None
    if "arrivals" in data:
        arrivals = v.arrivals(data["arrivals"])
        for i, item in enumerate(jobs_data):
            if isinstance(item, dict) and "start_offset_s" in item:
                v.fail(f"jobs[{i}].start_offset_s", "arrivals: draws every job's arrival; give one or the other")
        times = arrival_times(arrivals, len(jobs))
        jobs = [dataclasses.replace(job, start_offset_s=t) for job, t in zip(jobs, times)]
    faults = data.get("faults", [])
    if not isinstance(faults, list):
        v.fail("faults", "must be a list of faults such as 'link lf1-sp1 down at 5'")
    for i, line in enumerate(faults):
        try:
            parse_fault(line)
        except ValueError as exc:
            v.fail(f"faults[{i}]", str(exc))
    return Scenario(name=name, jobs=tuple(jobs), description=" ".join(description.split()),
                    real_link_gbps=real_link_gbps, time_scale=time_scale, target_iteration_s=(lo, hi),
                    max_buckets=max_buckets, placement=placement, source=source,
                    faults=tuple(str(line).strip() for line in faults), min_packets_per_op=min_packets,
                    arrivals=arrivals)


def arrival_times(arrivals: Dict[str, Any], jobs: int) -> List[float]:
    """Each job's arrival (emulated seconds from the start): the first at 0, then exponential gaps."""
    rng = random.Random(arrivals["seed"])
    times, t = [], 0.0
    for i in range(jobs):
        if i:
            t += rng.expovariate(1.0 / arrivals["mean_interarrival_s"])
        times.append(round(t, 6))
    return times


class _Checker:
    """Field checks that raise ``ScenarioError`` with "<file>: <field>: <problem>"."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, message: str):
        raise ScenarioError(f"{self.source}: {where}: {message}")

    def no_unknown(self, d: dict, allowed: Iterable[str], prefix: str):
        allowed = tuple(allowed)
        for key in d:
            if key not in allowed:
                self.fail(f"{prefix}{key}", f"unknown field (allowed: {', '.join(allowed)})")

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(where, f"must be a non-empty string (got {value!r})")
        return value

    def integer(self, value: Any, where: str, minimum: int, maximum: Optional[int] = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or \
                (maximum is not None and value > maximum):
            bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            self.fail(where, f"must be an integer {bound} (got {value!r})")
        return value

    def number(self, value: Any, where: str, positive: bool = False, hint: str = "") -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < 0 or (positive and value == 0):
            self.fail(where, f"must be a number {'> 0' if positive else '>= 0'}{hint} (got {value!r})")
        return float(value)

    def arrivals(self, value: Any) -> Dict[str, Any]:
        if not isinstance(value, dict):
            self.fail("arrivals", "must be a mapping {process: poisson, mean_interarrival_s, seed} "
                                  f"(got {value!r})")
        self.no_unknown(value, ("process", "mean_interarrival_s", "seed"), "arrivals.")
        process = value.get("process", "poisson")
        if process not in ARRIVAL_PROCESSES:
            self.fail("arrivals.process", f"must be one of {', '.join(ARRIVAL_PROCESSES)} (got {process!r})")
        if "mean_interarrival_s" not in value:
            self.fail("arrivals.mean_interarrival_s", "missing")
        mean = self.number(value["mean_interarrival_s"], "arrivals.mean_interarrival_s", positive=True)
        seed = self.integer(value.get("seed", 0), "arrivals.seed", 0)
        return {"process": process, "mean_interarrival_s": mean, "seed": seed}

    def placement(self, value: Any) -> Placement:
        if isinstance(value, str):
            value = {"policy": value}
        if not isinstance(value, dict):
            self.fail("placement", f"must be a policy name or a mapping {{policy, seed}} (got {value!r})")
        self.no_unknown(value, ("policy", "seed"), "placement.")
        policy = value.get("policy", DEFAULT_POLICY)
        if policy not in PLACEMENT_POLICIES:
            self.fail("placement.policy", f"must be one of {', '.join(PLACEMENT_POLICIES)} (got {policy!r})")
        seed = self.integer(value.get("seed", 0), "placement.seed", 0)
        return Placement(policy, seed)

    def job(self, item: Any, i: int, base: Path) -> JobConfig:
        where = f"jobs[{i}]"
        if not isinstance(item, dict):
            self.fail(where, "must be a mapping with name, model, workers, iterations")
        self.no_unknown(item, _JOB_KEYS, f"{where}.")
        for key in ("name", "model", "workers", "iterations"):
            if key not in item:
                self.fail(f"{where}.{key}", "missing")
        name = item["name"]
        if not isinstance(name, str) or not JOB_NAME_RE.match(name):
            self.fail(f"{where}.name", "must be 1-64 characters: letters, digits, '_', '.', '-', starting with a "
                                       f"letter or digit (got {name!r})")
        model = self.string(item["model"], f"{where}.model")
        profile = self.profile(model, f"{where}.model", base)
        workers = self.integer(item["workers"], f"{where}.workers", 2)
        iterations = self.integer(item["iterations"], f"{where}.iterations", 1)
        offset = self.number(item.get("start_offset_s", 0.0), f"{where}.start_offset_s")
        semantics = item.get("semantics", "overlap")
        if semantics not in SEMANTICS:
            self.fail(f"{where}.semantics", f"must be one of {', '.join(SEMANTICS)} (got {semantics!r})")
        hosts = None
        if "hosts" in item:
            raw = item["hosts"]
            if not isinstance(raw, list) or not all(isinstance(h, str) and h for h in raw):
                self.fail(f"{where}.hosts", f"must be a list of host names (got {raw!r})")
            if len(raw) != workers:
                self.fail(f"{where}.hosts", f"lists {len(raw)} hosts for {workers} workers")
            for k, h in enumerate(raw):
                if h in raw[:k]:
                    self.fail(f"{where}.hosts[{k}]", f"host {h!r} listed twice (one worker per host)")
            hosts = tuple(raw)
        return JobConfig(name=name, model=model, profile=profile, workers=workers, iterations=iterations,
                         start_offset_s=offset, semantics=semantics, hosts=hosts)

    def profile(self, model: str, where: str, base: Path) -> ModelProfile:
        if model in available_profiles():
            target: Union[str, Path] = model
        else:
            target = Path(model).expanduser()
            if not target.is_absolute():
                target = base / target
            if not target.is_file():
                self.fail(where, f"unknown model {model!r}: not a shipped profile ({', '.join(available_profiles())})"
                                 f" and no profile file at {target}")
        try:
            return load_profile(target)
        except ValueError as exc:
            self.fail(where, f"bad profile: {exc}")


# --------------------------------------------------------------------------------------------------------------
# Placement helpers


def _normalise_hosts(hosts: Sequence[Any]) -> List[Host]:
    """(name, ip, leaf) tuples from tuples or from objects with ``name``, ``ip`` and ``leaf`` attributes."""
    out: List[Host] = []
    for h in hosts:
        if all(hasattr(h, a) for a in ("name", "ip", "leaf")):
            out.append((h.name, h.ip, h.leaf))
        else:
            name, ip, leaf = h
            out.append((str(name), str(ip), leaf))
    names = [h[0] for h in out]
    if len(set(names)) != len(names):
        raise ValueError("host names in the fabric must be unique")
    return out


def _order_hosts(free: List[Host], placement: Placement) -> List[Host]:
    """The order in which jobs without explicit hosts take the free hosts."""
    if placement.policy == "random":
        shuffled = list(free)
        random.Random(placement.seed).shuffle(shuffled)
        return shuffled
    by_leaf: Dict[Any, List[Host]] = {}
    for h in free:                     # dicts keep insertion order: leaves in order of first appearance
        by_leaf.setdefault(h[2], []).append(h)
    if placement.policy == "packed":
        return [h for leaf_hosts in by_leaf.values() for h in leaf_hosts]
    order: List[Host] = []
    queues = list(by_leaf.values())
    depth = max((len(q) for q in queues), default=0)
    for r in range(depth):
        order.extend(q[r] for q in queues if r < len(q))
    return order


def _host_range(fabric: List[Host]) -> str:
    names = [h[0] for h in fabric]
    return ", ".join(names) if len(names) <= 4 else f"{names[0]}, {names[1]}, ..., {names[-1]}"
