#!/usr/bin/env python3
"""``sudo python testbed/run.py --scheduler flux``: the run command as typed in the README.

It sets up what is missing, continues in <project>/.venv, and hands its arguments to ``flux-testbed run``
(cli/run.py), which checks the plan and runs it in the emulation (testbed/emulation.py) or the twin (twin/).
"""
from __future__ import annotations

import os
import sys

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Run as a file, Python puts testbed/ first on the path, where its modules would shadow top-level packages.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
if PROJECT_DIR not in sys.path:
    sys.path.insert(0, PROJECT_DIR)

from testbed.bootstrap import asks_for_fluid, ensure_env  # noqa: E402  (standard library only)

if __name__ == "__main__":
    # ``sudo python testbed/run.py`` picks whatever ``python`` root has: set up what is missing, then continue in
    # <project>/.venv. Asking for --help needs no set-up beyond the environment.
    # The flow-level twin (--engine fluid) needs no fabric, and no root.
    _argv = sys.argv[1:]
    ensure_env("run.py", needs_fabric=not (asks_for_fluid(_argv) or {"-h", "--help"} & set(_argv)))
    from cli.run import main
    sys.exit(main())
