"""Model profiles: DDP bucket building, coarsening, the shipped files and errors in user files."""
import math

import pytest
import yaml

from core.model import ModelProfile
from workloads.profiles import (
    DEFAULT_BUCKET_CAP_BYTES,
    DEFAULT_FIRST_BUCKET_BYTES,
    Layer,
    ProfileError,
    available_profiles,
    build_buckets,
    build_profile,
    coarsen,
    load_profile,
)

MB = 2 ** 20
SHIPPED = ("bert_large", "gpt2_xl", "resnet50", "vgg16")
# Parameter counts from the papers (millions) and the tolerance the shipped files must meet.
PAPER_PARAMS_M = {"resnet50": 25.6, "vgg16": 138.0, "bert_large": 340.0, "gpt2_xl": 1558.0}


def layer(name, mb, fwd=0.001, bwd=0.002):
    """A layer holding ``mb`` MiB of fp32 gradients."""
    return Layer(name, int(mb * MB) // 4, fwd, bwd)


def test_build_buckets_reverse_order_and_small_first_bucket():
    layers = [layer("l0", 10), layer("l1", 10), layer("l2", 10), layer("l3", 10), layer("l4", 2)]
    buckets = build_buckets(layers)
    # l4 (2 MiB >= 1 MiB) closes the first bucket alone; then 10+10+10 >= 25 closes bucket 1; l0 is left.
    assert [b.nbytes for b in buckets] == [2 * MB, 30 * MB, 10 * MB]
    assert [b.index for b in buckets] == [0, 1, 2]


def test_build_buckets_first_bucket_is_small():
    layers = [layer(f"l{i}", 0.25) for i in range(40)]     # 10 MiB in 0.25 MiB layers
    buckets = build_buckets(layers)
    assert buckets[0].nbytes == DEFAULT_FIRST_BUCKET_BYTES
    assert all(b.nbytes <= DEFAULT_BUCKET_CAP_BYTES for b in buckets)


def test_build_buckets_cap_exceeded_by_at_most_one_layer():
    layers = [layer(f"l{i}", 3 + (i % 5)) for i in range(60)]
    biggest = max(x.params for x in layers) * 4
    for b in build_buckets(layers)[1:-1]:
        assert DEFAULT_BUCKET_CAP_BYTES <= b.nbytes < DEFAULT_BUCKET_CAP_BYTES + biggest


def test_build_buckets_oversized_layer_is_its_own_bucket():
    buckets = build_buckets([layer("a", 1), layer("huge", 400), layer("b", 30)])
    assert [b.nbytes for b in buckets] == [30 * MB, 400 * MB, 1 * MB]


def test_build_buckets_preserves_sums_and_times_follow_layers():
    layers = [Layer(f"l{i}", 1_000_000 + 37 * i, 0.001 * (i + 1), 0.002 * (i + 1)) for i in range(30)]
    buckets = build_buckets(layers)
    assert sum(b.nbytes for b in buckets) == 4 * sum(x.params for x in layers)
    assert math.isclose(sum(b.forward_s for b in buckets), sum(x.forward_s for x in layers))
    assert math.isclose(sum(b.backward_s for b in buckets), sum(x.backward_s for x in layers))
    # Bucket 0 holds the last layers: its times are those of the last layers.
    n0 = buckets[0].nbytes // 4
    tail, acc = [], 0
    for lay in reversed(layers):
        if acc >= n0:
            break
        tail.append(lay)
        acc += lay.params
    assert acc == n0
    assert math.isclose(buckets[0].backward_s, sum(x.backward_s for x in tail))


def test_build_buckets_parameter_free_layers_add_time():
    layers = [Layer("embed", 0, 0.5, 0.5), layer("a", 30), layer("b", 30), Layer("head", 0, 0.25, 0.75)]
    buckets = build_buckets(layers)
    assert [b.nbytes for b in buckets] == [30 * MB, 30 * MB]
    assert math.isclose(buckets[0].forward_s, 0.001 + 0.25)
    assert math.isclose(buckets[1].backward_s, 0.002 + 0.5)


def test_build_buckets_custom_limits():
    layers = [layer(f"l{i}", 1) for i in range(10)]
    buckets = build_buckets(layers, bucket_cap_bytes=4 * MB, first_bucket_bytes=2 * MB)
    assert [b.nbytes // MB for b in buckets] == [2, 4, 4]


def test_build_buckets_rejects_empty_models():
    with pytest.raises(ValueError):
        build_buckets([])
    with pytest.raises(ValueError):
        build_buckets([Layer("x", 0, 1.0, 1.0)])


def _profile(sizes):
    from core.model import Bucket
    buckets = tuple(Bucket(i, n, 0.01 * (i + 1), 0.02 * (i + 1)) for i, n in enumerate(sizes))
    return ModelProfile("m", "gpu", 1, buckets)


def test_coarsen_merges_adjacent_and_preserves_sums():
    p = _profile([1, 5, 5, 5, 5, 5, 5, 5, 5, 100, 3, 3])
    c = coarsen(p, 4)
    assert len(c.buckets) == 4
    assert [b.index for b in c.buckets] == [0, 1, 2, 3]
    assert c.gradient_bytes == p.gradient_bytes
    assert math.isclose(c.forward_s, p.forward_s) and math.isclose(c.backward_s, p.backward_s)
    # Merged buckets are runs of consecutive original buckets, in launch order.
    sizes = [b.nbytes for b in p.buckets]
    pos = 0
    for b in c.buckets:
        run = 0
        while run < b.nbytes:
            run += sizes[pos]
            pos += 1
        assert run == b.nbytes
    assert pos == len(sizes)


def test_coarsen_balances_bytes():
    p = _profile([10] * 97)
    c = coarsen(p, 6)
    sizes = [b.nbytes for b in c.buckets]
    assert max(sizes) - min(sizes) <= 10


def test_coarsen_keeps_small_profiles_and_rejects_bad_counts():
    p = _profile([1, 2, 3])
    assert coarsen(p, 3) == p and coarsen(p, 64) == p
    assert len(coarsen(p, 1).buckets) == 1
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            coarsen(p, bad)


def test_shipped_profiles():
    assert set(SHIPPED) <= set(available_profiles())
    for name in SHIPPED:
        p = load_profile(name)
        assert p.name == name and p.gpu and p.batch_size >= 1 and p.description
        assert len(p.sources) >= 3
        params_m = p.gradient_bytes / 4 / 1e6
        assert abs(params_m - PAPER_PARAMS_M[name]) / PAPER_PARAMS_M[name] < 0.02, (name, params_m)
        assert 0.05 < p.compute_s < 5.0
        assert p.backward_s > p.forward_s
        assert p.buckets[0].nbytes >= DEFAULT_FIRST_BUCKET_BYTES
        assert [b.index for b in p.buckets] == list(range(len(p.buckets)))
        assert all(b.nbytes > 0 for b in p.buckets)
        c = coarsen(p, 6)
        assert len(c.buckets) == min(6, len(p.buckets)) and c.gradient_bytes == p.gradient_bytes


def test_shipped_profile_layer_order():
    # Bucket 0 holds the classifier / heads, the last bucket the input layers.
    _, layers = build_profile(yaml.safe_load(_shipped_path("resnet50").read_text()), "resnet50")
    assert layers[0].name == "stem" and layers[-1].name == "fc"
    p = load_profile("resnet50")
    assert p.buckets[0].nbytes == layers[-1].params * 4          # fc alone exceeds the 1 MiB first bucket
    _, bert = build_profile(yaml.safe_load(_shipped_path("bert_large").read_text()), "bert_large")
    assert bert[1].name == "encoder0.attention" and bert[-4].name == "encoder23.ffn"


def _shipped_path(name):
    from workloads.profiles import profile_path
    return profile_path(name)


def test_profile_dict_round_trip():
    p = load_profile("vgg16")
    assert ModelProfile.from_dict(p.to_dict()) == p


def _write(tmp_path, data, name="custom.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


GOOD = {
    "name": "tiny", "gpu": "Test GPU", "batch_size": 8, "description": "test", "sources": ["made up"],
    "layers": [{"name": "a", "params": 1000000, "forward_ms": 1.0, "backward_ms": 2.0},
               {"name": "b", "params": 500000, "forward_ms": 3.0, "backward_ms": 4.0}],
}


def test_user_profile_from_file(tmp_path):
    p = load_profile(_write(tmp_path, GOOD))
    assert p.name == "tiny" and p.gradient_bytes == 6_000_000
    assert math.isclose(p.forward_s, 0.004) and math.isclose(p.backward_s, 0.006)
    assert p.buckets[0].nbytes == 2_000_000            # layer b first: its gradients are ready first
    assert load_profile(str(_write(tmp_path, GOOD, "again.yml"))) == p


def test_user_profile_with_timing_and_repeat(tmp_path):
    data = {"name": "rep", "gpu": "g", "batch_size": 1, "timing": {"forward_ms": 10, "backward_ms": 20},
            "layers": [{"name": "in", "params": 10, "macs": 0},
                       {"repeat": 3, "name": "blk", "layers": [{"name": "x", "params": 1 << 20, "macs": 1},
                                                               {"name": "y", "params": 1 << 20, "macs": 3}]}]}
    p = load_profile(_write(tmp_path, data))
    assert math.isclose(p.forward_s, 0.010) and math.isclose(p.backward_s, 0.020)
    assert p.gradient_bytes == 4 * (10 + 6 * (1 << 20))
    _, layers = build_profile(data, "x")
    assert [x.name for x in layers] == ["in", "blk0.x", "blk0.y", "blk1.x", "blk1.y", "blk2.x", "blk2.y"]
    assert math.isclose(layers[2].forward_s, 0.010 * 3 / 12)


def test_user_profile_with_buckets(tmp_path):
    data = {"name": "direct", "gpu": "g", "batch_size": 2,
            "buckets": [{"bytes": 100, "forward_ms": 1, "backward_ms": 2}, {"bytes": 300, "forward_ms": 3,
                                                                            "backward_ms": 4}]}
    p = load_profile(_write(tmp_path, data))
    assert [b.nbytes for b in p.buckets] == [100, 300]


@pytest.mark.parametrize("change, field", [
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": "8"}, "batch_size"),
    ({"gpu": ""}, "gpu"),
    ({"colour": "red"}, "colour"),
    ({"sources": "a string"}, "sources"),
    ({"layers": []}, "layers"),
    ({"layers": [{"name": "a", "params": -1, "forward_ms": 1, "backward_ms": 1}]}, "layers[0].params"),
    ({"layers": [{"name": "a", "params": 5, "forward_ms": 1}]}, "layers[0].backward_ms"),
    ({"layers": [{"name": "a", "params": 5, "forward_ms": 1, "backward_ms": 1, "macs": 2}]}, "layers[0].macs"),
    ({"layers": [{"name": "a", "params": 5, "forward_ms": "fast", "backward_ms": 1}]}, "layers[0].forward_ms"),
    ({"timing": {"forward_ms": 1, "backward_ms": 2}}, "layers[0].backward_ms"),  # keys are written sorted
    ({"buckets": [{"bytes": 1, "forward_ms": 1, "backward_ms": 1}]}, "layers"),
    ({"bucket_cap_mb": 0}, "bucket_cap_mb"),
])
def test_user_profile_bad_field(tmp_path, change, field):
    data = dict(GOOD)
    data.update(change)
    path = _write(tmp_path, data)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {field}:"), message


def test_user_profile_missing_field_and_bad_yaml(tmp_path):
    data = dict(GOOD)
    del data["name"]
    path = _write(tmp_path, data)
    with pytest.raises(ValueError, match=r"custom\.yaml: name: missing"):
        load_profile(path)
    path = _write(tmp_path, "name: [unclosed", "broken.yaml")
    with pytest.raises(ValueError, match=r"broken\.yaml: not valid YAML"):
        load_profile(path)
    path = _write(tmp_path, "- just\n- a list\n", "list.yaml")
    with pytest.raises(ValueError, match=r"list\.yaml: \(top level\)"):
        load_profile(path)


def test_unknown_profile_name():
    with pytest.raises(ValueError, match="unknown profile 'alexnet'"):
        load_profile("alexnet")
