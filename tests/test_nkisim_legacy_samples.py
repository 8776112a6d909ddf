"""Kernel patterns of AWS's legacy-API samples that nkisim had to learn (issue 13, part B), in kernels of our own.

Each test checks values against an independent NumPy computation.
"""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nkisim.core.rules import NKIError
from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate

RNG = np.random.default_rng(13)


# ---------------------------------------------------------------------------------------------------------------
# direct PSUM allocation: wrapped blocks indexed by index expressions; a re-declared tile starts a new
# accumulation group


@nki.jit
def _rowtiles_matmul(xT, w):
    """out[r] = xT[:, r-tile].T @ w for two row tiles, with a 2-block PSUM tensor wrapped onto one bank and the
    accumulator re-declared (same bank) per row tile, as direct-allocation kernels do."""
    k, s = xT.shape
    n = w.shape[1]
    out = nl.ndarray((s, n), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:n]
    wt = nl.ndarray((k // 128, nl.par_dim(128), n), dtype=w.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    for kk in nl.affine_range(k // 128):
        wt[kk] = nl.load(w[kk * 128 + i_p, i_f])
    xs = nl.ndarray((k // 128, nl.par_dim(128), s), dtype=xT.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    for kk in nl.affine_range(k // 128):
        xs[kk] = nl.load(xT[nl.ds(kk * 128, 128), :])
    for r in nl.affine_range(s // 128):
        # two blocks, one bank: block 1 aliases block 0 (num_bank_tiles=(1,)); indexed with mgrid expressions
        scratch = nl.ndarray((2, nl.par_dim(128), n), dtype=nl.float32,
                             buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)))
        acc = nl.ndarray((1, nl.par_dim(128), n), dtype=nl.float32,
                         buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))
        for kk in nl.affine_range(k // 128):
            acc[0] += nisa.nc_matmul(xs[kk, :, nl.ds(r * 128, 128)], wt[kk])
        scratch[1, i_p, i_f] = nl.copy(acc[0])  # lands on bank 0 (wrapped)
        o = nl.ndarray((nl.par_dim(128), n), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
        o[...] = nl.copy(scratch[0, i_p, i_f])  # reads the same bank
        nl.store(out[r * 128 + i_p, i_f], value=o)
    return out


def test_direct_psum_wrapped_blocks_and_fresh_accumulation_groups():
    x = RNG.normal(size=(256, 256)).astype(np.float32)
    w = RNG.normal(size=(256, 128)).astype(np.float32)
    got = run_kernel(_rowtiles_matmul, (np.ascontiguousarray(x.T), w)).outputs
    # every row tile is its own sum over k: no accumulation carried over from the previous row tile
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------------------------------------------------------
# nc_matmul perf_mode double_row (FP8 double-row mode of NeuronCore-v3)


def _fp8(a):
    return nl.static_cast(a, nl.float8_e4m3)


@nki.jit
def _double_row(st, mv, mode):
    out = nl.ndarray((st.shape[-1], mv.shape[-1]), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.load(st)
    m = nl.load(mv)
    ps = nl.ndarray((st.shape[-1], mv.shape[-1]), dtype=nl.float32, buffer=nl.psum)
    ps[...] = nisa.nc_matmul(s, m, perf_mode=mode)
    nl.store(out, value=nl.copy(ps))
    return out


@pytest.mark.parametrize("mode", ["double_row_gen3", "double_row"])
def test_double_row_matmul_contracts_both_rows(mode):
    st = _fp8(RNG.uniform(-4, 4, size=(128, 2, 128)))
    mv = _fp8(RNG.uniform(-4, 4, size=(128, 2, 512)))
    run = run_kernel(_double_row, (st, mv, mode), target="trn2")
    s, m = st.astype(np.float32), mv.astype(np.float32)
    ref = s[:, 0].T @ m[:, 0] + s[:, 1].T @ m[:, 1]
    np.testing.assert_allclose(run.outputs, ref, rtol=1e-5, atol=1e-2)
    # cycle cost of one [128,128]x[128,512] fp8 matmul (2x throughput), flops of the 2K contraction
    single = run_kernel(_double_row, (_fp8(RNG.uniform(size=(128, 128))),
                                      _fp8(RNG.uniform(size=(128, 512))), None), target="trn2")
    mm = [i for i in run.trace.instrs if i.op == "nc_matmul"]
    assert len(mm) == 1 and mm[0].attrs["K"] == 256
    busy = estimate(run.trace).engine_busy_us["TensorE"]
    assert busy > 0 and busy == pytest.approx(estimate(single.trace).engine_busy_us["TensorE"], rel=1e-6)


def test_double_row_matmul_needs_fp8_and_trn2():
    st = nl.static_cast(RNG.uniform(size=(128, 2, 128)), nl.bfloat16)
    mv = nl.static_cast(RNG.uniform(size=(128, 2, 512)), nl.bfloat16)
    with pytest.raises(NKIError, match="fp8"):
        run_kernel(_double_row, (st, mv, "double_row_gen3"), target="trn2")
    with pytest.raises(NKIError, match="NeuronCore-v3"):
        run_kernel(_double_row, (_fp8(st.astype(np.float32)), _fp8(mv.astype(np.float32)), "double_row_gen3"),
                   target="trn1")
    with pytest.raises(ValueError, match="perf_mode"):
        run_kernel(_double_row, (st, mv, "quadruple"), target="trn2")
