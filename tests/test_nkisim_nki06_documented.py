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
import nki
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


def _accumulate_onto(init):
    def kernel(a, b):
        s, m = _sbuf(a), _sbuf(b)
        acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
        if init:
            nisa.memset(dst=acc, value=1.0)  # a non-matmul write
        nisa.nc_matmul(dst=acc, stationary=s, moving=m, accumulate=True)
        r = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=acc)
        o = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=r)
        return o
    return kernel


@pytest.mark.parametrize(("init", "code"), [(True, "nkisim_matmul_accumulate_value_init"),
                                            (False, "nkisim_matmul_accumulate_uninit")])
def test_nc_matmul_psum_patterns_wrong_on_hardware_warn_in_simulation(init, code):
    """Release notes 0.6: "nki.isa.nc_matmul warns on PSUM accumulation patterns that produce incorrect results on
    hardware" (nki.simulate).  accumulate=True onto PSUM a memset initialised (undefined on NeuronCore-v2/v3,
    nc_matmul's note) or onto PSUM nothing wrote: the compiled kernel is refused, the simulated one warns and
    accumulates onto what the PSUM holds (the memset's 1.0; unwritten memory is NaN in nkisim)."""
    a, b = np.ones((16, 8), np.float32), np.ones((16, 4), np.float32)
    with raises_rule(code, "accumulate=True"):
        nki.jit(_accumulate_onto(init))(a, b)
    from nkisim.core.rules import NKISimulationWarning

    with pytest.warns(NKISimulationWarning, match="accumulate=True adds to the PSUM destination"):
        out = nki.simulate(_accumulate_onto(init))(a, b)
    if init:
        np.testing.assert_array_equal(out, np.full((8, 4), 17.0, np.float32))
    else:
        assert np.isnan(out).all()


def test_sequence_bounds_docstring_shape_and_padding():
    """nki.isa.sequence_bounds (NKI 0.6): "with input shape (1, 512), the output shape becomes (1, 2, 512)", each
    element's [start_index, end_index] of its segment, padding (id 0) "a start index of n and an end index of (-1)".
    The end is one past the segment's last element (AWS's 2.26 doc test's NumPy equivalent)."""
    ids = np.zeros((1, 512), np.int32)
    ids[0, 0:100], ids[0, 100:101], ids[0, 101:400] = 3, 7, 3  # a segment id reused after another one
    seen = {}

    def kernel(seg):
        s = _sbuf(seg)
        d = nl.ndarray((1, 2, 512), dtype=nl.int32, buffer=nl.sbuf)
        seen["shape"] = d.shape
        nisa.sequence_bounds(dst=d, segment_ids=s)
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        return o
    out = _run(kernel, ids)
    assert out.shape == (1, 2, 512)
    want_start = np.r_[np.zeros(100), [100], np.full(299, 101), np.full(112, 512)]
    want_end = np.r_[np.full(100, 100), [101], np.full(299, 400), np.full(112, -1)]
    np.testing.assert_array_equal(out[0, 0], want_start)
    np.testing.assert_array_equal(out[0, 1], want_end)


def _transpose_mode_kernel(dst_dtype):
    def kernel(x):
        s = _sbuf(x)
        ident = nl.shared_identity_matrix(x.shape[0], dtype=x.dtype)
        p = nl.ndarray((x.shape[1], x.shape[0]), dtype=dst_dtype, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=s, moving=ident, is_transpose=True)
        t = nl.ndarray(p.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=p)
        out = nl.ndarray(p.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    return kernel


@pytest.mark.parametrize("dt", [nl.bfloat16, nl.float16])
def test_nc_matmul_transpose_mode_writes_16_bit_psum_bit_accurately(dt, monkeypatch):
    """trainium2_arch.rst, "Tensor Engine": NeuronCore-v3 transpose mode "can correctly transpose input tensors with
    NaN/Inf" and gives "FP16/BF16 PSUM output for FP16/BF16 transpose" (nki.isa.nc_matmul(..., is_transpose=True);
    AWS's nki-library MoE CTE relies on it).  NeuronCore-v2 keeps the float32-only dst."""
    host = np.float16 if dt == nl.float16 else ml_dtypes.bfloat16
    x = np.random.default_rng(3).standard_normal((64, 32)).astype(host)
    x[5, 7], x[9, 1] = np.nan, np.inf
    out = _run(_transpose_mode_kernel(dt), x)
    np.testing.assert_array_equal(out.view(np.uint16), x.T.view(np.uint16))  # bit for bit, NaN and Inf in place
    finite = np.nan_to_num(x.astype(np.float32), nan=0.0, posinf=1.0).astype(host)
    np.testing.assert_array_equal(_run(_transpose_mode_kernel(nl.float32), finite), finite.T)  # fp32 dst as before
    other = nl.float16 if dt == nl.bfloat16 else nl.bfloat16
    with raises_rule("nkisim_matmul_dtype", "float32 PSUM tile"):
        _run(_transpose_mode_kernel(other), x)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    with raises_rule("nkisim_matmul_dtype", "float32 PSUM tile"):
        _run(_transpose_mode_kernel(dt), x)


def _topk_kernel(n, k, cols):
    """nki.isa.topk's docstring example (n = 42, src_x = ceil(n / 16), k = 8), with n, k and the columns given."""
    def kernel(in_tensor):
        par_dim = in_tensor.shape[0]
        src = nl.ndarray((par_dim, cols), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=in_tensor)
        val_dst = nl.ndarray((par_dim, k), dtype=nl.bfloat16, buffer=nl.sbuf)
        idx_dst = nl.ndarray((par_dim, k), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(val_dst=val_dst, idx_dst=idx_dst, src=src, n=n)
        o0 = nl.ndarray(val_dst.shape, dtype=val_dst.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o0, src=val_dst)
        o1 = nl.ndarray(idx_dst.shape, dtype=idx_dst.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=idx_dst)
        return o0, o1
    return kernel


@pytest.mark.parametrize(("parts", "n", "k"), [(16, 42, 8), (32, 42, 8), (128, 300, 17), (16, 8, 8)])
def test_topk_docstring_semantics(parts, n, k):
    """nki.isa.topk (new in NKI 0.6): the 16-partition snake (element e at partition e % 16, column e // 16) of n
    bf16 values; val_dst "the K largest values in ascending order", idx_dst "the original 0-based indices".
    Checked against NumPy per 16-partition group; distinct values, so no tie order is assumed."""
    cols = -(-n // 16) + 1  # a spare column: only the first n snake elements count
    rng = np.random.default_rng(parts + n)
    # distinct bf16 values: consecutive positive bit patterns, shuffled
    x = (0x3C00 + rng.permutation(parts * cols)).astype(np.uint16).view(ml_dtypes.bfloat16).reshape(parts, cols)
    vals, idxs = _run(_topk_kernel(n, k, cols), x)
    for g in range(0, parts, 16):
        snake = x[g:g + 16].astype(np.float32).T.reshape(-1)[:n]
        top = np.sort(np.argsort(-snake, kind="stable")[:k])
        order = top[np.argsort(snake[top], kind="stable")]
        for p in range(g, g + 16):
            np.testing.assert_array_equal(idxs[p], order)
            np.testing.assert_array_equal(vals[p].astype(np.float32), snake[order])
    assert np.all(np.diff(vals[0].astype(np.float32)) >= 0)


@pytest.mark.parametrize(("parts", "n", "k", "cols", "fragment"), [
    (16, 7, 4, 1, "n = 7"),
    (16, 42, 43, 3, "K = 43"),
    (16, 42, 8, 2, "fewer than ceil(n / 16) = 3"),
    (24, 42, 8, 3, "multiple of 16"),
])
def test_topk_documented_constraints(parts, n, k, cols, fragment):
    x = np.zeros((parts, cols), dtype=ml_dtypes.bfloat16)
    with raises_rule("nkisim_bad_argument", "topk", fragment):
        _run(_topk_kernel(n, k, cols), x)


def test_topk_is_costed_with_the_documented_estimate():
    """"Estimated instruction cost: 4*n + K GpSIMD Engine cycles": a larger n costs proportionally more."""
    from nkisim.perf import estimate

    def engine_us(n):
        cols = -(-n // 16)
        run = run_kernel(_topk_kernel(n, 8, cols), (np.zeros((16, cols), dtype=ml_dtypes.bfloat16),), {},
                         frontend=frontends.NKI, mode="timing")
        ins = [i for i in run.trace.instrs if i.op == "topk"]
        assert len(ins) == 1 and ins[0].attrs["n"] == n and ins[0].attrs["k"] == 8
        return estimate(run.trace, "trn2").total_us

    assert engine_us(16000) > engine_us(1000) + 10  # 60,000 more cycles at GpSimd's ~1.4 GHz: ~40 us


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


# ---- the docstrings' pseudo-code, executed: each instruction against its documented NumPy/Python equivalent -------
def _io(*arrays):
    """SBUF copies of the kernel's HBM arguments (inside a kernel)."""
    return [_sbuf(a) for a in arrays]


def test_iota_pseudo_code():
    """nki.isa.iota: ``value = offset + channel_id * channel_multiplier + w*step_w + z*step_z + ...``."""
    pattern, offset, cm = [[7, 2], [-3, 3], [1, 4]], 5, 11

    def kernel():
        d = nl.ndarray((16, 2, 3, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=d, pattern=pattern, offset=offset, channel_multiplier=cm)
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        return o
    ref = np.zeros((16, 2, 3, 4), dtype=np.int32)
    for c in range(16):
        for w in range(2):
            for z in range(3):
                for x in range(4):
                    ref[c, w, z, x] = offset + c * cm + w * 7 + z * -3 + x * 1
    np.testing.assert_array_equal(_run(kernel), ref)


def test_affine_select_pseudo_code():
    """nki.isa.affine_select: ``predicate = cmp_op(offset + channel_id * channel_multiplier + w*step_w + ..., 0)``,
    ``dst = on_true_tile`` where it holds, ``on_false_value`` elsewhere."""
    x = np.random.default_rng(7).random((16, 3, 8)).astype(np.float32)

    def kernel(a):
        (t,) = _io(a)
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.affine_select(dst=d, pattern=[[-2, 3], [1, 8]], channel_multiplier=1, on_true_tile=t,
                           on_false_value=-9.0, cmp_op=nl.greater, offset=-3)
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        return o
    c, w, f = np.meshgrid(np.arange(16), np.arange(3), np.arange(8), indexing="ij")
    pred = (-3 + c * 1 + w * -2 + f * 1) > 0
    np.testing.assert_array_equal(_run(kernel, x), np.where(pred, x, np.float32(-9.0)))


def test_tensor_tensor_scan_pseudo_code():
    """nki.isa.tensor_tensor_scan: ``result[:, 0] = op1(op0(data0[:, 0], initial), data1[:, 0])``, then
    ``result[:, i] = op1(op0(data0[:, i], result[:, i-1]), data1[:, i])``."""
    rng = np.random.default_rng(8)
    d0 = rng.random((32, 12)).astype(np.float32)
    d1 = rng.random((32, 12)).astype(np.float32)

    def kernel(a, b):
        ta, tb = _io(a, b)
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=d, data0=ta, data1=tb, initial=0.5, op0=nl.multiply, op1=nl.add)
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        return o
    ref = np.empty_like(d0)
    ref[:, 0] = d0[:, 0] * np.float32(0.5) + d1[:, 0]
    for i in range(1, 12):
        ref[:, i] = d0[:, i] * ref[:, i - 1] + d1[:, i]
    np.testing.assert_allclose(_run(kernel, d0, d1), ref, rtol=1e-6)


def test_range_select_pseudo_code():
    """nki.isa.range_select: ``indices = range_start + arange``; ``mask = comp_op0(indices, bound0) &
    comp_op1(indices, bound1)``; ``select = where(mask, on_true_tile, on_false_value)``; ``reduce_res =
    reduce_op(select, axis=1)``."""
    rng = np.random.default_rng(9)
    x = rng.random((32, 16)).astype(np.float32)
    lo = rng.integers(100, 108, (32, 1)).astype(np.float32)
    hi = lo + rng.integers(1, 8, (32, 1)).astype(np.float32)
    fmin = float(np.finfo(np.float32).min)

    def kernel(a, b0, b1):
        t, l_, h = _io(a, b0, b1)
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(dst=d, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=l_, bound1=h,
                          reduce_res=r, reduce_op=nl.maximum, range_start=100, on_false_value=fmin)
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        o2 = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o2, src=r)
        return o, o2
    d, r = _run(kernel, x, lo, hi)
    indices = 100 + np.arange(16, dtype=np.float32)[None, :]
    sel = np.where((indices >= lo) & (indices < hi), x, np.float32(fmin))
    np.testing.assert_array_equal(d, sel)
    np.testing.assert_array_equal(r, sel.max(axis=1, keepdims=True))


def test_select_reduce_pseudo_code():
    """nki.isa.select_reduce: ``predicate = ~predicate if reverse_pred``; ``result = where(predicate, on_true,
    on_false)``; ``reduction_result = max(result, axis=1)``; on_false a vector."""
    rng = np.random.default_rng(10)
    pred = (rng.random((32, 16)) > 0.4).astype(np.uint8)
    on_true = rng.random((32, 16)).astype(np.float32)
    on_false = rng.random((32, 1)).astype(np.float32) - 2

    def kernel(p, t, f):
        tp, tt, tf = _io(p, t, f)
        d = nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=d, predicate=tp, on_true=tt, on_false=tf, reduce_res=r,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_op=nl.maximum, reverse_pred=True)
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        o2 = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o2, src=r)
        return o, o2
    d, r = _run(kernel, pred, on_true, on_false)
    ref = np.where(pred == 0, on_true, on_false)
    np.testing.assert_array_equal(d, ref)
    np.testing.assert_array_equal(r, ref.max(axis=1, keepdims=True))


@pytest.mark.parametrize(("op1", "cmd", "ref_start"), [
    ("add", "reset_reduce", 0.0), ("subtract", "reset_reduce", 0.0), ("multiply", "reset_reduce", 1.0),
    ("maximum", "reset_reduce", -np.inf), ("minimum", "reset_reduce", np.inf), ("add", "load_reduce", 3.0),
])
def test_tensor_scalar_cumulative_pseudo_code(op1, cmd, ref_start):
    """nki.isa.tensor_scalar_cumulative: ``reg`` starts per reduce_cmd (reset_reduce: the op1 identity; load_reduce:
    imm1); ``for i: reg = op1(op0(in[i], imm0), reg); out[i] = reg``."""
    x = (np.random.default_rng(11).random((16, 10)) + 0.5).astype(np.float32)
    f1 = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
          "minimum": np.minimum}[op1]

    def kernel(a):
        (t,) = _io(a)
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=d, src=t, op0=nl.multiply, op1=getattr(nl, op1), imm0=0.5,
                                      imm1=3.0 if cmd == "load_reduce" else None,
                                      reduce_cmd=getattr(nisa.reduce_cmd, cmd))
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        return o
    reg = np.full((16,), ref_start, dtype=np.float32)
    ref = np.empty_like(x)
    for i in range(10):
        reg = f1(x[:, i] * np.float32(0.5), reg).astype(np.float32)
        ref[:, i] = reg
    np.testing.assert_allclose(_run(kernel, x), ref, rtol=1e-5)


