#!/usr/bin/env python3
"""The scenario suite on either engine, and the twin against the emulation: the code is cli/suite.py
(``flux-testbed suite``)."""
import os
import sys

if __name__ == "__main__":  # run as a file: the project on sys.path, set up, continue in .venv
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from cli.entry import builds_fabric, set_up
    set_up(__file__, fabric=builds_fabric("suite", sys.argv[1:]))

    from cli.suite import main
    sys.exit(main(sys.argv[1:]))
