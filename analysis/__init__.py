"""What the tools (cli/), the benchmarks (bench/) and the investigations (research/) share: pure functions and
constants over finished result folders, importable without root or a fabric.

- ``analysis.suite``: the scenario suite's definition (scenarios, fabrics, variants) and its folders' job figures;
- ``analysis.agreement``: the agreement bands, discordant pairs, and the emulation's agreement with itself;
- ``analysis.seeds``: completed runs of a (scenario, variant) pair gathered over several suite folders;
- ``analysis.timeline``: operation timelines of an emulation run and of the twin's replay of it;
- ``analysis.starvation``: timelines and the twin's rule for a flow starved by a higher class;
- ``analysis.same``: whether two results folders hold the same figures, cell by cell.
"""