def test_activation_reduce_pseudo_code():
    """nki.isa.activation_reduce: ``output = op(data * scale + bias)``; ``reduce_res = reduce_op(output,
    axis=<FreeAxis>)``."""
    rng = np.random.default_rng(12)
    x = rng.random((32, 24)).astype(np.float32)
    bias = rng.random((32, 1)).astype(np.float32)

    def kernel(a, b):
        t, tb = _io(a, b)
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=d, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=r, bias=tb, scale=0.5)
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        o2 = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o2, src=r)
        return o, o2
    d, r = _run(kernel, x, bias)
    ref = np.exp(x * np.float32(0.5) + bias)
    np.testing.assert_allclose(d, ref, rtol=1e-6)
    np.testing.assert_allclose(r, ref.sum(axis=1, keepdims=True), rtol=1e-5)


@nki.jit
def nc_matmul_accumulate_kernel(lhsT, rhs):
    '''nki.isa.nc_matmul docstring example, as written there: "Tiles K=512 into 4 tiles of 128, accumulating partial
    products in PSUM. The first iteration overwrites PSUM (accumulate=False via i > 0 == False), subsequent
    iterations accumulate".'''
    K, M = lhsT.shape
    K_, N = rhs.shape
    TILE_K = 128

    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    res_psum = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)

    for i in nl.static_range(K // TILE_K):
        lhs_sb = nl.ndarray((TILE_K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        rhs_sb = nl.ndarray((TILE_K, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhs_sb, src=lhsT[i * TILE_K : (i + 1) * TILE_K, :])
        nisa.dma_copy(dst=rhs_sb, src=rhs[i * TILE_K : (i + 1) * TILE_K, :])
        nisa.nc_matmul(
            dst=res_psum, stationary=lhs_sb, moving=rhs_sb, accumulate=(i > 0)
        )

    res_sb = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res_sb, src=res_psum)
    nisa.dma_copy(dst=result, src=res_sb)
    return result


def test_nc_matmul_accumulate_docstring_example():
    rng = np.random.default_rng(13)
    lhs_t = rng.integers(-3, 4, (512, 64)).astype(np.float32)
    rhs = rng.integers(-3, 4, (512, 96)).astype(np.float32)
    np.testing.assert_array_equal(nc_matmul_accumulate_kernel(lhs_t, rhs), lhs_t.T @ rhs)


def test_register_docstring_examples():
    """nki.isa.register_move / register_store docstrings: "nisa.register_move(loop_count, 10)  # Set register to
    10", "nisa.register_move(reg2, loop_count)  # Copy value from loop_count", then register_store into a [1]
    int32 tensor; VirtualRegister's dynamic loop: ``for _ in nl.dynamic_range(reg)`` with reg = 5 runs 5 times."""
    def kernel(x):
        loop_count = nisa.register_alloc()
        nisa.register_move(loop_count, 10)
        reg2 = nisa.register_alloc()
        nisa.register_move(reg2, loop_count)
        result_tensor = nl.ndarray([1], dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(result_tensor, reg2)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        reg = nisa.register_alloc(5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            for _ in nl.dynamic_range(reg):
                tile = nl.load(x[0:128, 0:512])
                nisa.tensor_tensor(dst=acc, data1=acc, data2=tile, op=nl.add)
        o = nl.ndarray([1], dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=result_tensor)
        o2 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o2, src=acc)
        return o, o2
    x = np.ones((128, 512), dtype=np.float32)
    stored, acc = _run(kernel, x)
    np.testing.assert_array_equal(stored, [10])
    assert (acc == 5.0).all()


# ---- nki.language docstring examples with stated results -----------------------------------------------------------
# Each example builds tiles with nl.full and states the expected tile ("assert nl.equal(c, expected)"): a device
# value the kernel's Python cannot test, so the kernel returns c and the test compares it with the stated value.
def _full(v, shape=(128, 512)):
    return nl.full(shape, v, dtype=nl.float32, buffer=nl.sbuf)


LANGUAGE_EXAMPLES = {
    "add": (lambda: nl.add(_full(3.0), _full(2.0)), 5.0),
    "add_scalar": (lambda: nl.add(_full(3.0), 2.0), 5.0),
    "abs": (lambda: nl.abs(_full(-1.0)), 1.0),
    "abs_fp16": (lambda: nl.abs(_full(-1.0), dtype=nl.float16), 1.0),
    "square": (lambda: nl.square(_full(3.0)), 9.0),
    "power": (lambda: nl.power(_full(3.0), _full(2.0)), 9.0),
    "exp": (lambda: nl.exp(_full(0.0)), 1.0),
    "rsqrt": (lambda: nl.rsqrt(_full(4.0)), 0.5),
    "sin": (lambda: nl.sin(_full(0.0)), 0.0),
    "tan": (lambda: nl.tan(_full(0.0)), 0.0),
    "ceil": (lambda: nl.ceil(_full(3.2)), 4.0),
    "ceil_negative": (lambda: nl.ceil(_full(-3.7)), -3.0),
    "trunc": (lambda: nl.trunc(_full(3.7)), 3.0),
    "trunc_negative": (lambda: nl.trunc(_full(-3.7)), -3.0),
    "sign": (lambda: nl.sign(_full(-5.0)), -1.0),
    "where_true": (lambda: nl.where(_full(1.0), _full(10.0), _full(0.0)), 10.0),
    "where_false": (lambda: nl.where(_full(0.0), _full(10.0), _full(5.0)), 5.0),
    "softmax_uniform": (lambda: nl.softmax(_full(1.0), axis=1), 1.0 / 512),  # "uniform input produces uniform"
    "rms_norm_unit_weights": (lambda: nl.rms_norm(_full(2.0), _full(1.0), axis=1, n=512), 1.0),
    "no_reorder": (lambda: _in_no_reorder(), 5.0),
}


def _in_no_reorder():
    with nl.no_reorder():
        a = _full(3.0)
        b = _full(2.0)
        c = nl.add(a, b)
    return c


@pytest.mark.parametrize("name", sorted(LANGUAGE_EXAMPLES))
def test_language_docstring_example(name):
    build, expected = LANGUAGE_EXAMPLES[name]

    def kernel():
        c = build()
        o = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=c)
        return o
    out = _run(kernel)
    assert out.shape == (128, 512)
    np.testing.assert_allclose(out.astype(np.float32), np.float32(expected), rtol=1e-6)


def test_random_seed_docstring_example():
    """nl.random_seed: "same seed produces same values"."""
    def kernel():
        seed = nl.full((1, 1), 42, dtype=nl.int32, buffer=nl.sbuf)
        nl.random_seed(seed)
        a = nl.rand((128, 512), dtype=nl.float32)
        nl.random_seed(seed)
        b = nl.rand((128, 512), dtype=nl.float32)
        oa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=oa, src=a)
        ob = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=ob, src=b)
        return oa, ob
    a, b = _run(kernel)
    np.testing.assert_array_equal(a, b)
    assert ((a >= 0) & (a < 1)).all() and np.unique(a).size > 1000  # "random values in [0, 1)"


def test_matmul_and_transpose_docstring_examples():
    """nl.matmul: "identity.T @ ones = ones"; nl.transpose: "transpose of identity is identity".  AWS places
    nl.shared_identity_matrix in SBUF; nkisim placed it in HBM (issue 32, another helper's part), so the kernel
    copies it on chip when it is not there already."""
    def kernel():
        x = nl.shared_identity_matrix(n=128, dtype=nl.float32)
        if x.buffer is not nl.sbuf:
            on_chip = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=on_chip, src=x)
            x = on_chip
        y = nl.full((128, 128), 1.0, dtype=nl.float32, buffer=nl.sbuf)
        result_psum = nl.matmul(x, y, transpose_x=True)
        result = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(result, result_psum)
        t_psum = nl.transpose(x)
        t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(t, t_psum)
        o1 = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=result)
        o2 = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o2, src=t)
        return o1, o2
    ones, ident = _run(kernel)
    np.testing.assert_array_equal(ones, np.ones((128, 128), np.float32))
    np.testing.assert_array_equal(ident, np.eye(128, dtype=np.float32))


