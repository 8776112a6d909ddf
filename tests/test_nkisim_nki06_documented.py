"""NKI 0.6 as AWS documents it: docstring examples with their stated results, and every ``nki.simulate`` fix of
the NKI 0.6.0 release notes, each run on nkisim's current-API front end.

Sources (aws-neuron/aws-neuron-sdk, the API stubs and pages of NKI 0.6 / Neuron SDK 2.32):
``nki/api/nki/isa/__init__.py`` (docstrings), ``nki/deep-dives/nki-aps.rst`` (access patterns),
``release-notes/components/nki.rst`` ("Neuron Kernel Interface (NKI) [0.6.0]", Bug Fixes).  Each test names the
sentence it checks.  Where a behaviour changed between the APIs (casts, tie-breaks), the legacy API keeps the
behaviour documented for its SDK, which the same test checks.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import neuronxcc.nki.isa as lisa
import neuronxcc.nki.language as lnl
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nkisim_util import raises_rule

from nkisim import frontends
from nkisim.core.runtime import run_kernel


def _run(kernel, *args, frontend=frontends.NKI):
    return run_kernel(kernel, args, {}, frontend=frontend).outputs


def _sbuf(x):
    """An SBUF copy of HBM tensor ``x`` (inside a kernel)."""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


# ---- nc_match_replace8 / nc_find_index8 -------------------------------------------------------------------------
def _match_find_kernel(idx_dtype):
    def kernel(data, vals):
        d, v = _sbuf(data), _sbuf(vals)
        replaced = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
        dst_idx = nl.ndarray((data.shape[0], 8), dtype=idx_dtype, buffer=nl.sbuf)
        nisa.nc_match_replace8(dst=replaced, data=d, vals=v, imm=-1.0, dst_idx=dst_idx)
        found = nl.ndarray((data.shape[0], 8), dtype=idx_dtype, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=found, data=d, vals=v)
        o0 = nl.ndarray(replaced.shape, dtype=replaced.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=replaced)
        o1 = nl.ndarray(dst_idx.shape, dtype=dst_idx.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=dst_idx)
        o2 = nl.ndarray(found.shape, dtype=found.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o2, src=found)
        return o0, o1, o2
    return kernel


DOC_DATA = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], dtype=np.float32)
DOC_VALS = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], dtype=np.float32)


def test_nc_match_replace8_docstring_example():
    """nc_match_replace8 docstring: "with data = [1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8] and vals = [3, 8, 8, 8, 8, 8,
    8, 8], dst_idx is [2, 10, 9, 8, 7, 6, 5, 4]"; release notes 0.6: "iterates values in reverse to match hardware
    tie-break ordering when the search values contain duplicates"."""
    data, vals = np.repeat(DOC_DATA, 4, axis=0), np.repeat(DOC_VALS, 4, axis=0)
    replaced, dst_idx, _ = _run(_match_find_kernel(nl.uint32), data, vals)
    np.testing.assert_array_equal(dst_idx, np.repeat([[2, 10, 9, 8, 7, 6, 5, 4]], 4, axis=0))
    np.testing.assert_array_equal(replaced, np.repeat([[1, 2, -1, 4] + [-1] * 7], 4, axis=0))


def test_nc_find_index8_duplicates_ascend_unlike_match_replace8():
    """Same docstring: "This duplicate-vals tie-break is the opposite of nc_find_index8, which pairs duplicate vals
    with their matching positions in ascending order"; release notes 0.6: "Duplicate search values now advance
    through successive occurrences, instead of all mapping to the first match"."""
    _, _, found = _run(_match_find_kernel(nl.uint32), DOC_DATA, DOC_VALS)
    np.testing.assert_array_equal(found, [[2, 4, 5, 6, 7, 8, 9, 10]])


@pytest.mark.parametrize(("idx_dtype", "ones"), [(nl.uint32, 0xFFFFFFFF), (nl.uint16, 0xFFFF)])
def test_nc_find_index8_unmatched_slots_are_all_ones(idx_dtype, ones):
    """Release notes 0.6: "nc_find_index8 unmatched slots now return all-ones, matching hardware (previously
    returned 0, a valid index)"; docstring: "0xFFFFFFFF for uint32, 0xFFFF for uint16".  A duplicate beyond the
    occurrences in data is unmatched too."""
    data = np.array([[5, 1, 7, 3, 9, 2, 6, 0, 4, 8]] * 2, dtype=np.float32)
    vals = np.array([[7, 11, 0, 7, 9, -3, 2, 5]] * 2, dtype=np.float32)
    _, _, found = _run(_match_find_kernel(idx_dtype), data, vals)
    np.testing.assert_array_equal(found, [[2, ones, 7, ones, 4, ones, 5, 0]] * 2)


