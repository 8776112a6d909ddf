"""Automatically allocated PSUM beyond the 8 banks is spilled, as neuronx-cc does for AWS's legacy samples (the
attention tutorial's attn_fwd_v3 declares 256 PSUM tiles; nki-samples flash_attn_bwd: "we will have psum spilling
in the current implementation"): values stay exact (checked against NumPy), each spilled tile costs a VectorE
copy, and the profile summary warns.  Direct allocation keeps its errors."""

from __future__ import annotations

import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nkisim.core.rules import NKIError
from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate
from nkisim.perf.summary import format_summary, parse_summary

N_TILES = 12  # 12 live [128, 512] fp32 PSUM tiles: 12 banks, 8 exist


def _many_psum(a, b):
    """All N_TILES matmul results stay live in one PSUM tensor before any is read (as attn_fwd_v3's qk)."""
    out = nl.ndarray((N_TILES, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a_s = nl.load(a)
    ps = nl.ndarray((N_TILES, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(N_TILES):
        ps[i] = nisa.nc_matmul(a_s, nl.load(b[i]))
    for i in nl.affine_range(N_TILES):
        nl.store(out[i], nl.copy(ps[i]))
    return out


def _inputs():
    rng = np.random.default_rng(7)
    return (rng.standard_normal((128, 128)).astype(np.float32),
            rng.standard_normal((N_TILES, 128, 512)).astype(np.float32))


def test_spilled_psum_values_are_exact():
    a, b = _inputs()
    got = run_kernel(_many_psum, (a, b)).outputs
    np.testing.assert_allclose(got, np.einsum("km,tkn->tmn", a, b), rtol=1e-4, atol=1e-3)


def test_spill_is_costed_and_reported():
    a, b = _inputs()
    trace = run_kernel(_many_psum, (a, b)).trace
    spills = [i for i in trace.instrs if i.attrs.get("psum_spill")]
    assert len(spills) == 1  # one tensor of 12 banks, allocated once
    assert spills[0].srcs[0].free_elems * spills[0].srcs[0].itemsize == N_TILES * 2048
    rep = estimate(trace)
    assert rep.psum_spills == 1 and rep.psum_spill_bytes == N_TILES * 2048
    assert rep.engine_busy_us["VectorE"] > 0
    text = format_summary(rep)
    assert "warning: 1 PSUM tile(s)" in text
    assert parse_summary(text)["psum_spill_count"] == 1


def test_eight_banks_do_not_spill():
    def k(a, b):
        out = nl.ndarray((8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        a_s = nl.load(a)
        ps = nl.ndarray((8, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(8):
            ps[i] = nisa.nc_matmul(a_s, nl.load(b[i]))
        for i in nl.affine_range(8):
            nl.store(out[i], nl.copy(ps[i]))
        return out

    a, b = _inputs()
    res = run_kernel(k, (a, b[:8]))
    assert not any(i.attrs.get("psum_spill") for i in res.trace.instrs)
    assert estimate(res.trace).psum_spills == 0


def test_direct_allocation_beyond_the_banks_still_fails():
    def k(a):
        nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,
                   buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(2,)))

    with pytest.raises(NKIError, match="beyond the 8 banks"):
        run_kernel(k, (np.zeros((4, 4), np.float32),))
