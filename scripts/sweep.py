#!/usr/bin/env python3
"""Run a grid of experiments and collect one summary table: the code is cli/sweep.py (``flux-testbed sweep``)."""
import os
import sys

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import builds_fabric, set_up
    set_up(__file__, fabric=builds_fabric("sweep", sys.argv[1:]))

    from cli.sweep import main
    sys.exit(main(sys.argv[1:]))
