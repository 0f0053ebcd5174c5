"""Scenario files: validation errors, placement policies, resolution into JobSpecs, the shipped scenarios."""
import json
import math
import re

import pytest
import yaml

from core.model import MAX_JOBS, JobSpec, src_port
from core.ring import ring_time_s
from workloads.profiles import load_profile
from workloads.scenario import (
    ResolvedScenario,
    ScenarioError,
    available_scenarios,
    default_scenario_path,
    load_scenario,
    scenario_from_dict,
)


def fabric(leaves=4, per_leaf=4):
    """(name, ip, leaf) of a leaf-spine fabric in fabric order: h1..hK on leaf 1, and so on."""
    return [(f"h{k}", f"10.0.0.{k}", (k - 1) // per_leaf + 1) for k in range(1, leaves * per_leaf + 1)]


HOSTS = fabric()
LEAF = {name: leaf for name, _, leaf in HOSTS}


def write(tmp_path, data, name="scenario.yaml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def base(**top):
    d = {"name": "t", "jobs": [{"name": "a", "model": "resnet50", "workers": 4, "iterations": 2},
                               {"name": "b", "model": "bert_large", "workers": 4, "iterations": 2}]}
    d.update(top)
    return d


# ------------------------------------------------------------------------------------------------ shipped files


def test_shipped_scenarios_load_and_resolve():
    assert {"default", "smoke", "headline"} <= set(available_scenarios())
    assert default_scenario_path().is_file()
    for name in ("default", "smoke", "headline"):
        s = load_scenario(name)
        r = s.resolve(HOSTS, emu_link_mbps=10)
        assert r.jobs and all(isinstance(j, JobSpec) for j in r.jobs)
        for i, job in enumerate(r.jobs):
            assert job.index == i
            assert len(job.hosts) == len(job.addresses) == job.workers
            assert len(job.model.buckets) <= s.max_buckets
            src_port(job.index, len(job.model.buckets) - 1)         # fits the port encoding
        used = [h for j in r.jobs for h in j.hosts]
        assert len(used) == len(set(used))
        for t in r.estimated_iteration_s().values():
            assert 0.5 <= t <= 3.0
        # Each host sends at most its link rate; one worker per host keeps it there.
        assert len(used) <= len(HOSTS)


def test_default_scenario_is_short_and_fits_ci_fabric():
    s = load_scenario(default_scenario_path())
    assert len(s.jobs) in (2, 3) and s.total_workers <= 16
    r = s.resolve(HOSTS, 10)
    est = r.estimated_iteration_s()
    assert max(est[j.name] * j.iterations + j.start_offset_s for j in r.jobs) < 30


def test_smoke_scenario():
    s = load_scenario("smoke")
    assert len(s.jobs) == 1 and s.jobs[0].workers == 2 and s.jobs[0].iterations == 3


def test_headline_scenario_contends_on_the_spine():
    s = load_scenario("headline")
    assert sorted(j.profile.name for j in s.jobs) == ["bert_large", "gpt2_xl", "resnet50", "vgg16"]
    r = s.resolve(HOSTS, 10)
    assert sorted(h for j in r.jobs for h in j.hosts) == sorted(name for name, _, _ in HOSTS)
    for job in r.jobs:
        leaves = [LEAF[h] for h in job.hosts]
        assert len(set(leaves)) == 4                           # every ring hop crosses the spine
    iterations = [j.iterations for j in s.jobs]
    assert 15 <= sum(iterations) / len(iterations) <= 30


# ------------------------------------------------------------------------------------------------ resolution


def test_resolve_scales_and_coarsens(tmp_path):
    s = load_scenario(write(tmp_path, base(max_buckets=3, time_scale=2.0)))
    r = s.resolve(HOSTS, 10)
    assert r.scaling.time_scale == 2.0 and r.scaling.emu_link_mbps == 10
    real = load_profile("bert_large")
    job = r.jobs[1]
    assert job.name == "b" and job.index == 1 and len(job.model.buckets) == 3
    assert math.isclose(job.model.compute_s, 2.0 * real.compute_s)
    assert math.isclose(job.model.gradient_bytes, real.gradient_bytes * r.scaling.byte_factor, rel_tol=1e-4)
    comm_ratio_real = ring_time_s(real.gradient_bytes, 4, 100e9) / real.compute_s
    comm_ratio_emu = ring_time_s(job.model.gradient_bytes, 4, 10e6) / job.model.compute_s
    assert math.isclose(comm_ratio_emu, comm_ratio_real, rel_tol=1e-3)
    assert job.addresses == tuple(f"10.0.0.{h[1:]}" for h in job.hosts)


def test_resolve_auto_uses_one_time_scale_for_all_jobs(tmp_path):
    r = load_scenario(write(tmp_path, base())).resolve(HOSTS, 10)
    real = {"a": load_profile("resnet50"), "b": load_profile("bert_large")}
    taus = {j.name: j.model.compute_s / real[j.name].compute_s for j in r.jobs}
    assert math.isclose(taus["a"], taus["b"]) and math.isclose(taus["a"], r.scaling.time_scale)


def test_resolved_to_dict_round_trip(tmp_path):
    r = load_scenario(write(tmp_path, base())).resolve(HOSTS, 10)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["scenario"]["jobs"][0]["model"] == "resnet50"
    assert d["scaling"]["time_scale"] == r.scaling.time_scale
    assert d["real_models"]["b"]["name"] == "bert_large"
    back = ResolvedScenario.from_dict(d)
    assert back.jobs == r.jobs and back.scaling == r.scaling


def test_json_scenario_and_relative_profile_path(tmp_path):
    (tmp_path / "models").mkdir()
    profile = {"name": "mine", "gpu": "Test GPU", "batch_size": 4,
               "layers": [{"name": "x", "params": 4_000_000, "forward_ms": 100, "backward_ms": 200}]}
    (tmp_path / "models" / "mine.yaml").write_text(yaml.safe_dump(profile))
    data = {"jobs": [{"name": "m", "model": "models/mine.yaml", "workers": 2, "iterations": 1}]}
    path = write(tmp_path, json.dumps(data), "s.json")
    s = load_scenario(path)
    assert s.name == "s" and s.jobs[0].profile.name == "mine" and s.time_scale is None


# ------------------------------------------------------------------------------------------------ placement


def test_packed_fills_leaves_in_order(tmp_path):
    s = load_scenario(write(tmp_path, base(placement={"policy": "packed"})))
    assert s.place(HOSTS) == [("h1", "h2", "h3", "h4"), ("h5", "h6", "h7", "h8")]


def test_spread_round_robins_over_leaves(tmp_path):
    s = load_scenario(write(tmp_path, base(placement="spread")))
    assert s.place(HOSTS) == [("h1", "h5", "h9", "h13"), ("h2", "h6", "h10", "h14")]
    # Two-worker jobs continue the round-robin, so consecutive jobs start on different leaves.
    d = base(placement="spread")
    d["jobs"] = [{"name": f"j{i}", "model": "resnet50", "workers": 2, "iterations": 1} for i in range(3)]
    assert load_scenario(write(tmp_path, d)).place(HOSTS) == [("h1", "h5"), ("h9", "h13"), ("h2", "h6")]


def test_random_is_deterministic_per_seed(tmp_path):
    s1 = load_scenario(write(tmp_path, base(placement={"policy": "random", "seed": 7}), "a.yaml"))
    s2 = load_scenario(write(tmp_path, base(placement={"policy": "random", "seed": 7}), "b.yaml"))
    s3 = load_scenario(write(tmp_path, base(placement={"policy": "random", "seed": 8}), "c.yaml"))
    p1 = s1.place(HOSTS)
    assert p1 == s2.place(HOSTS) == s1.place(HOSTS)
    assert p1 != s3.place(HOSTS)
    used = [h for hosts in p1 for h in hosts]
    assert len(used) == 8 and len(set(used)) == 8


def test_explicit_hosts_override_and_others_avoid_them(tmp_path):
    d = base(placement="packed")
    d["jobs"][1]["hosts"] = ["h2", "h6", "h10", "h14"]
    s = load_scenario(write(tmp_path, d))
    placed = s.place(HOSTS)
    assert placed[1] == ("h2", "h6", "h10", "h14")
    assert placed[0] == ("h1", "h3", "h4", "h5")
    r = s.resolve(HOSTS, 10)
    assert r.jobs[1].addresses == ("10.0.0.2", "10.0.0.6", "10.0.0.10", "10.0.0.14")


def test_placement_accepts_host_objects():
    class HostInfo:
        def __init__(self, name, ip, leaf):
            self.name, self.ip, self.leaf = name, ip, leaf

    s = scenario_from_dict(base(placement="spread"))
    assert s.place([HostInfo(*h) for h in HOSTS]) == s.place(HOSTS)


def test_not_enough_hosts(tmp_path):
    path = write(tmp_path, base())
    s = load_scenario(path)
    with pytest.raises(ScenarioError, match=r"scenario\.yaml: placement: .*need 8 hosts but only 6"):
        s.place(fabric(leaves=2, per_leaf=3))
    with pytest.raises(ScenarioError, match="placement"):
        s.resolve(fabric(leaves=1, per_leaf=4), 10)


def test_unknown_and_reused_explicit_hosts(tmp_path):
    d = base()
    d["jobs"][0]["hosts"] = ["h1", "h2", "h3", "h99"]
    with pytest.raises(ScenarioError, match=r"jobs\[0\]\.hosts\[3\]: unknown host 'h99'"):
        load_scenario(write(tmp_path, d)).place(HOSTS)
    d = base()
    d["jobs"][0]["hosts"] = ["h1", "h2", "h3", "h4"]
    d["jobs"][1]["hosts"] = ["h5", "h6", "h7", "h1"]
    with pytest.raises(ScenarioError, match=r"jobs\[1\]\.hosts\[3\]: host 'h1' is already used by job 'a'"):
        load_scenario(write(tmp_path, d)).place(HOSTS)


# ------------------------------------------------------------------------------------------------ validation


def _job(**kw):
    j = {"name": "a", "model": "resnet50", "workers": 4, "iterations": 2}
    j.update(kw)
    return j


BAD = [
    ({"jobs": [_job(workers=1)]}, "jobs[0].workers: must be an integer >= 2"),
    ({"jobs": [_job(), _job(name="b", workers="4")]}, "jobs[1].workers: must be an integer >= 2"),
    ({"jobs": [_job(iterations=0)]}, "jobs[0].iterations: must be an integer >= 1"),
    ({"jobs": [_job(), _job()]}, "jobs[1].name: duplicate job name 'a'"),
    ({"jobs": [_job(name="a b")]}, "jobs[0].name: must be"),
    ({"jobs": [_job(model="alexnet")]}, "jobs[0].model: unknown model 'alexnet'"),
    ({"jobs": [_job(semantics="eventually")]}, "jobs[0].semantics: must be one of overlap, wait_all"),
    ({"jobs": [_job(start_offset_s=-1)]}, "jobs[0].start_offset_s: must be a number >= 0"),
    ({"jobs": [_job(gpus=4)]}, "jobs[0].gpus: unknown field"),
    ({"jobs": [_job(hosts=["h1", "h2"])]}, "jobs[0].hosts: lists 2 hosts for 4 workers"),
    ({"jobs": [_job(hosts=["h1", "h2", "h1", "h3"])]}, "jobs[0].hosts[2]: host 'h1' listed twice"),
    ({"jobs": [{"name": "a", "model": "resnet50", "workers": 4}]}, "jobs[0].iterations: missing"),
    ({"jobs": []}, "jobs: must be a non-empty list"),
    ({"name": "x"}, "jobs: missing"),
    ({"jobs": [_job()], "tenants": 3}, "tenants: unknown field"),
    ({"jobs": [_job()], "time_scale": "fast"}, "time_scale: must be a number > 0 or \"auto\""),
    ({"jobs": [_job()], "time_scale": 0}, "time_scale: must be a number > 0"),
    ({"jobs": [_job()], "max_buckets": 65}, "max_buckets: must be an integer in 1..64"),
    ({"jobs": [_job()], "real_link_gbps": -100}, "real_link_gbps: must be a number > 0"),
    ({"jobs": [_job()], "placement": {"policy": "scatter"}}, "placement.policy: must be one of packed, spread"),
    ({"jobs": [_job()], "placement": {"policy": "random", "sede": 1}}, "placement.sede: unknown field"),
    ({"jobs": [_job()], "target_iteration_s": [3, 1]}, "target_iteration_s: low must not exceed high"),
    ({"jobs": [_job(name=f"j{i}") for i in range(MAX_JOBS + 1)]}, "jobs: at most 711 jobs"),
]


@pytest.mark.parametrize("data, expected", BAD, ids=[e.split(":")[0] for _, e in BAD])
def test_validation_errors_name_file_and_field(tmp_path, data, expected):
    path = write(tmp_path, data)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).startswith(f"{path}: {expected}"), str(err.value)


def test_bad_profile_file_is_reported_through_the_scenario(tmp_path):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"name": "b", "gpu": "g", "batch_size": -3, "layers": []}))
    path = write(tmp_path, {"jobs": [_job(model="bad.yaml")]})
    with pytest.raises(ScenarioError, match=r"scenario\.yaml: jobs\[0\]\.model: bad profile: .*bad\.yaml: batch_size"):
        load_scenario(path)


