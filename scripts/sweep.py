#!/usr/bin/env python3
"""Run a grid of experiments (schedulers x scenarios x seeds x parameter axes) and collect one summary table.

    sudo python scripts/sweep.py --schedulers ecmp,crux,flux --scenarios workloads/scenarios/default.yaml \\
        --seeds 1,2,3 --set host-rate=10,20 --set param.alpha=0.3,0.7 --out results/sweep-NAME

Design:

* One combination = one subprocess of the runner (``testbed/run.py ... --out <sweep>/<id> --run-id <id> -q``).
  The runner owns all fabric state and removes it on every exit path, so the sweep only starts it, waits for it
  and forwards signals to it; it never touches Mininet, Open vSwitch or the controller itself.
* Combination ids are built from the parameters (``flux__default__s1__host-rate-10__alpha-0.3``) and contain only
  ``[A-Za-z0-9._+-]``, so they are folder names and grep-able run ids at once. Ids that would collide (two scenario
  files with the same stem, values that differ only in unsafe characters) get a short hash of the parameters.
* Order: seed outermost, scheduler innermost, so a sweep stopped half-way holds complete scheduler comparisons
  for the seeds it reached rather than every seed of one scheduler.
* Resumability lives in the folders, not in a database: a combination whose folder has ``summary.json`` with
  ``"ok": true`` is done and skipped. Any other folder (failed, or cut short) is moved to ``<sweep>/.attempts/``
  before the combination is redone, so one run folder never mixes the files of two attempts and the failed
  attempt stays available for debugging. ``--retries`` extra attempts are made per invocation; a runner exit
  code of 2 (bad input) is not retried because it would fail the same way.
* The runner is started in its own session: a Ctrl-C in the terminal reaches only the sweep, which forwards it
  exactly once and then waits for the runner's teardown (a second signal during teardown is forwarded too and
  ignored by the runner; a third kills the runner, whose leftovers the next run removes).
* The runner's output goes to ``<sweep>/<id>/sweep-runner.log`` so the progress bar stays readable.
* ``sweep.json`` (the manifest) records the command, the axes, the start time and every combination with its
  parameters; ``summary.csv`` is rebuilt from the folders at the end of every invocation (or with
  ``--collect-only``): one row per (run, job) and one ``__cluster__`` row per run, including runs that failed or
  never ran, so a partial sweep is visible as such.

Exit codes: 0 every combination succeeded, 1 some failed, 2 bad input (nothing started), 130 interrupted.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PROJECT_DIR not in sys.path:
    sys.path.insert(0, PROJECT_DIR)

from testbed.bootstrap import ensure_env  # noqa: E402  (standard library only)

if __name__ == "__main__":
    # Set up what is missing and continue in .venv; collecting finished runs needs no fabric.
    ensure_env("sweep.py", needs_fabric=not ({"-h", "--help", "--collect-only"} & set(sys.argv[1:])))

RUNNER_SCRIPT = os.path.join(PROJECT_DIR, "testbed", "run.py")
DEFAULT_SCENARIO = os.path.join(PROJECT_DIR, "workloads", "scenarios", "default.yaml")

MANIFEST = "sweep.json"
SUMMARY_CSV = "summary.csv"
RUNNER_LOG = "sweep-runner.log"
ATTEMPTS_DIR = ".attempts"
LOCK_FILE = ".sweep.lock"
CLUSTER = "__cluster__"

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Runner flags the sweep sets itself for every combination; they cannot be axes or extra arguments.
RESERVED_FLAGS = {"scheduler", "scenario", "seed", "out", "run-id", "quiet", "q", "param", "help", "h"}
TRUE_WORDS, FALSE_WORDS = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}

RUN_COLUMNS = ["run_id", "scheduler", "scenario", "seed"]
JOB_COLUMNS = ["job", "model", "workers", "iterations", "iteration_time_mean_s", "iteration_time_p99_s",
               "gpu_utilization", "gpu_utilization_reconstructed", "faithful", "ok", "error"]

# Where a runner flag's value ends up in config.json: used to recover axis values of run folders that are not
# listed in the manifest (e.g. runs copied into the sweep folder by hand).
FLAG_IN_CONFIG = {
    "host-rate": ("fabric", "host_rate_mbps"), "fabric-rate": ("fabric", "fabric_rate_mbps"),
    "spines": ("fabric", "spines"), "leaves": ("fabric", "leaves"), "hosts-per-leaf": ("fabric", "hosts_per_leaf"),
    "poll-interval": ("poll_interval_s",), "class-floor": ("class_floor",), "queue-ms": ("queue_ms",),
    "iterations": ("iterations_override",), "time-limit": ("time_limit_s",),
}


class BadInput(Exception):
    """Bad flags or values: reported in one line, exit 2, nothing started."""


# ------------------------------------------------------------------------------------------------ axes and ids
@dataclass(frozen=True)
class Axis:
    """One ``--set`` axis: a runner flag (``host-rate``) or a scheduler parameter (``param.alpha``)."""

    name: str
    values: Tuple[str, ...]

    @property
    def is_param(self) -> bool:
        return self.name.startswith("param.")

    @property
    def key(self) -> str:
        """The runner flag without dashes, or the scheduler parameter's name."""
        return self.name[len("param."):] if self.is_param else self.name


