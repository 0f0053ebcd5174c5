"""Start one of the testbed's Ryu apps as its own process, with ryu 4.34 made to run on Python 3.10+.

ryu 4.34 imports ``eventlet.wsgi.ALREADY_HANDLED``, which eventlet >= 0.31 no longer defines; eventlet < 0.33
crashes on Python >= 3.10. With eventlet 0.33.x, defining the missing name before ryu is imported is enough,
so nothing installed needs patching. Importing this module applies the fix.

Usage (the runner does this, once per role)::

    FLUX_CONTROLLER_CONFIG=run/controller.json python -m controller.launcher --role scheduler --ofp-tcp-listen-port 6653

OpenFlow and the (unused) WSGI server listen on 127.0.0.1 only.
"""
from __future__ import annotations

import os
import sys

import eventlet.wsgi

if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
    # Any unique sentinel works: ryu only compares a WSGI response against it.
    eventlet.wsgi.ALREADY_HANDLED = object()

# One Ryu app per concern: the scheduler owns the rules and reacts to events; the monitor polls counters.
APPS = {"scheduler": "controller.scheduler_app", "monitor": "controller.monitor_app"}


def main(argv=None) -> None:
    from ryu.cmd import manager

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
    args = ["--ofp-listen-host", "127.0.0.1", "--wsapi-host", "127.0.0.1"] + argv + [APPS[role]]
    manager.main(args=args, prog=f"flux-controller-{role}")


if __name__ == "__main__":
    main()
