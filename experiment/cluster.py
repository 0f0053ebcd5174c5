"""Run a sweep's combinations on a Dask cluster (``scripts/sweep.py --cluster ADDRESS``).

The sweep stays the only writer of its folder: each combination runs on some worker as the same runner command
it would run locally, into a temporary folder there; the worker sends the finished folder back as a compressed
archive, and the sweep unpacks it into ``<sweep>/<id>/`` (first into ``<sweep>/.incoming/``, then renamed, so a
folder is either complete or absent). Resuming is therefore exactly the local sweep's: whatever has an ``ok``
summary is skipped, anything else is redone; nothing a worker produced after an interruption is written.

* Workers run the project from their own clone at the same commit, started from it with its environment, e.g.
  ``cd testbed-clone && PYTHONPATH=. .venv/bin/dask worker tcp://HOST:8786 --nthreads 1 --resources
  emulation=1`` (as root where emulations run; the scheduler: ``.venv/bin/dask scheduler``). A scenario file
  inside the project is passed relative to it, so clones may live at different paths; files outside it must
  exist at the same path on every worker.
* One emulation at a time per machine: emulation runs ask for the ``emulation`` resource when the cluster's
  workers declare it, and, whatever the workers declare, take a machine-wide lock file before starting (emulations
  share the machine's Open vSwitch). Fluid runs take neither and run anywhere, as many as there are threads.
* A worker lost mid-run is Dask's to handle: it reruns the task elsewhere (``distributed.scheduler.allowed-
  failures`` times, then the attempt counts as failed and ``--retries`` applies as for a local run).
* ``local:N`` starts a local cluster of N single-threaded worker processes (for fluid sweeps on one machine, and
  for tests).
"""
from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import uuid
from typing import Callable, Dict, List, Optional, Sequence, Tuple

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Taken by every emulation a cluster worker runs on this machine, whichever sweep sent it.
EMULATION_LOCK = os.path.join(tempfile.gettempdir(), "flux-testbed-emulation.lock")
RUNNER_LOG = "sweep-runner.log"
INCOMING_DIR = ".incoming"


def portable_args(args: Sequence[str]) -> List[str]:
    """Runner arguments with paths inside the project made relative to it (workers' clones may live elsewhere)."""
    out = []
    for arg in args:
        if os.path.isabs(arg) and os.path.exists(arg):
            rel = os.path.relpath(arg, PROJECT_DIR)
            if not rel.startswith(".."):
                arg = rel
        out.append(arg)
    return out


def run_remote(runner_args: Sequence[str], run_id: str, emulation: bool) -> Tuple[int, bytes, str]:
    """On a worker: run one combination with this clone's runner; return (exit code, the run folder as a
    tar.gz, host name). Runs with the project as working directory, under the worker's own interpreter."""
    import fcntl
    with tempfile.TemporaryDirectory(prefix="sweep-remote-") as work:
        out = os.path.join(work, run_id)
        log_path = os.path.join(work, RUNNER_LOG)
        cmd = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py"), *runner_args,
               "--out", out, "--run-id", run_id, "-q"]
        lock = open(EMULATION_LOCK, "a") if emulation else None
        try:
            if lock is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            with open(log_path, "w") as log:
                code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_DIR).returncode
        finally:
            if lock is not None:
                lock.close()
        os.makedirs(out, exist_ok=True)
        shutil.move(log_path, os.path.join(out, RUNNER_LOG))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(out, arcname=run_id)
        return code, buf.getvalue(), socket.gethostname()