@dataclass(frozen=True)
class Combo:
    """One point of the grid; ``settings`` holds the ``--set`` axes in command-line order."""

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


def split_list(text: str, what: str) -> List[str]:
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or any(not x for x in items):
        raise BadInput(f"{what}: empty item in {text!r}")
    if len(set(items)) != len(items):
        raise BadInput(f"{what}: repeated item in {text!r}")
    return items


def parse_seeds(text: str) -> List[int]:
    """``1,2,3`` or ranges ``1-5`` (inclusive), mixed: ``1-3,7``."""
    seeds: List[int] = []
    for item in split_list(text, "--seeds"):
        m = re.fullmatch(r"(-?\d+)-(-?\d+)", item)
        try:
            seeds += list(range(int(m.group(1)), int(m.group(2)) + 1)) if m else [int(item)]
        except ValueError:
            raise BadInput(f"--seeds: not an integer: {item!r}")
    if not seeds or len(set(seeds)) != len(seeds):
        raise BadInput(f"--seeds: empty or repeated seeds in {text!r}")
    return seeds


def parse_set(text: str) -> Axis:
    """``NAME=V1,V2,...`` -> Axis. NAME is a runner flag (with or without ``--``) or ``param.KEY``."""
    if "=" not in text:
        raise BadInput(f"--set {text!r}: expected NAME=V1,V2,... (e.g. host-rate=10,20 or param.alpha=0.3,0.7)")
    name, values = text.split("=", 1)
    name = name.strip().lstrip("-")
    if not name or (name.startswith("param.") and not name[len("param."):]):
        raise BadInput(f"--set {text!r}: missing axis name")
    if not name.startswith("param.") and name in RESERVED_FLAGS:
        raise BadInput(f"--set {name}: set by the sweep itself (use --schedulers/--scenarios/--seeds, "
                       f"or param.KEY for scheduler parameters)")
    return Axis(name, tuple(split_list(values, f"--set {name}")))


_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")


def safe(text) -> str:
    """Filesystem-safe rendering of one id part (``/`` ``=`` spaces and the like become ``-``)."""
    return _UNSAFE.sub("-", str(text)) or "x"


def short_hash(text: str, n: int = 6) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:n]


def scenario_labels(paths: Sequence[str]) -> Dict[str, str]:
    """Absolute path -> label: the file stem, plus a hash of the path when two files share a stem."""
    stems = {p: os.path.splitext(os.path.basename(p))[0] for p in paths}
    counts: Dict[str, int] = {}
    for s in stems.values():
        counts[s] = counts.get(s, 0) + 1
    return {p: s if counts[s] == 1 else f"{s}-{short_hash(p)}" for p, s in stems.items()}


def combo_id(scheduler: str, scenario: str, seed: int, settings: Iterable[Tuple[str, str]]) -> str:
    parts = [safe(scheduler), safe(scenario), f"s{seed}"]
    for name, value in settings:
        key = name[len("param."):] if name.startswith("param.") else name
        parts.append(f"{safe(key)}-{safe(value)}")
    cid = "__".join(parts)
    if cid[0] in ".-":  # never a hidden folder or something that looks like an option
        cid = "x" + cid
    if len(cid) > 150:  # stay well below the 255-byte file name limit
        cid = cid[:140] + "-" + short_hash(cid, 8)
    return cid