def test_nkitensor_view_docstring_examples():
    """The NkiTensor view methods' examples and their stated shapes (nki/api/nki/language NkiTensor), and the
    access-pattern deep dive's "View Primitives Build APs": ``t.slice(dim=1, start=8, end=24)`` has pattern
    ``[[64, 128], [1, 16]]`` and offset 8, as ``t.ap(pattern=[[64, 128], [1, 16]], offset=8)``."""
    got = {}

    def kernel():
        sb = lambda shape, dt=nl.float32: nl.ndarray(shape, dtype=dt, buffer=nl.sbuf)  # noqa: E731
        t = sb((128, 4, 8))
        got["permute"] = t.permute((0, 2, 1)).shape
        got["broadcast"] = sb((128, 1, 64)).broadcast(1, 8).shape
        got["expand_dim"] = sb((128, 64)).expand_dim(1).shape
        got["squeeze_dim"] = sb((128, 1, 64)).squeeze_dim(1).shape
        t24 = sb((128, 24))
        got["reshape_dim"] = t24.reshape_dim(1, (4, 6)).shape
        got["reshape_dim_inferred"] = t24.reshape_dim(1, (4, -1)).shape
        got["flatten_dims"] = sb((128, 2, 3, 4)).flatten_dims(1, 2).shape
        t46 = sb((128, 4, 6))
        got["reshape_merge"] = t46.reshape((128, 24)).shape
        got["reshape_split"] = t46.reshape((128, 2, 12)).shape
        got["rearrange"] = t24.rearrange(("b", ("h", "w")), ("b", "w", "h"), {"h": 4}).shape
        t64 = sb((128, 64))
        got["slice"] = t64.slice(1, 8, 24, 1).shape
        got["slice_step"] = t64.slice(1, 0, 64, 2).shape
        got["select"] = sb((128, 8, 64)).select(1, 3).shape
        idx = sb((1, 1), nl.int32)
        nisa.memset(dst=idx, value=0)
        hbm_t = nl.ndarray((4, 128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        got["select_dynamic"] = hbm_t.select(0, idx).shape
        hbm_v = nl.ndarray((64, 128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        offsets = sb((128, 1), nl.int32)
        nisa.memset(dst=offsets, value=0)
        got["vector_select"] = hbm_v.vector_select(0, offsets).shape
        got["view_u8"] = t64.view(nl.uint8).shape
        got["view_i32"] = t64.view(nl.int32).shape
        got["view_f32"] = sb((128, 256), nl.uint8).view(nl.float32).shape
        got["ap"] = sb((128, 32)).ap(pattern=[[32, 128], [1, 32]]).shape
        u = t64.slice(dim=1, start=8, end=24)
        v = t64.ap(pattern=[[64, 128], [1, 16]], offset=8)
        got["slice_pattern"] = (u.get_pattern(), u.offset, v.get_pattern(), v.offset)
    _run(kernel)
    stated = {"permute": (128, 8, 4), "broadcast": (128, 8, 64), "expand_dim": (128, 1, 64),
              "squeeze_dim": (128, 64), "reshape_dim": (128, 4, 6), "reshape_dim_inferred": (128, 4, 6),
              "flatten_dims": (128, 6, 4), "reshape_merge": (128, 24), "reshape_split": (128, 2, 12),
              "rearrange": (128, 6, 4), "slice": (128, 16), "slice_step": (128, 32), "select": (128, 64),
              "select_dynamic": (128, 8), "vector_select": (128, 128, 8), "view_u8": (128, 256),
              "view_i32": (128, 64), "view_f32": (128, 64), "ap": (128, 32)}
    for k, shape in stated.items():
        assert tuple(got[k]) == shape, (k, got[k], shape)
    up, uo, vp, vo = got["slice_pattern"]
    assert [list(p) for p in up] == [[64, 128], [1, 16]] and uo == 8
    assert [list(p) for p in vp] == [[64, 128], [1, 16]] and vo == 8


def test_copy_gather_flattened_and_static_range_docstring_examples():
    """nl.copy: "copy an nl.matmul result from PSUM back to SBUF"; nl.gather_flattened: "gather elements by index"
    (per partition, from the flattened free dims); nl.static_range: "fully unrolled iteration over tiles"."""
    rng = np.random.default_rng(14)
    x = rng.random((128, 64)).astype(np.float32)
    y = rng.random((128, 32)).astype(np.float32)
    data = rng.random((128, 512)).astype(np.float32)
    ind = rng.integers(0, 512, (128, 512)).astype(np.uint32)
    wide = rng.random((128, 1024)).astype(np.float32)

    def kernel(x_tensor, y_tensor, data_tensor, indices_tensor, input_tensor):
        xs = nl.load(x_tensor)
        ys = nl.load(y_tensor)
        result_psum = nl.matmul(xs, ys, transpose_x=True)  # x.T @ y, in PSUM
        result = nl.copy(result_psum)  # PSUM -> SBUF
        mm = nl.ndarray(result.shape, dtype=result.dtype, buffer=nl.shared_hbm)
        nl.store(mm, result)
        actual_tensor = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        d = nl.load(data_tensor[0:128, 0:512])
        indices = nl.load(indices_tensor[0:128, 0:512])
        nl.store(actual_tensor[0:128, 0:512], nl.gather_flattened(d, indices))
        out_tensor = nl.ndarray(input_tensor.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.static_range(input_tensor.shape[1] // 512):
            offset = i * 512
            tile = nl.load(input_tensor[0:128, offset:offset + 512])
            nl.store(out_tensor[0:128, offset:offset + 512], nl.multiply(tile, tile))
        return mm, actual_tensor, out_tensor
    mm, gathered, squared = _run(kernel, x, y, data, ind, wide)
    np.testing.assert_allclose(mm, x.T @ y, rtol=1e-5)
    np.testing.assert_array_equal(gathered, np.take_along_axis(data, ind.astype(np.int64), axis=1))
    np.testing.assert_array_equal(squared, wide * wide)


@pytest.mark.parametrize(("data_shape", "vals_shape", "idx_dtype", "code", "fragment"), [
    ((4, 6), (4, 8), nl.uint32, "nkisim_bad_argument", "between 8 and 16,384"),
    ((4, 16), (4, 7), nl.uint32, "nkisim_bad_argument", "exactly 8 elements"),
    ((4, 16), (2, 8), nl.uint32, "err_num_partition_mismatch", "data, vals"),
    ((4, 16), (4, 8), nl.int32, "nkisim_dtype_not_supported", "uint16 or uint32"),
])
def test_nc_find_index8_documented_operand_limits(data_shape, vals_shape, idx_dtype, code, fragment):
    """nc_find_index8 docstring: "The data tensor must have between 8 and 16,384 elements per partition. The vals
    tensor must have exactly 8 elements per partition. The output will contain exactly 8 elements per partition and
    will be uint16 or uint32 type"."""
    def kernel(data, vals):
        d, v = _sbuf(data), _sbuf(vals)
        found = nl.ndarray((data.shape[0], 8), dtype=idx_dtype, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=found, data=d, vals=v)
    with raises_rule(code, fragment):
        _run(kernel, np.zeros(data_shape, np.float32), np.zeros(vals_shape, np.float32))


def test_access_pattern_deep_dive_illegal_partition_step():
    """nki-aps.rst, "Restriction on SBUF/PSUM Tensors": on a (16, 32) SBUF tensor "The following is illegal,
    because the first stride is 32*2 and reads every other partition": ``t.ap(pattern=[[64, 8], [1, 32]],
    offset=0)``."""
    def kernel():
        t = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
        t.ap(pattern=[[64, 8], [1, 32]], offset=0)
    with raises_rule("nkisim_view", "must walk the partitions"):
        _run(kernel)


# ---- the nki.language sweep: every documented rule of a language function, each from its docstring ---------------
# (nki/api/nki/language/__init__.py and nki/get-started/nki-language-guide.rst, NKI 0.6)
def _tile(v, dt=nl.float32, shape=(4, 8)):
    return nl.full(shape, v, dtype=dt, buffer=nl.sbuf)


def _out(build):
    def kernel():
        c = build()
        o = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=c)
        return o
    return _run(kernel)


@pytest.mark.parametrize("op, x, y, want", [
    ("equal", 1.0, 1.0, 1.0), ("not_equal", 1.0, 1.0, 0.0), ("less", 1.0, 2.0, 1.0), ("less_equal", 3.0, 2.0, 0.0),
    ("greater", 3.0, 2.0, 1.0), ("greater_equal", 2.0, 2.0, 1.0)])
@pytest.mark.parametrize("dt", [nl.float32, nl.bfloat16, nl.int32])
def test_comparisons_default_to_the_input_tile_dtype(op, x, y, want, dt):
    """nl.equal ... nl.greater_equal: "dtype: ... Defaults to the input tile dtype. Use dtype=nl.uint8 for a
    boolean-like result"; "return: a tile with 1 where equal, 0 otherwise" (a bool tile before)."""
    fn = getattr(nl, op)
    for build in (lambda: fn(_tile(x, dt), _tile(y, dt)), lambda: fn(_tile(x, dt), y)):
        out = _out(build)
        assert out.dtype == np.dtype(dt) and out.shape == (4, 8)
        np.testing.assert_array_equal(out.astype(np.float32), np.float32(want))
    out = _out(lambda: fn(_tile(x, dt), _tile(y, dt), dtype=nl.uint8))
    assert out.dtype == np.uint8 and (out == int(want)).all()
    # an integer tile against a fractional scalar still gives the tile's dtype, "the input tile dtype"
    assert _out(lambda: nl.less(_tile(1, nl.int32), 1.5)).dtype == np.int32


@pytest.mark.parametrize("op", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "bitwise_and",
                                "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "logical_and",
                                "logical_or", "logical_xor"])
def test_two_scalars_are_refused_where_a_tile_is_required(op):
    """ "y: a tile or a scalar value. At least one of x, y must be a tile." (comparisons, bitwise and logical)."""
    with pytest.raises(TypeError, match=f"nl.{op}: at least one of x, y must be a tile"):
        _out(lambda: getattr(nl, op)(1, 2))
    # the legacy API keeps its scalar (op) scalar
    assert lnl.equal(1.0, 1.0) == 1


def test_logical_not_is_xor_with_one():
    """nl.logical_not: "Implemented as XOR with 1, so inputs should be boolean-like (0 or 1 values). For
    non-boolean inputs, use nl.equal(x, 0) instead"; dtype "will default to be the same as the data type of the
    input tile"."""
    ints = np.array([[0, 1, 2, 3, 7, -1, 0, 1]] * 4, np.int32)

    def kernel(x):
        t = _sbuf(x)
        o = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=nl.logical_not(t))
        return o
    np.testing.assert_array_equal(_run(kernel, ints), ints ^ 1)  # 2 -> 3: not a negation, as the docstring warns
    out = _out(lambda: nl.logical_not(_tile(1.0)))
    assert out.dtype == np.float32 and (out == 0.0).all()
    assert (_out(lambda: nl.logical_not(_tile(0.0, nl.bfloat16))).astype(np.float32) == 1.0).all()


def test_logical_binary_operators_keep_the_input_dtype():
    out = _out(lambda: nl.logical_and(_tile(1, nl.int32), _tile(1, nl.int32)))
    assert out.dtype == np.int32 and (out == 1).all()
    out = _out(lambda: nl.logical_xor(_tile(1.0), _tile(1.0)))
    assert out.dtype == np.float32 and (out == 0).all()


def test_all_defaults_to_the_input_dtype():
    """nl.all: "a tile with the logical AND reduction"; dtype "will default to be the same as the data type of the
    input tile" (a bool tile before)."""
    x = np.ones((4, 8), np.float32)
    x[1, 3] = 0.0

    def kernel(a):
        r = nl.all(_sbuf(a), axis=1)
        o = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=r)
        return o
    out = _run(kernel, x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.0, 0.0, 1.0, 1.0])


@pytest.mark.parametrize("keepdims", [False, True])
def test_var_always_keeps_the_reduced_dims(keepdims):
    """nl.var: "keepdims: currently ignored; result always has keepdims=True shape"."""
    x = np.random.default_rng(3).normal(size=(4, 3, 8)).astype(np.float32)

    def kernel(a):
        r = nl.var(_sbuf(a), axis=2, keepdims=keepdims)
        o = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=r)
        return o
    out = _run(kernel, x)
    assert out.shape == (4, 3, 1)
    np.testing.assert_allclose(out, x.var(axis=2, keepdims=True), rtol=1e-4)


