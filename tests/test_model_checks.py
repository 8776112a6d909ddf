# STAFF-ONLY: runs the calibration corpus (complete solutions); excluded from the student release.
"""Model checks: the performance model against the corpus registry's hardware facts and plausible bounds.

* Every corpus kernel with a hardware row is modelled within 1.5x of it (the training target); seed 004's kernel
  (the clearest data point: 3,832 us fp32 / ~820 us fp16, as fast as the course reference) within 15%.
* Every registry ``Expectation`` (modelled latency / staff reference's modelled latency within stated bounds,
  e.g. "TensorE work equals the reference's, so not more than 1.15x") holds for each configuration it applies
  to.  The bounds are the corpus author's hardware-plausible statements; this test fails when the model breaks
  one.  Each statement is run on its generation (trn2, the course target, unless it names trn1) and only in the
  configurations it names.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

from nkisim.calibration import corpus
from nkisim.calibration.corpus import ConvConfig
from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate

pytestmark = pytest.mark.slow

REF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "grader", "reference")


def _inputs(config):
    if isinstance(config, ConvConfig):
        dt = np.dtype(config.dtype)
        return ((np.zeros((1, 256, config.height, config.width), dt), np.zeros((256, 256, 3, 3), dt),
                 np.zeros(256, dt)), {"pool_size": config.pool})
    return (np.zeros((config.rows, config.cols), np.dtype(config.dtype)),), {}


@functools.cache
def _reference(family: str):
    import importlib.util

    from nkisim import _hook

    _hook.install()
    path = os.path.join(REF, "part2", "conv2d.py") if family == "conv" else os.path.join(REF, "part1", "kernels.py")
    spec = importlib.util.spec_from_file_location(f"_modelcheck_ref_{family}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, "fused_conv2d_maxpool" if family == "conv" else "matrix_transpose")


def modelled(kernel, config, kwargs=None, target: str = "trn2") -> float:
    args, kw = _inputs(config)
    kw.update(kwargs or {})
    run = run_kernel(kernel, args, kw, mode="timing", target=target)
    return estimate(run.trace, target).nc_latency_us


@functools.cache
def reference_us(family: str, config, target: str = "trn2") -> float:
    return modelled(_reference(family), config, target=target)


@functools.cache
def corpus_us(kernel_id: str, config, target: str = "trn2") -> float:
    k = corpus.get(kernel_id)
    return modelled(k.load(), config, k.kwargs, target)


def _hardware_cases():
    seen = set()
    for k in corpus.kernels():
        for hw in k.hardware:
            if (k.id, hw.config) in seen or hw.config not in k.configs:
                continue
            seen.add((k.id, hw.config))
            yield pytest.param(k.id, hw, id=f"{k.id}-{hw.config.key}")


def _expectation_cases():
    for k in corpus.kernels():
        for i, e in enumerate(k.expectations):
            for cfg in k.configs:
                if e.applies(cfg) and cfg.key not in k.unsupported and getattr(cfg, "pool", 1) == 1:
                    yield pytest.param(k.id, i, cfg, id=f"{k.id}-{i}-{cfg.key}")


@pytest.mark.parametrize(("kernel_id", "hw"), list(_hardware_cases()))
def test_hardware_rows_within_1_5x(kernel_id, hw):
    pred = corpus_us(kernel_id, hw.config)
    ratio = pred / hw.us
    limit = 1.15 if kernel_id == "seed004-conv" else 1.5
    assert 1 / limit <= ratio <= limit, f"{kernel_id} {hw.config.key}: modelled {pred:.1f} us vs {hw.us} us"


# Registry statements today's model breaks, with the modelled figure: strict xfails, so a model change that fixes
# one (or a bound that moves) shows up as a failure to update this list.
# (Empty since loop-local tiles rotate through five buffers: seed003-copies fp16 224 went from 2.51x to 1.99x the
# reference, seed003-one-row 32x16 fp16 from 9.4x to 5.9x.)
KNOWN_MISSES: dict[tuple[str, int, str], str] = {}


def _expectation_params():
    for p in _expectation_cases():
        kid, idx, cfg = p.values
        why = KNOWN_MISSES.get((kid, idx, cfg.key))
        yield pytest.param(*p.values, id=p.id, marks=pytest.mark.xfail(reason=why, strict=True)) if why else p


@pytest.mark.skipif(not os.path.isdir(REF), reason="staff reference absent (student release)")
@pytest.mark.parametrize(("kernel_id", "index", "config"), list(_expectation_params()))
def test_registry_expectations_hold(kernel_id, index, config):
    k = corpus.get(kernel_id)
    e = k.expectations[index]
    ratio = corpus_us(kernel_id, config, e.target) / reference_us(k.family, config, e.target)
    lo = e.min_ratio if e.min_ratio is not None else 0.0
    hi = e.max_ratio if e.max_ratio is not None else float("inf")
    assert lo <= ratio <= hi, f"{kernel_id} {config.key}: {ratio:.2f}x the reference; expected [{lo}, {hi}]: " \
        f"{e.statement}"
