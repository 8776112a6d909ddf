"""nl.matmul(x, y) without transpose_x: the compiler inserts a TensorE transpose of x (nki.language.matmul: "matmul(x,
y) lowers to nc_matmul(transpose(x), y)").  The 2024 toolchain's middle end hoists it out of the loops it does not
depend on: a statement whose x is the same unchanged view as at its previous execution reuses that transpose.  Under
skip_middle_end_transformations, or with trn2's 2025 toolchain, every execution transposes again."""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nkisim.core.runtime import run_kernel


def _kernel(rewrite: bool):
    def body(w, x):
        """out[r] = w @ x[r] for 4 rows, the row loop innermost (w is loop-invariant in it)."""
        out = nl.ndarray((4, 128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
        w_sb = nl.load(w)
        for r in nl.affine_range(4):
            if rewrite:
                w_sb[...] = nl.multiply(w_sb, 1.0)  # x written between executions: not invariant
            x_sb = nl.load(x[r])
            acc = nl.matmul(w_sb, x_sb)
            nl.store(out[r], value=nl.copy(acc, dtype=nl.float32))
        return out

    return body


def _transposes(trace) -> int:
    return sum(1 for i in trace.instrs if i.op == "nc_transpose")


def _inputs(dtype):
    rng = np.random.default_rng(3)
    return rng.standard_normal((128, 128)).astype(dtype), rng.standard_normal((4, 128, 256)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_trn1_2024_hoists_the_loop_invariant_inserted_transpose(dtype):
    w, x = _inputs(dtype)
    run = run_kernel(nki.jit(_kernel(False)), (w, x), target="trn1")
    assert _transposes(run.trace) == 1
    ref = np.einsum("ij,rjk->rik", w.astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(run.outputs, ref, rtol=2e-2 if dtype == np.float16 else 1e-4, atol=0.1)


def test_no_hoisting_under_skip_middle_end_or_on_trn2():
    w, x = _inputs(np.float32)
    skip = nki.compiler.skip_middle_end_transformations(nki.jit(_kernel(False)))
    assert _transposes(run_kernel(skip, (w, x), target="trn1", mode="timing").trace) == 4
    assert _transposes(run_kernel(nki.jit(_kernel(False)), (w, x), target="trn2", mode="timing").trace) == 4


def test_a_rewritten_stationary_is_transposed_again_and_values_follow():
    w, x = _inputs(np.float32)
    run = run_kernel(nki.jit(_kernel(True)), (w, x), target="trn1")
    assert _transposes(run.trace) == 4
    ref = np.einsum("ij,rjk->rik", w.astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(run.outputs, ref, rtol=1e-4, atol=1e-3)
