"""Whether two results folders hold the same figures: every CSV table under one, cell by cell, against the file at
the same place under the other. Provenance columns (the commit) are left out, and so are columns one side has
and the other has not (a new column is no changed figure; they are listed); numbers must be equal to the last bit
unless a tolerance is given."""
from __future__ import annotations

import csv
import math
import os
from typing import Dict, List, Optional, Sequence

#: Columns that say what produced a figure, not the figure.
PROVENANCE = ("git_commit",)


def _cells(path: str) -> List[Dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _differs(a: str, b: str, tolerance: float) -> bool:
    if a == b:
        return False
    try:
        x, y = float(a), float(b)
    except ValueError:
        return True
    if math.isnan(x) and math.isnan(y):
        return False
    return abs(x - y) > tolerance


def tables(folder: str) -> List[str]:
    """Every CSV file under ``folder``, relative to it, sorted."""
    out = []
    for root, _dirs, files in os.walk(folder):
        out += [os.path.relpath(os.path.join(root, f), folder) for f in files if f.endswith(".csv")]
    return sorted(out)


def compare(reference: str, other: str, tolerance: float = 0.0,
            ignore: Sequence[str] = PROVENANCE, limit: Optional[int] = 20) -> dict:
    """The tables of ``reference`` against those of ``other``: counts, files missing on either side, and the
    differing cells (at most ``limit`` listed)."""
    ref, oth = tables(reference), tables(other)
    differences, cells, one_sided = [], 0, {}
    for name in sorted(set(ref) & set(oth)):
        a, b = _cells(os.path.join(reference, name)), _cells(os.path.join(other, name))
        if len(a) != len(b):
            differences.append({"table": name, "row": None, "column": "rows", "reference": len(a), "other": len(b)})
            continue
        columns_a, columns_b = set(a[0]) if a else set(), set(b[0]) if b else set()
        if columns_a != columns_b:
            one_sided[name] = sorted(columns_a ^ columns_b)
        for i, (row_a, row_b) in enumerate(zip(a, b)):
            for column in sorted((columns_a & columns_b) - set(ignore)):
                cells += 1
                va, vb = row_a.get(column, ""), row_b.get(column, "")
                if _differs(va or "", vb or "", tolerance):
                    differences.append({"table": name, "row": i, "column": column, "reference": va, "other": vb})
    return {"reference": reference, "other": other, "tolerance": tolerance, "ignored_columns": list(ignore),
            "tables": len(set(ref) & set(oth)), "cells": cells,
            "only_in_reference": sorted(set(ref) - set(oth)), "only_in_other": sorted(set(oth) - set(ref)),
            "columns_on_one_side": one_sided,
            "differences": len(differences), "listed": differences[:limit] if limit else differences,
            "same": not differences and set(ref) == set(oth)}