def test_legacy_match_replace8_keeps_its_documented_order():
    """The legacy API's docs (SDK 2.2x) give nc_match_replace8 a NumPy equivalent visiting vals in order: each
    value replaces its first remaining occurrence.  That API's documented behaviour is kept."""
    def kernel(data, vals):
        d, v = lnl.load(data), lnl.load(vals)
        idx = lnl.ndarray((1, 8), dtype=lnl.uint32, buffer=lnl.sbuf)
        r = lisa.nc_match_replace8(data=d, vals=v, imm=-1.0, dst_idx=idx)
        o = lnl.ndarray(data.shape, dtype=data.dtype, buffer=lnl.shared_hbm)
        oi = lnl.ndarray((1, 8), dtype=lnl.uint32, buffer=lnl.shared_hbm)
        lnl.store(o, r)
        lnl.store(oi, idx)
        return o, oi
    replaced, idx = _run(kernel, DOC_DATA, DOC_VALS, frontend=frontends.LEGACY)
    ref = DOC_DATA[0].copy()
    ref_idx = []
    for x in DOC_VALS[0]:  # the 2.2x docstring's NumPy equivalent
        m = np.where(ref == x)[0]
        ref_idx.append(int(m[0]) if m.size else 0)
        if m.size:
            ref[m[0]] = -1.0
    np.testing.assert_array_equal(idx[0], ref_idx)
    np.testing.assert_array_equal(replaced[0], ref)


# ---- fp32 -> integer casts ---------------------------------------------------------------------------------------
CAST_IN = np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.4999, -2.5001, 3.7, -3.7, 1e10, -1e10, 300.5, -0.0,
                     np.inf, -np.inf]] * 2, dtype=np.float32)


def _rne_saturate(x, dt):
    info = np.iinfo(dt)
    return np.clip(np.rint(x.astype(np.float64)), info.min, info.max).astype(dt)


@pytest.mark.parametrize("dt", [nl.int32, nl.int16, nl.int8, nl.uint8, nl.uint16, nl.uint32])
def test_fp32_to_int_rounds_to_nearest_even_and_saturates(dt):
    """Release notes 0.6: "fp32-to-integer casts match hardware (round to nearest, ties to even; saturate to the
    destination range) instead of numpy's default behavior" - on an engine's output and on a DMA's cast."""
    def kernel(x):
        t = _sbuf(x)
        y = nl.ndarray(x.shape, dtype=dt, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y, src=t)
        z = nl.ndarray(x.shape, dtype=dt, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=z, data=t, op0=nl.add, operand0=0.0)
        w = nl.ndarray(x.shape, dtype=dt, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=w, src=x)  # DMA cast: "first casting from src.dtype to float32, then ... to dst.dtype"
        o0 = nl.ndarray(x.shape, dtype=dt, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=y)
        o1 = nl.ndarray(x.shape, dtype=dt, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=z)
        return o0, o1, w
    ref = _rne_saturate(CAST_IN, np.dtype(dt))
    for out in _run(kernel, CAST_IN):
        np.testing.assert_array_equal(out, ref)


def test_legacy_casts_still_truncate():
    """The legacy API keeps its SDK's truncation (core/execute.cast, evidence there)."""
    def kernel(x):
        r = lisa.tensor_copy(lnl.load(x), dtype=lnl.int32)
        o = lnl.ndarray(x.shape, dtype=lnl.int32, buffer=lnl.shared_hbm)
        lnl.store(o, r)
        return o
    out = _run(kernel, CAST_IN, frontend=frontends.LEGACY)
    info = np.iinfo(np.int32)
    np.testing.assert_array_equal(out, np.clip(np.trunc(CAST_IN.astype(np.float64)), info.min, info.max))


