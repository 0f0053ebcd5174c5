"""How a run ends, the same for both engines: exit codes, bad input, interruption by a signal, and the outcome of a
run that went to its end."""
from __future__ import annotations

from typing import List, Optional, Tuple

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNFAITHFUL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class BadInput(Exception):
    """Bad flags, scenario or environment: reported in one line, exit 2, nothing started."""


class Interrupted(Exception):
    """SIGTERM or SIGINT during a run."""


# The last signal received. The handler raises Interrupted wherever the runner is, but library code that catches
# every Exception (a host shell's read in Mininet, for one) can swallow it: the phases check this as well.
_signalled: List[str] = []


def on_signal(signum: int, frame=None) -> None:
    """A signal handler: record the signal and raise Interrupted."""
    import signal
    _signalled.append(signal.Signals(signum).name)
    raise Interrupted(signal.Signals(signum).name)


def clear_signals() -> None:
    _signalled.clear()


def raise_if_signalled() -> None:
    if _signalled:
        raise Interrupted(_signalled[-1])


def outcome(failures: List[str], faithful: Optional[bool]) -> Tuple[bool, Optional[str], int]:
    """(ok, error, exit code) of a run that went to its end: any failure fails it; a run that completed but
    whose emulator did not keep up (``faithful`` false) is ok, yet exits with EXIT_UNFAITHFUL, since its
    figures are not the scheduler's either."""
    if failures:
        return False, "; ".join(dict.fromkeys(failures)), EXIT_FAILED
    if faithful is False:
        return True, None, EXIT_UNFAITHFUL
    return True, None, EXIT_OK
