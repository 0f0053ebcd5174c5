"""The one preamble of every command file (scripts/*.py shims, bench/*.py, research/*.py, cli/main.py).

A file run by path sees only its own folder on ``sys.path``, so it first puts the project there and then hands
over to :func:`set_up`, inside ``if __name__ == "__main__":`` so that importing the file as a module does nothing::

    if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
        sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        from cli.entry import set_up
        set_up(__file__, fabric=True)

``sys.path[0]`` is replaced rather than prepended to: bench/twin.py and bench/controller.py must not shadow the
``twin`` and ``controller`` packages. This module uses the standard library and testbed.bootstrap only: it runs
on whatever ``python`` the user typed, before the environment's packages can be imported.
"""
from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from testbed.bootstrap import asks_for_fluid, ensure_env

HELP = {"-h", "--help"}


def builds_fabric(command: str, argv: Sequence[str], name: Optional[str] = None) -> bool:
    """Whether ``flux-testbed COMMAND ARGV`` builds an emulated fabric on this machine (then set-up also checks
    Open vSwitch and Mininet's tools). ``name`` is the benchmark's name for ``bench``."""
    args = list(argv)
    if HELP & set(args):
        return False
    if command == "run":
        return not asks_for_fluid(args)
    if command == "sweep":
        # Collecting finished runs, dry runs, fluid-only sweeps and sweeps sent to a cluster run no emulation here.
        words = " ".join(args).replace("=", " ").split()
        fluid = "engine fluid" in " ".join(words) and "engine emulation" not in " ".join(words)
        return not ({"--collect-only", "--dry-run", "--cluster"} & set(words) or fluid)
    if command == "suite":
        return "emulation" in args and "--collect-only" not in args
    if command == "bounds":
        return "emulation" in args
    if command == "bench":
        return name != "twin" and not (name == "fidelity" and (asks_for_fluid(args) or "--verdict-table" in args))
    if command == "research":
        return (name == "crossval" and "--run-emulation" in args) or name == "tcp_timers"
    return command == "test"


def set_up(script: str, fabric: bool) -> None:
    """Set up what is missing and continue in the project's .venv (testbed/bootstrap.py); ``fabric``: the
    command builds a fabric here (never for ``-h``/``--help``)."""
    fabric = fabric and not (HELP & set(sys.argv[1:]))
    ensure_env(os.path.basename(script), needs_fabric=fabric, script=script)