def expand(schedulers: Sequence[str], scenarios: Sequence[str], seeds: Sequence[int],
           axes: Sequence[Axis]) -> List[Combo]:
    """The cross product, seed outermost and scheduler innermost (see the module docstring for why)."""
    files = [os.path.abspath(s) for s in scenarios]
    labels = scenario_labels(files)
    combos = []
    grid = itertools.product(seeds, files, *(a.values for a in axes), schedulers)
    for seed, scenario, *values, scheduler in grid:
        settings = tuple((a.name, v) for a, v in zip(axes, values))
        combos.append(Combo(combo_id(scheduler, labels[scenario], seed, settings), scheduler, labels[scenario],
                            scenario, seed, settings))
    # Sanitising can map distinct values to one id ("a/b" and "a:b"); a hash of the raw parameters separates them.
    seen: Dict[str, int] = {}
    for c in combos:
        seen[c.id] = seen.get(c.id, 0) + 1
    return [c if seen[c.id] == 1 else
            Combo(f"{c.id}-{short_hash(repr((c.scheduler, c.scenario_file, c.seed, c.settings)))}", c.scheduler,
                  c.scenario, c.scenario_file, c.seed, c.settings) for c in combos]


# ------------------------------------------------------------------------------------------------ commands
def runner_parser() -> Optional[argparse.ArgumentParser]:
    """The runner's own argument parser, to check flags before hours of runs start (None if not importable)."""
    if PROJECT_DIR not in sys.path:
        sys.path.insert(0, PROJECT_DIR)
    try:
        from testbed.run import build_parser
        return build_parser()
    except Exception:  # the sweep must stay usable while the runner's dependencies are being changed
        return None


def boolean_flags(parser: Optional[argparse.ArgumentParser]) -> set:
    """Runner flags that take no value (``--skip-checks``): an axis value switches them on or off."""
    if parser is None:
        return set()
    return {opt.lstrip("-") for a in parser._actions if a.nargs == 0 for opt in a.option_strings}


def combo_args(combo: Combo, extra: Sequence[str], flags_without_value: set) -> List[str]:
    """The runner arguments of one combination, without the runner itself and without --out/--run-id/-q."""
    args = ["--scheduler", combo.scheduler, "--scenario", combo.scenario_file, "--seed", str(combo.seed)]
    for name, value in combo.settings:
        if name.startswith("param."):
            args += ["--param", f"{name[len('param.'):]}={value}"]
        elif name in flags_without_value:
            word = value.lower()
            if word not in TRUE_WORDS | FALSE_WORDS:
                raise BadInput(f"--set {name}: the runner flag takes no value; use true/false (got {value!r})")
            if word in TRUE_WORDS:
                args.append(f"--{name}")
        else:
            args += [f"--{name}", value]
    return args + list(extra)


def build_command(runner: Sequence[str], combo: Combo, out_dir: str, extra: Sequence[str] = (),
                  flags_without_value: set = frozenset()) -> List[str]:
    return (list(runner) + combo_args(combo, extra, flags_without_value)
            + ["--out", os.path.join(os.path.abspath(out_dir), combo.id), "--run-id", combo.id, "-q"])


def check_extra_args(extra: Sequence[str], axes: Sequence[Axis]) -> None:
    axis_flags = {a.key for a in axes if not a.is_param}
    axis_params = {a.key for a in axes if a.is_param}
    for i, tok in enumerate(extra):
        if not tok.startswith("-"):
            continue
        name = tok.lstrip("-").split("=", 1)[0]
        if name == "param":
            value = tok.split("=", 1)[1] if "=" in tok else (extra[i + 1] if i + 1 < len(extra) else "")
            if value.split("=", 1)[0] in axis_params:
                raise BadInput(f"--extra-args: --param {value} conflicts with the axis param.{value.split('=')[0]}")
        elif name in RESERVED_FLAGS:
            raise BadInput(f"--extra-args: {tok} is set by the sweep itself")
        elif name in axis_flags:
            raise BadInput(f"--extra-args: {tok} is also a --set axis")


