"""``nl.DType`` (NKI 0.6: the type of the data types, the stub's ``DType = str``) names a data type: it does not hand
kernel code a way to make one.  A dtype named like a 16-bit type over 32-bit storage would buy fp32 exactness at the
bf16 matmul rate if a name reached the rules or the cost model while the storage made the values
(docs/grading-security.md, audit index, ``nl.DType``)."""

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
def test_nl_dtype_cannot_pair_a_name_with_another_storage(name, storage):
    """``nl.DType`` names a data type (the stub's ``DType = str``): ``nl.DType(name)`` is the NKI data type of that
    name, and a storage that is not the name's own is refused, so kernel code cannot make a 16-bit name over 32-bit
    storage (nor the reverse).  Such a made dtype also outlived its kernel: it compared equal by name to the real one
    and the process's later runs (tests/test_nkisim_stream.py after this file) saw its storage."""
    assert nl.DType(name) is getattr(nl, name)
    assert nl.DType(name, name) is getattr(nl, name)
    assert isinstance(nl.float32, nl.DType) and not isinstance("float32", nl.DType)
    with pytest.raises(TypeError, match=f"{name} is stored as"):
        nl.DType(name, storage)
    with pytest.raises(TypeError, match="not an NKI data type"):
        nl.DType("float64")
    a = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((128, 512)).astype(np.float32)
    made = run_kernel(_matmul_loop(nl.DType(name)), (a, b), {}, target="trn2")
    twin = run_kernel(_matmul_loop(getattr(nl, name)), (a, b), {}, target="trn2")
    np.testing.assert_array_equal(made.outputs, twin.outputs)
    assert estimate(made.trace, "trn2").nc_latency_us == estimate(twin.trace, "trn2").nc_latency_us
