"""The results model: one run's folder and its summary, the only code that knows their files and formats.

Every run (of any engine) writes one folder; ``RunFolder`` names its files and reads them back, ``RunSummary``
is ``summary.json`` typed. The runner, the workload phase, the reconstruction, the sweep, the figures and
``reanalyse`` all go through this module, so a file's format is written down once (and documented, with the
schema version, in results/README.md).

Schema versions of ``summary.json``:

* 1 (no ``schema_version`` key): summaries written before the field existed; read as version 1.
* 2: ``schema_version``, ``config.engine`` (what produced the run) and ``config.flags`` (every runner flag by
  name) added.
* 3: ``config.fabric.topology`` and ``config.fabric.k`` added (a second topology family); decisions.csv's
  ``spine`` column is now ``path``.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Tuple

from core.config import ControllerConfig
from core.model import JobSpec
from workloads import truth

SCHEMA_VERSION = 3

Series = List[Tuple[float, int]]  # (time, cumulative counter value), sorted by time
FlowId = Tuple[int, int, int]      # (job index, bucket, rank)


# ---------------------------------------------------------------------------------------------- the summary
@dataclass
class JobSummary:
    """One job's figures. The typed fields are what sweeps and figures read; every other figure the workers'
    logs gave (operation times, waits, bytes ...) is kept in ``figures`` and written back as it came."""

    name: str
    model: str = ""
    workers: int = 0
    iterations: int = 0
    hosts: List[str] = field(default_factory=list)
    gpu_utilization: Optional[float] = None
    gpu_utilization_reconstructed: Optional[float] = None
    idle_per_iteration_reconstructed_s: Optional[float] = None
    iteration_time_mean_s: Optional[float] = None
    iteration_time_p50_s: Optional[float] = None
    iteration_time_p99_s: Optional[float] = None
    error: Optional[str] = None
    figures: Dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default=None):
        """A figure by its summary.json key, typed or not."""
        if key in _JOB_FIELDS:
            value = getattr(self, key)
            return default if value is None else value
        return self.figures.get(key, default)

    def to_dict(self) -> dict:
        out = {f: getattr(self, f) for f in _JOB_FIELDS if getattr(self, f) is not None or f in _JOB_ALWAYS}
        out.update(self.figures)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "JobSummary":
        known = {k: d[k] for k in _JOB_FIELDS if k in d}
        return cls(**known, figures={k: v for k, v in d.items() if k not in _JOB_FIELDS})


_JOB_FIELDS = tuple(f.name for f in fields(JobSummary) if f.name != "figures")
_JOB_ALWAYS = {"name", "model", "workers", "iterations", "hosts"}


@dataclass
class RunSummary:
    """``summary.json``: what produced a run (config, versions, seed, engine) and what it measured."""

    run_id: str
    ok: bool = False
    error: Optional[str] = None
    config: Dict[str, Any] = field(default_factory=dict)
    versions: Dict[str, Any] = field(default_factory=dict)
    seed: Optional[int] = None
    jobs: List[JobSummary] = field(default_factory=list)
    cluster: Dict[str, Any] = field(default_factory=dict)
    controller: Dict[str, Any] = field(default_factory=dict)
    fidelity: Dict[str, Any] = field(default_factory=dict)
    reconstruction: Dict[str, Any] = field(default_factory=dict)
    checks: Dict[str, Any] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict)  # the workload phase's and the runner's other keys

    @property
    def engine(self) -> str:
        """What produced the run (config.engine); runs from before the field existed were emulations."""
        return self.config.get("engine", "emulation")

    @property
    def faithful(self) -> Optional[bool]:
        return self.fidelity.get("faithful")

    def job(self, name: str) -> Optional[JobSummary]:
        return next((j for j in self.jobs if j.name == name), None)

    def apply_reconstruction(self, reconstruction: dict) -> None:
        """Record the counter-based estimate (testbed/reconstruct.py) next to the workers' truth."""
        self.reconstruction = reconstruction
        per_job = reconstruction.get("jobs") or {}
        for job in self.jobs:
            entry = per_job.get(job.name) or {}
            job.gpu_utilization_reconstructed = entry.get("gpu_utilization")
            job.idle_per_iteration_reconstructed_s = entry.get("idle_per_iteration_s")
        # A cluster figure from an earlier analysis must not outlive the job figures it was made of.
        self.cluster.pop("gpu_utilization_reconstructed", None)
        if reconstruction.get("cluster_gpu_utilization") is not None:
            self.cluster["gpu_utilization_reconstructed"] = reconstruction["cluster_gpu_utilization"]

    def to_dict(self) -> dict:
        out = {"schema_version": self.schema_version, "run_id": self.run_id, "ok": self.ok}
        if self.error is not None:
            out["error"] = self.error
        for name in ("config", "versions", "seed", "checks", "timings", "controller", "fidelity",
                     "reconstruction", "cluster"):
            value = getattr(self, name)
            if value not in (None, {}):
                out[name] = value
        out["jobs"] = [j.to_dict() for j in self.jobs]
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "RunSummary":
        typed = {f.name for f in fields(cls)} - {"jobs", "extra"}
        known = {k: d[k] for k in typed if k in d}
        known.setdefault("schema_version", 1)
        known.setdefault("run_id", d.get("run_id") or "")
        jobs = [JobSummary.from_dict(j) for j in d.get("jobs") or [] if isinstance(j, dict)]
        extra = {k: v for k, v in d.items() if k not in typed and k != "jobs"}
        return cls(**known, jobs=jobs, extra=extra)


