"""Operation events from workers to the controller, over a Unix datagram socket.

Each ``model.OperationEvent`` travels as one datagram holding its ``to_dict()`` as JSON. The socket lives at a
filesystem path: Mininet hosts are network namespaces that share the file system, so every worker reaches the
controller's socket without touching the emulated network, and events never sit in the data-plane queues they
are meant to inform.

The sender never blocks the worker: the socket is non-blocking and an event that cannot be delivered (nobody
bound at the path, receiver queue full) is dropped and counted. A late event is worth less than a stalled GPU.

Capacity note: Linux limits a Unix datagram receiver to ``net.unix.max_dgram_qlen`` queued datagrams (10 by
default), whatever its buffer size; the limit is taken from the receiver's network namespace when its socket is
created. A receiver serving many workers must drain the socket from a dedicated thread, or the sysctl should be
raised (e.g. to 1024) in its namespace before the ``EventReceiver`` is created.
"""
from __future__ import annotations

import json
import os
import select
import socket
import stat
import threading
import time
from dataclasses import dataclass
from typing import List, Optional

from core.model import OperationEvent

MAX_DATAGRAM = 4096


@dataclass(frozen=True)
class ReceivedEvent:
    event: OperationEvent
    received_at: float  # time.time() when the receiver read it


class EventSender:
    """Fire-and-forget sender of OperationEvents to the Unix datagram socket at ``path`` (None: disabled)."""

    def __init__(self, path: Optional[str]):
        self.path = path
        self.sent = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        if path:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, event: OperationEvent) -> bool:
        """Send one event; True if the kernel accepted it. Never blocks, never raises for delivery problems."""
        if self._sock is None:
            return False
        data = json.dumps(event.to_dict(), separators=(",", ":")).encode()
        try:
            self._sock.sendto(data, self.path)
            ok = True
        except OSError:
            # EAGAIN (receiver queue full), ENOENT (no socket yet), ECONNREFUSED (stale path): drop.
            ok = False
        with self._lock:
            if ok:
                self.sent += 1
            else:
                self.dropped += 1
        return ok

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "EventSender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class EventReceiver:
    """Binds the Unix datagram socket at ``path`` (replacing a stale socket file) and reads events from it."""

    def __init__(self, path: str, rcvbuf: int = 1 << 22):
        self.path = path
        self.invalid = 0
        if os.path.lexists(path):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise FileExistsError(f"{path} exists and is not a socket")
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        except OSError:
            pass
        self._sock.bind(path)
        # Workers may run as another user than the receiver.
        try:
            os.chmod(path, 0o777)
        except OSError:
            pass

    def fileno(self) -> int:
        return self._sock.fileno()

    def recv(self, timeout: Optional[float] = None) -> Optional[ReceivedEvent]:
        """The next valid event, or None if none arrives within ``timeout`` seconds (None: wait forever).
        Datagrams that are not valid events are counted in ``invalid`` and skipped."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self._sock], [], [], wait)
            if not readable:
                return None
            data = self._sock.recv(MAX_DATAGRAM)
            now = time.time()
            try:
                return ReceivedEvent(OperationEvent.from_dict(json.loads(data)), now)
            except (ValueError, KeyError, TypeError):
                self.invalid += 1

    def recv_batch(self, limit: int = 1000) -> List[ReceivedEvent]:
        """Wait for the next event, then take every one already queued (events come in bursts), up to
        ``limit``; all are stamped with the time the first was received."""
        first = self.recv()
        batch = [first]
        while len(batch) < limit:
            item = self.recv(0.0)
            if item is None:
                break
            batch.append(ReceivedEvent(item.event, first.received_at))
        return batch

    def drain(self, timeout: float = 0.0) -> List[ReceivedEvent]:
        """Every event that arrives until none has come for ``timeout`` seconds."""
        out = []
        while True:
            item = self.recv(timeout)
            if item is None:
                return out
            out.append(item)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def __enter__(self) -> "EventReceiver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
