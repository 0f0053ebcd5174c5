"""core/topology_file.py and the ``file`` fabric: racks and pods from a CSV, one-line errors naming the line."""
import os
import subprocess
import sys

import pytest

from core.fabric import FabricLayout, FabricSpec
from core.topology_file import read_racks

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINGJUN = os.path.join(PROJECT, "workloads", "topologies", "alibaba-lingjun-2023.csv")


def write(tmp_path, text, name="topo.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def small(tmp_path):
    # Two pods; rack S1 exists in both (the dataset reuses rack names across pods); racks of 3, 1 and 2 hosts.
    return write(tmp_path, "ip,DSW,PSW,ASW\na,G,P2,S1\nb,G,P1,S10\nc,G,P1,S1\nd,G,P1,S10\ne,G,P2,S1\n"
                           "f,G,P1,S10\n")


def test_racks_are_named_by_pod_and_rack_in_natural_order(tmp_path):
    racks = read_racks(small(tmp_path))
    assert racks.racks == (("P1", "S1", 1), ("P1", "S10", 3), ("P2", "S1", 2))
    assert racks.pods == ("P1", "P2") and racks.hosts == 6 and racks.core_group == "G"


@pytest.mark.parametrize("text, message", [
    ("ip,PSW,ASW\na,P,S\n", "line 1: missing column"),
    ("ip,DSW,PSW,ASW\na,G,P,S\nb,G,P\n", "line 3: 3 fields"),
    ("ip,DSW,PSW,ASW\na,G,P,S\nb,G,,S\n", "line 3: empty PSW"),
    ("ip,DSW,PSW,ASW\na,G,P,S\na,G,P,S\n", "line 3: host a already on line 2"),
    ("ip,DSW,PSW,ASW\na,G,P,S\nb,H,P,S\n", "line 3: DSW H: one core group"),
    ("ip,DSW,PSW,ASW\n", "no hosts"),
])
def test_a_malformed_file_is_one_line_naming_its_line(tmp_path, text, message):
    path = write(tmp_path, text, f"bad{abs(hash(text))}.csv")
    with pytest.raises(ValueError, match=message) as info:
        read_racks(path)
    assert "\n" not in str(info.value)


def test_three_tiers_link_racks_to_their_pods_aggregation_and_planes_of_cores(tmp_path):
    spec = FabricSpec.from_file(small(tmp_path), spines=4, aggregation_per_pod=2)
    spec.validate(max_hosts=1000)
    layout = FabricLayout.from_spec(spec)
    assert (spec.leaves, spec.hosts, len(layout.hosts)) == (3, 6, 6)
    assert [h.leaf for h in layout.hosts] == [1, 2, 2, 2, 3, 3]
    view = layout.view()
    # Racks 1 and 2 share pod P1: through either of its 2 aggregation switches; to P2's rack through a core of
    # the aggregation switch's plane (2 cores each): 4 paths.
    assert view.paths("10.0.0.1", "10.0.0.2") == (("lf1", "ag1", "lf2"), ("lf1", "ag2", "lf2"))
    across = view.paths("10.0.0.1", "10.0.0.5")
    assert set(across) == {("lf1", "ag1", "co1", "ag3", "lf3"), ("lf1", "ag1", "co2", "ag3", "lf3"),
                           ("lf1", "ag2", "co3", "ag4", "lf3"), ("lf1", "ag2", "co4", "ag4", "lf3")}
    assert spec.oversubscription == 3 / 2  # the largest rack (3 hosts) over its 2 uplinks


def test_two_tiers_link_every_rack_to_every_spine(tmp_path):
    spec = FabricSpec.from_file(small(tmp_path), spines=3)
    view = FabricLayout.from_spec(spec).view()
    assert len(view.paths("10.0.0.1", "10.0.0.5")) == 3 and spec.oversubscription == 1.0


def test_the_production_topology_is_shipped_whole():
    racks = read_racks(LINGJUN)
    assert racks.hosts == 847 and len(racks.racks) == 119 and len(racks.pods) == 3


@pytest.mark.parametrize("flags, message", [
    (["--topology", "file"], "needs --topology-file"),
    (["--topology", "file", "--topology-file", LINGJUN], "the fluid engine only"),
    (["--topology-file", LINGJUN, "--engine", "fluid"], "file fabrics only"),
    (["--topology", "file", "--topology-file", LINGJUN, "--engine", "fluid", "--leaves", "3"], "racks come from"),
    (["--topology", "file", "--topology-file", LINGJUN, "--engine", "fluid", "--spines", "6",
      "--aggregation-per-pod", "4"], "a multiple of --aggregation-per-pod 4"),
])
def test_the_runner_refuses_a_bad_file_fabric_in_one_line(tmp_path, flags, message):
    r = subprocess.run([sys.executable, os.path.join(PROJECT, "testbed", "run.py"), *flags, "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, cwd=PROJECT)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_malformed_topology_file_stops_the_runner_naming_the_line(tmp_path):
    bad = write(tmp_path, "ip,DSW,PSW,ASW\na,G,P,S\nb,G,P,\n", "broken.csv")
    r = subprocess.run([sys.executable, os.path.join(PROJECT, "testbed", "run.py"), "--engine", "fluid",
                        "--topology", "file", "--topology-file", bad, "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=PROJECT)
    assert r.returncode == 2 and r.stderr.strip() == "run.py: broken.csv: line 3: empty ASW"
