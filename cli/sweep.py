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
import copy
import hashlib
import io
import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from analysis.schedulers import folder_label, scheduler_classes
from experiment.results import (MANIFEST, Combo, RunFolder, collect, display_path, read_json,
                                safe_name, write_json)

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUNNER_SCRIPT = os.path.join(PROJECT_DIR, "testbed", "run.py")
DEFAULT_SCENARIO = os.path.join(PROJECT_DIR, "workloads", "scenarios", "default.yaml")

RUNNER_LOG = "sweep-runner.log"
ATTEMPTS_DIR = ".attempts"
LOCK_FILE = ".sweep.lock"

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNFAITHFUL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# Run states that are not redone: "unfaithful" ran to its end, and rerunning on the same machine would not help.
FINISHED = ("done", "unfaithful")
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Runner flags the sweep sets itself for every combination; they cannot be axes or extra arguments.
RESERVED_FLAGS = {"scheduler", "scenario", "seed", "out", "run-id", "quiet", "q", "param", "help", "h"}
TRUE_WORDS, FALSE_WORDS = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


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
    parts = [safe_name(folder_label(scheduler)), safe_name(scenario), f"s{seed}"]
    for name, value in settings:
        key = name[len("param."):] if name.startswith("param.") else name
        parts.append(f"{safe_name(key)}-{safe_name(value)}")
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
    try:
        from cli.run import build_parser
        return build_parser()
    except Exception:  # the sweep must stay usable while the runner's dependencies are being changed
        return None


def runner_flag(parser: argparse.ArgumentParser, name: str) -> Optional[bool]:
    """Whether the runner has the flag ``--NAME``: None if it has not, else whether it takes no value
    (``--skip-checks``). Asked through argparse's public parse_known_args on a copy of the parser that takes no
    abbreviations: an unknown flag is left over, a flag that needs a value is an error, any other parses."""
    probe = copy.copy(parser)
    probe.allow_abbrev = False
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            _, left_over = probe.parse_known_args([f"--{name}"])
    except SystemExit:
        return False
    return None if left_over else True


def boolean_flags(parser: Optional[argparse.ArgumentParser], names: Iterable[str]) -> set:
    """Those of ``names`` that are runner flags taking no value: an axis value switches them on or off."""
    if parser is None:
        return set()
    return {name for name in names if runner_flag(parser, name)}


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
                      extra: Sequence[str], flags_without_value: set) -> set:
    """Parse every combination's arguments with the runner's parser: unknown flags and bad numbers fail now.
    Returns the ids of the combinations that run the emulation (every one when the parser is unavailable)."""
    if parser is None:
        return {c.id for c in combos}
    emulation = set()
    for name in dict.fromkeys(name for c in combos for name, _ in c.settings if not name.startswith("param.")):
        if runner_flag(parser, name) is None:
            raise BadInput(f"--set {name}: the runner has no flag --{name} (see: python testbed/run.py --help)")
    for combo in combos:
        args = combo_args(combo, extra, flags_without_value) + ["--out", "x", "-q"]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parsed = parser.parse_args(args)
        except SystemExit:
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            msg = lines[-1].split("error:", 1)[-1].strip() if lines else "rejected"
            raise BadInput(f"combination {combo.id}: runner rejects its arguments: {msg}")
        if getattr(parsed, "engine", "emulation") != "fluid":
            emulation.add(combo.id)
    return emulation


def check_schedulers(schedulers: Sequence[str], axes: Sequence[Axis] = ()) -> None:
    """Unknown scheduler names, and param.KEY axes a scheduler does not accept, fail before anything runs. A name
    is what the runner's --scheduler takes: a shipped name, an installed entry point or package.module:ClassName."""
    try:
        from controller.schedulers import registry  # noqa: F401
    except Exception:  # the runner reports these itself (exit 2) if the registry is not importable here
        return
    try:
        classes = scheduler_classes(schedulers)
    except ValueError as exc:
        raise BadInput(f"--schedulers: {exc}")
    for axis in axes:
        if not axis.is_param:
            continue
        without = [s for s in schedulers if axis.key not in getattr(classes[s], "defaults", {axis.key: None})]
        if without:
            # Every such combination would fail with "unknown parameter"; sweeps with different schedulers
            # and axes can share one --out folder instead (the manifest and summary.csv merge them).
            raise BadInput(f"--set {axis.name}: not a parameter of {', '.join(without)}; run those schedulers "
                           f"in a separate sweep with the same --out")


# ------------------------------------------------------------------------------------------------ run state
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


# ------------------------------------------------------------------------------------------------ the sweep
def is_root() -> bool:
    return os.geteuid() == 0


