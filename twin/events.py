"""The kinds of the twin's timed events, shared by the event loop (engine.py) and the concerns that schedule them
(rings.py, tcp.py, control.py). Ordered so that, at one instant, deliveries happen before the GPU moves on."""

STEP_DONE, START, RESUME_FLOW, APPLY, EVENTS, DECIDE, PERIODIC, GPU = range(8)

#: Two times closer than this are one instant.
EPS_T = 1e-12
