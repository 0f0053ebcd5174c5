"""Model profiles: what one training iteration of a real model computes and communicates.

A profile file (YAML; JSON is accepted since it is YAML) describes one model on one named GPU at one per-GPU batch
size and says where every number comes from. ``load_profile`` turns it into a ``model.ModelProfile`` whose buckets
follow PyTorch DistributedDataParallel (DDP):

* gradients are fp32, ``bytes_per_param`` = 4 bytes per parameter (DDP all-reduces the fp32 ``.grad`` tensors,
  also under ``torch.cuda.amp``);
* parameters are bucketed in *reverse* forward order, because the backward pass produces the gradients of the last
  layers first;
* a bucket is closed as soon as it holds at least its size limit, so a bucket can exceed the limit by one unit;
  the first bucket's limit is 1 MiB (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``) so the first all-reduce
  starts early, the others use ``bucket_cap_mb`` = 25 MiB;
* bucket 0 holds the last layers; each bucket's ``forward_s``/``backward_s`` is the sum over its layers.

The unit that ``build_buckets`` never splits is a *layer group* (a bottleneck block, a transformer sub-layer, ...),
not a single tensor as in DDP. Bucket edges therefore fall on group edges, where DDP may also cut inside a group
(e.g. between the two weight matrices of a GPT-2 MLP, each above the cap): bucket counts and sizes differ from
DDP's accordingly; the totals and the order do not.

Profile file format::

    name: resnet50                      # required
    gpu: NVIDIA V100-SXM2-16GB          # required: the GPU the times were measured on
    batch_size: 112                     # required: per GPU
    description: ...                    # optional free text: configuration and assumptions
    sources: [...]                      # optional list of strings: where every number comes from
    bytes_per_param: 4                  # optional (default 4: fp32 gradients)
    bucket_cap_mb: 25                   # optional (default 25, DDP's bucket_cap_mb)
    first_bucket_mb: 1                  # optional (default 1, DDP's first bucket)
    timing: {forward_ms: 91.1, backward_ms: 214.1}   # optional: measured totals of one iteration
    layers:                             # forward order (input first); or ``buckets`` instead, see below
      - {name: stem, params: 9536, macs: 118.0}
      - repeat: 24                      # a group of layers repeated; names become "<name><i>.<layer name>"
        name: encoder
        layers:
          - {name: attention, params: 4200448, macs: 4.46}
          - {name: ffn, params: 8395776, macs: 8.39}

Two ways to give compute times, one per file:

* ``timing`` present: every layer has ``macs`` (its forward multiply-accumulates in any unit, only ratios matter);
  the measured forward and backward totals are split over the layers in proportion to ``macs``. This is the
  assumption that per-layer time follows per-layer arithmetic (memory-bound operations are not modelled apart).
* ``timing`` absent: every layer has its own ``forward_ms`` and ``backward_ms`` (e.g. from a profiler trace).

Instead of ``layers`` a file may give the DDP buckets directly, in launch order (bucket 0 = last layers)::

    buckets:
      - {bytes: 8196000, forward_ms: 0.5, backward_ms: 1.0}

The buckets of a real model can be more than ``model.MAX_BUCKETS`` (GPT-2 1.5B has about a hundred); the emulation
runs few, coarse buckets: ``coarsen`` merges adjacent buckets down to a given number.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import yaml

from core.model import Bucket, ModelProfile

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
PROFILE_SUFFIXES = (".yaml", ".yml", ".json")

BYTES_PER_PARAM = 4                      # fp32 gradients
DEFAULT_BUCKET_CAP_BYTES = 25 * 2 ** 20  # DDP bucket_cap_mb=25
DEFAULT_FIRST_BUCKET_BYTES = 2 ** 20     # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES

_TOP_KEYS = ("name", "gpu", "batch_size", "description", "sources", "bytes_per_param", "bucket_cap_mb",
             "first_bucket_mb", "timing", "layers", "buckets")
_MAX_REPEAT = 10000


class ProfileError(ValueError):
    """A profile file is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Layer:
    """One layer group in forward order: its parameter count and its compute times (seconds)."""

    name: str
    params: int
    forward_s: float
    backward_s: float


# --------------------------------------------------------------------------------------------------------------
# Buckets


