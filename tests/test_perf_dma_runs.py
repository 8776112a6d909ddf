"""Issue 33, deliverable 3: the trn1 run-length efficiency of a DMA follows its HBM runs, end to end through the
legacy front end (``nl.load`` of whole rows of a row-major tensor is one contiguous run per DMA engine; the same
bytes per partition cut out of wider rows are not).  nkisim/perf/MODEL.md, "Issue 33, deliverable 3"."""

from __future__ import annotations

import numpy as np
import pytest

from nkisim import _hook

_hook.install()

import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

from nkisim.core.runtime import run_kernel  # noqa: E402
from nkisim.perf import estimate  # noqa: E402


@nki.jit
def add_whole_rows(a, b):
    n, f = a.shape
    out = nl.ndarray((n, f), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        y = nl.load(b[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(x, y))
    return out


@nki.jit
def add_column_blocks(a, b):
    n, f = a.shape
    w = f // 4
    out = nl.ndarray((n, f), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n // 128):
        for j in nl.affine_range(4):
            x = nl.load(a[i * 128:(i + 1) * 128, j * w:(j + 1) * w])
            y = nl.load(b[i * 128:(i + 1) * 128, j * w:(j + 1) * w])
            nl.store(out[i * 128:(i + 1) * 128, j * w:(j + 1) * w], value=nl.add(x, y))
    return out


def _latency(kernel, shape, target: str) -> float:
    a = np.zeros(shape, np.float32)
    return estimate(run_kernel(kernel, (a, a), mode="timing", target=target).trace, target).nc_latency_us


def test_trn1_whole_row_tiles_are_not_charged_the_short_run_rate():
    # 1 KiB per partition either way: [4096, 256] in whole-row tiles vs [1024, 1024] in 256-column blocks
    rows = _latency(add_whole_rows, (4096, 256), "trn1")
    blocks = _latency(add_column_blocks, (1024, 1024), "trn1")
    assert blocks > 1.8 * rows  # 43% of the engine rate for the strided 1 KiB runs, ~100% for 8 KiB per engine
    # trn2 has no run-length term: the same DMAs, the same time
    assert _latency(add_whole_rows, (4096, 256), "trn2") == pytest.approx(
        _latency(add_column_blocks, (1024, 1024), "trn2"), rel=0.02)
