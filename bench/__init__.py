"""Benchmarks of the testbed itself: how fast, how faithful, how robust (each module runs as
``flux-testbed bench NAME`` or ``python bench/NAME.py``; docs/fidelity.md and docs/twin.md cite their results)."""

import json
from typing import Optional


def print_json(result: dict, out: Optional[str] = None) -> None:
    """A benchmark's result on stdout, and in ``out`` as well when given."""
    text = json.dumps(result, indent=2)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(text)
