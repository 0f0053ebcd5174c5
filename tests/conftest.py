"""Shared test fixtures: the ``root`` marker, and a guard that fails any test leaving something behind.

Tests that need a real network are marked ``@pytest.mark.root``. Run as a normal user they are skipped. Run as
root (as CI does) they are required: if Open vSwitch is not running the session stops with an error instead of
skipping them, so a broken machine can never pass by skipping (FLUX_REQUIRE_ROOT_TESTS=1 requires them for any
user).
"""
import functools
import os
import subprocess
import sys
import uuid

import pytest

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PROJECT_DIR not in sys.path:
    sys.path.insert(0, PROJECT_DIR)

from core.fabric import FABRIC_NAME  # noqa: E402
from testbed import state  # noqa: E402

# Every process this session starts inherits this, so that the guard below only ever ends this session's own.
SESSION = os.environ.setdefault(state.SESSION_MARKER, f"{os.getpid()}-{uuid.uuid4().hex[:8]}")


@functools.lru_cache(maxsize=None)
def _root_unavailable_reason():
    if os.geteuid() != 0:
        return "needs root"
    r = subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True)
    if r.returncode != 0:
        return "Open vSwitch is not running"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _root_unavailable_reason()
    if reason is None:
        return
    root_items = [item for item in items if "root" in item.keywords]
    required = os.geteuid() == 0 or os.environ.get("FLUX_REQUIRE_ROOT_TESTS") == "1"
    if root_items and required:
        pytest.exit(f"{len(root_items)} root tests are required (FLUX_REQUIRE_ROOT_TESTS=1) but: {reason}",
                    returncode=1)
    for item in root_items:
        item.add_marker(pytest.mark.skip(reason=reason))


# ------------------------------------------------------------------------------------------ nothing left behind
LEFTOVER_GRACE_S = 3.0


def _check_nothing_new(before, what):
    left = state.new_since(before, grace_s=LEFTOVER_GRACE_S, session=SESSION)
    if left:
        # Removed so that the next test starts clean, but only what is surely the testbed's: this session's
        # processes (already so scoped), bridges and interfaces with the fabric's names, a state file whose runner
        # is gone. Anything else is reported and left alone.
        # A runner still alive after the test is not the test's (its runs end with it): another emulation on this
        # machine, whose bridges must not be touched.
        other_run = state.active_run() is not None
        ours = {"process": left.get("process", []),
                "bridge": [] if other_run else [b for b in left.get("bridge", []) if FABRIC_NAME.fullmatch(b)],
                "interface": [] if other_run else [i for i in left.get("interface", []) if FABRIC_NAME.fullmatch(i)],
                "state file": [] if other_run else left.get("state file", [])}
        state.remove_things(ours)
        described = "; ".join(f"{kind} {', '.join(names)}" for kind, names in left.items())
        pytest.fail(f"{what} left behind: {described}", pytrace=False)


@pytest.fixture(scope="module", autouse=True)
def nothing_left_behind_by_module():
    """Like ``nothing_left_behind``, for what a module's shared fixtures (a live fabric) start and stop."""
    before = state.snapshot(SESSION) if _root_unavailable_reason() is None else None
    yield
    if before is not None:
        _check_nothing_new(before, "this module")


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """Fails the test (and so the session) if it leaves a testbed process, a bridge, an interface, a namespace
    or a state file behind that was not there before it; removes what it left so that the next test starts
    clean. Runs where the root tests run (as root, with Open vSwitch)."""
    before = state.snapshot(SESSION) if _root_unavailable_reason() is None else None
    yield
    if before is not None:
        _check_nothing_new(before, "this test")
