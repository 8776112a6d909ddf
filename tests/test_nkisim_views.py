"""Views written as slices, as index expressions (nl.arange / nl.mgrid) and as composed views address the same
elements: every write path (matmul accumulation, +=, masks, dtype casts, retargeted results, stores and DMA
destinations) gives bit-identical results whichever way a kernel spells its accesses (issue 10, items 1 and 5)."""

from __future__ import annotations

import warnings

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nkisim_util import raises_rule

from nkisim.core.rules import NKISimulationWarning
from nkisim.core.runtime import run_kernel

STYLES = ("slice", "arange", "mgrid", "composed", "overlong")


def view(t, style: str, p0: int, np_: int, f0: int, nf: int):
    """t[p0:p0+np_, f0:f0+nf] spelled in one of the STYLES."""
    if style == "slice":
        return t[p0:p0 + np_, f0:f0 + nf]
    if style == "arange":
        i_p = nl.arange(np_)[:, None]
        i_f = nl.arange(nf)[None, :]
        return t[p0 + i_p, i_f + f0]
    if style == "mgrid":
        i_p, i_f = nl.mgrid[0:np_, 0:nf]
        return t[i_p + p0, f0 + i_f]
    if style == "composed":  # a slice of a slice, then an integer-free window of it
        return t[p0:, :][0:np_, f0:][:, 0:nf]
    # a window running past the tile's end, sliced back in bounds (lazy views: only the final access counts)
    over = t[:, f0:f0 + t.shape[1]]
    return over[p0:p0 + np_, 0:nf]


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _run_both(make_kernel, args, style_a: str, style_b: str, target: str = "trn2"):
    # windows at any partition: view semantics, run as AWS's simulator runs them (compiling refuses an operand off
    # the legal start partitions, docs/grading-security.md G10; simulation warns)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NKISimulationWarning)
        ra = run_kernel(make_kernel(style_a), args, target=target, simulate=True)
        rb = run_kernel(make_kernel(style_b), args, target=target, simulate=True)
    outs_a = ra.outputs if isinstance(ra.outputs, tuple) else (ra.outputs,)
    outs_b = rb.outputs if isinstance(rb.outputs, tuple) else (rb.outputs,)
    for a, b in zip(outs_a, outs_b):
        np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=f"{style_a} vs {style_b}")
    # the same instructions on the same operands: an index expression is the access a slice makes, for the
    # cost model too
    assert [(i.op, int(i.engine), i.srcs, i.dsts) for i in ra.trace] == \
        [(i.op, int(i.engine), i.srcs, i.dsts) for i in rb.trace], f"{style_a} vs {style_b}: different instructions"
    return ra


OPS = ("matmul_acc", "nl_matmul_acc", "matmul_assign", "add", "scalar", "exp", "cast", "iadd", "masked_add",
       "masked_store", "dma_copy", "reduce", "transpose", "psum_iadd_vector", "acc_plus_matmul", "where",
       "masked_load", "store_cast", "activation_bias", "isa_tensor_scalar", "isa_copy_scalar_engine")