def build_buckets(layers: Sequence[Layer], bucket_cap_bytes: int = DEFAULT_BUCKET_CAP_BYTES,
                  first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES,
                  bytes_per_param: int = BYTES_PER_PARAM) -> Tuple[Bucket, ...]:
    """DDP buckets of ``layers`` (given in forward order), in launch order.

    Layers are taken from the last to the first; a bucket is closed once it holds at least its limit
    (``first_bucket_bytes`` for bucket 0, ``bucket_cap_bytes`` afterwards), as DDP's
    ``compute_bucket_assignment_by_size`` does. Layers without parameters (e.g. a head tied to the embedding) add
    their compute time to the bucket being filled. Sums of bytes and of times equal those of the layers.
    """
    if bucket_cap_bytes <= 0 or first_bucket_bytes <= 0:
        raise ValueError("bucket limits must be positive")
    if bytes_per_param <= 0:
        raise ValueError("bytes_per_param must be positive")
    if not layers:
        raise ValueError("a model needs at least one layer")
    if sum(layer.params for layer in layers) <= 0:
        raise ValueError("a model needs at least one parameter")

    groups: List[List[float]] = []   # [nbytes, forward_s, backward_s] of closed buckets
    nbytes, fwd, bwd = 0, 0.0, 0.0
    for layer in reversed(layers):
        if layer.params < 0:
            raise ValueError(f"layer {layer.name!r} has a negative parameter count")
        nbytes += layer.params * bytes_per_param
        fwd += layer.forward_s
        bwd += layer.backward_s
        limit = first_bucket_bytes if not groups else bucket_cap_bytes
        if nbytes >= limit:
            groups.append([nbytes, fwd, bwd])
            nbytes, fwd, bwd = 0, 0.0, 0.0
    if nbytes > 0 or not groups:
        groups.append([nbytes, fwd, bwd])
    else:
        # Only parameter-free layers are left (they come first in the forward pass): their time belongs to the
        # bucket that holds the layers right after them.
        groups[-1][1] += fwd
        groups[-1][2] += bwd
    return tuple(Bucket(i, int(n), float(f), float(b)) for i, (n, f, b) in enumerate(groups))


def coarsen(profile: ModelProfile, max_buckets: int) -> ModelProfile:
    """``profile`` with adjacent buckets merged so that at most ``max_buckets`` remain.

    Launch order is kept and the sums of bytes and of times are unchanged. The cut points are the bucket edges
    closest to the k-quantiles of the cumulative gradient bytes, so the merged buckets carry similar amounts of
    data (one huge bucket, like VGG-16's fc6, stays one bucket). A profile that already has few enough buckets is
    returned unchanged.
    """
    if isinstance(max_buckets, bool) or not isinstance(max_buckets, int) or max_buckets < 1:
        raise ValueError(f"max_buckets must be an integer >= 1 (got {max_buckets!r})")
    buckets = profile.buckets
    n = len(buckets)
    if n <= max_buckets:
        return profile
    k = max_buckets
    cumulative = [0]
    for b in buckets:
        cumulative.append(cumulative[-1] + b.nbytes)
    total = cumulative[-1]
    cuts = [0]
    for j in range(1, k):
        target = total * j / k
        lo = cuts[-1] + 1          # each group keeps at least one bucket ...
        hi = n - (k - j)           # ... and enough buckets remain for the groups after it
        best = min(range(lo, hi + 1), key=lambda e: (abs(cumulative[e] - target), e))
        cuts.append(best)
    cuts.append(n)
    merged = []
    for i in range(k):
        part = buckets[cuts[i]:cuts[i + 1]]
        merged.append(Bucket(i, sum(b.nbytes for b in part), sum(b.forward_s for b in part),
                             sum(b.backward_s for b in part)))
    return replace(profile, buckets=tuple(merged))


# --------------------------------------------------------------------------------------------------------------
# Files


def available_profiles() -> List[str]:
    """Names of the profiles shipped in ``workloads/profiles``."""
    if not PROFILE_DIR.is_dir():
        return []
    return sorted(p.stem for p in PROFILE_DIR.iterdir() if p.suffix in PROFILE_SUFFIXES and p.is_file())


def profile_path(name: str) -> Path:
    """Path of the shipped profile ``name``."""
    for suffix in PROFILE_SUFFIXES:
        path = PROFILE_DIR / f"{name}{suffix}"
        if path.is_file():
            return path
    raise ValueError(f"unknown profile {name!r}; available: {', '.join(available_profiles())}")


