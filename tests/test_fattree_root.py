"""A second topology family, live (root, Open vSwitch): the k = 4 fat-tree forwards every pair through the
controller's rules, and a flow pinned to one of its four equal-cost paths really crosses that path's core, with
transit rules only where the path still has a choice and none left behind when the path changes."""
import re
import subprocess

import pytest

from core.fabric import FabricSpec
from core.model import FlowKey
from testbed.fabric import Testbed

pytestmark = pytest.mark.root

INTER_POD = FlowKey("10.0.0.1", "10.0.0.5", 44001, 5401)   # h1 (lf1, pod 0) -> h5 (lf3, pod 1)


@pytest.fixture(scope="module")
def fattree(tmp_path_factory):
    out = tmp_path_factory.mktemp("fattree")
    with Testbed(FabricSpec.fattree(4), str(out), scheduler="ecmp") as tb:
        yield tb


def ofctl(*args):
    return subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], capture_output=True, text=True,
                          check=True).stdout


def core_tx_bytes():
    """Bytes sent by each core switch, over all its ports."""
    return {core: sum(int(b) for b in re.findall(r"tx pkts=\d+, bytes=(\d+)", ofctl("dump-ports", core)))
            for core in ("co1", "co2", "co3", "co4")}


def transit_rules(switch):
    return [line for line in ofctl("dump-flows", switch).splitlines() if f"tp_src={INTER_POD.src_port}" in line]


def test_every_pair_is_reachable(fattree):
    assert fattree.check_reachability() == []


@pytest.mark.parametrize("path_index", [3, 0])  # through ag2 and co4, then through ag1 and co1
def test_a_pinned_flow_crosses_its_paths_core(fattree, path_index):
    path = fattree.layout.paths(1, 3)[path_index]
    agg, core = path[1], path[2]
    other_agg = {"ag1", "ag2"}.difference({agg}).pop()
    reply = fattree.pin(INTER_POD, 6, path=path_index)
    assert reply["ok"]
    (rule,) = transit_rules(agg)
    assert f"output:{fattree.layout.port(agg, core)}" in rule
    assert transit_rules(other_agg) == []   # the earlier path's transit rule is gone
    before = core_tx_bytes()
    (report,) = fattree.bulk_flows([INTER_POD], duration=2.0, warmup=0.5)
    after = core_tx_bytes()
    sent = {c: after[c] - before[c] for c in after}
    assert report["bytes"] > 1_000_000, report
    assert sent[core] >= 0.95 * report["bytes"], sent
    assert sum(v for c, v in sent.items() if c != core) < 0.05 * report["bytes"], sent