def test_broadcast_to_needs_the_same_rank():
    """nl.broadcast_to: "shape: the target shape. Must have the same rank as x. Each dimension must either match or
    be broadcast from size 1"; "If x.shape is already the same as shape, returns x unchanged"."""
    assert (_out(lambda: nl.broadcast_to(_tile(2.0, shape=(4, 1)), (4, 8))) == 2.0).all()
    with raises_rule("nkisim_shape_mismatch", "same rank"):
        _out(lambda: nl.broadcast_to(_tile(2.0, shape=(4,)), (4, 8)))
    seen = []

    def same():
        t = _tile(2.0)
        seen.append(nl.broadcast_to(t, (4, 8)) is t)
        return t
    _out(same)
    assert seen == [True]


@pytest.mark.parametrize("op", ["abs_max", "abs_min"])
def test_abs_max_and_abs_min_are_trn3_only(op):
    """ "Available only on NeuronCore-v4 (trn3) and newer" (their docstrings); "These are trn3 only and run on the
    Vector Engine. Also usable as op0 with nki.isa.tensor_scalar and nki.isa.tensor_scalar_reduce" (release notes,
    NKI 0.4.0).  nkisim models trn1 and trn2: every use is refused, naming trn3."""
    for target in ("trn1", "trn2"):
        with raises_rule("nkisim_engine_op_unsupported", "trn3"):
            run_kernel(lambda: _out_k(lambda: getattr(nl, op)(_tile(-5.0), _tile(3.0))), (), {},
                       frontend=frontends.NKI, target=target)
    fn = getattr(nl, op)
    for build in (lambda d: nisa.tensor_scalar(dst=d, data=_tile(-5.0), op0=fn, operand0=3.0),
                  lambda d: nisa.tensor_tensor(dst=d, data1=_tile(-5.0), data2=_tile(3.0), op=fn)):
        def kernel(build=build):
            d = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
            build(d)
            return _out_k(lambda: d)
        with raises_rule("nkisim_engine_op_unsupported", "trn3"):
            run_kernel(kernel, (), {}, frontend=frontends.NKI)


