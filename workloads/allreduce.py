"""Ring all-reduce over real TCP connections on real data.

One *operation* is the all-reduce of one gradient bucket. With N workers the float32 array is split into N chunks
(``np.array_split``, so sizes need not be divisible by N, and chunks may be empty) and the ring runs 2(N-1) steps:
N-1 reduce-scatter steps (send a partial sum, receive one and add it) followed by N-1 all-gather steps (send a
finished chunk, receive one and store it). Every step sends one chunk to rank r+1 and receives one from rank r-1,
so every worker sends 2(N-1)/N x S bytes per operation, plus 8 bytes of framing per step.

Connections are persistent and there is one per (job, bucket) and direction, so every operation's packets can be
told apart from headers alone (see ``core.model``):

* rank r opens ONE connection per bucket b to rank r+1, bound to source port ``src_port(job, b)`` on its own
  address and connecting to ``dst_port(job)`` on the next rank's address;
* rank r listens on ``dst_port(job)`` on its own address and accepts one connection per bucket from rank r-1;
  the connecting side first sends an 8-byte handshake ``(magic, job index, bucket, rank)`` so the acceptor knows
  which bucket the connection carries.

Framing: each message is an 8-byte header ``(message counter, payload length)`` followed by the chunk's raw bytes.
The counter is per connection and checks that both ends agree on the sequence of operations.

Sending and receiving must proceed at the same time: every rank sends in the same step, and a chunk larger than
the socket buffers would deadlock a ring of blocking ``sendall`` calls. Each outgoing connection therefore has a
sender thread fed by a queue; the caller's thread receives and reduces. Messages are copied when queued, so the
caller may overwrite a chunk that is still waiting to be sent.

Shutdown order avoids TIME_WAIT on the fixed source ports (which would make the next run's ``connect`` fail with
EADDRNOTAVAIL on non-loopback addresses): the receiving side closes first (it has read everything it needs once
its last operation completed), and the sending side waits for that EOF before closing its end.

Data-plane sockets set TCP_NODELAY but never TOS/DSCP: the switches classify flows by their ports.
An optional per-connection pacing rate (``pace_mbps``) stands in for a link rate when running on loopback without
Mininet; it is off by default.
"""
from __future__ import annotations

import errno
import queue
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from core.model import FlowKey, JobSpec, dst_port, src_port
from core.ring import ring_steps

HANDSHAKE = struct.Struct("!HHHH")  # magic, job index, bucket, sender rank
HANDSHAKE_MAGIC = 0x5247
HEADER = struct.Struct("!II")  # per-connection message counter, payload length in bytes
HEADER_BYTES = HEADER.size
SEND_SLICE = 1 << 20  # progress callbacks and pacing act at this granularity
ITEMSIZE = np.dtype(np.float32).itemsize

ProgressCallback = Callable[[int], None]


class RingError(RuntimeError):
    """A peer broke the protocol or the connection failed."""


def framing_overhead(workers: int) -> int:
    """Bytes of framing one rank sends per operation (2(N-1) message headers)."""
    return ring_steps(workers) * HEADER_BYTES


@dataclass
class OpStats:
    """What one rank saw of one operation. Times are from the member's clock (epoch seconds by default).

    ``first_byte``: the sender started writing the op's first message; ``last_byte``: the op's last message was
    handed to the kernel; ``last_recv``: the last chunk from the previous rank arrived; ``done``: the result is
    complete (both of the above). ``bytes_sent`` includes framing, ``payload_sent`` does not.
    """

    bucket: int
    seq: int
    nbytes: int
    launch: float
    first_byte: float = 0.0
    last_byte: float = 0.0
    last_recv: float = 0.0
    done: float = 0.0
    bytes_sent: int = 0
    payload_sent: int = 0
    bytes_received: int = 0


@dataclass
class _OpState:
    stats: OpStats
    on_progress: Optional[ProgressCallback]
    sent: threading.Event = field(default_factory=threading.Event)
    error: Optional[BaseException] = None


