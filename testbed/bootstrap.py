"""First use of any command: set up what is missing, then continue in the project's virtual environment.

Every user-facing command (``testbed/run.py`` and the scripts in ``scripts/``) starts with::

    from testbed.bootstrap import ensure_env
    if __name__ == "__main__":
        ensure_env("run.py", needs_fabric=True)

This module uses the standard library only, so it runs on whatever ``python`` the user typed. It checks that
``<project>/.venv`` exists and was built by the current install recipe (``scripts/install.sh`` and ``setup.cfg``,
compared by hash), and, for commands that build a fabric, that Open vSwitch runs and Mininet's tools are there.
If something is missing and the user is root, it says what and runs ``scripts/install.sh`` (about a minute the
first time; the checks alone take milliseconds). It then re-executes the command in ``.venv``. Without root it
prints one line saying what to run and exits with 2.

``python testbed/bootstrap.py --stamp`` prints the recipe's hash (install.sh writes it into the environment).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from typing import List, Optional

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_SH = os.path.join(PROJECT_DIR, "scripts", "install.sh")
RECIPE_FILES = (INSTALL_SH, os.path.join(PROJECT_DIR, "setup.cfg"))
STAMP_NAME = ".flux-setup"
SYSTEM_TOOLS = ("ovs-vsctl", "mnexec", "tc", "ip", "ethtool", "ping")
EXIT_BAD_INPUT = 2
_REEXEC_FLAG = "FLUX_BOOTSTRAPPED"


def venv_dir() -> str:
    return os.environ.get("FLUX_VENV") or os.path.join(PROJECT_DIR, ".venv")


def recipe_stamp() -> str:
    """Hash of the files that decide what the environment holds; a change to either means: reinstall."""
    digest = hashlib.sha256()
    for path in RECIPE_FILES:
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def _venv_python_changed(venv: str) -> bool:
    """Whether the interpreter under the environment is no longer the one it was built on (a distribution
    upgrade moves /usr/bin/python3 to a new minor version; the environment's packages are then missing)."""
    try:
        with open(os.path.join(venv, "pyvenv.cfg")) as f:
            built = next(line.split("=", 1)[1].strip() for line in f if line.split("=", 1)[0].strip() == "version")
    except (OSError, StopIteration):
        return False
    runs = os.path.basename(os.path.realpath(os.path.join(venv, "bin", "python")))  # e.g. python3.11
    return runs.startswith("python3.") and runs[len("python"):] != ".".join(built.split(".")[:2])


def venv_problem(venv: str) -> Optional[str]:
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        return f"no Python environment in {venv}"
    if _venv_python_changed(venv):
        return f"the Python under {venv} changed since it was built"
    try:
        with open(os.path.join(venv, STAMP_NAME)) as f:
            stamp = f.read().strip()
    except OSError:
        stamp = ""
    if stamp != recipe_stamp():
        return "the Python environment does not match scripts/install.sh and setup.cfg"
    return None


def system_problem() -> Optional[str]:
    missing = [tool for tool in SYSTEM_TOOLS if shutil.which(tool) is None]
    if missing:
        return "missing " + ", ".join(missing)
    try:
        r = subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True, timeout=10)
        running = r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        running = False
    return None if running else "Open vSwitch is not running"


def problems(needs_fabric: bool) -> List[str]:
    found = [venv_problem(venv_dir())]
    # Only root can see whether Open vSwitch runs (its socket is root's); without root the command's own check
    # says that it needs root, which is the one thing to fix first.
    if needs_fabric and os.geteuid() == 0:
        found.append(system_problem())
    return [p for p in found if p]


def asks_for_fluid(argv: List[str]) -> bool:
    """Whether a command line asks for ``--engine fluid`` (either spelling), read before argparse runs: the
    flow-level twin needs no fabric and no root."""
    return "fluid" in [a.split("=", 1)[-1] for a in argv if a.startswith("--engine=")] + \
        [b for a, b in zip(argv, argv[1:]) if a == "--engine"]


def in_venv(venv: Optional[str] = None) -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(venv or venv_dir())


def ensure_env(prog: str, needs_fabric: bool, script: Optional[str] = None) -> None:
    """Make sure the command can run, then continue in .venv (re-executing ``script`` there if needed).

    Returns only when the caller already runs in an up-to-date environment; otherwise it re-executes or exits."""
    script = os.path.abspath(script or sys.argv[0])
    if in_venv() and venv_problem(venv_dir()) is None:
        # Started in the environment (re-executed, or by a developer): the command's own preflight reports
        # what the system lacks, after checking its input.
        os.environ.pop(_REEXEC_FLAG, None)
        return
    found = problems(needs_fabric)
    if found:
        if os.environ.get(_REEXEC_FLAG) == "1":
            _fail(prog, f"set-up finished but {'; '.join(found)}")
        if os.geteuid() != 0:
            rel = os.path.relpath(script, os.getcwd())
            _fail(prog, f"set-up needed ({'; '.join(found)}); run it once as root: sudo python {rel}")
        sys.stderr.write(f"[setup] {'; '.join(found)}: running scripts/install.sh "
                         "(packages, Open vSwitch, .venv; about a minute the first time)\n")
        sys.stderr.flush()
        # Its progress goes to stderr: the command's own output (a benchmark's JSON) must stay clean.
        r = subprocess.run(["bash", INSTALL_SH], stdout=sys.stderr)
        if r.returncode != 0:
            _fail(prog, f"set-up failed (scripts/install.sh exited with {r.returncode}); see the lines above")
        sys.stderr.write("[setup] done\n")
        sys.stderr.flush()
    venv_python = os.path.join(venv_dir(), "bin", "python")
    os.environ[_REEXEC_FLAG] = "1"
    sys.stdout.flush()
    os.execv(venv_python, [venv_python, script] + sys.argv[1:])


def _fail(prog: str, message: str) -> None:
    sys.stderr.write(f"{prog}: {message}\n")
    sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    if sys.argv[1:] == ["--stamp"]:
        print(recipe_stamp())
    else:
        sys.exit("usage: python testbed/bootstrap.py --stamp")