def test_abs_max_and_abs_min_values_for_trn3():
    """Their values as documented, kept in the core for trn3: "abs_max(-5, 3) returns -5"; "abs_min(-5, 3) returns
    3"; "tie-breaking: returns y when |x| == |y|" (the docstrings' examples)."""
    from nkisim.core import execute

    x = np.float32([-5.0, 1.0, 5.0, 1.0])
    y = np.float32([3.0, -1.0, -3.0, -1.0])
    np.testing.assert_array_equal(execute.alu("abs_max", x, y), [-5.0, -1.0, 5.0, -1.0])
    np.testing.assert_array_equal(execute.alu("abs_min", x, y), [3.0, -1.0, -3.0, -1.0])


def _out_k(build):
    c = build()
    o = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=c)
    return o


def test_hbm_integer_indexing_is_at_least_1d():
    """NkiTensor.__getitem__: "HBM tensors: integer indexing removes the dimension. Result is at least 1D" (an
    integer on every axis was a 0-d view)."""
    shapes = []

    def kernel(a):
        shapes.extend([a[1].shape, a[1, 2].shape, a[-1, -1].shape])
        o = nl.ndarray((2,), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 1), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[1, 2])
        nisa.dma_copy(dst=o[0], src=t)
        nisa.dma_copy(dst=o[1], src=a[-1, -1])
        return o
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(_run(kernel, x), [x[1, 2], x[-1, -1]])
    assert shapes == [(4,), (1,), (1,)]


# ---- the nki.isa sweep: documented options and constraints of the instructions -------------------------------------
def _run_isa(body, target=None, arr=None):
    def kernel(a):
        body(a)
        t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        o = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=t)
        return o
    kw = {} if target is None else {"target": target}
    return run_kernel(kernel, (np.zeros((128, 64), np.float32) if arr is None else arr,), {},
                      frontend=frontends.NKI, **kw)


def _sb(shape=(128, 64), dt=nl.float32, buffer=nl.sbuf, fill=None):
    t = nl.ndarray(shape, dtype=dt, buffer=buffer)
    if fill is not None:
        nisa.memset(dst=t, value=fill)
    return t


def test_dma_copy_priority_is_neuroncore_v4_only():
    """nisa.dma_copy: "priority: (optional): DMA quality-of-service priority level 0-3 ... (NeuronCore-v4+ only)"."""
    for target in ("trn1", "trn2"):
        with raises_rule("nkisim_bad_argument", "priority=1", "NeuronCore-v4"):
            _run_isa(lambda a: nisa.dma_copy(dst=_sb(), src=a, priority=1), target=target)
    _run_isa(lambda a: nisa.dma_copy(dst=_sb(), src=a, priority=None))


def test_dma_copy_engine_is_the_hardware_dges():
    """nisa.dma_copy: "engine: (optional) the engine to use for HWDGE descriptor generation: nki.isa.engine.sync or
    nki.isa.engine.scalar. Only valid when dge_mode=nisa.dge_mode.hwdge"."""
    hw = nisa.dge_mode.hwdge
    for eng in (nisa.engine.sync, nisa.engine.scalar):
        _run_isa(lambda a, eng=eng: nisa.dma_copy(dst=_sb(), src=a, engine=eng, dge_mode=hw), target="trn2")
        with raises_rule("nkisim_bad_argument", "only valid with dge_mode=nisa.dge_mode.hwdge"):
            _run_isa(lambda a, eng=eng: nisa.dma_copy(dst=_sb(), src=a, engine=eng))
    with raises_rule("nkisim_bad_argument", "sync or nisa.engine.scalar, not VectorE"):
        _run_isa(lambda a: nisa.dma_copy(dst=_sb(), src=a, engine=nisa.engine.vector, dge_mode=hw))


def test_hardware_dge_needs_neuroncore_v3():
    """nisa.dma_copy: "Hardware based DGE is only supported for NeuronCore-v3 or newer"."""
    with raises_rule("nkisim_engine_op_unsupported", "hwdge", "trn1"):
        _run_isa(lambda a: nisa.dma_copy(dst=_sb(), src=a, dge_mode=nisa.dge_mode.hwdge), target="trn1")
    _run_isa(lambda a: nisa.dma_copy(dst=_sb(), src=a, dge_mode=nisa.dge_mode.hwdge), target="trn2")


def test_memset_runs_on_vector_or_gpsimd():
    """nisa.memset: "engine: specify which engine to use for memset: nki.isa.engine.vector or
    nki.isa.engine.gpsimd" (the legacy API's memset keeps taking any engine)."""
    for eng in (nisa.engine.vector, nisa.engine.gpsimd, nisa.engine.unknown):
        _run_isa(lambda a, eng=eng: nisa.memset(dst=_sb(), value=1.0, engine=eng))
    for eng in (nisa.engine.scalar, nisa.engine.tensor):
        with raises_rule("nkisim_bad_argument", "vector or nisa.engine.gpsimd"):
            _run_isa(lambda a, eng=eng: nisa.memset(dst=_sb(), value=1.0, engine=eng))


@pytest.mark.parametrize("pred_dt", [nl.uint8, nl.uint16, nl.uint32])
def test_tensor_copy_predicated_documented_constraints(pred_dt):
    """nisa.tensor_copy_predicated: "predicate must be of type uint8, uint16, or uint32"; "src and dst must share
    the same data type"; "Either src or predicate may be in PSUM, but not both simultaneously"."""
    x = np.random.default_rng(5).normal(size=(128, 64)).astype(np.float32)
    mask = (np.arange(64) % 3 == 0)[None, :].repeat(128, 0)

    def kernel(a, m):
        s = _sbuf(a)
        p = nl.ndarray(m.shape, dtype=pred_dt, buffer=nl.sbuf)
        nisa.dma_copy(dst=p, src=m)
        d = _sb(fill=-1.0)
        nisa.tensor_copy_predicated(dst=d, src=s, predicate=p)
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        return o
    np.testing.assert_array_equal(_run(kernel, x, mask.astype(np.dtype(pred_dt))), np.where(mask, x, -1.0))
    for bad in (nl.float32, nl.int32, nl.int8):
        with raises_rule("nkisim_bad_argument", "predicate must be of type uint8, uint16 or uint32"):
            _run_isa(lambda a, bad=bad: nisa.tensor_copy_predicated(dst=_sb(), src=_sb(fill=1.0),
                                                                   predicate=_sb(dt=bad, fill=1)))
    with raises_rule("nkisim_bad_argument", "src (bfloat16) and dst (float32) must share the same data type"):
        _run_isa(lambda a: nisa.tensor_copy_predicated(dst=_sb(), src=_sb(dt=nl.bfloat16, fill=1.0),
                                                       predicate=_sb(dt=pred_dt, fill=1)))
    with raises_rule("nkisim_two_inputs_in_psum"):
        _run_isa(lambda a: nisa.tensor_copy_predicated(dst=_sb(), src=_sb(buffer=nl.psum, fill=1.0),
                                                       predicate=_sb(dt=pred_dt, buffer=nl.psum, fill=1)))
    # one of them in PSUM, and a number as src, are fine
    _run_isa(lambda a: nisa.tensor_copy_predicated(dst=_sb(), src=_sb(buffer=nl.psum, fill=1.0),
                                                   predicate=_sb(dt=pred_dt, fill=1)))
    _run_isa(lambda a: nisa.tensor_copy_predicated(dst=_sb(), src=3.0, predicate=_sb(dt=pred_dt, fill=1)))


def _mm_tiled(k, m, pos, size, target="trn2", dt=nl.bfloat16, perf=None):
    def body(a):
        st = _sb((k, 2, m) if perf else (k, m), dt=dt, fill=1.0)
        mv = _sb((k, 2, 512) if perf else (k, 512), dt=dt, fill=1.0)
        ps = nl.ndarray((m, 512), dtype=nl.float32, buffer=nl.psum)
        kw = {"perf_mode": perf} if perf else {}
        nisa.nc_matmul(dst=ps, stationary=st, moving=mv, tile_position=pos, tile_size=size, **kw)
    return _run_isa(body, target=target)


