#!/usr/bin/env python3
"""Rebuild the derived files of finished run folders: the code is cli/reanalyse.py (``flux-testbed reanalyse``)."""
import os
import sys

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import set_up
    set_up(__file__, fabric=False)

    from cli.reanalyse import main
    sys.exit(main(sys.argv[1:]))
