"""Benchmarks of the testbed itself: how fast, how faithful, how robust (each module runs as
``flux-testbed bench NAME`` or ``python bench/NAME.py``; docs/fidelity.md and docs/twin.md cite their results)."""