def test_pe_tiling_sizes_positions_and_generations():
    """nisa.nc_matmul "Tiling mode": "Row tiling mode slices the 128 PE rows into 2x 64 row tiles (NeuronCore-v2 or
    newer), or 4x 32 row tiles (NeuronCore-v3 or newer). Column tiling mode slices the 128 PE columns in the same
    fashion"; "The start_row must be a multiple of row_size ... Similarly, the start_column must be a multiple of
    column_size"; "double_row performance mode cannot be combined with Tensor Engine column tiling mode"; the
    docstring's own example: tile_position (64, 0) with tile_size (64, 128) is the bottom half."""
    _mm_tiled(64, 64, (64, 0), (64, 128), target="trn1")
    _mm_tiled(32, 64, (96, 0), (32, 128), target="trn2")
    _mm_tiled(64, 32, (0, 96), (64, 32), target="trn2")
    with raises_rule("nkisim_bad_argument", "need NeuronCore-v3"):
        _mm_tiled(32, 64, (32, 0), (32, 128), target="trn1")
    with raises_rule("nkisim_bad_argument", "multiples of the row and column tile sizes"):
        _mm_tiled(64, 64, (32, 0), (64, 128))
    with raises_rule("nkisim_bad_argument", "a tile size is 128, 64 (2 tiles) or 32 (4 tiles)"):
        _mm_tiled(64, 64, (0, 0), (96, 128))
    f8 = nl.float8_e4m3
    _mm_tiled(64, 64, (64, 0), (64, 128), dt=f8, perf=nisa.matmul_perf_mode.double_row)  # row tiling is fine
    with raises_rule("nkisim_bad_argument", "double_row performance mode cannot be combined with column tiling"):
        _mm_tiled(64, 64, (0, 64), (64, 64), dt=f8, perf=nisa.matmul_perf_mode.double_row)


def test_nc_transpose_runs_on_tensor_or_vector():
    """nisa.nc_transpose: "engine: specify which engine to use for transpose: nki.isa.engine.tensor or
    nki.isa.engine.vector" (GpSimd was accepted)."""
    for eng in (nisa.engine.vector, nisa.engine.unknown):
        _run_isa(lambda a, eng=eng: nisa.nc_transpose(dst=_sb((32, 32)), data=_sb((32, 32), fill=1.0), engine=eng))
    _run_isa(lambda a: nisa.nc_transpose(dst=nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum),
                                         data=_sb((128, 64), fill=1.0), engine=nisa.engine.tensor))
    with raises_rule("nkisim_bad_argument", "tensor or nisa.engine.vector, not GpSimd"):
        _run_isa(lambda a: nisa.nc_transpose(dst=_sb((32, 32)), data=_sb((32, 32), fill=1.0),
                                             engine=nisa.engine.gpsimd))


def test_tensor_tensor_and_tensor_scalar_engines():
    """nisa.tensor_tensor: "engine: ... nki.isa.engine.vector, nki.isa.engine.gpsimd or nki.isa.engine.unknown";
    "Valid choices for op: 1. Any supported binary operator that runs on the Vector Engine. 2. nl.power. (Which runs
    on the GpSimd engine.)".  nisa.tensor_scalar: "engine: ... nki.isa.engine.gpsimd (only allowed for rsqrt)"."""
    tt = nisa.tensor_tensor
    _run_isa(lambda a: tt(dst=_sb(), data1=_sb(fill=2.0), data2=_sb(fill=3.0), op=nl.power, engine=nisa.engine.gpsimd))
    _run_isa(lambda a: tt(dst=_sb(), data1=_sb(fill=2.0), data2=_sb(fill=3.0), op=nl.add, engine=nisa.engine.gpsimd))
    for op, eng, frag in ((nl.power, nisa.engine.vector, "'power' cannot run on VectorE"),
                          (nl.add, nisa.engine.scalar, "'add' cannot run on ScalarE")):
        with raises_rule("nkisim_bad_argument", frag):
            _run_isa(lambda a, op=op, eng=eng: tt(dst=_sb(), data1=_sb(fill=2.0), data2=_sb(fill=3.0), op=op,
                                                   engine=eng))
    ts = nisa.tensor_scalar
    _run_isa(lambda a: ts(dst=_sb(), data=_sb(fill=4.0), op0=nl.rsqrt, operand0=0, engine=nisa.engine.gpsimd))
    with raises_rule("nkisim_bad_argument", "'multiply' cannot run on GpSimdE", "only for nl.rsqrt"):
        _run_isa(lambda a: ts(dst=_sb(), data=_sb(fill=4.0), op0=nl.multiply, operand0=2.0, engine=nisa.engine.gpsimd))