# ----------------------------------------------------------------------------------------------- the folder
class RunFolder:
    """One run's folder (see results/README.md for every file)."""

    CONFIG = "config.json"
    SUMMARY = "summary.json"
    CONTROLLER_CONFIG = "controller.json"
    FLOW_STATS = "flow_stats.csv"
    PORT_STATS = "port_stats.csv"
    DECISIONS = "decisions.csv"
    EVENTS = "events.csv"
    ERROR_LOG = "error.log"

    def __init__(self, path: str):
        self.path = os.path.abspath(path)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def has(self, name: str) -> bool:
        return os.path.isfile(self.file(name))

    # -- what a run is and how it ended
    def is_run(self) -> bool:
        return self.has(self.SUMMARY) or self.has(self.CONFIG)

    def status(self) -> str:
        """``done`` (summary ok), ``unfaithful`` (ok, but the emulation was not faithful: the runner exited with
        3), ``failed`` (summary not ok), ``incomplete`` (no summary) or ``new``."""
        if not os.path.isdir(self.path):
            return "new"
        summary = self.summary()
        if summary is None:
            return "incomplete"
        if summary.ok is not True:
            return "failed"
        return "unfaithful" if summary.faithful is False else "done"

    def config(self) -> Optional[dict]:
        return read_json(self.file(self.CONFIG))

    def write_config(self, config: dict) -> None:
        os.makedirs(self.path, exist_ok=True)
        write_json(self.file(self.CONFIG), config)

    def summary(self) -> Optional[RunSummary]:
        data = read_json(self.file(self.SUMMARY))
        return None if data is None else RunSummary.from_dict(data)

    def write_summary(self, summary: RunSummary) -> None:
        os.makedirs(self.path, exist_ok=True)
        write_json(self.file(self.SUMMARY), summary.to_dict())

    def run_config(self) -> dict:
        """The run's config: config.json, or the copy in summary.json when only that survived."""
        config = self.config()
        if config is None:
            summary = self.summary()
            config = summary.config if summary else {}
        return config or {}

    def poll_interval_s(self) -> Optional[float]:
        value = self.run_config().get("poll_interval_s")
        if value is None:
            ctl = self.controller_config()
            value = ctl.poll_interval_s if ctl else None
        return float(value) if value is not None else None

    # -- what the controller and the workers were given
    def controller_config(self) -> Optional[ControllerConfig]:
        try:
            with open(self.file(self.CONTROLLER_CONFIG)) as f:
                return ControllerConfig.from_json(f.read())
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def jobs(self) -> List[JobSpec]:
        ctl = self.controller_config()
        return list(ctl.jobs) if ctl else []

    def job_file(self, job: str) -> str:
        return os.path.join(self.path, "jobs", f"{job}.json")

    def write_job(self, job: JobSpec) -> str:
        path = self.job_file(job.name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json(path, job.to_dict())
        return path

    # -- the workers' ground truth
    def worker_log(self, job: str, rank: int) -> str:
        return os.path.join(self.path, "workers", f"{job}-r{rank}.jsonl")

    def worker_stderr(self, job: str, rank: int) -> str:
        return os.path.join(self.path, "workers", f"{job}-r{rank}.stderr")

    def worker_logs(self, job: str) -> List[str]:
        """Paths of one job's worker logs that exist, by rank."""
        pattern = re.compile(re.escape(job) + r"-r(\d+)\.jsonl")
        try:
            names = os.listdir(os.path.join(self.path, "workers"))
        except OSError:
            return []
        ranked = sorted((int(m.group(1)), name) for name in names if (m := pattern.fullmatch(name)))
        return [os.path.join(self.path, "workers", name) for _, name in ranked]

    def iteration_times(self, job: str, warmup: int = 0) -> List[float]:
        """Iteration durations of one job as the workers logged them (workloads/truth.py's definition),
        skipping ``warmup``; from summary.json's ``iteration_times_s`` when the logs are gone."""
        paths = self.worker_logs(job)
        if paths:
            return truth.iteration_durations([truth.read_log(p) for p in paths])[warmup:]
        summary = self.summary()
        entry = summary.job(job) if summary else None
        times = entry.get("iteration_times_s", []) if entry else []
        return [t for t in times[warmup:] if isinstance(t, (int, float))]

    # -- the controller's counters and decisions
    def flow_series(self) -> Dict[FlowId, Series]:
        """(job, bucket, rank) -> byte counter series of each data flow's forward direction, where it enters
        the fabric (the flow's ingress rule)."""
        series: Dict[FlowId, Series] = defaultdict(list)
        for row in self._rows(self.FLOW_STATS):
            if row["reverse"] != "0":
                continue
            series[(int(row["job"]), int(row["bucket"]), int(row["rank"]))].append(
                (float(row["time"]), int(row["bytes"])))
        for pts in series.values():
            pts.sort()
        return dict(series)

    def flow_series_by_switch(self) -> Dict[FlowId, Dict[int, Series]]:
        """Like ``flow_series``, per switch (DPID) that counted the flow."""
        series: Dict[FlowId, Dict[int, Series]] = defaultdict(lambda: defaultdict(list))
        for row in self._rows(self.FLOW_STATS):
            if row["reverse"] != "0":
                continue
            key = (int(row["job"]), int(row["bucket"]), int(row["rank"]))
            series[key][int(row["dpid"])].append((float(row["time"]), int(row["bytes"])))
        for per_dpid in series.values():
            for pts in per_dpid.values():
                pts.sort()
        return {k: dict(v) for k, v in series.items()}

    def port_series(self, column: str = "tx_bytes") -> Dict[Tuple[int, int], Series]:
        """(dpid, port) -> series of one column of port_stats.csv (tx_bytes, rx_bytes, tx_dropped ...)."""
        series: Dict[Tuple[int, int], Series] = defaultdict(list)
        for row in self._rows(self.PORT_STATS):
            series[(int(row["dpid"]), int(row["port"]))].append((float(row["time"]), int(row[column])))
        for pts in series.values():
            pts.sort()
        return dict(series)

    def class_timelines(self) -> Dict[FlowId, List[Tuple[float, int]]]:
        """(job, bucket, rank) -> [(time, priority class)] of every class change the scheduler made."""
        timelines: Dict[FlowId, List[Tuple[float, int]]] = defaultdict(list)
        for row in self._rows(self.DECISIONS):
            try:
                timelines[(int(row["job"]), int(row["bucket"]), int(row["rank"]))].append(
                    (float(row["time"]), int(row["priority_class"])))
            except (KeyError, TypeError, ValueError):
                continue
        for tl in timelines.values():
            tl.sort(key=lambda x: x[0])
        return dict(timelines)

    def _rows(self, name: str):
        try:
            with open(self.file(name), newline="") as f:
                yield from csv.DictReader(f)
        except FileNotFoundError:
            return


# ------------------------------------------------------------------------------- many runs: sweeps, tables
MANIFEST = "sweep.json"      # a sweep's grid and the state of its combinations (written by scripts/sweep.py)
SUMMARY_CSV = "summary.csv"  # one row per run and job, plus a CLUSTER row per run
CLUSTER = "__cluster__"
RUN_COLUMNS = ["run_id", "scheduler", "scenario", "seed"]
#: ``timeouts``: TCP retransmission timeouts (a job's, or the run's on the CLUSTER row); ``drops``: packets the
#: switches' class queues dropped and ``steals``: Flux's steals (CLUSTER row; empty where the engine has none);
#: ``starvation_timeouts``: the part of ``timeouts`` that the fluid engine's starvation rule charged (empty for
#: emulation runs), the figure docs/twin-log.md's cross-validation sorts the twin's jobs by.
#: Enough to tabulate a sweep from this file alone, without its run folders (scripts/suite.py).
JOB_COLUMNS = ["job", "model", "workers", "iterations", "iteration_time_mean_s", "iteration_time_p99_s",
               "gpu_utilization", "gpu_utilization_reconstructed", "timeouts", "starvation_timeouts", "drops", "steals",
               "faithful", "ok", "error", "git_commit"]
#: ``git_commit``: the code that produced the run (12 digits, ``+dirty`` when tracked files differed from it), so
#: that a table kept without its run folders still says which code made each row.


@dataclass(frozen=True)
class Combo:
    """One point of a sweep's grid, as sweep.json lists it; ``settings`` holds the ``--set`` axes in
    command-line order."""

    id: str
    scheduler: str
    scenario: str          # label: the scenario file's stem (made unique)
    scenario_file: str     # absolute path
    seed: int
    settings: Tuple[Tuple[str, str], ...] = ()

    def params(self) -> dict:
        return {"scheduler": self.scheduler, "scenario": self.scenario, "seed": self.seed, **dict(self.settings)}

    def to_dict(self) -> dict:
        return {"id": self.id, "scheduler": self.scheduler, "scenario": self.scenario,
                "scenario_file": self.scenario_file, "seed": self.seed, "set": dict(self.settings)}

    @classmethod
    def from_dict(cls, d: dict) -> "Combo":
        return cls(id=d["id"], scheduler=d["scheduler"], scenario=d["scenario"],
                   scenario_file=d.get("scenario_file", ""), seed=int(d["seed"]),
                   settings=tuple((k, str(v)) for k, v in (d.get("set") or {}).items()))


@dataclass
class RunRecord:
    """One run folder of a sweep (or a single run folder) with its parameters and whatever it wrote."""

    id: str
    folder: RunFolder
    params: dict
    summary: Optional[RunSummary] = None
    config: Optional[dict] = None
    in_manifest: bool = False

    @property
    def path(self) -> str:
        return self.folder.path

    @property
    def ok(self) -> bool:
        return self.summary is not None and self.summary.ok is True

    @property
    def exists(self) -> bool:
        return os.path.isdir(self.path)

    @classmethod
    def read(cls, run_id: str, path: str, params: Optional[dict] = None, axes=(), in_manifest=False) -> "RunRecord":
        folder = RunFolder(path)
        summary, config = folder.summary(), folder.config()
        if params is None:
            params = infer_params(config or (summary.config if summary else None), axes, run_id)
        return cls(run_id, folder, params, summary, config, in_manifest)


def infer_params(config: Optional[dict], axes, fallback_id: str) -> dict:
    """Parameters of a run folder the manifest does not list, from its config: any runner flag an axis names
    is in ``config.flags`` (runs of schema 1 lack it, and their axis values stay empty)."""
    config = config or {}
    scenario = config.get("scenario") or {}
    name = scenario.get("name") if isinstance(scenario, dict) else None
    if not name and config.get("scenario_file"):
        name = os.path.splitext(os.path.basename(config["scenario_file"]))[0]
    params = {"scheduler": config.get("scheduler", "") or fallback_id, "scenario": name or "",
              "seed": config.get("seed", "")}
    flags = config.get("flags") or {}
    for axis in axes:
        if axis.startswith("param."):
            params[axis] = format_value((config.get("scheduler_params") or {}).get(axis[len("param."):]))
        else:
            params[axis] = format_value(flags.get(axis))
    return params


def discover_runs(results_dir: str) -> Tuple[List[RunRecord], List[str]]:
    """Run records and ``--set`` axis names of a sweep folder, or the one record of a single run folder.

    Manifest combinations come first, in sweep order (including ones that never ran); then any other run
    folder found in the directory, with parameters read from its config."""
    results_dir = os.path.abspath(results_dir)
    if RunFolder(results_dir).is_run() and not os.path.isfile(os.path.join(results_dir, MANIFEST)):
        return [RunRecord.read(os.path.basename(results_dir), results_dir)], []
    manifest = read_json(os.path.join(results_dir, MANIFEST)) or {}
    axes: List[str] = list(manifest.get("set_axes") or [])
    records: List[RunRecord] = []
    seen = set()
    for d in manifest.get("combinations") or []:
        try:
            combo = Combo.from_dict(d)
        except (KeyError, TypeError, ValueError):
            continue
        if combo.id in seen:
            continue
        seen.add(combo.id)
        axes += [name for name, _ in combo.settings if name not in axes]
        records.append(RunRecord.read(combo.id, os.path.join(results_dir, combo.id), combo.params(),
                                      in_manifest=True))
    try:
        names = sorted(os.listdir(results_dir))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(results_dir, name)
        if name.startswith(".") or name in seen or not os.path.isdir(path) or not RunFolder(path).is_run():
            continue
        records.append(RunRecord.read(name, path, axes=axes))
    for r in records:
        for axis in axes:
            r.params.setdefault(axis, "")
    return records, axes


def _cell(value):
    """Numbers for the CSV: NaN and missing become empty cells."""
    if value is None:
        return ""
    if isinstance(value, float) and value != value:
        return ""
    return value


def summary_rows(record: RunRecord, axes) -> List[dict]:
    """The summary.csv rows of one run: one per job, then the CLUSTER row."""
    summary = record.summary
    config = record.config or (summary.config if summary else {}) or {}
    base = {"run_id": (summary.run_id if summary else "") or config.get("run_id") or record.id,
            "scheduler": record.params.get("scheduler", ""), "scenario": record.params.get("scenario", ""),
            "seed": record.params.get("seed", "")}
    for axis in axes:
        base[axis] = record.params.get(axis, "")
    if summary is None:
        why = "not run" if not record.exists else "no summary.json (unfinished or killed run)"
        return [dict(base, job=CLUSTER, ok=False, error=why)]
    ok, faithful = summary.ok is True, _cell(summary.faithful)
    base["git_commit"] = code_label(summary.versions or {})
    fidelity, controller = summary.fidelity or {}, summary.controller or {}
    by_job = fidelity.get("tcp_by_job") or {}

    def job_timeouts(job):
        if job.name in by_job:
            return by_job[job.name].get("timeouts")
        return job.figures.get("timeouts")
    rows = []
    for job in summary.jobs:
        rows.append(dict(base, job=job.name, model=job.model, workers=_cell(job.workers),
                         iterations=_cell(job.iterations), iteration_time_mean_s=_cell(job.iteration_time_mean_s),
                         iteration_time_p99_s=_cell(job.iteration_time_p99_s),
                         gpu_utilization=_cell(job.gpu_utilization),
                         gpu_utilization_reconstructed=_cell(job.gpu_utilization_reconstructed),
                         timeouts=_cell(job_timeouts(job)),
                         starvation_timeouts=_cell(job.figures.get("starvation_timeouts")),
                         faithful=faithful, ok=ok, error=job.error or summary.error or ""))
    run_timeouts = (fidelity.get("tcp") or {}).get("timeouts")
    if run_timeouts is None:
        run_timeouts = _total(job_timeouts(j) for j in summary.jobs)
    cluster = summary.cluster
    rows.append(dict(base, job=CLUSTER, model="", workers=_cell(cluster.get("gpus")), iterations="",
                     iteration_time_mean_s="", iteration_time_p99_s="",
                     gpu_utilization=_cell(cluster.get("gpu_utilization")),
                     gpu_utilization_reconstructed=_cell(cluster.get("gpu_utilization_reconstructed")),
                     timeouts=_cell(run_timeouts),
                     starvation_timeouts=_cell(_total(j.figures.get("starvation_timeouts") for j in summary.jobs)),
                     drops=_cell((fidelity.get("classes") or {}).get("dropped")),
                     steals=_cell(controller.get("steals")),
                     faithful=faithful, ok=ok, error=summary.error or ""))
    return rows


def _total(values) -> Optional[float]:
    """The sum of a figure over a run's jobs; None when a job lacks it (an engine that has no such figure)."""
    values = list(values)
    return None if not values or any(v is None for v in values) else sum(values)


def collect(results_dir: str) -> Tuple[str, List[dict]]:
    """Rebuild ``<results_dir>/summary.csv`` from the run folders; returns its path and rows."""
    records, axes = discover_runs(results_dir)
    rows = [row for r in records for row in summary_rows(r, axes)]
    columns = RUN_COLUMNS + list(axes) + JOB_COLUMNS
    path = os.path.join(results_dir, SUMMARY_CSV)
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({c: row.get(c, "") for c in columns})
    os.replace(tmp, path)  # readers never see a half-written table
    return path, rows


def read_summary_csv(path: str) -> Tuple[List[dict], List[str]]:
    """The rows of a summary.csv and its axis columns (those between ``seed`` and ``job``)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        columns = reader.fieldnames or []
    try:
        axes = columns[columns.index("seed") + 1:columns.index("job")]
    except ValueError:
        axes = []
    return rows, axes


# ------------------------------------------------------------------------------------------------ provenance
def code_version(project_dir: str) -> Dict[str, Any]:
    """``git_commit`` and ``git_dirty`` (tracked files changed) of ``project_dir``; None where git cannot say
    (not a checkout, no git)."""
    def git(*args) -> Optional[str]:
        try:
            done = subprocess.run(["git", "-C", project_dir, *args], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


def code_label(versions: Dict[str, Any]) -> str:
    """``versions``' commit as summary.csv shows it: 12 digits, ``+dirty`` if tracked files differed."""
    commit = versions.get("git_commit")
    if not commit:
        return ""
    return commit[:12] + ("+dirty" if versions.get("git_dirty") else "")


# --------------------------------------------------------------------------------------------------- helpers
def read_json(path: str) -> Optional[dict]:
    """A JSON object from a file, or None if it is missing, unreadable or not an object."""
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def write_json(path: str, data: dict) -> None:
    """Written aside and renamed, so that a reader (a sweep, a killed run's next run) never sees half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, default=str)
    os.replace(tmp, path)


def format_value(value) -> str:
    """A parameter's value as sweeps and figures print it: floats in %g, None as empty."""
    if isinstance(value, float):
        return f"{value:g}"
    return "" if value is None else str(value)


_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")


def safe_name(text) -> str:
    """Filesystem-safe rendering of one id or file-name part (``/`` ``=`` spaces and the like become ``-``)."""
    return _UNSAFE.sub("-", str(text)) or "x"


def display_path(path: str) -> str:
    """Relative to the working directory when below it, else absolute."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
