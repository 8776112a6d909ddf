"""``nl.DType`` (NKI 0.6: the type of the data types) hands kernel code the dtype class itself, so a kernel can make
a dtype of its own: one named like a 16-bit type over 32-bit storage would buy fp32 exactness at the bf16 matmul
rate if a name reached the rules or the cost model while the storage made the values.  It does not: the dtype is one
real dtype throughout (docs/grading-security.md, audit index, ``nl.DType``)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate


def _matmul_loop(dtype):
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 128), dtype=dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, 512), dtype=dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=y, src=b)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        for _ in nl.affine_range(4):
            nisa.nc_matmul(dst=acc, stationary=x, moving=y)
        r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=acc)
        nisa.dma_copy(dst=out, src=r)
        return out

    return kernel


@pytest.mark.parametrize(("name", "storage"), [("bfloat16", "float32"), ("float32", "float16")])
def test_a_dtype_made_by_kernel_code_is_one_honest_dtype(name, storage):
    """The made dtype is one real dtype throughout: values, the trace's dtype names and the latency are those of an
    honest twin (its storage's; or its name's, when a dtype of that name is already known to the process: dtypes
    equal by name), never a name's cost over another storage's values."""
    a = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((128, 512)).astype(np.float32)
    forged = run_kernel(_matmul_loop(nl.DType(name, storage)), (a, b), {}, target="trn2")
    ops = {tuple(s.dtype for s in i.srcs) for i in forged.trace.instrs if i.op == "nc_matmul"}
    assert len(ops) == 1
    (named,) = {d for op in ops for d in op}
    twin = run_kernel(_matmul_loop(getattr(nl, named)), (a, b), {}, target="trn2")
    assert named in (name, storage)
    np.testing.assert_array_equal(forged.outputs, twin.outputs)
    assert estimate(forged.trace, "trn2").nc_latency_us == estimate(twin.trace, "trn2").nc_latency_us
