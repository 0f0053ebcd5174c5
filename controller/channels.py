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

    def __init__(self, path: str, header: List[str], append: bool = False):
        """``append``: go on with an existing file (a restarted controller's), writing the header only if new."""
        if append and os.path.exists(path):
            drop_partial_line(path)
        fresh = not (append and os.path.exists(path) and os.path.getsize(path) > 0)
        self._f = open(path, "w" if fresh else "a", newline="")
        self._w = csv.writer(self._f)
        if fresh:
            self._w.writerow(header)

    def write(self, row) -> None:
        self._w.writerow(row)
        self._f.flush()

    def write_many(self, rows) -> None:
        self._w.writerows(rows)
        self._f.flush()


def drop_partial_line(path: str) -> None:
    """Cut a file back to its last complete line. A controller killed in the middle of a write (the runner's
    ``controller ... kill`` fault, or a crash) can leave half a row; its successor must not append to it, or the
    half row and the next one merge into a row that no reader can parse."""
    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        # Scan back in blocks for the last newline (rows are short; the file may not be).
        end, keep = size, 0
        while end > 0:
            start = max(0, end - 65536)
            f.seek(start)
            block = f.read(end - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            end = start
        f.truncate(keep)


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

    def reply(self, requester, payload: dict) -> None:
        """Answer ``requester`` (the (address, request id) a handler was given), echoing the request's id."""
        addr, request_id = requester
        try:
            self.sock.sendto(json.dumps(dict(payload, id=request_id)).encode(), addr)
        except OSError as exc:
            LOG.warning("cannot answer %s: %s", addr, exc)

    def serve_forever(self) -> None:
        while True:
            data, addr = self.sock.recvfrom(65536)
            requester = (addr, None)
            try:
                req = json.loads(data)
                requester = (addr, req.get("id"))
                handler = self.handlers.get(req.get("op"))
                if handler is None:
                    self.reply(requester, {"ok": False, "error": f"unknown op {req.get('op')!r}"})
                    continue
                answer = handler(req, requester)
                if answer is not None:
                    self.reply(requester, answer)
            except Exception as exc:  # a bad request must not kill the control loop
                LOG.exception("control request failed")
                self.reply(requester, {"ok": False, "error": str(exc)})


def write_stats(path: str, stats: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(stats, f, indent=2, default=str)
    os.replace(tmp, path)


def guarded(loop: Callable[[], None], failed: List[str]) -> None:
    """Run a background loop. A loop that dies is logged and added to ``failed``, which the app's status reports,
    so that the runner fails the run: a controller whose event loop died would go on with frozen rules."""
    try:
        loop()
    except Exception:
        LOG.exception("controller loop %s failed", loop.__name__)
        failed.append(loop.__name__)
