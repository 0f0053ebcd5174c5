"""The experiment layer both engines share: the results model (results.py) and the distributed sweep runner
(cluster.py). The emulation (testbed/) and the twin (twin/) write the same results folders through it and never
import each other."""