class _Sender(threading.Thread):
    """Writes queued messages of one outgoing connection, in order, optionally paced."""

    def __init__(self, sock: socket.socket, name: str, clock: Callable[[], float], pace_bps: Optional[float]):
        super().__init__(name=name, daemon=True)
        self.sock = sock
        self.clock = clock
        self.pace_bps = pace_bps
        # At low pacing rates, smaller slices keep the rate smooth (about 5 ms of data each).
        self.slice = SEND_SLICE if not pace_bps else max(1024, min(SEND_SLICE, int(pace_bps * 0.005)))
        self.queue: "queue.SimpleQueue[Optional[Tuple[bytearray, _OpState, bool]]]" = queue.SimpleQueue()
        self.error: Optional[BaseException] = None
        self._next_free = 0.0

    def submit(self, msg: bytearray, op: _OpState, last: bool) -> None:
        self.queue.put((msg, op, last))

    def stop(self) -> None:
        self.queue.put(None)

    def _pace(self, n: int) -> None:
        now = time.perf_counter()
        if self._next_free > now:
            time.sleep(self._next_free - now)
            now = self._next_free
        self._next_free = max(self._next_free, now) + n / self.pace_bps

    def run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            msg, op, last = item
            if self.error is None:
                try:
                    self._send(msg, op)
                except BaseException as exc:  # noqa: BLE001 - reported to the waiting caller
                    self.error = exc
            if self.error is not None:
                op.error = op.error or self.error
                op.sent.set()
            elif last:
                op.stats.last_byte = self.clock()
                op.sent.set()

    def _send(self, msg: bytearray, op: _OpState) -> None:
        view = memoryview(msg)
        stats = op.stats
        if not stats.first_byte:
            stats.first_byte = self.clock()
        pos, total = 0, len(view)
        while pos < total:
            n = min(self.slice, total - pos)
            if self.pace_bps:
                self._pace(n)
            self.sock.sendall(view[pos:pos + n])
            pos += n
            stats.bytes_sent += n
            if op.on_progress is not None:
                try:
                    op.on_progress(stats.bytes_sent)
                except Exception:  # noqa: BLE001 - a broken observer must not stall the data plane
                    pass


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    pos, total = 0, len(view)
    while pos < total:
        n = sock.recv_into(view[pos:], total - pos)
        if n == 0:
            raise RingError("connection closed by the previous rank")
        pos += n


def _set_common(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)


def clamp_listener(sock: socket.socket, clamp: int) -> None:
    """Bound the receive window of every connection ``sock`` (a listener, before ``listen``) will accept.

    ``TCP_WINDOW_CLAMP`` alone does not hold on recent kernels: the receive buffer's autotuning and the first
    full-sized data packet (which updates the skb scaling ratio) both reset the clamp to what the buffer allows
    (measured on 6.18: an 11,584-byte clamp became 1.7 MB and the peer saw the largest unscaled window,
    65,535 bytes). So the buffer is locked too (setting ``SO_RCVBUF`` turns autotuning off; the kernel doubles
    the value, room for about 10 full packets of ``clamp`` 8), which bounds the window if the clamp is reset,
    and ``hold_clamp`` sets the clamp again once data flows. The clamp on the listener reaches the SYN-ACK."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, clamp)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamp)


def hold_clamp(sock: socket.socket, clamp: int) -> None:
    """Set the clamp again after data arrived (a no-op for the kernel while it holds; see ``clamp_listener``)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamp)


