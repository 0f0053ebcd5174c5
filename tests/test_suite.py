"""cli/suite.py (scripts/suite.py) without root (fluid engine): every suite scenario resolves on its fabric, a small
suite gives one row per scenario and variant with the bound and the fraction of the attainable gain, and bad input
is refused before anything runs."""
import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from analysis.agreement import discordant_pairs
from analysis.suite import SUITE_DIR, fabric_flags, scenario_names
from cli import run as runner
from cli import suite

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SUITE = [sys.executable, os.path.join(PROJECT_DIR, "scripts", "suite.py")]


@pytest.mark.parametrize("name", scenario_names())
def test_every_suite_scenario_resolves_on_its_fabric_and_says_what_it_tests(name):
    path = os.path.join(SUITE_DIR, name + ".yaml")
    with open(path, encoding="utf-8") as f:
        header = f.read().split("\nname:", 1)[0]
    assert "Tests:" in header and "Theory:" in header, name
    args = runner.build_parser().parse_args(["--scenario", path, "--engine", "fluid", *fabric_flags(name)])
    resolved = runner.validate(args)
    assert len(resolved.jobs) >= 2


def test_the_suite_names_the_issues_scenarios():
    assert {"headline", "same-model", "vgg-bert", "bert-bert-offset", "vgg-gpt2", "bert-gpt2", "resnet-bert",
            "wait-all", "stress-8", "small-first"} <= set(scenario_names())


