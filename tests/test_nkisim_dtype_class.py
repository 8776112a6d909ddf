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


@pytest.mark.parametrize(("name", "storage"), [("float32", "float16"), ("bfloat16", "float32")])
def test_the_dtype_class_itself_makes_no_new_data_type(name, storage):
    """``type(nl.float32)(name, storage)`` -- the class of the data types, which kernel code can reach with ``type``
    -- was unsealed: it made a dtype pairing any name with any storage.  Such an object compares and hashes equal to
    the real one by name, so it took the real one's place in ``core.dtypes.to_dtype``'s process-wide cache: after a
    forged ``float32`` stored as float16 was looked up once, every later ``"float32"`` of the process was float16
    (docs/grading-security.md, L7).  The class now answers as ``nl.DType``: the real data type, or an error."""
    from nkisim.core import dtypes

    cls = type(nl.float32)
    assert cls(name, name) is getattr(nl, name)
    with pytest.raises(TypeError, match=f"{name} is stored as"):
        cls(name, storage)
    with pytest.raises(TypeError, match="not an NKI data type"):
        cls("float64", "float64")
    with pytest.raises(TypeError, match="not a NeuronCore-v4 data type"):
        type(nl.float8_e5m2_x4)(name)
    assert type(nl.float8_e5m2_x4)("float8_e5m2_x4") is nl.float8_e5m2_x4
    assert dtypes.to_dtype(name) == np.dtype(dtypes.to_dtype(getattr(nl, name)))
    assert dtypes.to_dtype("float32") == np.float32


def test_data_types_copy_and_pickle_as_themselves():
    import copy
    import pickle

    for d in (nl.float32, nl.bfloat16, nl.tfloat32, nl.float8_e5m2_x4):
        assert copy.deepcopy(d) is d
        assert pickle.loads(pickle.dumps(d)) is d


def test_an_equal_copy_of_a_dtype_gives_the_canonical_one():
    """An unpickled array's dtype equals np.float32 but is another object.  ``to_dtype`` cached it under the equal key
    and returned that copy for every later float32 of the process, so ``arr.dtype is dt`` checks (aps.rebuild) failed
    and whole outputs were copied."""
    import pickle

    from nkisim.core import dtypes

    for name in ("float32", "int32", "uint8"):
        copy = pickle.loads(pickle.dumps(np.dtype(name)))
        assert copy == np.dtype(name) and copy is not np.dtype(name)
        assert dtypes.to_dtype(copy) is np.dtype(name)
        assert dtypes.to_dtype(name) is np.dtype(name)
        assert dtypes.to_dtype(np.dtype(name)) is np.dtype(name)
    assert dtypes.is_tf32(dtypes.to_dtype(nl.tfloat32)) and dtypes.to_dtype("tfloat32") is dtypes.TF32
