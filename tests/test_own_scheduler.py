"""A scheduler brought from outside the project (``--scheduler package.module:ClassName``): the registry finds
it, bad names are one-line errors with exit 2, and the shipped example runs in the twin and, as root, in the
emulation, where its classes reach the wire."""
import os
import shutil
import subprocess
import sys

import pytest

from controller.schedulers import registry
from controller.schedulers.base import Scheduler
from core.classes import class_to_dscp
from core.fabric import FabricLayout, FabricSpec
from core.model import Bucket, JobSpec, ModelProfile
from experiment.results import RunFolder

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(PROJECT_DIR, "examples", "smallest_first.py")
RUN = [sys.executable, os.path.join(PROJECT_DIR, "testbed", "run.py")]


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A folder outside the project holding the example as the user's own module ``my_scheduler``, plus a
    module whose class is not a scheduler and one that fails to import."""
    shutil.copy(EXAMPLE, tmp_path / "my_scheduler.py")
    (tmp_path / "not_a_scheduler.py").write_text("class Thing:\n    pass\n")
    (tmp_path / "broken_scheduler.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("my_scheduler", "not_a_scheduler", "broken_scheduler"):
        sys.modules.pop(name, None)


def test_the_registry_loads_a_users_class_and_names_its_folder(user_dir):
    cls = registry.scheduler_class("my_scheduler:SmallestFirst")
    assert issubclass(cls, Scheduler) and cls.__module__ == "my_scheduler"
    assert registry.module_root("my_scheduler:SmallestFirst") == str(user_dir)
    assert registry.module_root("crux") == ""


@pytest.mark.parametrize("name, message", [
    ("my_scheduler:Missing", "has no 'Missing'"),
    ("not_a_scheduler:Thing", "is not a subclass of controller.schedulers.base.Scheduler"),
    ("no_such_module:X", "cannot import 'no_such_module'"),
    ("broken_scheduler:X", "importing 'broken_scheduler' failed: RuntimeError: boom"),
    ("my_scheduler:", "write package.module:ClassName"),
    ("nonsense", "unknown scheduler 'nonsense'"),
])
def test_a_bad_scheduler_name_is_one_line(user_dir, name, message):
    with pytest.raises(ValueError, match=message):
        registry.scheduler_class(name)


def test_the_run_command_refuses_a_bad_scheduler_in_one_line_with_exit_2(user_dir):
    r = subprocess.run(RUN + ["--engine", "fluid", "--scheduler", "not_a_scheduler:Thing"], cwd=user_dir,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "run.py: scheduler 'not_a_scheduler:Thing' is not a subclass of controller.schedulers.base.Scheduler"]


def test_the_example_runs_in_the_twin_from_the_users_folder(user_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "fluid"
    r = subprocess.run(RUN + ["--engine", "fluid", "--scheduler", "my_scheduler:SmallestFirst", "--iterations", "2",
                              "--out", str(out), "-q"], cwd=user_dir, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = RunFolder(str(out)).summary()
    assert summary.ok and summary.config["scheduler"] == "my_scheduler:SmallestFirst"
    # Two jobs, so two classes: the loop installed the example's decisions in the twin.
    assert summary.controller["flowmods"] > 0 and 0 < summary.cluster["gpu_utilization"] < 1


def test_smallest_first_puts_the_smaller_job_higher():
    layout = FabricLayout.from_spec(FabricSpec(spines=1, leaves=2, hosts_per_leaf=2))
    hosts = layout.hosts
    small = JobSpec(0, "small", ModelProfile("s", "none", 1, (Bucket(0, 10_000, 0.01, 0.01),)), 2, 1,
                    hosts=(hosts[0].name, hosts[2].name), addresses=(hosts[0].ip, hosts[2].ip))
    big = JobSpec(1, "big", ModelProfile("b", "none", 1, (Bucket(0, 90_000, 0.01, 0.01),)), 2, 1,
                  hosts=(hosts[1].name, hosts[3].name), addresses=(hosts[1].ip, hosts[3].ip))
    cls = registry.scheduler_class("examples.smallest_first:SmallestFirst")
    rules = cls(layout.view(), [big, small]).decide(0.0)
    assert {rules[small.flow(r, 0)].priority_class for r in range(2)} == {6}
    assert {rules[big.flow(r, 0)].priority_class for r in range(2)} == {5}
    with pytest.raises(ValueError, match="top_class"):
        cls(layout.view(), [big], {"top_class": 7})


@pytest.mark.root
def test_the_users_scheduler_reaches_the_wire(user_dir, tmp_path_factory, monkeypatch):
    """The controller, in its own process, loads the user's class (through PYTHONPATH, as the run command sets
    it) and its class is the DSCP of the packets at the receiver's switch port."""
    from testbed.fabric import Testbed
    from tests.wire import flow_dscps

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(user_dir), os.environ.get("PYTHONPATH")])))
    spec = FabricSpec(spines=1, leaves=2, hosts_per_leaf=2)
    layout = FabricLayout.from_spec(spec)
    src, dst = layout.hosts[0], layout.hosts[2]
    model = ModelProfile("wire", "none", 1, (Bucket(0, 100_000, 0.01, 0.01),))
    job = JobSpec(0, "wire", model, 2, 1, hosts=(src.name, dst.name), addresses=(src.ip, dst.ip))
    name = "my_scheduler:SmallestFirst"
    expected = registry.make_scheduler(name, layout.view(), [job]).decide(0.0)
    flow = job.flow(0, 0)
    want = class_to_dscp(expected[flow].priority_class)
    assert want != 0
    with Testbed(spec, str(tmp_path_factory.mktemp("wire")), scheduler=name, jobs=[job]) as tb:
        dscps = flow_dscps(tb, src, dst, flow)
    assert len(dscps) >= 10 and set(dscps) == {want}