def test_a_small_suite_gives_rows_with_bound_and_gain_fraction(tmp_path):
    out = tmp_path / "suite"
    r = subprocess.run(SUITE + ["--engine", "fluid", "--scenarios", "bert-bert-offset", "--variants", "ecmp,crux",
                                "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {row["variant"]: row for row in csv.DictReader(open(out / "suite.csv"))}
    assert set(rows) == {"ecmp", "crux"}
    bound = float(rows["crux"]["u_bound"])
    for variant, row in rows.items():
        assert row["runs"] == "1" and float(row["u_mean"]) <= bound + 0.01, variant
    # Crux separates the two jobs; ECMP shares fairly: Crux takes part of the room between ECMP and the bound.
    assert float(rows["ecmp"]["gain_fraction"]) == 0.0
    assert 0.0 < float(rows["crux"]["gain_fraction"]) <= 1.01
    assert json.loads(r.stdout)["rows"][0]["scenario"] == "bert-bert-offset"
    assert (out / "suite.md").exists() and (out / "suite.png").stat().st_size > 0
    # Rerunning resumes: the finished run is not run again.
    (done,) = (out / "bert-bert-offset" / "crux").glob("*/summary.json")
    before = done.stat().st_mtime_ns
    again = subprocess.run(SUITE + ["--engine", "fluid", "--scenarios", "bert-bert-offset", "--variants", "crux",
                                    "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and done.stat().st_mtime_ns == before
    # A clone keeps each sweep's summary.csv and not its run folders: the table comes out the same from it alone.
    for run in (out / "bert-bert-offset").glob("*/*/summary.json"):
        shutil.rmtree(run.parent)
    (out / "suite.csv").unlink()
    table = subprocess.run(SUITE + ["--out", str(out), "--scenarios", "bert-bert-offset", "--variants", "ecmp,crux",
                                    "--collect-only"], capture_output=True, text=True, timeout=600)
    assert table.returncode == 0, table.stderr[-2000:]
    again_rows = {row["variant"]: row for row in csv.DictReader(open(out / "suite.csv"))}
    for variant in rows:
        for column in ("runs", "u_mean", "timeouts_per_run"):
            assert again_rows[variant][column] == rows[variant][column] != "", (variant, column)


@pytest.mark.parametrize("bad", [["--scenarios", "nope"], ["--variants", "crux,nope"],
                                 ["--twin-set", "progress_weight=x"], ["--twin-set", "nonsense=1"],
                                 ["--twin-set", "goodput=2"], ["--engine", "emulation", "--twin-set", "goodput=0.9"],
                                 ["--rate", "0"], ["--min-packets", "-1"]])
def test_unknown_scenarios_or_variants_are_refused(tmp_path, bad):
    r = subprocess.run(SUITE + ["--engine", "fluid", "--out", str(tmp_path / "x"), *bad],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_the_rate_reaches_every_run_and_the_bound(tmp_path):
    out = tmp_path / "suite"
    r = subprocess.run(SUITE + ["--engine", "fluid", "--scenarios", "bert-bert-offset", "--variants", "ecmp",
                                "--rate", "2.5", "--out", str(out), "--dry-run"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--host-rate 2.5 --fabric-rate 2.5" in r.stderr and "--host-rate 5 " not in r.stderr
    assert "--min-packets" not in r.stderr
    halved = subprocess.run(SUITE + ["--engine", "fluid", "--scenarios", "bert-bert-offset", "--variants", "ecmp",
                                     "--rate", "2.5", "--min-packets", "10", "--out", str(out), "--dry-run"],
                            capture_output=True, text=True, timeout=120)
    assert halved.returncode == 0 and "--host-rate 2.5 --fabric-rate 2.5 --min-packets 10" in halved.stderr
    assert fabric_flags("bert-bert-offset")[:4] == ["--host-rate", "5", "--fabric-rate", "5"]


def placed_suite():
    """(name, jobs, fabric view) of every suite scenario, placed on its fabric as the runner places it."""
    for name in scenario_names():
        path = os.path.join(SUITE_DIR, name + ".yaml")
        args = runner.build_parser().parse_args(["--scenario", path, "--engine", "fluid", *fabric_flags(name)])
        resolved = runner.validate(args)
        yield name, resolved.jobs, resolved.layout.view()


def test_contiguous_compression_differs_from_crux_only_where_jobs_are_equally_intensive():
    """docs/suite.md compares crux-contiguous with crux: same rules where every job's intensity differs."""
    from controller.schedulers.registry import make_scheduler
    differ = set()
    for name, jobs, view in placed_suite():
        published = make_scheduler("crux", view, jobs).decide(0.0)
        if make_scheduler("crux", view, jobs, {"compression": "contiguous"}).decide(0.0) != published:
            differ.add(name)
    assert differ == {"bert-bert-offset", "same-model", "small-first", "stress-8", "wait-all"}


def test_the_earlier_overlap_correction_orders_jobs_differently_only_on_vgg_bert_and_small_first():
    """docs/suite.md measures crux-overlap only where its job order differs from crux's (strict priority: the
    same order is the same schedule, whatever the class numbers)."""
    from controller.schedulers.registry import make_scheduler

    def order(scheduler):
        classes = scheduler.classes
        return {(a, b): (classes[a] > classes[b]) - (classes[a] < classes[b]) for a in classes for b in classes}
    differ = set()
    for name, jobs, view in placed_suite():
        published = make_scheduler("crux", view, jobs)
        earlier = make_scheduler("crux", view, jobs, {"correction": "overlap"})
        assert earlier.paths == published.paths or name in ("vgg-bert", "small-first"), name
        if order(earlier) != order(published):
            differ.add(name)
    assert differ == {"vgg-bert", "small-first"}


def _suite_folder(root, scenario, variant, jobs, starvation=None):
    """A suite folder holding one sweep table (summary.csv) with one run of ``jobs`` ({job: utilisation});
    ``starvation`` ({job: timeouts}): a twin's ``starvation_timeouts`` column."""
    folder = root / scenario / variant
    folder.mkdir(parents=True)
    cluster = sum(jobs.values()) / len(jobs)
    with open(folder / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run_id", "scheduler", "job", "gpu_utilization", "ok", "starvation_timeouts"])
        for job, u in jobs.items():
            w.writerow(["r1", variant, job, u, "True", "" if starvation is None else starvation[job]])
        w.writerow(["r1", variant, "__cluster__", cluster, "True", ""])
    with open(root / "suite.csv", "a", newline="") as f:
        w = csv.writer(f)
        if f.tell() == 0:
            w.writerow(["scenario", "variant", "runs", "u_mean", "u_min", "u_max"])
        w.writerow([scenario, variant, 1, cluster, cluster, cluster])
    return {"scenario": scenario, "variant": variant, "runs": 1, "u_mean": cluster}


def test_compare_names_the_job_furthest_off_and_counts_agreement(tmp_path):
    here, other = tmp_path / "here", tmp_path / "other"
    rows = [_suite_folder(here, "pair", "ecmp", {"a": 0.80, "b": 0.60}),
            _suite_folder(here, "solo", "ecmp", {"a": 0.90, "b": 0.90})]
    # Cluster agrees on "pair" (0.70 both) although each job is 0.06 off; "solo" is off on the cluster and job a.
    _suite_folder(other, "pair", "ecmp", {"a": 0.74, "b": 0.66})
    _suite_folder(other, "solo", "ecmp", {"a": 0.82, "b": 0.90})
    pairs = {p["scenario"]: p for p in suite.compare(str(here), rows, str(other))}
    assert pairs["pair"]["difference"] == pytest.approx(0.0)
    assert pairs["pair"]["worst_job"] in ("a", "b")
    assert abs(pairs["pair"]["worst_job_difference"]) == pytest.approx(0.06)
    assert pairs["solo"]["worst_job"] == "a" and pairs["solo"]["worst_job_difference"] == pytest.approx(-0.08)
    table = (here / "compare.md").read_text()
    assert "| ecmp | 1/2 | 0/2 | 0.020 | 0.070 |" in table
    assert (here / "compare.png").stat().st_size > 0


def test_compare_splits_the_jobs_by_whether_the_twins_starvation_rule_timed_them_out(tmp_path):
    here, other = tmp_path / "here", tmp_path / "other"
    rows = [_suite_folder(here, "pair", "crux", {"a": 0.80, "b": 0.60}),
            _suite_folder(here, "solo", "crux", {"a": 0.90})]
    _suite_folder(other, "pair", "crux", {"a": 0.70, "b": 0.62}, starvation={"a": 12, "b": 0})
    _suite_folder(other, "solo", "crux", {"a": 0.96}, starvation={"a": 0})
    pairs = {p["scenario"]: p for p in suite.compare(str(here), rows, str(other))}
    assert pairs["pair"]["starvation_timeouts"] == {"a": 12, "b": 0}
    table = (here / "compare.md").read_text()
    # a (starved) is 0.10 off; b and solo's a (not starved) 0.02 and 0.06 off, the latter outside the band.
    assert "| crux | 0/1 | 0.100 | 0.100 | 1/2 | 0.040 | 0.060 | solo a +0.060 |" in table
    assert "| all | 0/1 | 0.100 | 0.100 | 1/2 | 0.040 | 0.060 | crux solo a +0.060 |" in table
    # Two emulation folders (no such column on either side): no such table.
    plain = tmp_path / "plain"
    _suite_folder(plain, "pair", "crux", {"a": 0.70, "b": 0.62})
    _suite_folder(plain, "solo", "crux", {"a": 0.96})
    suite.compare(str(here), rows, str(plain))
    assert "starvation rule" not in (here / "compare.md").read_text()


def test_compare_says_whether_the_job_furthest_off_is_a_figure_the_runs_here_gave(tmp_path):
    here, other = tmp_path / "here", tmp_path / "other"
    # Two runs here, job a at 0.60 and 0.80 (a bimodal job): the other's 0.78 is 0.08 off the mean but inside
    # what the runs gave; on "narrow" the other's 0.82 is outside both.
    rows = []
    for scenario, runs in (("wide", [0.60, 0.80]), ("narrow", [0.69, 0.71])):
        folder = here / scenario / "ecmp"
        folder.mkdir(parents=True)
        with open(folder / "summary.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["run_id", "scheduler", "job", "gpu_utilization", "ok"])
            for i, u in enumerate(runs):
                w.writerow([f"r{i}", "ecmp", "a", u, "True"])
                w.writerow([f"r{i}", "ecmp", "__cluster__", u, "True"])
        with open(here / "suite.csv", "a", newline="") as f:
            w = csv.writer(f)
            if f.tell() == 0:
                w.writerow(["scenario", "variant", "runs", "u_mean", "u_min", "u_max"])
            w.writerow([scenario, "ecmp", 2, 0.70, min(runs), max(runs)])
        rows.append({"scenario": scenario, "variant": "ecmp", "runs": 2, "u_mean": 0.70})
    _suite_folder(other, "wide", "ecmp", {"a": 0.78})
    _suite_folder(other, "narrow", "ecmp", {"a": 0.82})
    pairs = {p["scenario"]: p for p in suite.compare(str(here), rows, str(other))}
    assert pairs["wide"]["worst_job_range"] == pytest.approx((0.60, 0.80))
    table = (here / "compare.md").read_text()
    assert "| wide | ecmp | 2 | 0.700 | 0.780 [0.780, 0.780] | +0.080 | a | +0.080 | [0.600, 0.800] |" in table
    assert "| ecmp | 0/2 | 0/2 | 0.100 | 0.100 | 1/2 |" in table


def test_compare_lists_the_pairs_the_other_engine_orders_the_other_way(tmp_path):
    here, other = tmp_path / "here", tmp_path / "other"
    rows = [_suite_folder(here, "s", "ecmp", {"a": 0.60}), _suite_folder(here, "s", "crux", {"a": 0.80}),
            _suite_folder(here, "s", "flux", {"a": 0.805})]
    # crux above ecmp here and there; flux 0.005 above crux here (a tie) but below it there: not counted;
    # flux above ecmp here by 0.205 and below it there: counted.
    _suite_folder(other, "s", "ecmp", {"a": 0.70})
    _suite_folder(other, "s", "crux", {"a": 0.75})
    _suite_folder(other, "s", "flux", {"a": 0.65})
    pairs = suite.compare(str(here), rows, str(other))
    assert [(d["a"], d["b"]) for d in discordant_pairs(pairs)] == [("flux", "ecmp")]
    assert "orders the other way: 1." in (here / "compare.md").read_text()


def test_compare_plot_gives_variants_that_agree_one_label():
    outside = [("small-first bert_b", "crux", 0.885, 0.808), ("small-first bert_b", "flux", 0.886, 0.808),
               ("small-first bert_b", "ecmp", 0.700, 0.600), ("stress-8 bert_b", "flux", 0.885, 0.808)]
    assert suite._merge_labels(outside) == [("small-first bert_b", ["crux", "flux"], 0.885, 0.808),
                                            ("small-first bert_b", ["ecmp"], 0.700, 0.600),
                                            ("stress-8 bert_b", ["flux"], 0.885, 0.808)]
