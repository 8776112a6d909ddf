"""The course's starter-style kernels run correctly on nkisim (tests/kernels/), in both API styles."""

from __future__ import annotations

import neuronxcc.nki as nki
import numpy as np
import pytest
from nkisim_util import load_kernels, raises_rule

from nkisim.core.runtime import run_kernel

K24 = load_kernels("vector_add_2024")
K25 = load_kernels("vector_add_2025")
MM = load_kernels("matmul_tutorial")


def _vecs(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


@pytest.mark.parametrize("mod", [K24, K25], ids=["2024", "2025"])
def test_naive_vector_add(mod):
    a, b = _vecs(128)
    out = nki.baremetal(mod.vector_add_naive)(a, b)
    assert out.shape == a.shape
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


@pytest.mark.parametrize("mod", [K24, K25], ids=["2024", "2025"])
@pytest.mark.parametrize("row_chunk", [1, 128])
def test_tiled_vector_add(mod, row_chunk):
    a, b = _vecs(1024 if row_chunk == 1 else 25600)
    out = nki.baremetal(mod.vector_add_tiled)(a, b, row_chunk=row_chunk)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


@pytest.mark.parametrize("mod", [K24, K25], ids=["2024", "2025"])
def test_tiled_row_chunk_256_hits_partition_limit(mod):
    a, b = _vecs(25600)
    with raises_rule("err_num_partition_exceed_arch_limit",
                     "number of partitions 256 exceed architecture limitation of 128"):
        nki.baremetal(mod.vector_add_tiled)(a, b, row_chunk=256)


@pytest.mark.parametrize("mod", [K24, K25], ids=["2024", "2025"])
@pytest.mark.parametrize("free_dim", [2, 200])
def test_stream_vector_add(mod, free_dim):
    a, b = _vecs(25600)
    out = nki.baremetal(mod.vector_add_stream)(a, b, free_dim=free_dim)
    assert out.shape == (25600,)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_stream_2025_instruction_count():
    """One tile: 2 loads, 1 add, 1 store -- the trace holds each instruction once."""
    a, b = _vecs(25600)
    run = run_kernel(K25.vector_add_stream, (a, b), {"free_dim": 200})
    assert [i.op for i in run.trace] == ["dma_copy", "dma_copy", "tensor_tensor", "dma_copy"]


def test_direct_allocation_good_and_bad():
    a, b = _vecs(256000)
    good = nki.baremetal(K24.vector_add_direct_allocation, disable_allocation_opt=True)(a, b)
    assert good.shape == (256000, 1)
    np.testing.assert_allclose(good.reshape(-1), a + b, rtol=1e-6)
    # all three tile groups at base_addr=0 alias the same SBUF bytes: the result is wrong, as on hardware
    bad = nki.baremetal(K24.vector_add_direct_allocation_bad, disable_allocation_opt=True)(a, b)
    assert not np.allclose(bad.reshape(-1), a + b)


def test_matrix_transpose_2025():
    a = np.random.default_rng(1).random((256, 384), dtype=np.float32)
    out = nki.baremetal(K25.matrix_transpose)(a)
    np.testing.assert_array_equal(out, a.T)


@pytest.mark.parametrize("kernel", [MM.matmul_tiled_nisa, MM.matmul_tiled_nl], ids=["nisa", "nl"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_tiled_matmul_tutorial(kernel, dtype):
    rng = np.random.default_rng(2)
    K, M, N = 384, 256, 1024
    lhsT = rng.random((K, M), dtype=np.float32).astype(dtype)
    rhs = rng.random((K, N), dtype=np.float32).astype(dtype)
    out = kernel(lhsT, rhs)
    assert out.dtype == dtype and out.shape == (M, N)
    ref = (lhsT.astype(np.float64).T @ rhs.astype(np.float64)).astype(dtype)
    if dtype == np.float32:
        np.testing.assert_allclose(out, ref, rtol=1e-5)
    else:
        # fp32 accumulation, one rounding to fp16 at the end: at most one fp16 ulp from the exact result
        np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=2 ** -10)


def test_tiled_matmul_psum_accumulates_in_trace():
    rng = np.random.default_rng(3)
    lhsT = rng.random((384, 128), dtype=np.float32)
    rhs = rng.random((384, 512), dtype=np.float32)
    run = run_kernel(MM.matmul_tiled_nisa, (lhsT, rhs))
    mms = [i for i in run.trace if i.op == "nc_matmul"]
    assert len(mms) == 3
    assert all(i.attrs["accumulate"] for i in mms)
    assert len({i.dsts[0].region for i in mms}) == 1
