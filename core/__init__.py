"""The testbed's shared vocabulary, written once and used by every layer (no I/O, no root, no third-party code).

* ``core.model``: job, worker, bucket, operation, flow, operation event, a scheduler's decision;
* ``core.classes``: priority classes and their DSCP code points;
* ``core.fabric``: the fabric's graph (leaf-spine or fat-tree), its names, addresses, DPIDs, ports and paths,
  and a scheduler's view of it;
* ``core.ring``: the traffic of a ring all-reduce;
* ``core.config``: the controller's configuration, as the runner writes it and the controller reads it;
* ``core.faults``: the faults an experiment schedules (links, switches, controllers);
* ``core.stats``: the one percentile every report uses.

Index convention: switches, hosts and ports are numbered from 1 where they have names (``lf1``, ``h1``, port 1,
as Mininet and OpenFlow number them); everything a scheduler sees (``FabricView``, ``Decision.path``) is
numbered from 0. ``core.fabric`` converts between the two and nothing else does.
"""