def check_with_runner(parser: Optional[argparse.ArgumentParser], combos: Sequence[Combo],
                      extra: Sequence[str], flags_without_value: set) -> None:
    """Parse every combination's arguments with the runner's parser: unknown flags and bad numbers fail now."""
    if parser is None:
        return
    known = {opt.lstrip("-") for a in parser._actions for opt in a.option_strings}
    for combo in combos:
        for name, _ in combo.settings:
            if not name.startswith("param.") and name not in known:
                raise BadInput(f"--set {name}: the runner has no flag --{name} (see: python testbed/run.py --help)")
        args = combo_args(combo, extra, flags_without_value) + ["--out", "x", "-q"]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parser.parse_args(args)
        except SystemExit:
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            msg = lines[-1].split("error:", 1)[-1].strip() if lines else "rejected"
            raise BadInput(f"combination {combo.id}: runner rejects its arguments: {msg}")


def check_schedulers(schedulers: Sequence[str], axes: Sequence[Axis] = ()) -> None:
    """Unknown scheduler names, and param.KEY axes a scheduler does not accept, fail before anything runs."""
    if PROJECT_DIR not in sys.path:
        sys.path.insert(0, PROJECT_DIR)
    try:
        from controller.schedulers.registry import SCHEDULERS
    except Exception:  # the runner reports these itself (exit 2) if the registry is not importable here
        return
    unknown = [s for s in schedulers if s not in SCHEDULERS]
    if unknown:
        raise BadInput(f"--schedulers: unknown {', '.join(unknown)}; known: {', '.join(sorted(SCHEDULERS))}")
    for axis in axes:
        if not axis.is_param:
            continue
        without = [s for s in schedulers if axis.key not in getattr(SCHEDULERS[s], "defaults", {axis.key: None})]
        if without:
            # Every such combination would fail with "unknown parameter"; sweeps with different schedulers
            # and axes can share one --out folder instead (the manifest and summary.csv merge them).
            raise BadInput(f"--set {axis.name}: not a parameter of {', '.join(without)}; run those schedulers "
                           f"in a separate sweep with the same --out")


