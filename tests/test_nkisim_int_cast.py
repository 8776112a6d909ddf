"""float -> int conversion on the engines' output (nkisim.core.execute.cast): the fraction is truncated.

Each case is a small kernel of ours checked against NumPy: integer division through the fp32 ALU (the pattern
of nearest-neighbour index maps), explicit casts of negative and fractional values, saturation and NaN, casts
on the way to HBM, and the floor of an integer quotient.
"""

from __future__ import annotations

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkisim.core.runtime import run_kernel


def run(kernel, *args):
    return run_kernel(kernel, args, {}).outputs


def _store(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.hbm)
    nl.store(out, t)
    return out


def _quotient_kernel(divisor, rows, cols=16):
    def kernel():
        pos = nisa.iota(nl.arange(rows)[:, None] * cols + nl.arange(cols)[None, :], dtype=nl.int32)
        return _store(pos / divisor)
    return kernel


@settings(max_examples=20, deadline=None, derandomize=True)
@given(divisor=st.integers(min_value=1, max_value=97), rows=st.integers(min_value=1, max_value=128))
def test_int32_tile_divided_by_int_is_an_int32_quotient_truncated(divisor, rows):
    out = run(_quotient_kernel(divisor, rows))
    pos = np.arange(rows * 16, dtype=np.int64).reshape(rows, 16)
    assert out.dtype == np.int32  # (int32, int) promotes to int32 (NKI Type Promotion)
    np.testing.assert_array_equal(out, pos // divisor)  # non-negative: truncation == floor division


def test_quotient_that_rounds_up_to_nearest_is_truncated():
    """2241 / 38 = 58.97: rounding to nearest would give 59, the hardware (and NumPy's astype) gives 58."""
    out = run(_quotient_kernel(38, 128, cols=32))
    assert out[2241 // 32, 2241 % 32] == 58
    assert out[0, 20] == 0  # 20 / 38 = 0.53
    np.testing.assert_array_equal(out, np.arange(128 * 32).reshape(128, 32) // 38)


def test_floor_of_int_quotient_with_int_dtype():
    def kernel():
        pos = nisa.iota(nl.arange(128)[:, None] * 8 + nl.arange(8)[None, :], dtype=nl.int32)
        return _store(nl.floor(pos / 38, dtype=nl.int32))
    out = run(kernel)
    np.testing.assert_array_equal(out, np.arange(1024).reshape(128, 8) // 38)


@pytest.mark.parametrize("dst", [nl.int32, nl.int16, nl.int8, nl.uint8])
def test_tensor_copy_truncates_towards_zero_and_saturates(dst):
    vals = np.array([[-2.9, -2.5, -0.7, -0.0, 0.4, 0.5, 1.5, 2.5, 2.99, 1e10, -1e10, np.nan, np.inf, -np.inf, 126.9,
                      300.2]], dtype=np.float32).repeat(4, axis=0)

    def kernel(x):
        return _store(nisa.tensor_copy(nl.load(x), dtype=dst))
    out = run(kernel, vals)
    info = np.iinfo(np.dtype(dst))
    ref = np.clip(np.nan_to_num(np.trunc(vals.astype(np.float64))), info.min, info.max).astype(np.dtype(dst))
    np.testing.assert_array_equal(out, ref)


def test_scaled_index_map_matches_numpy_floor():
    """An int32 index times a float scale, cast back to int32 by the multiply's dtype (nearest-resize maps)."""
    scale = 30 / 59

    def kernel():
        i = nisa.iota(nl.arange(59)[:, None] + 0 * nl.arange(4)[None, :], dtype=nl.int32)
        return _store(nl.multiply(i, scale, dtype=nl.int32))
    out = run(kernel)
    ref = np.floor(np.arange(59, dtype=np.float32)[:, None] * np.float32(scale)).astype(np.int32).repeat(4, axis=1)
    np.testing.assert_array_equal(out, ref)


def test_store_casts_float_tile_to_int_hbm_by_truncation():
    vals = np.linspace(-3.75, 3.75, 128 * 16, dtype=np.float32).reshape(128, 16)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out
    out = run(kernel, vals)
    np.testing.assert_array_equal(out, np.trunc(vals).astype(np.int32))