def write_manifest(out: str, argv: Sequence[str], runner: Sequence[str], extra: Sequence[str], retries: int,
                   schedulers, scenarios, seeds, axes: Sequence[Axis], combos: Sequence[Combo]) -> dict:
    """sweep.json; combinations of earlier invocations with other axes are kept so their runs stay collected."""
    path = os.path.join(out, MANIFEST)
    old = read_json(path) or {}
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
    write_json(os.path.join(out, MANIFEST), manifest)


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
        if RunFolder(run_dir).status() in ("failed", "incomplete"):
            move_aside(out, run_dir)
        os.makedirs(run_dir, exist_ok=True)
        log = os.path.join(run_dir, RUNNER_LOG)
        rc = child.run(cmd, log)
        status = RunFolder(run_dir).status()
        if status == "done":
            return "ok"
        if status == "unfaithful":  # it ran to its end; the emulator, not the run, fell short: not redone here
            say(f"{combo.id}: completed, but its emulation was not faithful (see its fidelity warnings)")
            return "unfaithful"
        if rc is None or child.signals:
            return "interrupted"
        summary = RunFolder(run_dir).summary()
        reason = ((summary.error if summary else None)
                  or f"exit {rc}" + ("" if status == "failed" else ", no summary.json"))
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
    flags_without_value = boolean_flags(parser, [a.name for a in axes if not a.is_param])
    emulation = check_with_runner(parser, combos, extra, flags_without_value)
    out = os.path.abspath(args.out)
    commands = {c.id: build_command(runner, c, out, extra, flags_without_value) for c in combos}

    if args.dry_run:
        done = 0
        for c in combos:
            if RunFolder(os.path.join(out, c.id)).status() in FINISHED:
                done += 1
                print(f"# done, skipped: {c.id}")
            else:
                print(shlex.join(commands[c.id]))
        print(f"# {len(combos)} combinations, {done} already done, {len(combos) - done} to run", file=sys.stderr)
        return EXIT_OK
    if args.cluster:
        if args.runner:
            raise BadInput("--runner and --cluster do not go together (cluster workers run their own clone's runner)")
        check_cluster_address(args.cluster)
    elif emulation and not is_root():
        raise BadInput("must run as root (the runner needs Mininet): sudo python scripts/sweep.py ... "
                       "(or --dry-run to see the commands; runs with --engine fluid need no root)")

    os.makedirs(out, exist_ok=True)
    with sweep_lock(out):
        return _run_locked(args, argv, out, runner, extra, schedulers, scenarios, seeds, axes, combos, commands,
                           emulation)


def check_cluster_address(address: str) -> None:
    if address.startswith("local:"):
        n = address.split(":", 1)[1]
        if not n.isdigit() or int(n) < 1:
            raise BadInput(f"--cluster {address}: local:N needs N >= 1 worker processes")
    elif not re.match(r"^(tcp|tls|inproc|ws|wss)://\S+$", address):
        raise BadInput(f"--cluster {address}: give a Dask scheduler address (tcp://HOST:PORT) or local:N")
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise BadInput("--cluster needs the 'distributed' package (in .venv since install.sh; rerun it)")


def _run_on_cluster(args, out, combos, commands, emulation, counts, bar, say) -> bool:
    """Run the unfinished combinations on the cluster; True if interrupted."""
    from experiment import cluster as sweep_cluster
    todo = []
    for combo in combos:
        if RunFolder(os.path.join(out, combo.id)).status() in FINISHED:
            counts["skipped"] += 1
            bar.update(1)
            continue
        cmd = commands[combo.id]
        runner_args = cmd[cmd.index(RUNNER_SCRIPT) + 1:cmd.index("--out")] if RUNNER_SCRIPT in cmd else []
        todo.append((combo.id, runner_args, combo.id in emulation))
    if not todo:
        return False

    def judge(run_dir: str, code: Optional[int], attempt: int, host: str) -> Optional[str]:
        status = RunFolder(run_dir).status()
        if status == "done":
            return "ok"
        if status == "unfaithful":
            say(f"{os.path.basename(run_dir)}: completed on {host}, but its emulation was not faithful")
            return "unfaithful"
        reason = host if code is None else f"exit {code} on {host}"
        say(f"{os.path.basename(run_dir)}: attempt {attempt}/{1 + args.retries} failed ({reason})")
        return "bad-input" if code == EXIT_BAD_INPUT else None

    def progress(run_id: str, outcome: str) -> None:
        counts[outcome] += 1
        bar.update(1)
        bar.set_postfix(ok=counts["ok"] + counts["skipped"], failed=counts["failed"] + counts["bad-input"])

    def stop(signum, frame):
        raise KeyboardInterrupt
    # SIGINT too, rather than Python's default handler: a sweep started where SIGINT is ignored (a background
    # job of a script) would otherwise inherit the disposition and run on, while the local loop stops on it.
    previous = {sig: signal.signal(sig, stop) for sig in FORWARDED_SIGNALS}
    try:
        bar.set_description(f"sweep on {args.cluster}")
        sweep_cluster.run_all(args.cluster, todo, out, 1 + args.retries, lambda d: move_aside(out, d), judge,
                              progress)
        return False
    except KeyboardInterrupt:
        say("sweep: interrupted; finished runs are kept, the others are redone by the next invocation")
        return True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_locked(args, argv, out, runner, extra, schedulers, scenarios, seeds, axes, combos, commands,
                emulation) -> int:
    from tqdm import tqdm

    manifest = write_manifest(out, argv, runner, extra, args.retries, schedulers, scenarios, seeds, axes, combos)
    counts = {"ok": 0, "unfaithful": 0, "skipped": 0, "failed": 0, "bad-input": 0}
    bar = tqdm(total=len(combos), unit="run", file=sys.stderr, dynamic_ncols=True, desc="sweep")
    child = ChildRunner(notify=tqdm.write)
    child.install()
    interrupted = False
    try:
        for combo in combos if not args.cluster else ():
            if child.signals:
                interrupted = True
                break
            if RunFolder(os.path.join(out, combo.id)).status() in FINISHED:
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
        if args.cluster:
            child.restore()
            interrupted = _run_on_cluster(args, out, combos, commands, emulation, counts, bar, tqdm.write)
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
          + (f", {counts['unfaithful']} completed but not faithful" if counts["unfaithful"] else "")
          + (", interrupted" if interrupted else ""))
    print(f"summary: {path} ({len(rows)} rows)")
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if failed else EXIT_UNFAITHFUL if counts["unfaithful"] else EXIT_OK


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
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="run the combinations on a Dask cluster: its scheduler's address (tcp://HOST:8786) or "
                        "local:N (N local worker processes); results come back into --out and resuming works as "
                        "for a local sweep. One emulation at a time per machine; see experiment/cluster.py "
                        "for starting workers")
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