def load_profile(name_or_path: Union[str, Path]) -> ModelProfile:
    """Load a shipped profile by name, or a profile file by path.

    Raises ``ProfileError`` (a ``ValueError``) naming the file and the field if the file is malformed, and
    ``ValueError`` if the name is neither a shipped profile nor an existing file.
    """
    key = str(name_or_path)
    if key in available_profiles():
        path = profile_path(key)
    else:
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise ValueError(f"unknown profile {key!r}: not a shipped profile "
                             f"({', '.join(available_profiles())}) and no such file")
    source = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{source}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise ProfileError(f"{source}: cannot read: {exc}") from None
    return parse_profile(data, source)


def parse_profile(data: Any, source: str = "<profile>") -> ModelProfile:
    """Build a ``ModelProfile`` from the parsed contents of a profile file (see the module docstring)."""
    return build_profile(data, source)[0]


def parse_layers(data: Any, source: str = "<profile>") -> List[Layer]:
    """The layer groups of a profile file in forward order (empty if the file gives buckets directly)."""
    return build_profile(data, source)[1]


def build_profile(data: Any, source: str = "<profile>") -> Tuple[ModelProfile, List[Layer]]:
    """The profile and its layer groups (the latter empty when the file lists buckets)."""
    v = _Validator(source)
    if not isinstance(data, dict):
        v.fail("(top level)", "must be a mapping of profile fields")
    for key in data:
        if key not in _TOP_KEYS:
            v.fail(str(key), f"unknown field (allowed: {', '.join(_TOP_KEYS)})")
    name = v.string(data, "name", "name")
    gpu = v.string(data, "gpu", "gpu")
    batch_size = v.integer(data, "batch_size", "batch_size", minimum=1)
    description = v.string(data, "description", "description", required=False, allow_empty=True) or ""
    sources = data.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) and s.strip() for s in sources):
        v.fail("sources", "must be a list of non-empty strings")
    bytes_per_param = v.integer(data, "bytes_per_param", "bytes_per_param", minimum=1, default=BYTES_PER_PARAM)
    cap_mb = v.number(data, "bucket_cap_mb", "bucket_cap_mb", positive=True,
                      default=DEFAULT_BUCKET_CAP_BYTES / 2 ** 20)
    first_mb = v.number(data, "first_bucket_mb", "first_bucket_mb", positive=True,
                        default=DEFAULT_FIRST_BUCKET_BYTES / 2 ** 20)

    has_layers, has_buckets = "layers" in data, "buckets" in data
    if has_layers == has_buckets:
        v.fail("layers", "give exactly one of 'layers' (forward order) or 'buckets' (launch order)")

    layers: List[Layer] = []
    if has_buckets:
        if "timing" in data:
            v.fail("timing", "only allowed with 'layers'")
        buckets = v.buckets(data["buckets"])
    else:
        timing = None
        if "timing" in data:
            t = data["timing"]
            if not isinstance(t, dict):
                v.fail("timing", "must be a mapping with forward_ms and backward_ms")
            for key in t:
                if key not in ("forward_ms", "backward_ms"):
                    v.fail(f"timing.{key}", "unknown field (allowed: forward_ms, backward_ms)")
            timing = (v.number(t, "forward_ms", "timing.forward_ms", positive=True) / 1000.0,
                      v.number(t, "backward_ms", "timing.backward_ms", positive=True) / 1000.0)
        raw = v.layer_list(data["layers"], "layers", with_macs=timing is not None)
        if not any(params > 0 for _, params, _, _ in raw):
            v.fail("layers", "the layers hold no parameters")
        if timing is not None:
            total_macs = sum(x for _, _, x, _ in raw)
            if total_macs <= 0:
                v.fail("layers", "the layers' macs add up to zero, so the timing cannot be split")
            layers = [Layer(n, p, timing[0] * m / total_macs, timing[1] * m / total_macs) for n, p, m, _ in raw]
        else:
            layers = [Layer(n, p, f, b) for n, p, f, b in raw]
        buckets = build_buckets(layers, bucket_cap_bytes=int(round(cap_mb * 2 ** 20)),
                                first_bucket_bytes=int(round(first_mb * 2 ** 20)), bytes_per_param=bytes_per_param)
    profile = ModelProfile(name=name, gpu=gpu, batch_size=batch_size, buckets=buckets,
                           sources=tuple(sources), description=" ".join(description.split()))
    return profile, layers


