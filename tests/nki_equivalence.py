"""Helpers for the two-API equivalence tests: run a legacy and an nki kernel on the same inputs and compare."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate

REPO = Path(__file__).resolve().parents[1]


def load_file(path: Path, name: str):
    """Import a kernel file under a private module name."""
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


def compare(legacy, current, args, kwargs=None, target="trn2", values=True) -> dict:
    """Run both kernels (values: full mode; latency: timing mode, as the grader times) and return what differs:
    ``{'values_equal', 'latency_legacy', 'latency_nki', 'ratio', 'instrs'}``."""
    kwargs = kwargs or {}
    out = {}
    if values:
        a = run_kernel(legacy, args, kwargs, target=target).outputs
        b = run_kernel(current, args, kwargs, target=target).outputs
        out["values_equal"] = _equal(a, b)
    ta = run_kernel(legacy, args, kwargs, mode="timing", target=target).trace
    tb = run_kernel(current, args, kwargs, mode="timing", target=target).trace
    la, lb = estimate(ta, target).nc_latency_us, estimate(tb, target).nc_latency_us
    out.update(latency_legacy=la, latency_nki=lb, ratio=lb / la, instrs=(len(ta), len(tb)))
    out["ops"] = ([(i.op, int(i.engine)) for i in ta.instrs], [(i.op, int(i.engine)) for i in tb.instrs])
    return out


def _equal(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