@pytest.mark.parametrize("op", ["add", "average", "maximum", "bitwise_or", "bitwise_and", "minimum", "multiply"])
def test_tensor_partition_reduce_operators(op):
    """nisa.tensor_partition_reduce: "op: the reduction operator (add, average, max, bitwise_or, bitwise_and)"."""
    ints = op.startswith("bitwise")
    x = np.random.default_rng(8).integers(0, 16, size=(32, 8)) if ints else \
        np.random.default_rng(8).normal(size=(32, 8))
    x = x.astype(np.int32 if ints else np.float32)

    def kernel(a):
        d = nl.ndarray((1, 8), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(dst=d, op=getattr(nl, op), data=_sbuf(a))
        o = nl.ndarray((1, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        return o
    ref = {"add": lambda v: v.sum(0), "average": lambda v: v.mean(0), "maximum": lambda v: v.max(0),
           "bitwise_or": np.bitwise_or.reduce, "bitwise_and": np.bitwise_and.reduce}
    if op in ref:
        np.testing.assert_allclose(_run(kernel, x)[0], ref[op](x), rtol=1e-5)
    else:
        with raises_rule("nkisim_bad_argument", "add, average, max, bitwise_or, bitwise_and"):
            _run(kernel, x)


def test_activation_reduce_op_and_bias_dtypes():
    """nisa.activation: "reduce_op must be nl.add" (activation_reduce takes others on NeuronCore-v3: "On
    NeuronCore-v2, the reduce_op must be nl.add"); "the bias parameter can be any supported dtype except tfloat32"
    (the 2.26 error catalogue's float32/float16/bfloat16 rule stays the legacy API's)."""
    act = nisa.activation
    red = nisa.reduce_cmd.reset_reduce
    _run_isa(lambda a: act(dst=_sb(), op=nl.exp, data=_sb(fill=0.5), reduce_op=nl.add, reduce_res=_sb((128, 1)),
                           reduce_cmd=red))
    with raises_rule("nkisim_bad_argument", "reduce_op must be nl.add, got nl.maximum"):
        _run_isa(lambda a: act(dst=_sb(), op=nl.exp, data=_sb(fill=0.5), reduce_op=nl.maximum,
                               reduce_res=_sb((128, 1)), reduce_cmd=red))
    _run_isa(lambda a: nisa.activation_reduce(dst=_sb(), op=nl.exp, data=_sb(fill=0.5), reduce_op=nl.maximum,
                                              reduce_res=_sb((128, 1))), target="trn2")
    x = np.random.default_rng(4).normal(size=(128, 64)).astype(np.float32)

    def kernel(a):
        b = nl.ndarray((128, 1), dtype=nl.int8, buffer=nl.sbuf)
        nisa.iota(dst=b, pattern=[[0, 1]], channel_multiplier=1, offset=-64)
        d = _sb()
        act(dst=d, op=nl.copy, data=_sbuf(a), bias=b, scale=2.0)
        o = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=d)
        return o
    np.testing.assert_allclose(_run(kernel, x), 2.0 * x + (np.arange(128, dtype=np.float32) - 64)[:, None], rtol=1e-6)
    with raises_rule("nkisim_bad_argument", "any dtype except tfloat32"):
        _run_isa(lambda a: act(dst=_sb(), op=nl.exp, data=_sb(fill=0.5), bias=_sb((128, 1), dt=nl.tfloat32, fill=0.0)))
    # a bias of the wrong shape: the operand rule (the 2.26 error text names the 2.26 dtypes, which NKI 0.6 widened)
    with raises_rule("nkisim_scalar_operand_shape", "operand bias must be a scalar or a per-partition vector of shape "
                     "(128, 1), got [128, 2]"):
        _run_isa(lambda a: act(dst=_sb(), op=nl.exp, data=_sb(fill=0.5), bias=_sb((128, 2), dt=nl.int8, fill=0.0)))
    with raises_rule("err_activation_bias_invalid_type", "int8"):
        def legacy(x):
            t = lnl.load(x)
            return lisa.activation(op=lnl.exp, data=t, bias=lnl.zeros((128, 1), dtype=lnl.int8))
        run_kernel(legacy, (x,), {}, frontend=frontends.LEGACY)


def test_more_dtype_and_operand_rules_of_the_isa_docstrings():
    """nc_stream_shuffle: "dst must have same data type as src"; dropout: "prob data type must be float32", "The
    output data type dst.dtype must match the input data type data.dtype"; scalar_tensor_tensor: "Both op0 and op1
    must be arithmetic operators ... Bitvec operators are not supported", "data and operand1 cannot both reside in
    PSUM"; tensor_scalar_reduce: "op0 can only be arithmetic ... Bitvec operators are not supported" (a NumPy
    TypeError before) and a reduce_op that is a reduction operator (a KeyError before); tensor_tensor_scan: "data0
    and data1 cannot both reside in PSUM"."""
    i32 = nl.int32
    with raises_rule("nkisim_dst_mismatch", "dst has src's dtype"):
        _run_isa(lambda a: nisa.nc_stream_shuffle(dst=_sb((32, 64), dt=nl.bfloat16), src=_sb((32, 64), fill=1.0),
                                                  shuffle_mask=list(range(32))))
    with raises_rule("nkisim_dst_mismatch", "dst has data's dtype"):
        _run_isa(lambda a: nisa.dropout(dst=_sb(dt=nl.bfloat16), data=_sb(fill=1.0), prob=0.5))
    with raises_rule("nkisim_bad_argument", "prob must be float32, got a bfloat16 tile"):
        _run_isa(lambda a: nisa.dropout(dst=_sb(), data=_sb(fill=1.0), prob=_sb((128, 1), dt=nl.bfloat16, fill=0.5)))
    _run_isa(lambda a: nisa.dropout(dst=_sb(), data=_sb(fill=1.0), prob=_sb((128, 1), fill=0.5)))
    with raises_rule("nkisim_bad_argument", "not the bitvec 'bitwise_and'"):
        _run_isa(lambda a: nisa.scalar_tensor_tensor(dst=_sb(dt=i32), data=_sb(dt=i32, fill=3), op0=nl.bitwise_and,
                                                     operand0=1, op1=nl.bitwise_or, operand1=_sb(dt=i32, fill=4)))
    with raises_rule("nkisim_two_inputs_in_psum"):
        _run_isa(lambda a: nisa.scalar_tensor_tensor(dst=_sb(), data=_sb(buffer=nl.psum, fill=1.0), op0=nl.add,
                                                     operand0=1.0, op1=nl.add, operand1=_sb(buffer=nl.psum, fill=1.0)))
    with raises_rule("nkisim_bad_argument", "op0 must be an arithmetic operator"):
        _run_isa(lambda a: nisa.tensor_scalar_reduce(dst=_sb(dt=i32), data=_sb(dt=i32, fill=3), op0=nl.bitwise_and,
                                                     operand0=1, reduce_op=nl.add, reduce_res=_sb((128, 1), dt=i32)))
    with raises_rule("nkisim_bad_argument", "'power' is not an arithmetic reduction operator"):
        _run_isa(lambda a: nisa.tensor_scalar_reduce(dst=_sb(), data=_sb(fill=1.0), op0=nl.add, operand0=1.0,
                                                     reduce_op=nl.power, reduce_res=_sb((128, 1))))
    with raises_rule("nkisim_two_inputs_in_psum"):
        _run_isa(lambda a: nisa.tensor_tensor_scan(dst=_sb(), data0=_sb(buffer=nl.psum, fill=1.0),
                                                   data1=_sb(buffer=nl.psum, fill=1.0), initial=0.0,
                                                   op0=nl.multiply, op1=nl.add))


def test_nl_rsqrt_runs_on_gpsimd_and_refuses_psum():
    """NKI 0.5.0 release notes: "The experimental nki.language.rsqrt API now provides higher numerical precision
    using the GpSimd Engine. PSUM inputs are no longer supported; use nki.isa.activation directly if you need PSUM
    input or Scalar Engine throughput" (it was a ScalarE activation taking PSUM)."""
    x = np.random.default_rng(9).uniform(0.5, 4.0, size=(128, 64)).astype(np.float32)

    def kernel(a):
        r = nl.rsqrt(_sbuf(a))
        o = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=r)
        return o
    run = run_kernel(kernel, (x,), {}, frontend=frontends.NKI)
    np.testing.assert_allclose(run.outputs, 1.0 / np.sqrt(x), rtol=1e-6)
    assert [i.engine.name for i in run.trace.instrs if i.attrs.get("alu0") == "rsqrt"] == ["GPSIMD"]
    with raises_rule("nkisim_gpsimd_psum", "psum"):
        _run_isa(lambda a: nl.rsqrt(_sb(buffer=nl.psum, fill=4.0)))
    # nisa.activation(op=nl.rsqrt) still takes PSUM, on ScalarE
    _run_isa(lambda a: nisa.activation(dst=_sb(), op=nl.rsqrt, data=_sb(buffer=nl.psum, fill=4.0)))


def test_language_guide_dynamic_loop_rules():
    """nki-language-guide.rst, "Dynamic Control Flow": "The induction variable of a dynamic_range loop is also a
    VirtualRegister, but it is frozen: you cannot write to it with register_move or register_load"; nl.fori_loop:
    "writing to i has no effect on the loop"; nl.no_reorder: "Register-based dynamic loops (nl.fori_loop,
    nl.while_loop) are not supported inside a no_reorder block. Static loops ... are allowed"."""
    def frozen(a):
        for i in nl.dynamic_range(3):
            nisa.register_move(i, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with raises_rule("nkisim_bad_argument", "induction variable of a dynamic_range loop is frozen"):
            _run_isa(frozen)

    def counted(a):
        acc = _sb((1, 1), fill=0.0)
        one = _sb((1, 1), fill=1.0)

        def body(i):
            nisa.register_move(i, 100)  # no effect on the loop
            nisa.tensor_tensor(dst=acc, data1=acc, data2=one, op=nl.add)
        nl.fori_loop(0, 4, body)
        o = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=acc)
        return o
    assert _run(counted, np.zeros((1, 1), np.float32))[0, 0] == 4.0

    def in_block(a):
        with nl.no_reorder():
            nl.fori_loop(0, 2, lambda i: None)
    with raises_rule("nkisim_bad_argument", "not supported inside a no_reorder block"):
        _run_isa(in_block)

    def static_in_block(a):
        with nl.no_reorder():
            for _ in nl.static_range(2):
                nisa.memset(dst=_sb(), value=0.0)
        nl.fori_loop(0, 2, lambda i: None)  # after the block: fine
    _run_isa(static_in_block)


def test_language_guide_indexing_and_classes():
    """nki-language-guide.rst: "t[0, ..., :]" is (1, 64, 64) ("partition index 0 is kept at size 1"), "u[:, 0:32, :]"
    is (1, 32, 64), "t[:, :, ::2]" is (64, 64, 32); a @dataclass NKIObject with a method ("prints 1 True"); a class
    instance and an Enum member passed as kernel arguments."""
    from dataclasses import dataclass
    from enum import Enum

    @dataclass
    class C(nl.NKIObject):
        x: int
        y: bool = False

        def toggle(self):
            self.y = not self.y

    class A(nl.NKIObject):
        x: int = 1

        def __init__(self, x):
            self.x = x

    class E(Enum):
        x = 1
        y = 2

    seen = []

    def kernel(x, a, e):
        t = nl.ndarray((64, 64, 64), dtype=nl.float32, buffer=nl.sbuf)
        u = t[0, ..., :]
        seen.extend([u.shape, u[:, 0:32, :].shape, t[...].shape, t[:, :, ::2].shape])
        c = C(1)
        c.toggle()
        seen.extend([(c.x, c.y), a.x, e == E.y])
        o = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=x)
        return o
    run_kernel(kernel, (np.zeros((1, 1), np.float32), A(7), E.y), {}, frontend=frontends.NKI)
    assert seen == [(1, 64, 64), (1, 32, 64), (64, 64, 64), (64, 64, 32), (1, True), 7, True]


def test_dynamic_loops_deep_dive_examples():
    """nki/deep-dives/nki-dynamic-loops.rst: "dynamic_range loops inside a nl.no_reorder() block are not currently
    supported" and its workaround ("no_reorder inside the dynamic loop body"); its "Runtime trip count from a
    VirtualRegister" example (rows i .. i+128 for i in 0, 128, 256, 384 through scalar_offset=i) against NumPy."""
    def bad(a):
        with nl.no_reorder():
            for _ in nl.dynamic_range(2):
                nisa.memset(dst=_sb(), value=0.0)

    def workaround(a):
        for _ in nl.dynamic_range(2):
            with nl.no_reorder():
                nisa.memset(dst=_sb(), value=0.0)

    def example(input_tensor):
        out_tensor = nl.ndarray(input_tensor.shape, dtype=input_tensor.dtype, buffer=nl.shared_hbm)
        start = nisa.register_alloc(0)
        stop = nisa.register_alloc(512)
        for i in nl.dynamic_range(start, stop, 128):
            tile = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(src=input_tensor.ap([[512, 128], [1, 512]], scalar_offset=i), dst=tile)
            nisa.tensor_scalar(dst=result, data=tile, op0=nl.add, operand0=2.0)
            nisa.dma_copy(src=result, dst=out_tensor.ap([[512, 128], [1, 512]], scalar_offset=i))
        return out_tensor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with raises_rule("nkisim_bad_argument", "not supported inside a no_reorder block"):
            _run_isa(bad)
        _run_isa(workaround)
        x = np.random.default_rng(2).normal(size=(512, 512)).astype(np.float32)
        np.testing.assert_array_equal(_run(example, x), x + np.float32(2.0))


