"""What both controller apps share besides OpenFlow: their configuration, the runner's control socket, the CSV
files they stream and the statistics file they keep current."""
from __future__ import annotations

import csv
import json
import logging
import os
import socket
from typing import Callable, Dict, List

from core.config import ControllerConfig

LOG = logging.getLogger("flux.controller")
CONFIG_ENV = "FLUX_CONTROLLER_CONFIG"


def load_config() -> ControllerConfig:
    with open(os.environ[CONFIG_ENV]) as f:
        return ControllerConfig.from_json(f.read())


class Csv:
    """A CSV file that is flushed on every write, so a killed controller still leaves complete rows."""

    def __init__(self, path: str, header: List[str]):
        self._f = open(path, "w", newline="")
        self._w = csv.writer(self._f)
        self._w.writerow(header)

    def write(self, row) -> None:
        self._w.writerow(row)
        self._f.flush()

    def write_many(self, rows) -> None:
        self._w.writerows(rows)
        self._f.flush()


def bind_unix(path: str) -> socket.socket:
    """A Unix datagram socket at ``path`` (replacing a stale one), writable by every host namespace's user."""
    if os.path.exists(path):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    os.chmod(path, 0o666)
    return s


class ControlServer:
    """Requests from the runner (JSON datagrams with an ``op``) dispatched to handlers; a handler returns the
    reply, or None when it answers later itself (through ``reply``)."""

    def __init__(self, path: str, handlers: Dict[str, Callable[[dict, object], object]]):
        self.sock = bind_unix(path)
        self.handlers = handlers

    def reply(self, addr, payload: dict) -> None:
        try:
            self.sock.sendto(json.dumps(payload).encode(), addr)
        except OSError as exc:
            LOG.warning("cannot answer %s: %s", addr, exc)

    def serve_forever(self) -> None:
        while True:
            data, addr = self.sock.recvfrom(65536)
            try:
                req = json.loads(data)
                handler = self.handlers.get(req.get("op"))
                if handler is None:
                    self.reply(addr, {"ok": False, "error": f"unknown op {req.get('op')!r}"})
                    continue
                answer = handler(req, addr)
                if answer is not None:
                    self.reply(addr, answer)
            except Exception as exc:  # a bad request must not kill the control loop
                LOG.exception("control request failed")
                self.reply(addr, {"ok": False, "error": str(exc)})


def write_stats(path: str, stats: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(stats, f, indent=2, default=str)
    os.replace(tmp, path)


def guarded(loop: Callable[[], None]) -> None:
    """Run a background loop; a dying loop must be visible in the log, not silent."""
    try:
        loop()
    except Exception:
        LOG.exception("controller loop %s failed", loop.__name__)
