"""A PSUM tile handed to a matmul as an operand (AWS's legacy samples do this: flash_attn_bwd's stationary is an
nc_transpose result, the attention tutorial's attn_fwd_v1 gives nl.transpose's result to nl.matmul) is staged
through SBUF by a costed VectorE copy, with values checked against NumPy."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

from nkisim.core.runtime import run_kernel


def _pst_stationary(a, b):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    a_t = nisa.nc_transpose(nl.load(a))  # PSUM [128, 128] = a.T
    nl.store(out, nisa.nc_matmul(a_t, nl.load(b)))  # (a.T).T @ b
    return out


def _nl_moving(a, b):
    out = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.shared_hbm)
    b_t = nl.transpose(nl.load(b))  # PSUM [128, 96] = b.T
    nl.store(out, nl.matmul(nl.load(a), b_t, transpose_x=True))  # a.T @ b.T
    return out


def test_psum_stationary_is_staged_through_sbuf():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 256)).astype(np.float32)
    got = nki.simulate_kernel(nki.jit(_pst_stationary), a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


def test_psum_moving_of_nl_matmul_is_staged_through_sbuf():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((96, 128)).astype(np.float32)
    got = nki.simulate_kernel(nki.jit(_nl_moving), a, b)
    np.testing.assert_allclose(got, a.T @ b.T, rtol=1e-4, atol=1e-3)


def _nl_psum_x(a, b):
    out = nl.ndarray((96, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    a_t = nl.transpose(nl.load(a))  # PSUM [96, 128] = a.T
    nl.store(out, nl.matmul(a_t, nl.load(b)))  # x @ y: the compiler transposes x, which it reads from SBUF
    return out


def test_psum_x_of_nl_matmul_without_transpose_x_is_staged_through_sbuf():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 96)).astype(np.float32)
    b = rng.standard_normal((128, 256)).astype(np.float32)
    for target in ("trn1", "trn2"):
        got = run_kernel(_nl_psum_x, (a, b), {}, target=target).outputs
        np.testing.assert_allclose(got, a.T @ b, rtol=1e-4, atol=1e-3)


def test_staging_copy_is_a_costed_vector_instruction():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 256)).astype(np.float32)
    res = run_kernel(_pst_stationary, (a, b), {})
    names = [i.op for i in res.trace.instrs]
    # the transpose's PSUM result is copied to SBUF (a traced, hence costed, instruction) before the matmul reads it
    assert "tensor_copy" in names[names.index("nc_transpose"):names.index("nc_matmul")]
