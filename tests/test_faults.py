"""The fault grammar (core/faults.py), without root: what a scenario's ``faults:`` and ``--fault`` accept, and
which interfaces a fault takes down."""
import pytest

from core.fabric import FabricLayout, FabricSpec
from core.faults import Fault, check_targets, link_interfaces, parse_fault, parse_faults
from workloads.scenario import ScenarioError, scenario_from_dict

LAYOUT = FabricLayout.from_spec(FabricSpec(spines=2, leaves=2, hosts_per_leaf=2))


def test_faults_parse_and_sort_by_time():
    faults = parse_faults(["link sp1-lf2 up at 12", "switch sp2 down at 8.5", "controller scheduler kill at 10",
                           "link lf1-sp1 down at 5"])
    assert [f.at_s for f in faults] == [5.0, 8.5, 10.0, 12.0]
    assert faults[0] == Fault(5.0, "link", ("lf1", "sp1"), "down")
    assert faults[2].target == ("scheduler",) and faults[2].text == "controller scheduler kill at 10"


@pytest.mark.parametrize("text, word", [
    ("link lf1-sp1 sideways at 5", "expected"), ("link lf1 down at 5", "two switches"),
    ("link lf1-sp1 down at soon", "number of seconds"), ("link lf1-sp1 down at -1", ">= 0 s"),
    ("controller ryu kill at 3", "scheduler|monitor"), ("switch sp1 kill at 3", "'down' or 'up'"),
    ("", "expected"),
])
def test_bad_faults_are_refused_with_a_reason(text, word):
    with pytest.raises(ValueError, match=word):
        parse_fault(text)


def test_targets_must_exist_in_the_fabric():
    check_targets(parse_faults(["link sp2-lf1 down at 1", "switch lf2 down at 2"]), LAYOUT)
    with pytest.raises(ValueError, match="no link between lf1 and lf2"):
        check_targets([parse_fault("link lf1-lf2 down at 1")], LAYOUT)
    with pytest.raises(ValueError, match="no switch sp3"):
        check_targets([parse_fault("switch sp3 down at 1")], LAYOUT)


def test_a_fault_takes_down_both_ends_of_every_link_it_names():
    assert sorted(link_interfaces(parse_fault("link sp2-lf1 down at 1"), LAYOUT)) == ["lf1-eth4", "sp2-eth1"]
    assert sorted(link_interfaces(parse_fault("switch sp1 down at 1"), LAYOUT)) == \
        ["lf1-eth3", "lf2-eth3", "sp1-eth1", "sp1-eth2"]
    # A leaf takes its host ports with it.
    assert sorted(link_interfaces(parse_fault("switch lf2 down at 1"), LAYOUT)) == \
        ["lf2-eth1", "lf2-eth2", "lf2-eth3", "lf2-eth4", "sp1-eth2", "sp2-eth2"]


def test_a_scenario_carries_its_faults_and_refuses_bad_ones():
    jobs = [{"name": "a", "model": "resnet50", "workers": 2, "iterations": 2}]
    scenario = scenario_from_dict({"jobs": jobs, "faults": ["link lf1-sp1 down at 5"]})
    assert scenario.faults == ("link lf1-sp1 down at 5",)
    assert scenario.to_dict()["faults"] == ["link lf1-sp1 down at 5"]
    with pytest.raises(ScenarioError, match=r"faults\[0\]"):
        scenario_from_dict({"jobs": jobs, "faults": ["link lf1-sp1 melts at 5"]})
    with pytest.raises(ScenarioError, match="faults"):
        scenario_from_dict({"jobs": jobs, "faults": "link lf1-sp1 down at 5"})