# ---- other nki.simulate fixes of 0.6 -------------------------------------------------------------------------------
def test_activation_reduce_res_aliasing_dst_keeps_the_reduction():
    """Release notes 0.6: "activation with a reduce_res tile that aliases dst no longer clobbers the reduction
    result": the reduction (read out after the element-wise result) is what the aliased column holds."""
    x = np.random.default_rng(0).random((128, 8)).astype(np.float32)

    def kernel(a):
        t = _sbuf(a)
        d = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=d, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=d[:, 0:1],
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        o0 = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=d)
        return o0
    out = _run(kernel, x)
    np.testing.assert_allclose(out[:, 1:], np.exp(x[:, 1:]), rtol=1e-6)
    np.testing.assert_allclose(out[:, 0], np.exp(x).sum(axis=1), rtol=1e-5)


def test_nc_matmul_double_row_docstring_shapes():
    """nc_matmul docstring: "to perform a matmul of [1, 256]@[256, 3]=[1, 3], the stationary tile is of shape
    [128, 2, 1], while the moving tile is of shape [128, 2, 3]"; release notes 0.6: "nc_matmul with
    matmul_perf_mode.double_row is detected correctly in simulation; previously the perf mode could be missed,
    producing an oversized result"."""
    rng = np.random.default_rng(1)
    fp8 = ml_dtypes.float8_e4m3
    a = rng.integers(-3, 4, (1, 256)).astype(fp8)
    b = rng.integers(-3, 4, (256, 3)).astype(fp8)
    # contraction index k = 2 * p + j split over (partition p, first free dim j)
    st_host = a.reshape(1, 128, 2).transpose(1, 2, 0).copy()  # [128, 2, 1]
    mv_host = b.reshape(128, 2, 3)

    def kernel(st, mv):
        s, m = _sbuf(st), _sbuf(mv)
        acc = nl.ndarray((1, 3), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=m, perf_mode=nisa.matmul_perf_mode.double_row)
        r = nl.ndarray((1, 3), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=acc)
        o0 = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=r)
        return o0
    out = _run(kernel, st_host, mv_host)
    assert out.shape == (1, 3)
    np.testing.assert_array_equal(out, a.astype(np.float32) @ b.astype(np.float32))


def test_nc_matmul_accumulates_into_overlapping_psum_regions():
    """Release notes 0.6: "nc_matmul accumulation into overlapping PSUM regions (the convolution pattern)
    accumulates correctly; previously each write was treated as a first write"."""
    rng = np.random.default_rng(2)
    w = rng.integers(-2, 3, (3, 16, 8)).astype(np.float32)  # 3 taps of [K=16, M=8]
    x = rng.integers(-2, 3, (16, 34)).astype(np.float32)  # K=16 rows of 34 samples

    def kernel(wt, xt):
        ws, xs = _sbuf(wt), _sbuf(xt)
        acc = nl.ndarray((8, 34), dtype=nl.float32, buffer=nl.psum)
        for tap in range(3):  # out[:, t] = sum_tap w[tap].T @ x[:, t + tap]: windows shifted by one column
            nisa.nc_matmul(dst=acc[:, 0:32], stationary=_tap(ws, tap),
                           moving=xs[:, tap:tap + 32], accumulate=tap > 0)
        r = nl.ndarray((8, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=acc[:, 0:32])
        o0 = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=r)
        return o0

    def _tap(ws, tap):
        return ws[:, tap * 8:(tap + 1) * 8]

    w_host = w.transpose(1, 0, 2).reshape(16, 24)  # [K, tap*M]
    out = _run(kernel, w_host, x)
    ref = sum(w[t].T @ x[:, t:t + 32] for t in range(3))
    np.testing.assert_array_equal(out, ref)