def make(op: str, p0: int, np_: int, f0: int, nf: int, lim: int):
    """Kernel factory: the op's destination (and sources) accessed through ``view`` in the given style."""

    def factory(style):
        def k(x, y, w):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.hbm)
            xt = nl.load(x)
            yt = nl.load(y)
            if op in ("matmul_acc", "nl_matmul_acc", "matmul_assign", "acc_plus_matmul"):
                acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
                wt = nl.load(w)
                for j in nl.affine_range(3):
                    lhs = wt[j * 8:j * 8 + 8, 0:np_]
                    rhs = yt[j * 8:j * 8 + 8, 0:nf]
                    if op == "matmul_acc":
                        view(acc, style, p0, np_, f0, nf)[...] += nisa.nc_matmul(lhs, rhs)
                    elif op == "nl_matmul_acc":
                        dst = view(acc, style, p0, np_, f0, nf)
                        dst += nl.matmul(lhs, rhs, transpose_x=True)
                    elif op == "acc_plus_matmul":
                        dst = view(acc, style, p0, np_, f0, nf)
                        dst[...] = dst + nl.matmul(lhs, rhs, transpose_x=True)
                    else:
                        view(acc, style, p0, np_, f0, nf)[...] = nisa.nc_matmul(lhs, rhs)
                nl.store(out, nl.copy(acc))
                return out
            if op == "transpose":
                ps = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
                view(ps, style, p0, np_, f0, nf)[...] = nisa.nc_transpose(xt[0:nf, 0:np_])
                nl.store(out, nl.copy(ps))
                return out
            if op == "psum_iadd_vector":
                ps = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
                dst = view(ps, style, p0, np_, f0, nf)
                dst += view(xt, style, p0, np_, f0, nf)
                nl.store(out, nl.copy(ps))
                return out
            dst_t = nl.zeros((128, 64), nl.float16 if op == "cast" else nl.float32, buffer=nl.sbuf)
            src = view(xt, style, p0, np_, f0, nf)
            i_m = nl.arange(np_)[:, None]
            if op == "add":
                view(dst_t, style, p0, np_, f0, nf)[...] = nl.add(src, view(yt, style, p0, np_, f0, nf))
            elif op == "scalar":
                view(dst_t, style, p0, np_, f0, nf)[...] = nl.multiply(src, 3.0)
            elif op == "exp":
                view(dst_t, style, p0, np_, f0, nf)[...] = nl.exp(src)
            elif op == "cast":
                view(dst_t, style, p0, np_, f0, nf)[...] = nl.copy(src, dtype=nl.float16)
            elif op == "iadd":
                d = view(dst_t, style, p0, np_, f0, nf)
                d += src
                d += view(yt, style, p0, np_, f0, nf)
            elif op == "masked_add":
                view(dst_t, style, p0, np_, f0, nf)[...] = nl.add(src, 1.0, mask=(i_m < lim))
            elif op == "reduce":
                col = view(dst_t, style, p0, np_, f0, 1)
                col[...] = nl.sum(src, axis=1, keepdims=True)
            elif op == "where":
                view(dst_t, style, p0, np_, f0, nf)[...] = nl.where(nl.greater(src, 0.0), src,
                                                                    view(yt, style, p0, np_, f0, nf))
            elif op == "masked_load":
                view(dst_t, style, p0, np_, f0, nf)[...] = nl.load(view(x, style, p0, np_, f0, nf),
                                                                   mask=(i_m < lim))
            elif op == "activation_bias":
                bias = view(yt, style, p0, np_, 0, 1)
                view(dst_t, style, p0, np_, f0, nf)[...] = nisa.activation(op=nl.exp, data=src, bias=bias,
                                                                           scale=0.5)
            elif op == "isa_tensor_scalar":
                view(dst_t, style, p0, np_, f0, nf)[...] = nisa.tensor_scalar(src, np.multiply, 2.0,
                                                                              op1=np.add, operand1=1.0)
            elif op == "isa_copy_scalar_engine":
                view(dst_t, style, p0, np_, f0, nf)[...] = nisa.activation(op=nl.copy, data=src)
            elif op == "store_cast":
                out16 = nl.ndarray((128, 64), dtype=nl.float16, buffer=nl.hbm)
                nl.store(out16, nl.copy(dst_t, dtype=nl.float16))
                nl.store(view(out16, style, p0, np_, f0, nf), value=src)  # the DMA casts fp32 -> fp16
                return out16
            elif op == "masked_store":
                nl.store(out, nl.copy(dst_t))
                nl.store(view(out, style, p0, np_, f0, nf), value=nl.copy(src), mask=(i_m < lim))
                return out
            elif op == "dma_copy":
                nl.store(out, nl.copy(dst_t))
                nisa.dma_copy(dst=view(out, style, p0, np_, f0, nf), src=view(yt, style, p0, np_, f0, nf))
                return out
            res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            res[...] = nl.copy(dst_t, dtype=nl.float32)
            nl.store(out, res)
            return out

        return k

    return factory


RNG = np.random.default_rng(10)
X = RNG.standard_normal((128, 64)).astype(np.float32)
Y = RNG.standard_normal((128, 64)).astype(np.float32)
W = RNG.standard_normal((128, 128)).astype(np.float32)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(OPS), style=st.sampled_from(STYLES[1:]), p0=st.integers(0, 64),
       np_=st.integers(1, 64), f0=st.integers(0, 32), nf=st.integers(1, 32), lim=st.integers(0, 64),
       target=st.sampled_from(["trn1", "trn2"]))
def test_index_expressions_and_slices_are_bit_identical(op, style, p0, np_, f0, nf, lim, target, monkeypatch):
    monkeypatch.delenv("NKISIM_TOOLCHAIN_ERA", raising=False)
    if op == "acc_plus_matmul":
        target = "trn1"  # the 2024 toolchain's spelling of accumulation
    _run_both(make(op, p0, np_, f0, nf, lim), (X, Y, W), "slice", style, target)


@pytest.mark.parametrize("op", OPS)
def test_every_op_and_style_agree_on_one_ragged_window(op, monkeypatch):
    """Every (op, style) pair at least once, on a window that starts off the origin (at partition 64, a legal start
    for 61 partitions, docs/grading-security.md G10) and ends off the edges."""
    monkeypatch.delenv("NKISIM_TOOLCHAIN_ERA", raising=False)
    target = "trn1" if op == "acc_plus_matmul" else "trn2"
    for style in STYLES[1:]:
        _run_both(make(op, 64, 61, 5, 27, 40), (X, Y, W), "slice", style, target)