class _Validator:
    """Field checks that raise ``ProfileError`` with "<file>: <field>: <problem>"."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, field: str, message: str):
        raise ProfileError(f"{self.source}: {field}: {message}")

    def string(self, d: dict, key: str, field: str, required: bool = True, allow_empty: bool = False) -> Optional[str]:
        if key not in d:
            if required:
                self.fail(field, "missing")
            return None
        value = d[key]
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            self.fail(field, "must be a non-empty string" if not allow_empty else "must be a string")
        return value

    def integer(self, d: dict, key: str, field: str, minimum: int = 0, default: Optional[int] = None) -> int:
        if key not in d:
            if default is None:
                self.fail(field, "missing")
            return default
        value = d[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(field, f"must be an integer >= {minimum} (got {value!r})")
        return value

    def number(self, d: dict, key: str, field: str, positive: bool = False,
               default: Optional[float] = None) -> float:
        if key not in d:
            if default is None:
                self.fail(field, "missing")
            return default
        value = d[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(field, f"must be a number (got {value!r})")
        if value < 0 or (positive and value == 0):
            self.fail(field, f"must be {'> 0' if positive else '>= 0'} (got {value!r})")
        return float(value)

    def layer_list(self, items: Any, field: str, with_macs: bool, prefix: str = "") -> List[tuple]:
        """Flattened (name, params, macs or forward_s, None or backward_s) tuples in forward order."""
        if not isinstance(items, list) or not items:
            self.fail(field, "must be a non-empty list")
        out: List[tuple] = []
        for i, item in enumerate(items):
            here = f"{field}[{i}]"
            if not isinstance(item, dict):
                self.fail(here, "must be a mapping")
            if "repeat" in item:
                for key in item:
                    if key not in ("repeat", "name", "layers"):
                        self.fail(f"{here}.{key}", "unknown field in a repeated group (allowed: repeat, name, layers)")
                count = self.integer(item, "repeat", f"{here}.repeat", minimum=1)
                if count > _MAX_REPEAT:
                    self.fail(f"{here}.repeat", f"must be <= {_MAX_REPEAT}")
                group = self.string(item, "name", f"{here}.name", required=False) or ""
                if "layers" not in item:
                    self.fail(f"{here}.layers", "missing")
                for r in range(count):
                    out.extend(self.layer_list(item["layers"], f"{here}.layers", with_macs, f"{prefix}{group}{r}."))
                continue
            allowed = ("name", "params", "macs") if with_macs else ("name", "params", "forward_ms", "backward_ms")
            for key in item:
                if key not in allowed:
                    hint = " (a file with 'timing' gives 'macs' per layer, otherwise forward_ms and backward_ms)"
                    self.fail(f"{here}.{key}", f"unknown field (allowed: {', '.join(allowed)}){hint}")
            name = self.string(item, "name", f"{here}.name")
            params = self.integer(item, "params", f"{here}.params", minimum=0)
            if with_macs:
                out.append((prefix + name, params, self.number(item, "macs", f"{here}.macs"), None))
            else:
                out.append((prefix + name, params, self.number(item, "forward_ms", f"{here}.forward_ms") / 1000.0,
                            self.number(item, "backward_ms", f"{here}.backward_ms") / 1000.0))
        return out

    def buckets(self, items: Any) -> Tuple[Bucket, ...]:
        if not isinstance(items, list) or not items:
            self.fail("buckets", "must be a non-empty list")
        out = []
        for i, item in enumerate(items):
            here = f"buckets[{i}]"
            if not isinstance(item, dict):
                self.fail(here, "must be a mapping with bytes, forward_ms and backward_ms")
            for key in item:
                if key not in ("bytes", "forward_ms", "backward_ms"):
                    self.fail(f"{here}.{key}", "unknown field (allowed: bytes, forward_ms, backward_ms)")
            nbytes = self.integer(item, "bytes", f"{here}.bytes", minimum=1)
            out.append(Bucket(i, nbytes, self.number(item, "forward_ms", f"{here}.forward_ms") / 1000.0,
                              self.number(item, "backward_ms", f"{here}.backward_ms") / 1000.0))
        return tuple(out)
