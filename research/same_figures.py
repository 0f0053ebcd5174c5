#!/usr/bin/env python3
"""Whether two results folders (two runs of the suite, two sweeps) hold the same figures, cell by cell.

Question: Does a change of the code leave the twin's committed suite figures as they were?
Answer: For the layout of engines, control loop and run plan of results/suite/fluid-rerun/same.json: every table
of a fresh ``flux-testbed suite --engine fluid --seeds 1-3`` run equals results/suite/fluid to the last bit
(commits aside). Cited in: results/suite/fluid-rerun/README.md.

    python research/same_figures.py results/suite/fluid /tmp/suite-rerun [--tolerance 0] [--out FILE]

Prints JSON (analysis/same.py ``compare``): the tables and cells compared, files on one side only, and the
differing cells; exits 1 when anything differs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)


from analysis.same import compare


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="same_figures.py", description=__doc__.splitlines()[0])
    p.add_argument("reference", help="results folder taken as right (e.g. a committed suite)")
    p.add_argument("other", help="results folder to check against it")
    p.add_argument("--tolerance", type=float, default=0.0, help="largest absolute difference taken as equal")
    p.add_argument("--out", default=None, help="also write the JSON to this file")
    args = p.parse_args(argv)
    for folder in (args.reference, args.other):
        if not os.path.isdir(folder):
            sys.stderr.write(f"same_figures.py: no such folder: {folder}\n")
            return 2
    result = compare(args.reference, args.other, args.tolerance)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0 if result["same"] else 1


if __name__ == "__main__":
    sys.exit(main())
