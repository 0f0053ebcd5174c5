"""Start one of the testbed's controller apps as its own process, on Ryu or os-ken (controller/framework.py).

Usage (the runner does this, once per role)::

    FLUX_CONTROLLER_CONFIG=run/controller.json python -m controller.launcher --role scheduler --ofp-tcp-listen-port 6653

OpenFlow (and Ryu's unused WSGI server) listen on 127.0.0.1 only.
"""
from __future__ import annotations

import os
import sys

# One app per concern: the scheduler owns the rules and reacts to events; the monitor polls counters.
APPS = {"scheduler": "controller.scheduler_app", "monitor": "controller.monitor_app"}


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    role = "scheduler"
    if "--role" in argv:
        i = argv.index("--role")
        role = argv[i + 1] if i + 1 < len(argv) else ""
        del argv[i:i + 2]
    if role not in APPS:
        sys.exit(f"controller: --role must be one of {', '.join(APPS)}")
    if "FLUX_CONTROLLER_CONFIG" not in os.environ:
        sys.exit("controller: FLUX_CONTROLLER_CONFIG must name the run's controller.json")
    from controller import framework
    try:
        framework.chosen()
    except ValueError as exc:
        sys.exit(f"controller: {exc}")
    framework.run(APPS[role], argv, prog=f"flux-controller-{role}")


if __name__ == "__main__":
    main()