def test_nc_matmul_overlapping_output_windows_accumulate():
    """The convolution pattern proper: a matmul starts the group over the whole PSUM tile, the next one
    accumulates into a window shifted from it; the overlap holds the sum of both writes."""
    rng = np.random.default_rng(3)
    a = rng.integers(-2, 3, (16, 4)).astype(np.float32)
    b = rng.integers(-2, 3, (16, 16)).astype(np.float32)

    def kernel(at, bt):
        s, m = _sbuf(at), _sbuf(bt)
        acc = nl.ndarray((4, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=m, accumulate=False)
        nisa.nc_matmul(dst=acc[:, 4:16], stationary=s, moving=m[:, 0:12], accumulate=True)
        r = nl.ndarray((4, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=acc)
        o0 = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=r)
        return o0
    out = _run(kernel, a, b)
    ref = a.T @ b
    ref[:, 4:16] += a.T @ b[:, 0:12]
    np.testing.assert_array_equal(out, ref)


def test_tensor_copy_predicated_and_select_reduce_take_mismatched_ranks():
    """Release notes 0.6: "tensor_copy_predicated and select_reduce now handle source, destination, and predicate
    operands with mismatched ranks but matching free-element counts (e.g. a 2D source with a 4D
    destination/predicate)"."""
    rng = np.random.default_rng(4)
    src = rng.random((32, 24)).astype(np.float32)
    pred = (rng.random((32, 2, 3, 4)) > 0.5).astype(np.uint8)
    base = rng.random((32, 2, 3, 4)).astype(np.float32)

    def kernel(s_h, p_h, b_h):
        s, p = _sbuf(s_h), _sbuf(p_h)
        d = _sbuf(b_h)
        nisa.tensor_copy_predicated(dst=d, src=s, predicate=p)
        sel = nl.ndarray((32, 2, 3, 4), dtype=nl.float32, buffer=nl.sbuf)
        red = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=sel, predicate=p, on_true=s, on_false=-5.0, reduce_res=red, reduce_op=nl.maximum,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce)
        o0 = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=d)
        o1 = nl.ndarray(sel.shape, dtype=sel.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=sel)
        o2 = nl.ndarray(red.shape, dtype=red.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o2, src=red)
        return o0, o1, o2
    d, sel, red = _run(kernel, src, pred, base)
    s4 = src.reshape(32, 2, 3, 4)
    np.testing.assert_array_equal(d, np.where(pred != 0, s4, base))
    np.testing.assert_array_equal(sel, np.where(pred != 0, s4, np.float32(-5.0)))
    np.testing.assert_array_equal(red[:, 0], np.where(pred != 0, s4, np.float32(-5.0)).reshape(32, -1).max(axis=1))


def test_range_select_and_affine_select_take_a_python_float_on_false_value():
    """Release notes 0.6: "range_select and affine_select now accept a Python float on_false_value (e.g.
    float(np.finfo(np.float32).min) used as an fp32 sentinel) without raising a dtype error"."""
    fmin = float(np.finfo(np.float32).min)
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)

    def kernel(a):
        t = _sbuf(a)
        lo = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
        hi = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=lo, value=2.0)
        nisa.memset(dst=hi, value=5.0)
        rs = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=rs, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=lo,
                          bound1=hi, on_false_value=fmin)
        af = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        # keep where p - f >= 0 (lower triangle), on_false elsewhere
        nisa.affine_select(dst=af, pattern=[[-1, 8]], channel_multiplier=1, on_true_tile=t, on_false_value=fmin,
                           cmp_op=nl.greater_equal)
        o0 = nl.ndarray(rs.shape, dtype=rs.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=rs)
        o1 = nl.ndarray(af.shape, dtype=af.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=af)
        return o0, o1
    rs, af = _run(kernel, x)
    cols = np.arange(8)[None, :]
    np.testing.assert_array_equal(rs, np.where((cols >= 2) & (cols < 5), x, np.float32(fmin)))
    rows = np.arange(16)[:, None]
    np.testing.assert_array_equal(af, np.where(rows - cols >= 0, x, np.float32(fmin)))


# ---- other docstring examples with stated results ------------------------------------------------------------------
def test_nonzero_with_count_docstring_example():
    """nonzero_with_count docstring: "Input array (T=8): [0, 1, 1, 0, 0, 1, 0, 0], index_offset = 16, padding_val
    = -1 -> Output (T+1=9): [17, 18, 21, -1, -1, -1, -1, -1, 3]", on partitions 0, 16, ..., 112 only."""
    x = np.tile(np.array([[0, 1, 1, 0, 0, 1, 0, 0]], dtype=np.int32), (128, 1))

    def kernel(a):
        t = _sbuf(a)
        o = nl.ndarray((128, 9), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=o, value=7)
        nisa.nonzero_with_count(dst=o, src=t, index_offset=16, padding_val=-1)
        o0 = nl.ndarray(o.shape, dtype=o.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=o)
        return o0
    out = _run(kernel, x)
    np.testing.assert_array_equal(out[::16], np.tile([[17, 18, 21, -1, -1, -1, -1, -1, 3]], (8, 1)))
    others = np.ones(128, dtype=bool)
    others[::16] = False
    assert (out[others] == 7).all()  # "The data in other partitions of the destination tile are not modified"


