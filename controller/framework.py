"""The OpenFlow framework the controller apps run on: Ryu 4.34, or os-ken, its maintained fork (OpenStack).

The apps import what they need from here (``from controller.framework import App, hub, ...``), never from
``ryu`` or ``os_ken`` directly, so the same apps run on either. The choice is ``FLUX_CONTROLLER_FRAMEWORK``
(``ryu`` or ``os-ken``; the runner's ``--controller-framework`` sets it for the controller processes); unset, Ryu
where it is installed, else os-ken. The framework is imported on the first use of one of its names, so the
runner can resolve the choice without loading either.

Ryu 4.34 imports ``eventlet.wsgi.ALREADY_HANDLED``, which eventlet >= 0.31 no longer defines, and eventlet < 0.33
crashes on Python >= 3.10: with eventlet 0.33.x, defining the missing name before Ryu is imported is enough, so
nothing installed needs patching. os-ken needs no such fix and has no manager command: ``run`` parses the same
options and starts the app as ``ryu-manager`` does.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import warnings
from typing import Dict, List

ENV = "FLUX_CONTROLLER_FRAMEWORK"
FRAMEWORKS = ("ryu", "os-ken")
PACKAGES = {"ryu": "ryu", "os-ken": "os_ken"}
# What the apps use, from the package named first (the same modules in both).
EXPORTS = {"app_manager": "base.app_manager", "ofp_event": "controller.ofp_event", "hub": "lib.hub",
           "ofproto_v1_3": "ofproto.ofproto_v1_3", "CONFIG_DISPATCHER": "controller.handler",
           "DEAD_DISPATCHER": "controller.handler", "MAIN_DISPATCHER": "controller.handler",
           "set_ev_cls": "controller.handler"}
_loaded: Dict[str, object] = {}


def installed(name: str) -> bool:
    return importlib.util.find_spec(PACKAGES[name]) is not None


def resolve(name: str = "") -> str:
    """``ryu`` or ``os-ken``: the one named (``auto`` or empty: Ryu where installed, else os-ken). ValueError (one
    line) for another name or one that is not installed."""
    name = (name or "").strip()
    if name in ("", "auto"):
        return "ryu" if installed("ryu") or not installed("os-ken") else "os-ken"
    if name not in FRAMEWORKS:
        raise ValueError(f"the controller framework must be one of {', '.join(FRAMEWORKS)}, not {name!r}")
    if not installed(name):
        raise ValueError(f"the controller framework {name} is not installed (scripts/install.sh installs both)")
    return name


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def chosen() -> str:
    """The framework of this process (``FLUX_CONTROLLER_FRAMEWORK``, else as ``resolve`` picks)."""
    return resolve(os.environ.get(ENV, ""))


def prepare() -> None:
    """What either framework needs before it is imported (done on the first use of a name)."""
    # os-ken's NETCONF dependency brings in cryptography, whose DSA deprecation warning dnspython (eventlet's
    # resolver) triggers on import: noise in every controller log, about code the testbed never calls.
    warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"dns\.")
    import eventlet.wsgi
    if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
        # Any unique sentinel works: Ryu only compares a WSGI response against it.
        eventlet.wsgi.ALREADY_HANDLED = object()


def _load() -> None:
    name = chosen()
    prepare()
    package = PACKAGES[name]
    for export, module in EXPORTS.items():
        loaded = importlib.import_module(f"{package}.{module}")
        _loaded[export] = loaded if module.endswith(export) else getattr(loaded, export)
    _loaded["App"] = getattr(_loaded["app_manager"], "RyuApp" if name == "ryu" else "OSKenApp")
    _loaded["NAME"] = name


def __getattr__(attr: str):
    if attr in EXPORTS or attr in ("App", "NAME"):
        if not _loaded:
            _load()
        return _loaded[attr]
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def run(app: str, args: List[str], prog: str) -> None:
    """Run one app module with these command-line options (``--ofp-tcp-listen-port`` and the like) until it
    stops, every listener on 127.0.0.1: ``ryu-manager``'s main under Ryu (its unused WSGI server too), its
    equivalent under os-ken (which has none)."""
    import logging

    name = __getattr__("NAME")
    args = ["--ofp-listen-host", "127.0.0.1"] + args
    if name == "ryu":
        from ryu.cmd import manager
        manager.main(args=["--wsapi-host", "127.0.0.1"] + args + [app], prog=prog)
        return
    from os_ken import cfg, log
    import os_ken.controller.controller  # noqa: F401  (registers the OpenFlow listener's options)
    log.early_init_log(logging.DEBUG)
    cfg.CONF(args=args, prog=prog, project="os_ken", version=f"os-ken {version('os-ken')}")
    log.init_log()
    __getattr__("hub").patch(thread=True)
    try:
        __getattr__("app_manager").AppManager.run_apps([app])
    except KeyboardInterrupt:
        pass
