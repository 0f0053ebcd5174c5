"""Priority classes: integers 0..7, class 7 served first, carried in packets as DSCP = 8 x class (CS0..CS7).

The tc tree that serves them on every switch port is testbed/qos.py; the controller's rules write the DSCP.
"""
from __future__ import annotations

NUM_CLASSES = 8
#: The top class carries the ACKs of every data flow (controller/rules.py), as DSCP CS7 is kept for network control
#: (RFC 4594). Schedulers give data classes 0..DATA_CLASSES-1 only: data in the ACK class would put every flow's
#: ACKs behind that data's queue and slow all the others' ACK clocks (measured: Crux with its top job in class 7
#: lost 0.025 of cluster utilisation on vgg-bert against the same order in classes 0..6, docs/fidelity.md).
ACK_CLASS = NUM_CLASSES - 1
DATA_CLASSES = NUM_CLASSES - 1


def class_to_dscp(priority_class: int) -> int:
    if not 0 <= priority_class < NUM_CLASSES:
        raise ValueError(f"priority class {priority_class} outside 0..{NUM_CLASSES - 1}")
    return 8 * priority_class


def dscp_to_class(dscp: int) -> int:
    """Class of a packet with this DSCP; DSCPs that are not class selectors fall into class 0, like tc does."""
    if not 0 <= dscp < 64:
        raise ValueError(f"DSCP {dscp} outside 0..63")
    return dscp // 8 if dscp % 8 == 0 else 0


def tos_byte(priority_class: int) -> int:
    return class_to_dscp(priority_class) << 2
