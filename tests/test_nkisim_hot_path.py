"""The per-instruction path's caches (issue 35) change nothing observable: call sites, allocation sites, interned
operands and the collector's permanent generation."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import nkisim.core.runtime as runtime
from nkisim.core.access import OPERANDS
from nkisim.core.context import Site
from nkisim.core.runtime import run_kernel

nki = pytest.importorskip("nki")
nisa = pytest.importorskip("nki.isa")
nl = pytest.importorskip("nki.language")


@nki.jit
def rotate(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * 128:(i + 1) * 128])
        u = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128], src=u)
    return out


def test_rotated_tiles_share_their_operands_and_the_values_are_right():
    a = np.arange(128 * 12 * 4, dtype=np.float32).reshape(128 * 12, 4)
    run = run_kernel(rotate, (a,), mode="full")
    np.testing.assert_array_equal(run.outputs, 2 * a)
    on_chip = [o for ins in run.trace.instrs for o in ins.srcs + ins.dsts if o.region.buf != 0]
    # 12 iterations rotate through ROTATION_DEPTH + 1 buffers per site: later iterations reuse the objects
    assert len({id(o) for o in on_chip}) < len(on_chip)
    assert len({o for o in on_chip}) == len({id(o) for o in on_chip})  # equal content <=> same object
    assert not OPERANDS  # emptied after the run


def test_tf32_views_are_not_taken_for_float32_ones():
    from nkisim.core import dtypes
    from nkisim.core.access import make_operand

    base = np.zeros((4, 4), np.float32)
    f32 = make_operand(_view(base))
    tf32 = make_operand(_view(base.view(dtypes.TF32)))
    assert (f32.dtype, tf32.dtype) == ("float32", "tfloat32")
    OPERANDS.clear()


def _view(arr):
    from nkisim.core.instr import B_SBUF
    from nkisim.core.memory import Allocation
    from nkisim.core.tensor import Tensor

    alloc = Allocation(B_SBUF, arr, 7, None, "t", arr.shape[1] * arr.itemsize, None)
    return Tensor(alloc, arr, 0, off=0)


def test_sites_are_one_object_per_statement_and_compare_by_identity():
    code = test_sites_are_one_object_per_statement_and_compare_by_identity.__code__
    a, b = Site((code, 3)), Site((code, 3))
    assert a == a and a != b and hash(a) == object.__hash__(a)
    assert (a, 1) != (b, 1) and (a, 1) == (a, 1)
    c, line = a
    assert c is code and line == 3


def test_the_trace_is_frozen_until_the_next_run_and_a_callers_freeze_is_left_alone():
    a = np.ones((256, 4), np.float32)
    gc.unfreeze()
    run_kernel(rotate, (a,), mode="timing")
    assert gc.get_freeze_count() > 0 and runtime._FROZEN[0]
    gc.disable()  # a caller that keeps the collector off: nothing is frozen for it
    try:
        run_kernel(rotate, (a,), mode="timing")
        assert gc.get_freeze_count() == 0 and not runtime._FROZEN[0]
    finally:
        gc.enable()
    gc.freeze()  # the caller's own freeze (a forking server's): not ours to thaw or extend
    try:
        n = gc.get_freeze_count()
        run_kernel(rotate, (a,), mode="timing")
        assert gc.get_freeze_count() <= n and not runtime._FROZEN[0]  # nothing of the run's added
    finally:
        gc.unfreeze()


def test_dtype_names_are_cached_per_object_and_stay_right():
    """``dtypes.name`` keeps (object, name) by the object's id: the same names as computing them afresh, TF32 told
    apart from float32, other metadata not taken for TF32, and right again after the table is emptied."""
    from nkisim.core import dtypes

    objs = [np.dtype(np.float32), dtypes.TF32, np.dtype(np.float16), np.dtype(np.int32),
            np.dtype(np.float32, metadata={"other": 1}), np.dtype("bfloat16") if hasattr(np, "bfloat16") else None]
    objs = [o for o in objs if o is not None]
    want = {id(o): ("tfloat32" if o is dtypes.TF32 else np.dtype(o).name) for o in objs}
    for _ in range(2):
        for o in objs:
            assert dtypes.name(o) == want[id(o)]
    for i in range(300):  # past the table's bound: emptied, then filled again
        fresh = np.dtype(np.float32, metadata={"i": i})
        assert dtypes.name(fresh) == "float32"
    for o in objs:
        assert dtypes.name(o) == want[id(o)]


@pytest.mark.parametrize("seed", range(4))
def test_a_fast_path_views_chain_maps_onto_its_root_as_numpy_indexes_it(seed):
    """``Tensor.__getitem__``'s fast path keeps each slice as the kernel gave it (``_pix``: bounds None or ints, a
    step None or an int); the view chain's map onto the root (``_root_map``, which normalises them) addresses what
    the view itself does, view of a view included."""
    rng = np.random.default_rng(seed)
    seen = []

    def item(n: int):
        if rng.random() < 0.3:
            return int(rng.integers(0, n))
        lo = None if rng.random() < 0.3 else int(rng.integers(0, n))
        hi = None if rng.random() < 0.3 else int(rng.integers(lo or 0, n + 1))
        step = None if rng.random() < 0.5 else int(rng.integers(1, 3))
        return slice(lo, hi, step)

    @nki.jit
    def chains(a):
        t = nl.ndarray((128, 6, 10), dtype=nl.float32, buffer=nl.sbuf)
        for _ in range(40):
            idx = (slice(None),) + tuple(item(n) for n in (6, 10))
            v = t[idx]
            if 0 in v.shape:
                continue
            idx2 = tuple(slice(None) if d == 0 else item(n) for d, n in enumerate(v.shape))
            w = v[idx2]
            for view in (v, w) if 0 not in w.shape else (v,):  # an empty axis's stride is NumPy's choice
                root, m = view._root_map()
                assert root is t
                got = root._v[views.basic_index(m)]
                want = view._v  # what the fast path indexed
                seen.append((got.shape, got.strides, got.__array_interface__["data"][0],
                             want.shape, want.strides, want.__array_interface__["data"][0]))
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out

    from nkisim.core import views

    run_kernel(chains, (np.zeros((1, 1), np.float32),), mode="timing")
    assert len(seen) > 20
    for g_shape, g_strides, g_ptr, w_shape, w_strides, w_ptr in seen:
        assert (g_shape, g_strides, g_ptr) == (w_shape, w_strides, w_ptr)