def test_nl_dtype_is_the_type_of_the_data_types():
    """nki/api/nki/language/__init__.py: "DType = str", the type of every nl data type (``bool_: DType``, ...),
    used in annotations (``dtype: nl.DType``); the name was missing."""
    assert all(isinstance(getattr(nl, n), nl.DType) for n in ("bool_", "int8", "uint32", "float16", "bfloat16",
                                                               "float32", "tfloat32", "float8_e4m3", "float8_e5m2"))

    def kernel(a, dt: nl.DType):
        o = nl.ndarray(a.shape, dtype=dt, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=a)
        return o
    assert _run(kernel, np.ones((4, 4), np.float32), nl.bfloat16).dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("mode, vector_ok, scalar_ok", [("unknown", True, True), ("swdge", True, True),
                                                       ("hwdge", False, True), ("none", False, False)])
def test_dge_modes_and_dynamic_addresses(mode, vector_ok, scalar_ok):
    """nki/deep-dives/nki-dge.rst: swdge "is the only mode that supports indirect (gather/scatter) operations with
    dynamic indices"; hwdge "Does not support indirect (gather/scatter) operations"; none "Cannot handle dynamic
    (runtime-computed) addresses or indices"; nisa.dma_copy: "When either sw_dge or hw_dge mode is used, the src and
    dst tensors can have a dynamic start address"."""
    dge = getattr(nisa.dge_mode, mode)
    x = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)

    def gather(a):
        idx = nl.ndarray((4, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.iota(dst=idx, pattern=[[0, 1]], channel_multiplier=2)  # rows 0, 2, 4, 6
        t = nl.ndarray((4, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[64, 4], [1, 64]], vector_offset=idx, indirect_dim=0), dge_mode=dge)
        o = nl.ndarray((4, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=t)
        return o

    def scalar(a):
        r = nisa.register_alloc(3)
        t = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[64, 1], [1, 64]], scalar_offset=r, indirect_dim=0), dge_mode=dge)
        o = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=t)
        return o
    for kernel, ok, want, frag in ((gather, vector_ok, x[0:8:2], "indirect (gather/scatter) view"),
                                   (scalar, scalar_ok, x[3:4], "run-time (scalar_offset) view")):
        if ok:
            np.testing.assert_array_equal(_run(kernel, x), want)
        else:
            with raises_rule("nkisim_bad_argument", frag, f"dge_mode={mode} cannot address"):
                _run(kernel, x)


def test_language_memory_and_argument_rules():
    """nl.store: "value: an SBUF tile that contains the values to store"; nl.device_print: "print_prefix ... must be
    a constant string", "tensor ... Can be in SBUF or HBM"; nl.random_seed: "seed: a [1,1] tensor on SBUF or PSUM
    with a 32-bit seed value"; nl.shared_constant: "Create a tensor in shared HBM" (it reported private_hbm)."""
    with raises_rule("err_unsupported_memory", "'value' of 'store'"):
        _run_isa(lambda a: nl.store(nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm),
                                    _sb(buffer=nl.psum, fill=1.0)))
    with raises_rule("err_unsupported_memory", "'tensor' of 'device_print'"):
        _run_isa(lambda a: nl.device_print("p", _sb(buffer=nl.psum, fill=1.0)))
    with pytest.raises(TypeError, match="print_prefix must be a constant string"):
        _run_isa(lambda a: nl.device_print(3, _sb(fill=1.0)))
    for seed in (lambda: 5, lambda: _sb((2, 1), dt=nl.int32, fill=1), lambda: _sb((1, 1), dt=nl.int16, fill=1)):
        with raises_rule("nkisim_bad_argument", "seed must be a [1, 1] SBUF or PSUM tensor holding a 32-bit value"):
            _run_isa(lambda a, seed=seed: nl.random_seed(seed()))
    seen = []
    _run_isa(lambda a: seen.append(nl.shared_constant(np.eye(4, dtype=np.float32)).buffer))
    assert seen == [nl.shared_hbm]


def test_range_select_and_select_reduce_documented_constraints():
    """nisa.range_select: "The comparison operators must be one of: nl.equal, nl.less, nl.less_equal, nl.greater,
    nl.greater_equal"; "on_true_tile must be one of the FP dtypes, and bound0/bound1 must be FP32 types"; reduce_op
    "Currently only nl.maximum is supported"; on_false_value "Due to hardware constraints, this must be FP32_MIN".
    nisa.select_reduce: "on_true can be any supported dtype except tfloat32, int32, uint32"; "predicate dtype can be
    any supported integer type int8, uint8, int16, uint16"; "reduce_res dtype must of float type"; "Either on_true or
    predicate may be in PSUM, but not both simultaneously".  All of these ran before."""
    fmin = float(np.finfo(np.float32).min)

    def rs(**kw):
        args = dict(dst=_sb(), on_true_tile=_sb(fill=1.0), comp_op0=nl.greater_equal, comp_op1=nl.less,
                    bound0=_sb((128, 1), fill=0.0), bound1=_sb((128, 1), fill=8.0), reduce_res=_sb((128, 1)),
                    reduce_op=nl.maximum, on_false_value=fmin)
        args.update({k: v() for k, v in kw.items()})
        nisa.range_select(**args)
    _run_isa(lambda a: rs())
    for kw, frag in ((dict(comp_op0=lambda: nl.not_equal), "'not_equal' is not a comparison operator"),
                     (dict(on_true_tile=lambda: _sb(dt=nl.int32, fill=1), dst=lambda: _sb(dt=nl.int32)),
                      "on_true_tile must have a floating-point dtype"),
                     (dict(bound1=lambda: _sb((128, 1), dt=nl.bfloat16, fill=8.0)), "bound1 must be a float32 tile"),
                     (dict(reduce_op=lambda: nl.add), "reduce_op must be nl.maximum"),
                     (dict(on_false_value=lambda: 0.0), "on_false_value must be FP32_MIN")):
        with raises_rule("nkisim_bad_argument", frag):
            _run_isa(lambda a, kw=kw: rs(**kw))

    def sr(**kw):
        args = dict(dst=_sb(), predicate=_sb(dt=nl.uint8, fill=1), on_true=_sb(fill=1.0), on_false=0.0,
                    reduce_res=_sb((128, 1)), reduce_cmd=nisa.reduce_cmd.reset_reduce)
        args.update({k: v() for k, v in kw.items()})
        nisa.select_reduce(**args)
    _run_isa(lambda a: sr())
    _run_isa(lambda a: sr(predicate=lambda: _sb(dt=nl.int16, fill=1)))
    for kw, frag in ((dict(on_true=lambda: _sb(dt=nl.int32, fill=1), dst=lambda: _sb(dt=nl.int32)),
                      "on_true cannot be int32"),
                     (dict(predicate=lambda: _sb(dt=nl.uint32, fill=1)), "predicate must be int8, uint8, int16"),
                     (dict(predicate=lambda: _sb(fill=1.0)), "got float32"),
                     (dict(reduce_res=lambda: _sb((128, 1), dt=nl.int32)), "reduce_res must have a float dtype")):
        with raises_rule("nkisim_bad_argument", frag):
            _run_isa(lambda a, kw=kw: sr(**kw))
    with raises_rule("nkisim_two_inputs_in_psum"):
        _run_isa(lambda a: sr(on_true=lambda: _sb(buffer=nl.psum, fill=1.0),
                              predicate=lambda: _sb(dt=nl.uint8, buffer=nl.psum, fill=1)))


def test_dma_transpose_destination_and_generation():
    """nisa.dma_transpose: "dst: the destination of transpose, must be a tile in SBUF"; "src.dtype == dst.dtype";
    dge_mode "Hardware based DGE is only supported for NeuronCore-v3 or newer" (an HBM destination, a casting
    transpose and hwdge on trn1 all ran)."""
    def kernel(dst_dtype=nl.bfloat16, dst_buffer=nl.sbuf, dge=nisa.dge_mode.unknown):
        def k(a):
            s = nl.ndarray((16, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=a)
            d = nl.ndarray((64, 16), dtype=dst_dtype, buffer=dst_buffer)
            nisa.dma_transpose(dst=d, src=s, dge_mode=dge)
            if dst_buffer is nl.shared_hbm:
                return d
            o = nl.ndarray((64, 16), dtype=dst_dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=o, src=d)
            return o
        return k
    x = np.random.default_rng(1).normal(size=(16, 64)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(_run(kernel(), x), x.T)
    with raises_rule("err_unsupported_memory", "'dst' of 'dma_transpose'"):
        _run(kernel(dst_buffer=nl.shared_hbm), x)
    with raises_rule("nkisim_dst_mismatch", "src.dtype == dst.dtype"):
        _run(kernel(dst_dtype=nl.float32), x)
    with raises_rule("nkisim_engine_op_unsupported", "hwdge", "trn1"):
        run_kernel(kernel(dge=nisa.dge_mode.hwdge), (x,), {}, frontend=frontends.NKI, target="trn1")
    np.testing.assert_array_equal(run_kernel(kernel(dge=nisa.dge_mode.hwdge), (x,), {}, frontend=frontends.NKI,
                                             target="trn2").outputs, x.T)


def test_migration_guide_removed_names():
    """NKI migration guide: "nki.isa.tensor_copy_dynamic_src / nki.isa.tensor_copy_dynamic_dst — removed ... Use
    nisa.tensor_copy() with .ap() and scalar_offset" (a bare AttributeError before)."""
    for name in ("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"):
        with pytest.raises(AttributeError, match="removed in NKI 0.4.0: use nisa.tensor_copy"):
            getattr(nisa, name)