def test_matmul_accumulates_into_index_expression_psum_destination():
    """The issue's pattern: ``acc[i_p, i_f] += nl.matmul(w, x)`` inside loops keeps every matmul, not the last."""
    w = RNG.standard_normal((2, 3, 128, 128)).astype(np.float32)
    x = RNG.standard_normal((2, 3, 128, 96)).astype(np.float32)

    def k(w, x):
        out = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.hbm)
        acc = nl.zeros((128, 96), nl.float32, buffer=nl.psum)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(96)[None, :]
        for c in nl.affine_range(2):  # channel tiles
            for f in nl.affine_range(3):  # filter positions
                acc[i_p, i_f] += nl.matmul(nl.load(w[c, f]), nl.load(x[c, f]), transpose_x=True)
        nl.store(out[i_p, i_f], value=acc[i_p, i_f])
        return out

    run = run_kernel(k, (w, x))
    ref = sum(w[c, f].astype(np.float64).T @ x[c, f] for c in range(2) for f in range(3))
    np.testing.assert_allclose(run.outputs, ref, rtol=1e-4, atol=1e-4)
    ops = [i.op for i in run.trace]
    assert ops.count("nc_matmul") == 6 and ops.count("tensor_copy") == 1  # no copies for `acc[...] +=`


def test_overlong_window_sliced_back_in_bounds():
    """``win = t[:, off:off + n]`` past the tile's end, then ``win[:, j:j + m]`` inside it: legal, lazy view."""
    a = np.arange(128 * 40, dtype=np.float32).reshape(128, 40)

    def k(a):
        out = nl.ndarray((128, 12), dtype=nl.float32, buffer=nl.hbm)
        t = nl.load(a)
        win = t[:, 30:30 + 16]  # runs 6 columns past the end
        nl.store(out[:, 0:8], value=nl.copy(win[:, 2:10]))
        row = t[3:5, :][1]  # an integer index of a slice
        nl.store(out[0:1, 8:12], value=nl.copy(t[0:4, :][:, 36:][1:2, :]))
        del row
        return out

    with pytest.warns(NKISimulationWarning, match="starting at partition"):  # t[3:5][1]: partition 4 (G10)
        out = run_kernel(k, (a,), simulate=True).outputs
    np.testing.assert_array_equal(out[:, 0:8], a[:, 32:40])
    np.testing.assert_array_equal(out[0, 8:12], a[1, 36:40])


def test_bounds_are_checked_on_the_access_used():
    a = np.zeros((128, 40), np.float32)

    def bad(a):
        t = nl.load(a)
        win = t[:, 30:30 + 16]
        return nl.copy(win[:, 4:12])  # columns 34..41 of 40

    with raises_rule("err_tensor_access_out_of_bound", "dimension 1", "[34, 41]", "size of 40"):
        run_kernel(bad, (a,))

    def masked(a):
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.hbm)
        t = nl.load(a)
        i_f = nl.arange(8)[None, :]
        nl.store(out, value=nl.copy(t[:, 30:30 + 16][:, 4:12], mask=(i_f < 6)))
        return out

    run_kernel(masked, (a,))  # masked-off positions may lie outside the tile

    def slice_of_slice_past_view(a):
        out = nl.ndarray((128, 10), dtype=nl.float32, buffer=nl.hbm)
        t = nl.load(a)
        nl.store(out, value=nl.copy(t[:, 0:10][:, 5:15]))  # past the 10-wide view, inside the 40-wide tile
        return out

    out = run_kernel(slice_of_slice_past_view, (np.arange(128 * 40, dtype=np.float32).reshape(128, 40),)).outputs
    np.testing.assert_array_equal(out, np.arange(128 * 40, dtype=np.float32).reshape(128, 40)[:, 5:15])


def test_views_of_index_expression_views_compose():
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)

    def k(a):
        out = nl.ndarray((64, 16), dtype=nl.float32, buffer=nl.hbm)
        t = nl.load(a)
        i_p, i_f = nl.mgrid[0:128, 0:32]
        g = t[i_p, 2 * i_f]  # even columns
        nl.store(out, value=nl.copy(g[64:128, 4:20]))
        return out

    out = run_kernel(k, (a,)).outputs
    np.testing.assert_array_equal(out, a[64:128, 8:40:2])


