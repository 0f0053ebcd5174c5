"""The DDP iteration program shared by the worker and the twin (workloads/program.py)."""
import pytest

from core.model import Bucket, JobSpec, ModelProfile
from workloads.program import BACKWARD, COMPUTE, FORWARD, LAUNCH, WAIT, IterationProgram, Step

PROFILE = ModelProfile("tiny", "test", 1, (
    Bucket(0, 4000, 0.010, 0.020),
    Bucket(1, 4000, 0.030, 0.040),
    Bucket(2, 4000, 0.050, 0.060),
))


def program(semantics="overlap", iterations=3):
    return IterationProgram(JobSpec(0, "j", PROFILE, 2, iterations, semantics=semantics))


def short(steps):
    return [(s.kind, s.bucket) + ((s.phase,) if s.kind == COMPUTE else ()) for s in steps]


def test_overlap_waits_for_each_bucket_before_its_forward_and_launches_after_its_backward():
    p = program("overlap")
    assert short(p.steps(0)) == [
        (WAIT, 2), (COMPUTE, 2, FORWARD), (WAIT, 1), (COMPUTE, 1, FORWARD), (WAIT, 0), (COMPUTE, 0, FORWARD),
        (COMPUTE, 0, BACKWARD), (LAUNCH, 0), (COMPUTE, 1, BACKWARD), (LAUNCH, 1), (COMPUTE, 2, BACKWARD),
        (LAUNCH, 2)]
    assert p.steps(1) == p.steps(0)
    # The last iteration ends with the optimizer step's wait for every bucket, first layers first.
    assert short(p.steps(2))[-3:] == [(WAIT, 2), (WAIT, 1), (WAIT, 0)]
    assert len(p.steps(2)) == len(p.steps(0)) + 3


def test_wait_all_waits_for_every_bucket_before_the_forward_pass():
    steps = short(program("wait_all").steps(1))
    assert steps[:3] == [(WAIT, 2), (WAIT, 1), (WAIT, 0)]
    assert (WAIT, 1) not in steps[3:]
    assert steps[3:6] == [(COMPUTE, 2, FORWARD), (COMPUTE, 1, FORWARD), (COMPUTE, 0, FORWARD)]


def test_compute_durations_come_from_the_profile():
    steps = program().steps(0)
    fwd = {s.bucket: s.duration_s for s in steps if s.kind == COMPUTE and s.phase == FORWARD}
    bwd = {s.bucket: s.duration_s for s in steps if s.kind == COMPUTE and s.phase == BACKWARD}
    assert fwd == {0: 0.010, 1: 0.030, 2: 0.050} and bwd == {0: 0.020, 1: 0.040, 2: 0.060}
    assert program().compute_s == pytest.approx(0.21)


def test_needed_offset_by_hand():
    p = program("overlap", iterations=3)
    # Bucket 0 launches after its backward: buckets 1 and 2 still compute backward (0.04 + 0.06), then the
    # next forward runs buckets 2 and 1 (0.05 + 0.03) before bucket 0's group needs it.
    assert p.needed_offset(0, 0) == pytest.approx(0.10 + 0.08)
    assert p.needed_offset(1, 0) == pytest.approx(0.06 + 0.05)
    assert p.needed_offset(2, 0) == pytest.approx(0.0)
    # In the last iteration the optimizer step needs everything at the end of the backward pass.
    assert p.needed_offset(0, 2) == pytest.approx(0.10)
    # Under wait_all the next forward needs every bucket before it starts.
    assert program("wait_all").needed_offset(0, 0) == pytest.approx(0.10)


def test_bad_programs_are_refused():
    with pytest.raises(ValueError):
        IterationProgram(JobSpec(0, "j", PROFILE, 2, 1, semantics="eventually"))
    gap = ModelProfile("gap", "t", 1, (Bucket(0, 1, 0, 0), Bucket(2, 1, 0, 0)))
    with pytest.raises(ValueError):
        IterationProgram(JobSpec(0, "j", gap, 2, 1))


def test_steps_are_plain_data():
    s = program().steps(0)[1]
    assert s == Step(COMPUTE, 2, FORWARD, 0.050)


def test_the_worker_runs_this_program():
    from workloads import worker
    assert worker.IterationProgram is IterationProgram
