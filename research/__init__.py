"""One-off investigations behind figures and claims in docs/ (each module opens with its question, its answer
and the section that cites it; run as ``flux-testbed research NAME`` or ``python research/NAME.py``)."""
