"""The command-line tool, above both engines: ``flux-testbed run`` checks a run's plan and hands it to the
emulation (testbed/) or the twin (twin/)."""