def test_access_pattern_deep_dive_concrete_example():
    """nki-aps.rst, "A Concrete Example": ``t.ap(pattern=[[16, 16], [1, 8]], offset=8)`` on a (16, 16) tensor
    iterates ``t[0:16, 8:16]``; "Composition": ``inner.ap(...)`` is fully overridden by the outer ``.ap``; and
    "Reinterpret Cast": int32 (128, 256) seen as bf16 through ``[[512, 128], [1, 512]]`` has shape (128, 512)."""
    x = np.arange(256, dtype=np.float32).reshape(16, 16)
    y = np.arange(128 * 256, dtype=np.int32).reshape(128, 256)

    def kernel(a, b):
        t = _sbuf(a)
        v = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=v, src=t.ap(pattern=[[16, 16], [1, 8]], offset=8))
        inner = t.ap(pattern=[[16, 16], [2, 8]])
        outer = inner.ap(pattern=[[16, 16], [1, 4]])
        w = nl.ndarray((16, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=w, src=outer)
        s = _sbuf(b)
        cast = s.ap(pattern=[[512, 128], [1, 512]], offset=0, dtype=nl.bfloat16)
        assert tuple(cast.shape) == (128, 512)
        c = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=cast)
        o0 = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=v)
        o1 = nl.ndarray(w.shape, dtype=w.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=w)
        o2 = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o2, src=c)
        return o0, o1, o2
    v, w, c = _run(kernel, x, y)
    np.testing.assert_array_equal(v, x[:, 8:16])
    np.testing.assert_array_equal(w, x[:, 0:4])
    np.testing.assert_array_equal(c.view(np.uint16), y.view(np.uint16).reshape(128, 512))


def test_access_pattern_deep_dive_scalar_dynamic_dma():
    """nki-aps.rst, "Scalar Dynamic Access": A (512, 512), ``A.ap([[512, 128], [1, 256]], offset=0,
    scalar_offset=batch_idx, indirect_dim=0)`` with batch_idx = 3*128 reads from ``0 + batch_idx * 512``."""
    a = np.arange(512 * 512, dtype=np.float32).reshape(512, 512)

    def kernel(A):
        batch_idx = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.memset(batch_idx, value=3 * 128)
        result = nl.ndarray((128, 256), A.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(src=A.ap(pattern=[[512, 128], [1, 256]], offset=0, scalar_offset=batch_idx, indirect_dim=0),
                      dst=result[...])
        return result
    np.testing.assert_array_equal(_run(kernel, a), a[384:512, 0:256])


def test_access_pattern_deep_dive_vector_select():
    """nki-aps.rst, "Vector Dynamic Access": ``A.vector_select(0, offsets)`` with offsets 0, 2, 4, ...: partition
    p reads row offsets[p]."""
    a = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)

    def kernel(A):
        offsets = nl.ndarray((64, 1), nl.int32, nl.sbuf)
        nisa.iota(offsets, [[1, 1]], 0, 2)
        src = A.vector_select(0, offsets)
        result = nl.ndarray((64, 512), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(src=src, dst=result[...])
        return result
    np.testing.assert_array_equal(_run(kernel, a), a[0:128:2])


def test_tensor_scalar_reduce_reduce_res_none_keeps_the_accumulator():
    """Release notes 0.6: "tensor_scalar_reduce now accepts reduce_res=None on non-final iterations of a
    reduction chain, keeping the result in the VectorE accumulator and only spilling to SBUF on the final call"."""
    x = np.random.default_rng(5).random((64, 3, 16)).astype(np.float32)

    def kernel(a):
        t = _sbuf(a)
        d = nl.ndarray((64, 16), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
        for i in range(3):
            nisa.tensor_scalar_reduce(dst=d, data=t[:, i, :], op0=nl.multiply, operand0=2.0, reduce_op=nl.add,
                                      reduce_res=r if i == 2 else None,
                                      reduce_cmd=nisa.reduce_cmd.reset_reduce if i == 0 else nisa.reduce_cmd.reduce)
        o0 = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=r)
        return o0
    np.testing.assert_allclose(_run(kernel, x)[:, 0], 2 * x.reshape(64, -1).sum(axis=1), rtol=1e-5)


def test_nl_copy_is_a_vector_engine_copy_on_sbuf():
    """Release notes 0.6: "nki.language.copy ... creates a copy of an SBUF or PSUM tile on SBUF, with the same
    layout as the input. It uses the Vector engine (tensor_copy), making it bit-accurate when source and
    destination dtypes match"."""
    x = np.random.default_rng(6).random((32, 8)).astype(np.float32)
    seen = {}

    def kernel(a):
        t = _sbuf(a)
        c = nl.copy(t)
        seen["buffer"] = c.buffer
        o0 = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=c)
        return o0
    run = run_kernel(kernel, (x,), {}, frontend=frontends.NKI)
    np.testing.assert_array_equal(run.outputs, x)
    assert seen["buffer"] is nl.sbuf
    copies = [i for i in run.trace.instrs if i.op == "tensor_copy"]
    assert len(copies) == 1 and copies[0].engine.name == "VECTOR"


