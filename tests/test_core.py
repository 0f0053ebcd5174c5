"""The shared vocabulary (core/): the ring formula, the percentile, the controller's configuration and the one
conversion between the fabric's 1-based names and the schedulers' 0-based view. No root needed."""
import random

import numpy as np
import pytest

from core.config import DEFAULT_POLL_INTERVAL_S, ControllerConfig
from core.fabric import FabricLayout, FabricSpec
from core.model import Bucket, JobSpec, ModelProfile
from core.ring import ring_bytes_per_rank, ring_steps, ring_time_s
from core.stats import percentile


def test_ring_traffic():
    assert ring_steps(1) == 0 and ring_steps(4) == 6
    assert ring_bytes_per_rank(1000, 1) == 0.0
    assert ring_bytes_per_rank(1000, 4) == 1500.0  # 2 x 3/4 x 1000
    assert ring_time_s(1000, 4, 8e3) == 1.5
    with pytest.raises(ValueError):
        ring_bytes_per_rank(1000, 0)


def test_percentile_matches_numpy_and_says_none_for_nothing():
    rng = random.Random(3)
    for n in (1, 2, 7, 100):
        values = [rng.random() for _ in range(n)]
        for q in (0, 10, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_the_schedulers_view_numbers_leaves_from_zero():
    layout = FabricLayout.from_spec(FabricSpec(spines=2, leaves=3, hosts_per_leaf=2))
    view = layout.view()
    assert len(view.leaf_names) == 3 and view.max_paths == 2
    for host in layout.hosts:
        assert view.leaf_of(host.ip) == host.leaf - 1
    # Path i between two leaves goes through spine i+1, on the leaf ports after the hosts'.
    assert view.paths("10.0.0.1", "10.0.0.3") == (("lf1", "sp1", "lf2"), ("lf1", "sp2", "lf2"))
    assert layout.port("lf1", "sp1") == 3 and layout.port("sp2", "lf3") == 3


def test_controller_config_round_trips():
    layout = FabricLayout.from_spec(FabricSpec(spines=1, leaves=2, hosts_per_leaf=2))
    model = ModelProfile("m", "gpu", 8, (Bucket(0, 1000, 0.01, 0.02),))
    job = JobSpec(0, "j", model, 2, 3, hosts=("h1", "h3"), addresses=("10.0.0.1", "10.0.0.3"))
    cfg = ControllerConfig(layout=layout, jobs=[job], scheduler="crux", out_dir="/tmp/x", events_socket="/e",
                           control_socket="/c", monitor_socket="/m", scheduler_params={"alpha": 0.5})
    back = ControllerConfig.from_json(cfg.to_json())
    assert back == cfg
    assert back.poll_interval_s == DEFAULT_POLL_INTERVAL_S
