"""The training side of the shared vocabulary: job, worker, bucket, operation, flow, decision.

Workloads produce traffic from these objects, the controller's schedulers decide on them, and the analysis
reads them back from results. They are plain frozen dataclasses with no I/O so every part of the project
(and every test) can build them by hand.

Conventions used everywhere:

* A *model profile* lists its gradient buckets in DDP launch order: bucket 0 holds the *last* layers (its
  gradients are ready first in the backward pass); the highest bucket index holds the first layers, which the
  next forward pass needs first.
* An *operation* is one ring all-reduce of one bucket in one iteration of one job. It is carried by one TCP
  *flow* per worker (rank r sends to rank r+1 mod N).
* Flows are recognisable from headers alone: rank r of job j sends bucket b from source port
  ``SRC_PORT_BASE + 64*j + b`` to destination port ``DST_PORT_BASE + j`` on the next rank's host.
* A *priority class* is an integer 0..7; 7 is served first. The data plane carries it as DSCP = 8 * class.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from core.classes import NUM_CLASSES

MAX_BUCKETS = 64
DST_PORT_BASE = 10000
SRC_PORT_BASE = 20000
#: As many jobs as the source ports hold (64 buckets each, below 65536): 711, in both engines.
MAX_JOBS = (65536 - SRC_PORT_BASE) // MAX_BUCKETS

SEMANTICS = ("overlap", "wait_all")


@dataclass(frozen=True)
class Bucket:
    """One DDP gradient bucket, with the compute time of the layers it holds (seconds)."""

    index: int
    nbytes: int
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class ModelProfile:
    """A model's per-iteration behaviour on one named GPU at one batch size."""

    name: str
    gpu: str
    batch_size: int
    buckets: Tuple[Bucket, ...]
    sources: Tuple[str, ...] = ()
    description: str = ""

    @property
    def gradient_bytes(self) -> int:
        return sum(b.nbytes for b in self.buckets)

    @property
    def forward_s(self) -> float:
        return sum(b.forward_s for b in self.buckets)

    @property
    def backward_s(self) -> float:
        return sum(b.backward_s for b in self.buckets)

    @property
    def compute_s(self) -> float:
        """GPU time of one iteration with no waiting."""
        return self.forward_s + self.backward_s

    def to_dict(self) -> dict:
        return {
            "name": self.name, "gpu": self.gpu, "batch_size": self.batch_size,
            "buckets": [[b.nbytes, b.forward_s, b.backward_s] for b in self.buckets],
            "sources": list(self.sources), "description": self.description,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ModelProfile":
        buckets = tuple(Bucket(i, int(n), float(f), float(b)) for i, (n, f, b) in enumerate(d["buckets"]))
        return cls(name=d["name"], gpu=d.get("gpu", ""), batch_size=int(d.get("batch_size", 0)), buckets=buckets,
                   sources=tuple(d.get("sources", ())), description=d.get("description", ""))


@dataclass(frozen=True)
class JobSpec:
    """One tenant's training job as placed on the fabric.

    ``model`` is already scaled to the emulation (bytes and seconds as the testbed sees them).
    ``hosts[r]`` is the host name of rank r; ``addresses[r]`` its IP address on the data network.
    """

    index: int
    name: str
    model: ModelProfile
    workers: int
    iterations: int
    start_offset_s: float = 0.0
    semantics: str = "overlap"
    hosts: Tuple[str, ...] = ()
    addresses: Tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "index": self.index, "name": self.name, "model": self.model.to_dict(), "workers": self.workers,
            "iterations": self.iterations, "start_offset_s": self.start_offset_s, "semantics": self.semantics,
            "hosts": list(self.hosts), "addresses": list(self.addresses),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "JobSpec":
        return cls(index=int(d["index"]), name=d["name"], model=ModelProfile.from_dict(d["model"]),
                   workers=int(d["workers"]), iterations=int(d["iterations"]),
                   start_offset_s=float(d.get("start_offset_s", 0.0)), semantics=d.get("semantics", "overlap"),
                   hosts=tuple(d.get("hosts", ())), addresses=tuple(d.get("addresses", ())))

    def flow(self, rank: int, bucket: int) -> "FlowKey":
        """The flow that carries ``bucket`` from ``rank`` to the next rank of the ring."""
        nxt = (rank + 1) % self.workers
        return FlowKey(
            src_ip=self.addresses[rank],
            dst_ip=self.addresses[nxt],
            src_port=src_port(self.index, bucket),
            dst_port=dst_port(self.index),
        )

    def flows(self, bucket: int) -> Tuple["FlowKey", ...]:
        """All flows of one operation on ``bucket`` (one per rank)."""
        return tuple(self.flow(r, bucket) for r in range(self.workers))


def src_port(job_index: int, bucket: int) -> int:
    if not 0 <= job_index < MAX_JOBS or not 0 <= bucket < MAX_BUCKETS:
        raise ValueError(f"job {job_index} / bucket {bucket} outside the port encoding")
    return SRC_PORT_BASE + MAX_BUCKETS * job_index + bucket


def dst_port(job_index: int) -> int:
    if not 0 <= job_index < MAX_JOBS:
        raise ValueError(f"job {job_index} outside the port encoding")
    return DST_PORT_BASE + job_index


def decode_ports(sport: int, dport: int) -> Optional[Tuple[int, int]]:
    """(job index, bucket) of a data flow from its ports, or None if they are not a testbed data flow."""
    offset = sport - SRC_PORT_BASE
    if not 0 <= offset < MAX_JOBS * MAX_BUCKETS:
        return None
    job, bucket = divmod(offset, MAX_BUCKETS)
    if dport != DST_PORT_BASE + job:
        return None
    return job, bucket


@dataclass(frozen=True)
class FlowKey:
    """A TCP flow's 5-tuple (protocol is always TCP for data flows)."""

    src_ip: str
    dst_ip: str
    src_port: int
    dst_port: int
    proto: int = 6

    def reversed(self) -> "FlowKey":
        return FlowKey(self.dst_ip, self.src_ip, self.dst_port, self.src_port, self.proto)

    def as_list(self):
        return [self.src_ip, self.dst_ip, self.src_port, self.dst_port, self.proto]


@dataclass(frozen=True)
class OperationId:
    job: int
    iteration: int
    bucket: int


# Operation lifecycle events, sent by workers to the controller.
EVENT_KINDS = ("launch", "progress", "done", "wait", "resume")


@dataclass(frozen=True)
class OperationEvent:
    """One worker's report about one operation.

    ``time`` is when the worker sent it (wall clock, seconds since the epoch; the workers and the controller
    share a machine and so a clock). ``needed_at`` is when the worker's GPU will need the result if nothing
    waits before it. ``kind`` is one of EVENT_KINDS: ``wait`` means the GPU is now idle waiting for this
    operation, ``resume`` that the wait ended.
    """

    kind: str
    job: int
    rank: int
    iteration: int
    bucket: int
    time: float
    nbytes: int = 0
    bytes_done: int = 0
    needed_at: float = 0.0

    @property
    def op(self) -> OperationId:
        return OperationId(self.job, self.iteration, self.bucket)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind, "job": self.job, "rank": self.rank, "iteration": self.iteration,
            "bucket": self.bucket, "time": self.time, "nbytes": self.nbytes,
            "bytes_done": self.bytes_done, "needed_at": self.needed_at,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "OperationEvent":
        if d.get("kind") not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {d.get('kind')!r}")
        return cls(
            kind=d["kind"], job=int(d["job"]), rank=int(d["rank"]), iteration=int(d["iteration"]),
            bucket=int(d["bucket"]), time=float(d["time"]), nbytes=int(d.get("nbytes", 0)),
            bytes_done=int(d.get("bytes_done", 0)), needed_at=float(d.get("needed_at", 0.0)),
        )


@dataclass(frozen=True)
class Decision:
    """What a scheduler wants for one flow: a priority class (0..7, 7 first) and a path.

    ``path`` indexes the equal-cost paths between the flow's two leaves (``FabricView.paths``, from 0; on a
    leaf-spine, path i goes through spine i+1), or is None for the hashed (ECMP) path; it only matters for
    flows with a choice of path.
    """

    priority_class: int = 0
    path: Optional[int] = None

    def __post_init__(self):
        if not 0 <= self.priority_class < NUM_CLASSES:
            raise ValueError(f"priority class {self.priority_class} outside 0..{NUM_CLASSES - 1}")
