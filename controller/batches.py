"""Change batches: the flow-mods sent for one trigger, and the barrier replies that confirm them.

Every change the controller makes (a switch's initial rules, a reaction to an event, a pinned flow) is one
batch: its flow-mods go out, then one barrier request to every switch touched. The batch is done when every
barrier has been answered; "reaction latency" is the trigger's time to that moment. (Not to be confused with
OpenFlow groups.) Pure bookkeeping, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Set, Tuple

Barrier = Tuple[int, int]  # (dpid, xid)


@dataclass
class Batch:
    id: int
    trigger: str            # "setup", "event", "periodic", "pin", "fabric"
    t0: float               # when the trigger happened
    flowmods: int = 0
    reply_to: object = None  # who asked (a pin request's address and id), answered when the batch is done
    sent_at: Optional[float] = None
    note: Optional[dict] = None  # what a "fabric" batch changed, recorded when it completes
    waiting: Set[Barrier] = field(default_factory=set)


class ChangeBatches:
    def __init__(self):
        self._batches: Dict[int, Batch] = {}
        self._by_barrier: Dict[Barrier, int] = {}
        self._next = 0

    def open(self, trigger: str, t0: float, flowmods: int = 0, reply_to=None) -> Batch:
        self._next += 1
        batch = Batch(self._next, trigger, t0, flowmods, reply_to)
        self._batches[batch.id] = batch
        return batch

    def expect(self, batch: Batch, dpid: int, xid: int) -> None:
        """A barrier request was sent for ``batch`` to switch ``dpid``."""
        batch.waiting.add((dpid, xid))
        self._by_barrier[(dpid, xid)] = batch.id

    def on_reply(self, dpid: int, xid: int) -> Optional[Tuple[Batch, bool]]:
        """The batch this barrier reply belongs to and whether it is now complete (None: not ours)."""
        batch_id = self._by_barrier.pop((dpid, xid), None)
        if batch_id is None:
            return None
        batch = self._batches[batch_id]
        batch.waiting.discard((dpid, xid))
        if batch.waiting:
            return batch, False
        del self._batches[batch_id]
        return batch, True

    def __len__(self) -> int:
        return len(self._batches)