def test_reshape_of_a_slice_where_the_layout_allows():
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)

    def k(a):
        out = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.hbm)
        t = nl.load(a)
        nl.store(out, value=nl.copy(t[:, 32:64].reshape((128, 4, 8))))
        return out

    out = run_kernel(k, (a,)).outputs
    np.testing.assert_array_equal(out, a[:, 32:64].reshape(128, 4, 8))

    def strided(a):
        t = nl.load(a)
        t[:, 0:64:2].reshape((128, 4, 8))[:, 1:3, :].reshape((128, 16))  # strided but splittable: legal

    run_kernel(strided, (a,))

    def merges_strided_axes(a):
        t = nl.load(a)
        t[:, 0:64].reshape((128, 8, 8))[:, :, 0:4].reshape((128, 32))

    with raises_rule("nkisim_reshape", "not contiguous"):
        run_kernel(merges_strided_axes, (a,))

    def changes_partitions(a):
        t = nl.load(a)
        t[:, 0:8].reshape((128 * 8,))

    with raises_rule("nkisim_reshape", "partition dimension"):
        run_kernel(changes_partitions, (a,))


@pytest.mark.parametrize("how", ["partition_arange_with_mgrid", "fewer_axes", "free_only"])
def test_masks_are_predicates_over_the_access_index_variables(how):
    a = np.arange(128 * 4 * 8, dtype=np.float32).reshape(128, 4, 8)

    def k(a):
        out = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.hbm)
        z = nl.zeros((128, 4, 8), nl.float32, buffer=nl.sbuf)
        nl.store(out, value=z)
        i_p = nl.arange(128)[:, None]
        _, i_y, i_x = nl.mgrid[0:1, 0:4, 0:8]
        if how == "partition_arange_with_mgrid":
            ip3 = nl.arange(128)[:, None, None]
            mask = (i_p < 100) & (i_y < 3) & (i_x >= 2)
            t = nl.load(a[ip3, i_y, i_x], mask=mask)
            nl.store(out[ip3, i_y, i_x], value=t, mask=mask)
        elif how == "fewer_axes":
            ip3 = nl.arange(128)[:, None, None]
            t = nl.load(a[ip3, i_y, i_x], mask=(i_p < 100))
            nl.store(out[ip3, i_y, i_x], value=t, mask=(i_p < 100))
        else:
            t = nl.load(a)
            nl.store(out[:, :, :], value=t, mask=(nl.arange(8)[None, :] >= 2))
        return out

    out = run_kernel(k, (a,)).outputs
    p, y, x = np.meshgrid(np.arange(128), np.arange(4), np.arange(8), indexing="ij")
    keep = {"partition_arange_with_mgrid": (p < 100) & (y < 3) & (x >= 2), "fewer_axes": p < 100,
            "free_only": x >= 2}[how]
    np.testing.assert_array_equal(out, np.where(keep, a, 0))


def test_reshape_of_an_index_expression_view_regroups_its_free_positions():
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)

    def k(a):
        out = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.hbm)
        t = nl.load(a)
        i_p, i_f = nl.mgrid[0:128, 0:32]
        nl.store(out, value=nl.copy(t[i_p, 2 * i_f].reshape((128, 4, 8))))
        return out

    np.testing.assert_array_equal(run_kernel(k, (a,)).outputs, a[:, 0:64:2].reshape(128, 4, 8))


def test_index_expression_views_extend_affinely_past_their_extent():
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)

    def k(a):
        out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.hbm)
        t = nl.load(a)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(16)[None, :]
        g = t[i_p, 2 + i_f]  # columns 2..17
        nl.store(out, value=nl.copy(g[:, 8:24]))  # the pattern continues: columns 10..25
        return out

    np.testing.assert_array_equal(run_kernel(k, (a,)).outputs, a[:, 10:26])

    def not_affine(a):
        t = nl.load(a)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(16)[None, :]
        t[i_p, i_f % 4][:, 10:20]

    with pytest.raises(IndexError, match="not affine"):
        run_kernel(not_affine, (a,))


@pytest.mark.parametrize("mode", ["full", "timing"])
@pytest.mark.parametrize("op", ["reciprocal", "tensor_copy_predicated", "max8"])
def test_less_common_isa_ops_check_bounds_on_the_access_used(op, mode):
    """The less common nki.isa instructions (core/ops/reduce.py, gpsimd.py) bounds-check their operands like the
    common ones: an over-long window is an error, never a silently clipped read."""
    a = np.ones((128, 40), np.float32)

    def kernel(a):
        t = nl.load(a)
        win = t[:, 30:30 + 16][:, 4:12]  # columns 34..41 of 40
        if op == "reciprocal":
            return nisa.reciprocal(data=win)
        if op == "max8":
            return nisa.max8(src=win)
        dst = nl.zeros((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        return nisa.tensor_copy_predicated(src=win, dst=dst, predicate=t[:, 0:8])

    with raises_rule("err_tensor_access_out_of_bound", "dimension 1", "[34, 41]"):
        run_kernel(kernel, (a,), mode=mode)