# ------------------------------------------------------------------------------------------------ run state
def load_json(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def run_status(run_dir: str) -> str:
    """``done`` (summary ok), ``failed`` (summary not ok), ``incomplete`` (folder without summary) or ``new``."""
    if not os.path.isdir(run_dir):
        return "new"
    summary = load_json(os.path.join(run_dir, "summary.json"))
    if summary is None:
        return "incomplete"
    return "done" if summary.get("ok") is True else "failed"


def move_aside(sweep_dir: str, run_dir: str) -> str:
    """Keep an unsuccessful attempt under .attempts/<id>.<n> so the redo starts from an empty folder."""
    attempts = os.path.join(sweep_dir, ATTEMPTS_DIR)
    os.makedirs(attempts, exist_ok=True)
    base = os.path.basename(run_dir.rstrip(os.sep))
    n = 1
    while os.path.exists(os.path.join(attempts, f"{base}.{n}")):
        n += 1
    dest = os.path.join(attempts, f"{base}.{n}")
    os.replace(run_dir, dest)
    return dest


def display_path(path: str) -> str:
    """Relative to the working directory when below it, else absolute."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f.read().splitlines()[-50:] if ln.strip()]
        return lines[-1] if lines else ""
    except OSError:
        return ""


class ChildRunner:
    """Runs one runner command at a time and forwards SIGINT/SIGTERM/SIGHUP to it.

    The child gets its own session, so a terminal's Ctrl-C is not delivered to it directly as well: it sees each
    signal once, from here. ``signals`` counts what the sweep received; any signal means: stop after this run."""

    def __init__(self, notify=None):
        self.proc: Optional[subprocess.Popen] = None
        self.signals = 0
        self.forwarded = 0
        self._old: dict = {}
        self._notify = notify or (lambda msg: sys.stderr.write(msg + "\n"))

    def install(self) -> None:
        self._old = {s: signal.signal(s, self._on_signal) for s in FORWARDED_SIGNALS}

    def restore(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
        self._old = {}

    def _on_signal(self, signum, frame) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self._notify(f"sweep: {name}: stopping (no run in progress)")
            return
        if self.signals >= 3:
            self._notify(f"sweep: {name} again: killing the runner (pid {proc.pid}); the next run removes "
                         f"what it left behind")
            proc.kill()
            return
        self._forward(signum)
        if self.signals == 1:
            self._notify(f"sweep: {name}: stopping; waiting for the runner to tear down (pid {proc.pid})")
        else:
            self._notify("sweep: still waiting for the runner's teardown; one more signal kills it")

    def _forward(self, signum) -> None:
        try:
            self.proc.send_signal(signum)
            self.forwarded += 1
        except (ProcessLookupError, AttributeError):
            pass

    def run(self, cmd: Sequence[str], log_path: str) -> Optional[int]:
        """Exit code of the runner, or None if a stop was requested before it started."""
        if self.signals:
            return None
        with open(log_path, "ab") as log:
            log.write(("$ " + shlex.join(cmd) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
            # A signal that arrived while the child was being created found no child to forward to.
            if self.signals and not self.forwarded:
                self._forward(signal.SIGINT)
            try:
                return self.proc.wait()
            finally:
                self.proc = None


# ------------------------------------------------------------------------------------------------ collection
@dataclass
class RunRecord:
    """One run folder of a sweep (or a single run folder) with its parameters and whatever it wrote."""

    id: str
    path: str
    params: dict
    summary: Optional[dict] = None
    config: Optional[dict] = None
    in_manifest: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.summary) and self.summary.get("ok") is True

    @property
    def exists(self) -> bool:
        return os.path.isdir(self.path)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "" if value is None else str(value)


def infer_params(config: Optional[dict], axes: Sequence[str], fallback_id: str) -> dict:
    """Parameters of a run folder the manifest does not list, from its config.json."""
    config = config or {}
    scenario = config.get("scenario") or {}
    name = scenario.get("name") if isinstance(scenario, dict) else None
    if not name and config.get("scenario_file"):
        name = os.path.splitext(os.path.basename(config["scenario_file"]))[0]
    params = {"scheduler": config.get("scheduler", ""), "scenario": name or "", "seed": config.get("seed", "")}
    for axis in axes:
        value = None
        if axis.startswith("param."):
            value = (config.get("scheduler_params") or {}).get(axis[len("param."):])
        elif axis in FLAG_IN_CONFIG:
            value = config
            for k in FLAG_IN_CONFIG[axis]:
                value = value.get(k) if isinstance(value, dict) else None
        params[axis] = _fmt(value)
    if not params["scheduler"]:
        params["scheduler"] = fallback_id
    return params


def is_run_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "summary.json")) or os.path.isfile(os.path.join(path, "config.json"))


def discover_runs(results_dir: str) -> Tuple[List[RunRecord], List[str]]:
    """Run records and ``--set`` axis names of a sweep folder, or the one record of a single run folder.

    Manifest combinations come first, in sweep order (including ones that never ran); then any other run
    folder found in the directory, with parameters read from its config.json."""
    results_dir = os.path.abspath(results_dir)
    if is_run_dir(results_dir) and not os.path.isfile(os.path.join(results_dir, MANIFEST)):
        config = load_json(os.path.join(results_dir, "config.json"))
        summary = load_json(os.path.join(results_dir, "summary.json"))
        rid = os.path.basename(results_dir)
        return [RunRecord(rid, results_dir, infer_params(config or (summary or {}).get("config"), [], rid),
                          summary, config)], []
    manifest = load_json(os.path.join(results_dir, MANIFEST)) or {}
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
        for name, _ in combo.settings:
            if name not in axes:
                axes.append(name)
        path = os.path.join(results_dir, combo.id)
        records.append(RunRecord(combo.id, path, combo.params(), load_json(os.path.join(path, "summary.json")),
                                 load_json(os.path.join(path, "config.json")), in_manifest=True))
    try:
        names = sorted(os.listdir(results_dir))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(results_dir, name)
        if name.startswith(".") or name in seen or not os.path.isdir(path) or not is_run_dir(path):
            continue
        config = load_json(os.path.join(path, "config.json"))
        summary = load_json(os.path.join(path, "summary.json"))
        records.append(RunRecord(name, path, infer_params(config or (summary or {}).get("config"), axes, name),
                                 summary, config))
    for r in records:
        for axis in axes:
            r.params.setdefault(axis, "")
    return records, axes


def _num(value):
    """Numbers for the CSV: NaN and missing become empty cells."""
    if value is None:
        return ""
    if isinstance(value, float) and value != value:
        return ""
    return value


def run_rows(record: RunRecord, axes: Sequence[str]) -> List[dict]:
    """The summary.csv rows of one run: one per job, then the ``__cluster__`` row."""
    summary = record.summary
    config = record.config or (summary or {}).get("config") or {}
    base = {"run_id": (summary or {}).get("run_id") or config.get("run_id") or record.id,
            "scheduler": record.params.get("scheduler", ""), "scenario": record.params.get("scenario", ""),
            "seed": record.params.get("seed", "")}
    for axis in axes:
        base[axis] = record.params.get(axis, "")
    if summary is None:
        why = "not run" if not record.exists else "no summary.json (unfinished or killed run)"
        return [dict(base, job=CLUSTER, ok=False, error=why)]
    ok = summary.get("ok") is True
    fidelity = summary.get("fidelity") or {}
    faithful = fidelity.get("faithful") if isinstance(fidelity, dict) else None
    rows = []
    for job in summary.get("jobs") or []:
        if not isinstance(job, dict):
            continue
        rows.append(dict(base, job=job.get("name", ""), model=job.get("model", ""), workers=_num(job.get("workers")),
                         iterations=_num(job.get("iterations")),
                         iteration_time_mean_s=_num(job.get("iteration_time_mean_s")),
                         iteration_time_p99_s=_num(job.get("iteration_time_p99_s")),
                         gpu_utilization=_num(job.get("gpu_utilization")),
                         gpu_utilization_reconstructed=_num(job.get("gpu_utilization_reconstructed")),
                         faithful=_num(faithful), ok=ok, error=job.get("error") or summary.get("error") or ""))
    cluster = summary.get("cluster") or {}
    rows.append(dict(base, job=CLUSTER, model="", workers=_num(cluster.get("gpus")), iterations="",
                     iteration_time_mean_s="", iteration_time_p99_s="",
                     gpu_utilization=_num(cluster.get("gpu_utilization")),
                     gpu_utilization_reconstructed=_num(cluster.get("gpu_utilization_reconstructed")),
                     faithful=_num(faithful), ok=ok, error=summary.get("error") or ""))
    return rows


def collect(results_dir: str) -> Tuple[str, List[dict]]:
    """Rebuild ``<results_dir>/summary.csv`` from the run folders; returns its path and rows."""
    records, axes = discover_runs(results_dir)
    rows = [row for r in records for row in run_rows(r, axes)]
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


# ------------------------------------------------------------------------------------------------ the sweep
def is_root() -> bool:
    return os.geteuid() == 0


def write_manifest(out: str, argv: Sequence[str], runner: Sequence[str], extra: Sequence[str], retries: int,
                   schedulers, scenarios, seeds, axes: Sequence[Axis], combos: Sequence[Combo]) -> dict:
    """sweep.json; combinations of earlier invocations with other axes are kept so their runs stay collected."""
    path = os.path.join(out, MANIFEST)
    old = load_json(path) or {}
    now = time.time()
    this = {"command": shlex.join(["scripts/sweep.py"] + list(argv)),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)), "started_at_epoch": now}
    combos_by_id = {c.get("id"): c for c in old.get("combinations") or [] if isinstance(c, dict)}
    combos_by_id.update({c.id: c.to_dict() for c in combos})
    set_axes = list(old.get("set_axes") or [])
    set_axes += [a.name for a in axes if a.name not in set_axes]
    previous = list(old.get("previous") or [])
    if old.get("command"):
        previous.append({k: old.get(k) for k in ("command", "started_at", "finished_at", "outcome")})
    manifest = dict(this, runner=list(runner), extra_args=list(extra), retries=retries,
                    axes={"scheduler": list(schedulers), "scenario": list(scenarios), "seed": list(seeds),
                          **{a.name: list(a.values) for a in axes}},
                    set_axes=set_axes, combinations=list(combos_by_id.values()), previous=previous)
    save_manifest(out, manifest)
    return manifest


def save_manifest(out: str, manifest: dict) -> None:
    path = os.path.join(out, MANIFEST)
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=2)
    os.replace(path + ".tmp", path)


@contextlib.contextmanager
def sweep_lock(out: str):
    """One sweep per folder: two would redo each other's unfinished combinations."""
    import fcntl
    f = open(os.path.join(out, LOCK_FILE), "w")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise BadInput(f"another sweep is running in {out}")
        f.write(str(os.getpid()))
        f.flush()
        yield
    finally:
        f.close()


def run_combo(combo: Combo, out: str, cmd: Sequence[str], attempts: int, child: ChildRunner, say) -> str:
    """``ok``, ``failed``, ``bad-input`` or ``interrupted``."""
    run_dir = os.path.join(out, combo.id)
    for attempt in range(1, attempts + 1):
        if child.signals:  # stopped between attempts: leave no empty folder behind
            return "interrupted"
        if run_status(run_dir) in ("failed", "incomplete"):
            move_aside(out, run_dir)
        os.makedirs(run_dir, exist_ok=True)
        log = os.path.join(run_dir, RUNNER_LOG)
        rc = child.run(cmd, log)
        status = run_status(run_dir)
        if status == "done":
            return "ok"
        if rc is None or child.signals:
            return "interrupted"
        summary = load_json(os.path.join(run_dir, "summary.json")) or {}
        reason = summary.get("error") or f"exit {rc}" + ("" if status == "failed" else ", no summary.json")
        say(f"{combo.id}: attempt {attempt}/{attempts} failed ({reason}); log: {display_path(log)}")
        if rc == EXIT_BAD_INPUT:
            say(f"  {last_line(log)}")
            return "bad-input"
    return "failed"


def run_sweep(args, argv: Sequence[str]) -> int:
    schedulers = split_list(args.schedulers, "--schedulers")
    scenarios = split_list(args.scenarios, "--scenarios")
    seeds = parse_seeds(args.seeds)
    axes = [parse_set(s) for s in args.set]
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise BadInput("--set: the same axis is given twice")
    if args.retries < 0:
        raise BadInput("--retries must be >= 0")
    for s in scenarios:
        if not os.path.isfile(s):
            raise BadInput(f"--scenarios: no such file: {s}")
    runner = shlex.split(args.runner) if args.runner else [sys.executable, RUNNER_SCRIPT]
    if not runner:
        raise BadInput("--runner is empty")
    extra = shlex.split(args.extra_args or "")
    check_extra_args(extra, axes)
    check_schedulers(schedulers, axes)
    combos = expand(schedulers, scenarios, seeds, axes)
    parser = runner_parser()
    flags_without_value = boolean_flags(parser)
    check_with_runner(parser, combos, extra, flags_without_value)
    out = os.path.abspath(args.out)
    commands = {c.id: build_command(runner, c, out, extra, flags_without_value) for c in combos}

    if args.dry_run:
        done = 0
        for c in combos:
            if run_status(os.path.join(out, c.id)) == "done":
                done += 1
                print(f"# done, skipped: {c.id}")
            else:
                print(shlex.join(commands[c.id]))
        print(f"# {len(combos)} combinations, {done} already done, {len(combos) - done} to run", file=sys.stderr)
        return EXIT_OK
    if not is_root():
        raise BadInput("must run as root (the runner needs Mininet): sudo python scripts/sweep.py ... "
                       "(or --dry-run to see the commands)")

    os.makedirs(out, exist_ok=True)
    with sweep_lock(out):
        return _run_locked(args, argv, out, runner, extra, schedulers, scenarios, seeds, axes, combos, commands)


def _run_locked(args, argv, out, runner, extra, schedulers, scenarios, seeds, axes, combos, commands) -> int:
    from tqdm import tqdm

    manifest = write_manifest(out, argv, runner, extra, args.retries, schedulers, scenarios, seeds, axes, combos)
    counts = {"ok": 0, "skipped": 0, "failed": 0, "bad-input": 0}
    bar = tqdm(total=len(combos), unit="run", file=sys.stderr, dynamic_ncols=True, desc="sweep")
    child = ChildRunner(notify=tqdm.write)
    child.install()
    interrupted = False
    try:
        for combo in combos:
            if child.signals:
                interrupted = True
                break
            if run_status(os.path.join(out, combo.id)) == "done":
                counts["skipped"] += 1
                bar.update(1)
                continue
            bar.set_description(combo.id if len(combo.id) <= 48 else combo.id[:45] + "...")
            outcome = run_combo(combo, out, commands[combo.id], 1 + args.retries, child, tqdm.write)
            if outcome == "interrupted":
                interrupted = True
                break
            counts[outcome] += 1
            bar.update(1)
            bar.set_postfix(ok=counts["ok"] + counts["skipped"], failed=counts["failed"] + counts["bad-input"])
    finally:
        child.restore()
        bar.close()
        # Collect whatever exists, also after Ctrl-C: a partial table is better than none.
        path, rows = collect(out)
        manifest.update(finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), outcome=dict(counts,
                        interrupted=interrupted))
        save_manifest(out, manifest)
    failed = counts["failed"] + counts["bad-input"]
    print(f"sweep {out}: {len(combos)} combinations: {counts['ok']} ran ok, {counts['skipped']} already done, "
          f"{failed} failed" + (f" ({counts['bad-input']} bad input)" if counts["bad-input"] else "")
          + (", interrupted" if interrupted else ""))
    print(f"summary: {path} ({len(rows)} rows)")
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if failed else EXIT_OK