def test_more_than_128_partitions_is_a_verification_error():
    """Release notes 0.6, Improvements: "Compute instructions ... now raise a clear verification error when an
    SBUF or PSUM operand exceeds the 128-partition hardware limit"."""
    def kernel():
        t = nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
    with raises_rule("err_num_partition_exceed_arch_limit", "256", "128"):  # nkisim refuses the tile already
        _run(kernel)


def test_dynamic_range_loops_warn_deprecated():
    """Release notes 0.6: "NKI emits a deprecation warning when it encounters for i in nl.dynamic_range(...)"."""
    def kernel():
        t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        for _ in nl.dynamic_range(2):
            nisa.memset(dst=t, value=0.0)
        o0 = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=t)
        return o0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(kernel)
    assert any(issubclass(w.category, DeprecationWarning) and "fori_loop" in str(w.message) for w in caught)



# ---- kernel arguments (NKI migration guide, 0.2 -> 0.3) ------------------------------------------------------------
def _copy_kernel(x, stride=(1, 1)):
    t = _sbuf(x)
    o = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    return o


def test_list_kernel_arguments_are_refused_tuples_taken():
    """Migration guide: "The NKI 0.3.0 compiler does not support list as a kernel argument type. Convert list
    arguments to tuples at the call site"; the legacy API took them."""
    x = np.ones((4, 4), dtype=np.float32)
    np.testing.assert_array_equal(run_kernel(_copy_kernel, (x,), {"stride": (1, 1)}, frontend=frontends.NKI).outputs,
                                  x)
    with raises_rule("nkisim_kernel_signature", "argument 'stride' is a list", "tuple"):
        run_kernel(_copy_kernel, (x,), {"stride": [1, 1]}, frontend=frontends.NKI)
    with raises_rule("nkisim_kernel_signature", "argument 1 is a list"):
        run_kernel(_copy_kernel, (x, [1, 1]), {}, frontend=frontends.NKI)

    def legacy(x, stride):
        o = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
        lnl.store(o, lnl.load(x))
        return o
    np.testing.assert_array_equal(run_kernel(legacy, (x, [1, 1]), {}, frontend=frontends.LEGACY).outputs, x)


def test_keyword_only_separator_is_refused():
    """Migration guide: "The NKI 0.3.0 compiler does not support the * separator in kernel function signatures"."""
    def kernel(x, *, flag=True):
        return _copy_kernel(x)
    with raises_rule("nkisim_kernel_signature", "* separator"):
        run_kernel(kernel, (np.ones((4, 4), dtype=np.float32),), {}, frontend=frontends.NKI)


def test_ap_integer_offset_adds_to_the_views_offset():
    """NkiTensor.ap (NKI 0.6 stub), ``offset``: "element offset added to the view's base storage offset. When None
    (default), inherits the current view's storage offset unchanged. Pass an explicit integer to compose with the
    base offset (e.g. offset=0 keeps the base, offset=N shifts by N additional elements)"."""
    x = np.arange(256, dtype=np.float32).reshape(16, 16)

    def kernel(a):
        t = _sbuf(a)
        v = t[:, 4:16]
        r1 = nl.ndarray((16, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r1, src=v.ap(pattern=[[16, 16], [1, 4]], offset=8))
        r2 = nl.ndarray((16, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r2, src=v.ap(pattern=[[16, 16], [1, 4]], offset=0))
        r3 = nl.ndarray((16, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r3, src=v.ap(pattern=[[16, 16], [1, 4]]))
        outs = []
        for r in (r1, r2, r3):
            o = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=o, src=r)
            outs.append(o)
        return tuple(outs)
    a, b, c = _run(kernel, x)
    np.testing.assert_array_equal(a, x[:, 12:16])
    np.testing.assert_array_equal(b, x[:, 4:8])
    np.testing.assert_array_equal(c, x[:, 4:8])
