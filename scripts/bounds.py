#!/usr/bin/env python3
"""Every job of a scenario alone on its share of the fabric: the code is cli/bounds.py (``flux-testbed bounds``)."""
import os
import sys

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import builds_fabric, set_up
    set_up(__file__, fabric=builds_fabric("bounds", sys.argv[1:]))

    from cli.bounds import main
    sys.exit(main(sys.argv[1:]))
