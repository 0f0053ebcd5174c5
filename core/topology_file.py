"""A fabric's hosts and racks read from a topology file, in the form of Crux's production dataset.

The file is a CSV with a header and one row per host: ``ip`` (any unique id), ``ASW`` (its top-of-rack switch),
``PSW`` (the aggregation group, a pod, the rack hangs off) and ``DSW`` (the core group above the pods), as in
``data/topo.csv`` of alibaba-lingjun-dataset-2023 (workloads/topologies/README.md). A rack is named by its pod and
its ASW together (the dataset reuses ASW names in different pods). The file says which hosts share a rack and
which racks share a pod; how many switches each tier has is not in it, so core/fabric.py takes those as
parameters. Every malformed row is a one-line ValueError naming the file and the line.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Tuple

COLUMNS = ("ip", "DSW", "PSW", "ASW")


@dataclass(frozen=True)
class Racks:
    """Racks in fabric order (pods by name, racks by name within a pod): (pod, rack name, hosts)."""

    racks: Tuple[Tuple[str, str, int], ...]
    core_group: str

    @property
    def pods(self) -> Tuple[str, ...]:
        return tuple(dict.fromkeys(pod for pod, _r, _n in self.racks))

    @property
    def hosts(self) -> int:
        return sum(n for _p, _r, n in self.racks)


def _natural(name: str):
    """S2 before S10: names compared by their text and their numbers."""
    digits = "".join(c for c in name if c.isdigit())
    return ("".join(c for c in name if not c.isdigit()), int(digits) if digits else -1, name)


@lru_cache(maxsize=8)
def read_racks(path: str) -> Racks:
    """The racks of a topology file (ValueError, one line naming the file and the line, for a malformed one)."""
    label = os.path.basename(path)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except OSError as exc:
        raise ValueError(f"topology file {path}: {exc.strerror}") from None
    if not rows:
        raise ValueError(f"{label}: empty (expected a header {','.join(COLUMNS)})")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{label}: line 1: missing column(s) {', '.join(missing)} (expected {','.join(COLUMNS)})")
    col = {c: header.index(c) for c in COLUMNS}
    seen: Dict[str, int] = {}
    counts: Dict[Tuple[str, str], int] = {}
    core = None
    for line, row in enumerate(rows[1:], 2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise ValueError(f"{label}: line {line}: {len(row)} fields, the header has {len(header)}")
        value = {c: row[i].strip() for c, i in col.items()}
        empty = [c for c in COLUMNS if not value[c]]
        if empty:
            raise ValueError(f"{label}: line {line}: empty {', '.join(empty)}")
        if value["ip"] in seen:
            raise ValueError(f"{label}: line {line}: host {value['ip'][:16]} already on line {seen[value['ip']]}")
        seen[value["ip"]] = line
        if core is None:
            core = value["DSW"]
        elif value["DSW"] != core:
            raise ValueError(f"{label}: line {line}: DSW {value['DSW']}: one core group is supported "
                             f"(the file's first is {core})")
        key = (value["PSW"], value["ASW"])
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        raise ValueError(f"{label}: no hosts")
    order: List[Tuple[str, str]] = sorted(counts, key=lambda k: (_natural(k[0]), _natural(k[1])))
    return Racks(tuple((pod, rack, counts[(pod, rack)]) for pod, rack in order), core)
