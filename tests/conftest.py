"""Shared test fixtures: the ``root`` marker and a small live fabric.

Tests that need a real network are marked ``@pytest.mark.root``. Run as a normal user they are skipped. Run as
root (as CI does) they are required: if Open vSwitch is not running the session stops with an error instead of
skipping them, so a broken machine can never pass by skipping (FLUX_REQUIRE_ROOT_TESTS=1 requires them for any
user).
"""
import os
import subprocess
import sys

import pytest

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PROJECT_DIR not in sys.path:
    sys.path.insert(0, PROJECT_DIR)


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