def unpack(blob: bytes, run_id: str, sweep_dir: str) -> str:
    """Put a returned run folder at <sweep>/<run_id> (whole or not at all); return its path."""
    incoming = os.path.join(sweep_dir, INCOMING_DIR, uuid.uuid4().hex)
    os.makedirs(incoming)
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            for member in tar.getmembers():
                name = os.path.normpath(member.name)
                inside = name == run_id or name.startswith(run_id + os.sep)
                if name.startswith("..") or os.path.isabs(name) or not inside:
                    raise ValueError(f"unexpected path in a returned run: {member.name}")
                if not (member.isfile() or member.isdir()):
                    raise ValueError(f"unexpected file type in a returned run: {member.name}")
            tar.extractall(incoming)
        target = os.path.join(sweep_dir, run_id)
        os.replace(os.path.join(incoming, run_id), target)
        return target
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
        with_parent = os.path.join(sweep_dir, INCOMING_DIR)
        if os.path.isdir(with_parent) and not os.listdir(with_parent):
            os.rmdir(with_parent)


def connect(address: str):
    """(client, cluster or None) for ``tcp://...`` or ``local:N``."""
    from distributed import Client, LocalCluster
    if address.startswith("local:"):
        workers = int(address.split(":", 1)[1])
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
        return Client(cluster), cluster
    return Client(address, timeout="20s"), None


def declares_emulation(client) -> bool:
    """Whether any worker declares the ``emulation`` resource (then emulation runs ask for it)."""
    info = client.scheduler_info()
    return any("emulation" in (w.get("resources") or {}) for w in info.get("workers", {}).values())


class ClusterRuns:
    """Submits combinations and yields their outcomes as they finish: (run_id, attempt, exit code or None,
    blob or None, host or error text)."""

    def __init__(self, address: str):
        self.client, self.cluster = connect(address)
        self.gate = declares_emulation(self.client)
        from distributed import as_completed
        self.queue = as_completed()
        self.futures: Dict[object, Tuple[str, int]] = {}

    def submit(self, run_id: str, runner_args: Sequence[str], emulation: bool, attempt: int) -> None:
        resources = {"emulation": 1} if emulation and self.gate else None
        future = self.client.submit(run_remote, portable_args(runner_args), run_id, emulation,
                                    key=f"sweep-{run_id}-{attempt}-{uuid.uuid4().hex[:8]}", pure=False,
                                    resources=resources)
        self.futures[future] = (run_id, attempt)
        self.queue.add(future)

    def results(self):
        for future in self.queue:
            run_id, attempt = self.futures.pop(future)
            try:
                code, blob, host = future.result()
                yield run_id, attempt, code, blob, host
            except Exception as exc:  # the task failed on every worker it was tried on (e.g. KilledWorker)
                yield run_id, attempt, None, None, f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        for future in list(self.futures):
            future.cancel()
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def run_all(address: str, todo: Sequence[Tuple[str, List[str], bool]], sweep_dir: str, attempts: int,
            set_aside: Callable[[str], None], judge: Callable[[str, Optional[int], int, str], Optional[str]],
            progress: Callable[[str, str], None]) -> Dict[str, str]:
    """Run ``todo`` (run id, runner args, is emulation) on the cluster; return run id -> outcome.

    ``set_aside(run_dir)`` moves an earlier attempt's folder out of the way before a returned one takes its place;
    ``judge(run_dir, exit code, attempt, host)`` classifies an unpacked run as the local sweep does and returns
    its outcome, or None to try again."""
    runs = ClusterRuns(address)
    args = {run_id: (runner_args, emulation) for run_id, runner_args, emulation in todo}
    outcomes: Dict[str, str] = {}
    try:
        for run_id, (runner_args, emulation) in args.items():
            runs.submit(run_id, runner_args, emulation, 1)
        for run_id, attempt, code, blob, host in runs.results():
            run_dir = os.path.join(sweep_dir, run_id)
            if blob is not None:
                if os.path.exists(run_dir):
                    set_aside(run_dir)
                unpack(blob, run_id, sweep_dir)
            outcome = judge(run_dir, code, attempt, host)
            if outcome is None and attempt < attempts:
                runs.submit(run_id, *args[run_id], attempt + 1)
                continue
            outcomes[run_id] = outcome or "failed"
            progress(run_id, outcomes[run_id])
    finally:
        runs.close()
    return outcomes
