"""Start the testbed's Ryu application as its own process, with ryu 4.34 made to run on Python 3.10+.

ryu 4.34 imports ``eventlet.wsgi.ALREADY_HANDLED``, which eventlet >= 0.31 no longer defines; eventlet < 0.33
crashes on Python >= 3.10. With eventlet 0.33.x, defining the missing name before ryu is imported is enough,
so nothing installed needs patching. Importing this module applies the fix.

Usage (the runner does this)::

    FLUX_CONTROLLER_CONFIG=run/controller.json python -m controller.launcher --ofp-tcp-listen-port 6653

OpenFlow and the (unused) WSGI server listen on 127.0.0.1 only.
"""
from __future__ import annotations

import os
import sys

import eventlet.wsgi

if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
    # Any unique sentinel works: ryu only compares a WSGI response against it.
    eventlet.wsgi.ALREADY_HANDLED = object()

APP_MODULE = "controller.app"


def main(argv=None) -> None:
    from ryu.cmd import manager

    argv = list(sys.argv[1:] if argv is None else argv)
    args = ["--ofp-listen-host", "127.0.0.1", "--wsapi-host", "127.0.0.1"] + argv + [APP_MODULE]
    if "FLUX_CONTROLLER_CONFIG" not in os.environ:
        sys.exit("controller: FLUX_CONTROLLER_CONFIG must name the run's controller.json")
    manager.main(args=args, prog="flux-controller")


if __name__ == "__main__":
    main()