# ------------------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sweep.py",
        description="Run testbed/run.py for every combination of schedulers x scenarios x seeds x --set axes,\n"
                    "one run folder per combination under --out (resumable), then write <out>/summary.csv.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n"
               "  sudo python scripts/sweep.py --schedulers ecmp,crux,flux \\\n"
               "      --scenarios workloads/scenarios/headline.yaml --seeds 1-3 --out results/sweep-headline\n"
               "  sudo python scripts/sweep.py --schedulers flux --seeds 1,2 --set param.alpha=0.3,0.7 \\\n"
               "      --set poll-interval=0.1,0.5 --out results/sweep-alpha --dry-run\n"
               "  python scripts/sweep.py --out results/sweep-headline --collect-only\n\n"
               "Rerunning the same command resumes: combinations with summary.json ok=true are skipped,\n"
               "failed or unfinished ones are moved to <out>/.attempts/ and redone.\n"
               "Exit codes: 0 all ok, 1 some failed, 2 bad input (nothing started), 130 interrupted.")
    p.add_argument("--schedulers", metavar="A,B,...", help="comma-separated scheduler names (ecmp, bytescheduler, "
                   "crux, flux)")
    p.add_argument("--scenarios", metavar="FILE[,FILE]", default=os.path.relpath(DEFAULT_SCENARIO),
                   help="comma-separated scenario files (default: %(default)s)")
    p.add_argument("--seeds", metavar="N,M,...", default="1",
                   help="comma-separated seeds; ranges like 1-5 are inclusive (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=V1,V2",
                   help="an extra axis (repeatable): a runner flag without dashes (host-rate, fabric-rate, "
                        "poll-interval, spines, iterations, ...) or param.KEY for a scheduler parameter "
                        "(passed as --param KEY=V); flags without a value (skip-checks) take true/false")
    p.add_argument("--out", metavar="DIR", help="sweep folder; one sub-folder per combination (required)")
    p.add_argument("--retries", type=int, default=1, metavar="N",
                   help="extra attempts for a failed combination in this invocation (default: %(default)s)")
    p.add_argument("--extra-args", default="", metavar="'ARGS'",
                   help="more runner arguments for every combination, e.g. "
                        "--extra-args=\"--iterations 4 --time-limit 600\"")
    p.add_argument("--runner", default=None, metavar="CMD",
                   help="command that runs one combination (default: this interpreter + testbed/run.py); it gets "
                        "the runner's arguments and must write summary.json into --out")
    p.add_argument("--dry-run", action="store_true", help="print the runner commands that would run, run nothing")
    p.add_argument("--collect-only", action="store_true",
                   help="only rebuild <out>/summary.csv from the existing run folders (no root needed)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        if not args.out:
            raise BadInput("--out DIR is required")
        if args.collect_only:
            if not os.path.isdir(args.out):
                raise BadInput(f"--out: no such folder: {args.out}")
            path, rows = collect(args.out)
            print(f"summary: {path} ({len(rows)} rows)")
            return EXIT_OK
        if not args.schedulers:
            raise BadInput("--schedulers is required (e.g. --schedulers ecmp,crux,flux)")
        return run_sweep(args, argv)
    except BadInput as exc:
        sys.stderr.write(f"sweep.py: {exc}\n")
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