class RingMember:
    """One rank's side of a job's ring: the outgoing connection per bucket to the next rank and the incoming one
    per bucket from the previous rank.

    ``addresses`` defaults to ``job.addresses``; ``bind_address`` (default: this rank's address) is where this
    rank listens and binds its source ports. ``port_offset`` shifts both port numbers (tests only: the switches
    decode flows with offset 0). ``buckets`` defaults to all of the job's buckets.
    """

    def __init__(self, job: JobSpec, rank: int, addresses: Optional[Sequence[str]] = None,
                 bind_address: Optional[str] = None, port_offset: int = 0, buckets: Optional[Iterable[int]] = None,
                 clock: Callable[[], float] = time.time, io_timeout: float = 300.0,
                 pace_mbps: Optional[float] = None, window_clamp: Optional[int] = None):
        self.job = job
        self.rank = rank
        self.workers = job.workers
        if not 0 <= rank < self.workers:
            raise ValueError(f"rank {rank} outside 0..{self.workers - 1}")
        self.addresses = tuple(addresses if addresses is not None else job.addresses)
        if self.workers > 1 and len(self.addresses) != self.workers:
            raise ValueError(f"job {job.name}: {len(self.addresses)} addresses for {self.workers} workers")
        self.bind_address = bind_address or (self.addresses[rank] if self.addresses else "127.0.0.1")
        self.port_offset = port_offset
        self.buckets = tuple(sorted(buckets if buckets is not None else (b.index for b in job.model.buckets)))
        self.clock = clock
        self.io_timeout = io_timeout
        self.pace_bps = pace_mbps * 1e6 / 8 if pace_mbps else None
        # Receive window clamp (bytes) of every incoming connection: bounds what the previous rank has in flight.
        self.window_clamp = window_clamp
        self.next_rank = (rank + 1) % self.workers
        self.prev_rank = (rank - 1) % self.workers
        self.listen_port = dst_port(job.index) + port_offset
        self._listener: Optional[socket.socket] = None
        self._out: Dict[int, socket.socket] = {}
        self._in: Dict[int, socket.socket] = {}
        self._senders: Dict[int, _Sender] = {}
        self._locks: Dict[int, threading.Lock] = {b: threading.Lock() for b in self.buckets}
        self._seq: Dict[int, int] = {b: 0 for b in self.buckets}
        self._msg_out: Dict[int, int] = {b: 0 for b in self.buckets}
        self._msg_in: Dict[int, int] = {b: 0 for b in self.buckets}
        self.last_stats: Dict[int, OpStats] = {}
        self.total_bytes_sent = 0
        self._total_lock = threading.Lock()
        self.connected = False

    # -- connection set-up -------------------------------------------------------------------------------------

    def source_port(self, bucket: int) -> int:
        return src_port(self.job.index, bucket) + self.port_offset

    def connect(self, timeout: float = 30.0) -> None:
        """Open the outgoing connection of every bucket and accept the incoming ones; retry while the peer is not
        listening yet. Raises TimeoutError if the ring is not complete within ``timeout`` seconds."""
        if self.connected:
            return
        if self.workers == 1:
            self.connected = True
            return
        deadline = time.monotonic() + timeout
        self._listen()
        accept_error: List[BaseException] = []
        acceptor = threading.Thread(target=self._accept_all, args=(deadline, accept_error),
                                    name=f"ring-accept-{self.job.index}-{self.rank}", daemon=True)
        acceptor.start()
        try:
            for b in self.buckets:
                self._out[b] = self._connect_one(b, deadline)
        finally:
            acceptor.join(max(0.0, deadline - time.monotonic()) + 1.0)
        if accept_error:
            raise accept_error[0]
        if len(self._in) != len(self.buckets):
            missing = sorted(set(self.buckets) - set(self._in))
            raise TimeoutError(f"job {self.job.name} rank {self.rank}: no connection from rank {self.prev_rank} "
                               f"for buckets {missing} within {timeout} s")
        for b, sock in self._out.items():
            sender = _Sender(sock, f"ring-send-{self.job.index}-{self.rank}-{b}", self.clock, self.pace_bps)
            sender.start()
            self._senders[b] = sender
        self.connected = True

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _set_common(sock)
        if self.window_clamp:
            clamp_listener(sock, self.window_clamp)
        sock.bind((self.bind_address, self.listen_port))
        sock.listen(max(64, 2 * len(self.buckets)))
        sock.settimeout(0.2)
        self._listener = sock

    def _accept_all(self, deadline: float, errors: List[BaseException]) -> None:
        try:
            while len(self._in) < len(self.buckets) and time.monotonic() < deadline:
                try:
                    conn, _ = self._listener.accept()
                except socket.timeout:
                    continue
                conn.settimeout(max(0.5, min(5.0, deadline - time.monotonic())))
                try:
                    hello = bytearray(HANDSHAKE.size)
                    _recv_exact(conn, memoryview(hello))
                except (OSError, RingError):
                    conn.close()
                    continue
                magic, job, bucket, rank = HANDSHAKE.unpack(hello)
                if (magic != HANDSHAKE_MAGIC or job != self.job.index or bucket not in self._locks
                        or rank != self.prev_rank or bucket in self._in):
                    conn.close()  # not ours (or a duplicate): ignore rather than corrupt the ring
                    continue
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(self.io_timeout)
                self._in[bucket] = conn
        except BaseException as exc:  # noqa: BLE001 - re-raised by connect()
            errors.append(exc)

    def _connect_one(self, bucket: int, deadline: float) -> socket.socket:
        peer = (self.addresses[self.next_rank], self.listen_port)
        delay = 0.02
        last: Optional[BaseException] = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"job {self.job.name} rank {self.rank}: cannot connect bucket {bucket} to "
                                   f"{peer[0]}:{peer[1]}: {last}")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                _set_common(sock)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.bind((self.bind_address, self.source_port(bucket)))
                sock.settimeout(min(remaining, 2.0))
                sock.connect(peer)
                sock.sendall(HANDSHAKE.pack(HANDSHAKE_MAGIC, self.job.index, bucket, self.rank))
                sock.settimeout(self.io_timeout)
                return sock
            except OSError as exc:
                # Refused: the peer is not listening yet. EADDRINUSE / EADDRNOTAVAIL: an old connection on the
                # same ports is still closing. Unreachable: the emulated network is still coming up.
                sock.close()
                last = exc
                if exc.errno not in (None, errno.ECONNREFUSED, errno.EADDRINUSE, errno.EADDRNOTAVAIL,
                                     errno.ECONNRESET, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH,
                                     errno.ECONNABORTED, errno.EAGAIN):
                    raise
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 0.5)

    def flows(self) -> Dict[int, FlowKey]:
        """The 5-tuple of every outgoing connection, as the kernel reports it."""
        out = {}
        for b, sock in self._out.items():
            (sip, sport), (dip, dport) = sock.getsockname()[:2], sock.getpeername()[:2]
            out[b] = FlowKey(sip, dip, sport, dport)
        return out

    # -- operations --------------------------------------------------------------------------------------------

    def allreduce(self, bucket: int, array: np.ndarray, on_progress: Optional[ProgressCallback] = None) -> np.ndarray:
        """Sum ``array`` over all ranks of the ring (blocking). Returns a new float32 array of the same shape.

        Calls for different buckets may run concurrently from different threads; calls for the same bucket are
        serialised. ``on_progress(bytes_sent)`` is called from the sender thread as data is written."""
        return self.allreduce_with_stats(bucket, array, on_progress)[0]

    def allreduce_with_stats(self, bucket: int, array: np.ndarray,
                             on_progress: Optional[ProgressCallback] = None) -> Tuple[np.ndarray, OpStats]:
        if bucket not in self._locks:
            raise KeyError(f"bucket {bucket} is not part of this ring")
        if not self.connected:
            raise RingError("connect() first")
        with self._locks[bucket]:
            launch = self.clock()
            data = np.array(array, dtype=np.float32, copy=True)
            flat = data.reshape(-1)
            seq = self._seq[bucket]
            self._seq[bucket] = seq + 1
            stats = OpStats(bucket=bucket, seq=seq, nbytes=flat.nbytes, launch=launch)
            if self.workers == 1:
                stats.first_byte = stats.last_byte = stats.last_recv = stats.done = self.clock()
                self.last_stats[bucket] = stats
                return data, stats
            op = _OpState(stats, on_progress)
            try:
                self._ring(bucket, flat, op)
            except BaseException:
                self._fail_bucket(bucket)
                raise
            stats.done = self.clock()
            with self._total_lock:
                self.total_bytes_sent += stats.bytes_sent
            self.last_stats[bucket] = stats
            return data, stats

    def _ring(self, bucket: int, flat: np.ndarray, op: _OpState) -> None:
        n, r = self.workers, self.rank
        chunks = np.array_split(flat, n)
        sender = self._senders[bucket]
        sock = self._in[bucket]
        scratch = np.empty(max(c.size for c in chunks), dtype=np.float32)
        steps = ring_steps(n)
        for step in range(steps):
            if step < n - 1:  # reduce-scatter
                send_idx, recv_idx = (r - step) % n, (r - step - 1) % n
            else:  # all-gather
                s = step - (n - 1)
                send_idx, recv_idx = (r + 1 - s) % n, (r - s) % n
            self._queue_chunk(bucket, sender, chunks[send_idx], op, last=step == steps - 1)
            target = chunks[recv_idx]
            if step < n - 1:
                buf = scratch[:target.size]
                self._recv_chunk(bucket, sock, buf, op)
                target += buf
            else:
                self._recv_chunk(bucket, sock, target, op)
        op.stats.last_recv = self.clock()
        if not op.sent.wait(self.io_timeout):
            raise RingError(f"bucket {bucket}: sending did not finish within {self.io_timeout} s")
        if op.error is not None:
            raise RingError(f"bucket {bucket}: send failed: {op.error}") from op.error

    def _queue_chunk(self, bucket: int, sender: _Sender, chunk: np.ndarray, op: _OpState, last: bool) -> None:
        if sender.error is not None:
            raise RingError(f"bucket {bucket}: send failed: {sender.error}") from sender.error
        payload = chunk.nbytes
        msg = bytearray(HEADER_BYTES + payload)
        HEADER.pack_into(msg, 0, self._msg_out[bucket] & 0xFFFFFFFF, payload)
        self._msg_out[bucket] += 1
        if payload:
            np.frombuffer(msg, dtype=np.float32, offset=HEADER_BYTES)[:] = chunk
        op.stats.payload_sent += payload
        sender.submit(msg, op, last)

    def _recv_chunk(self, bucket: int, sock: socket.socket, target: np.ndarray, op: _OpState) -> None:
        header = bytearray(HEADER_BYTES)
        _recv_exact(sock, memoryview(header))
        counter, length = HEADER.unpack(header)
        expected = self._msg_in[bucket] & 0xFFFFFFFF
        if counter != expected or length != target.nbytes:
            raise RingError(f"bucket {bucket}: got message {counter} of {length} B, expected message {expected} of "
                            f"{target.nbytes} B (do all ranks pass arrays of the same size?)")
        self._msg_in[bucket] += 1
        if length:
            _recv_exact(sock, memoryview(target).cast("B"))
            if self.window_clamp:
                hold_clamp(sock, self.window_clamp)
        op.stats.bytes_received += HEADER_BYTES + length

    def _fail_bucket(self, bucket: int) -> None:
        # After a failure the stream position is unknown: drop the connections so peers fail fast instead of
        # misreading data.
        for table in (self._in, self._out):
            sock = table.get(bucket)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def abort(self) -> None:
        """Shut every connection down at once (after a failure): blocked operations fail instead of hanging."""
        for bucket in self.buckets:
            self._fail_bucket(bucket)

    # -- shutdown ----------------------------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Close the ring: incoming connections first, then wait (up to ``timeout``) for the next rank to close
        the outgoing ones, so TIME_WAIT lands on the receiving side and the fixed source ports stay free."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for sender in self._senders.values():
            sender.stop()
        for sender in self._senders.values():
            sender.join(timeout)
        self._senders.clear()
        for sock in self._in.values():
            sock.close()
        self._in.clear()
        pending = list(self._out.values())
        deadline = time.monotonic() + timeout
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            readable, _, _ = select.select(pending, [], [], remaining)
            for sock in readable:
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    pending.remove(sock)
                    sock.close()
        for sock in pending:
            sock.close()
        self._out.clear()
        self.connected = False

    def __enter__(self) -> "RingMember":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