def test_unreadable_files(tmp_path):
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "missing.yaml")
    with pytest.raises(ScenarioError, match=r"broken\.yaml: not valid YAML"):
        load_scenario(write(tmp_path, "jobs: [", "broken.yaml"))
    with pytest.raises(ScenarioError, match=r"list\.yaml: \(top level\)"):
        load_scenario(write(tmp_path, "- 1\n- 2\n", "list.yaml"))


def test_poisson_arrivals_set_each_jobs_start_and_are_recorded(tmp_path):
    from workloads.scenario import arrival_times
    path = tmp_path / "churn.yaml"
    path.write_text("arrivals: {process: poisson, mean_interarrival_s: 4, seed: 7}\njobs:\n"
                    + "".join(f"  - {{name: j{i}, model: resnet50, workers: 2, iterations: 3}}\n" for i in range(5)))
    scenario = load_scenario(path)
    offsets = [j.start_offset_s for j in scenario.jobs]
    assert offsets == arrival_times({"mean_interarrival_s": 4.0, "seed": 7}, 5)
    assert offsets[0] == 0.0 and all(b > a for a, b in zip(offsets, offsets[1:]))
    assert scenario.to_dict()["arrivals"] == {"process": "poisson", "mean_interarrival_s": 4.0, "seed": 7}
    # Many draws average to the mean gap.
    many = arrival_times({"mean_interarrival_s": 4.0, "seed": 1}, 2001)
    assert 3.6 < many[-1] / 2000 < 4.4


@pytest.mark.parametrize("arrivals, job_extra, message", [
    ("{process: uniform, mean_interarrival_s: 4}", "", "arrivals.process: must be one of poisson"),
    ("{process: poisson}", "", "arrivals.mean_interarrival_s: missing"),
    ("{mean_interarrival_s: -1}", "", "arrivals.mean_interarrival_s: must be a number > 0"),
    ("{mean_interarrival_s: 2, rate: 1}", "", "arrivals.rate: unknown field"),
    ("{mean_interarrival_s: 2}", ", start_offset_s: 1", "jobs[0].start_offset_s: arrivals: draws every job"),
    ("poisson", "", "arrivals: must be a mapping"),
])
def test_bad_arrivals_are_one_line_naming_the_field(tmp_path, arrivals, job_extra, message):
    path = tmp_path / "bad.yaml"
    path.write_text(f"arrivals: {arrivals}\njobs:\n  - {{name: a, model: resnet50, workers: 2, iterations: 1"
                    f"{job_extra}}}\n")
    with pytest.raises(ScenarioError, match=re.escape(message)):
        load_scenario(path)
