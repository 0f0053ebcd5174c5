#!/usr/bin/env python3
"""The test command: set up what is missing, run every test, then the non-root tests on every other Python.

    sudo python scripts/test.py                  # what CI runs (as root, without sudo)
    sudo python scripts/test.py -- -k fabric     # arguments after -- go to pytest
    python scripts/test.py --pythons none        # a normal user: the tests that need no root, one interpreter

1. Like every command, it first sets up what is missing (testbed/bootstrap.py runs scripts/install.sh as root).
2. ``pytest`` in <project>/.venv, on the system's Python: all tests. As root the ones marked ``root`` (a real
   fabric, controller and traffic) are required; for a normal user they are skipped.
3. For every other Python 3.10-3.13 found on the machine (pyenv's interpreters, ``python3.X`` on the PATH), one
   per minor version: an environment ``.venv-py3.X`` built by ``scripts/install.sh --python-only``, the tests
   that need no root, and as root the few marked ``every_python``: a real fabric driven from that Python, on Ryu
   and on os-ken. The other fabric tests run once, with the system's Python: they measure the emulation, which
   is the same whatever Python drives it.

Exit code 0 when every step passed, 1 when a test failed, 2 for bad input or a set-up that failed.
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = PROJECT_DIR
    from cli.entry import set_up
    # Root runs the fabric tests, so root needs the fabric set up; a normal user needs only the environment.
    set_up(__file__, fabric=os.geteuid() == 0)

SUPPORTED = ((3, 10), (3, 11), (3, 12), (3, 13))


def interpreter_version(path: str):
    try:
        out = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        major, minor = out.split(".")
        return int(major), int(minor)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def candidate_interpreters():
    """Paths of Python interpreters on this machine, in a stable order (pyenv first, then the PATH)."""
    roots = [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv")]
    paths = []
    for root in filter(None, roots):
        paths += sorted(glob.glob(os.path.join(root, "versions", "*", "bin", "python3")))
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        for major, minor in SUPPORTED:
            path = os.path.join(directory, f"python{major}.{minor}")
            if os.access(path, os.X_OK) and "shims" not in directory:
                paths.append(path)
    return paths


def other_interpreters(exclude_version):
    """One interpreter per supported minor version other than ``exclude_version``: {(3, X): path}."""
    found = {}
    for path in candidate_interpreters():
        version = interpreter_version(path)
        if version in SUPPORTED and version != exclude_version and version not in found:
            found[version] = path
    return dict(sorted(found.items()))


def parse_pythons(value: str, exclude_version):
    if value == "auto":
        return other_interpreters(exclude_version)
    if value == "none":
        return {}
    chosen = {}
    for path in value.split(","):
        version = interpreter_version(path)
        if version not in SUPPORTED:
            raise ValueError(f"--pythons: {path} is not a Python 3.10-3.13 interpreter")
        chosen[version] = path
    return chosen


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="test.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--pythons", default="auto", metavar="auto|none|PATH,...",
                   help="other interpreters for the non-root tests: auto (every one found, default), none, or a "
                        "comma-separated list of paths")
    p.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                   help="extra arguments for pytest (after --)")
    return p


def run_step(title: str, cmd, env=None) -> bool:
    print(f"\n[test] {title}\n[test] $ {' '.join(cmd)}", flush=True)
    t0 = time.time()
    r = subprocess.run(cmd, cwd=PROJECT_DIR, env=env)
    print(f"[test] {title}: {'passed' if r.returncode == 0 else f'FAILED (exit {r.returncode})'} "
          f"in {time.time() - t0:.0f} s", flush=True)
    return r.returncode == 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    here = sys.version_info[:2]
    try:
        others = parse_pythons(args.pythons, here)
    except ValueError as exc:
        sys.stderr.write(f"test.py: {exc}\n")
        return 2
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    results = []
    ok = run_step(f"all tests, Python {here[0]}.{here[1]} ({sys.prefix})", pytest + args.pytest_args)
    results.append((f"{here[0]}.{here[1]}", "all tests", ok))
    for (major, minor), path in others.items():
        venv = os.path.join(PROJECT_DIR, f".venv-py{major}.{minor}")
        label = f"{major}.{minor}"
        built = run_step(f"environment for Python {label} ({path})",
                         ["bash", os.path.join(PROJECT_DIR, "scripts", "install.sh"), "--python-only",
                          "--python", path, "--venv", venv])
        if not built:
            results.append((label, "environment", False))
            continue
        env = dict(os.environ, FLUX_VENV=venv)
        root = os.geteuid() == 0
        what = "tests without root, a fabric" if root else "tests that need no root"
        ok = run_step(f"{what}, Python {label}",
                      [os.path.join(venv, "bin", "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "-m", "not root or every_python" if root else "not root"] + args.pytest_args, env=env)
        results.append((label, what, ok))
    print("\n[test] summary")
    for label, what, passed in results:
        print(f"[test]   Python {label:5} {what:24} {'passed' if passed else 'FAILED'}")
    return 0 if all(passed for _, _, passed in results) else 1


if __name__ == "__main__":
    sys.exit(main())
