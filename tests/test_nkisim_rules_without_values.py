"""Issue 31's principle: a rule on shapes does not depend on whether values are computed.  Each check here once ran
only in a full run (values), so a timing run accepted a kernel a full run refused; both modes now refuse it with
the same error, and the shapes the rule allows still run in both."""
from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from nkisim.core.rules import NKIError
from nkisim.core.runtime import run_kernel

MODES = ("full", "timing")


def _copy_kernel(src_shape, dst_shape):
    @nki.jit
    def kernel(a):
        out = nl.ndarray(dst_shape, dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray(src_shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=a)
        d = nl.ndarray(dst_shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=d, src=s)
        nisa.dma_copy(dst=out, src=d)
        return out
    return kernel


def _predicated_kernel(src_shape, pred_shape, dst_shape):
    @nki.jit
    def kernel(a, pr):
        out = nl.ndarray(dst_shape, dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray(src_shape, dtype=nl.float32, buffer=nl.sbuf)
        p = nl.ndarray(pred_shape, dtype=nl.uint8, buffer=nl.sbuf)  # "predicate must be of type uint8, ..."
        nisa.dma_copy(dst=s, src=a)
        nisa.dma_copy(dst=p, src=pr)
        d = nl.ndarray(dst_shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=d, value=-1.0)
        nisa.tensor_copy_predicated(src=s, dst=d, predicate=p)
        nisa.dma_copy(dst=out, src=d)
        return out
    return kernel


def _refused(kernel, args, mode) -> NKIError:
    with pytest.raises(NKIError) as info:
        run_kernel(kernel, args, mode=mode)
    return info.value


@pytest.mark.parametrize("mode", MODES)
def test_tensor_copy_refuses_a_source_that_cannot_fill_dst_in_both_modes(mode):
    # more elements in dst than in src, same partitions, and [128, 3] does not broadcast to [128, 4]
    err = _refused(_copy_kernel((128, 3), (128, 4)), (np.ones((128, 3), np.float32),), mode)
    assert err.code == "nkisim_shape_mismatch"
    assert str(err) == "tensor_copy: operand shapes [[128, 3], [128, 4]] are not compatible"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("src_shape", "dst_shape"), [((128, 1), (128, 4)), ((128, 8), (128, 2, 4))])
def test_tensor_copy_still_broadcasts_and_reshapes_in_both_modes(mode, src_shape, dst_shape):
    a = np.random.default_rng(0).random(src_shape, dtype=np.float32)
    run = run_kernel(_copy_kernel(src_shape, dst_shape), (a,), mode=mode)
    if mode == "full":
        want = np.broadcast_to(a, dst_shape) if a.size != np.prod(dst_shape) else a.reshape(dst_shape)
        np.testing.assert_array_equal(run.outputs, want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("src_shape", "pred_shape", "operand"), [((128, 3), (128, 4), "src"),
                                                                  ((128, 4), (128, 3), "predicate")])
def test_tensor_copy_predicated_refuses_mismatched_operands_in_both_modes(mode, src_shape, pred_shape, operand):
    k = _predicated_kernel(src_shape, pred_shape, (128, 4))
    err = _refused(k, (np.ones(src_shape, np.float32), np.ones(pred_shape, np.float32)), mode)
    assert err.code == "nkisim_shape_mismatch"
    bad = src_shape if operand == "src" else pred_shape
    assert str(err) == (f"tensor_copy_predicated: operand shapes [{list(bad)}, [128, 4]] are not compatible "
                        f"({operand} and dst)")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("src_shape", "pred_shape"), [((128, 8), (128, 2, 4)), ((128, 1), (128, 8)),
                                                       ((128, 8), (128, 8))])
def test_tensor_copy_predicated_same_elements_or_broadcast_run_in_both_modes(mode, src_shape, pred_shape):
    rng = np.random.default_rng(1)
    a = rng.random(src_shape, dtype=np.float32)
    pr = (rng.random(pred_shape) < 0.5).astype(np.float32)
    dst_shape = (128, 8)
    run = run_kernel(_predicated_kernel(src_shape, pred_shape, dst_shape), (a, pr), mode=mode)
    if mode == "full":
        src = np.broadcast_to(a, dst_shape) if a.size != 128 * 8 else a.reshape(dst_shape)
        np.testing.assert_array_equal(run.outputs, np.where(pr.reshape(dst_shape) != 0, src, -1.0))


def _reduce_res_kernel(call, res_shape):
    """``call(dst, data, reduce_res)`` on a [128, 4] tile; returns dst and reduce_res (padded to [128, 1])."""
    @nki.jit
    def kernel(a):
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray(res_shape, dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        d = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray(res_shape, dtype=nl.float32, buffer=nl.sbuf)
        call(d, x, r)
        nisa.dma_copy(dst=out, src=d)
        nisa.dma_copy(dst=res, src=r)
        return out, res
    return kernel


def _ones(p):
    return nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)


def _range_select(d, x, r):
    lo, hi = _ones(128), _ones(128)
    nisa.memset(dst=lo, value=1.0)
    nisa.memset(dst=hi, value=3.0)
    nisa.range_select(dst=d, on_true_tile=x, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=lo, bound1=hi,
                      reduce_res=r, reduce_op=nl.maximum)


def _select_reduce(d, x, r):
    # "predicate dtype can be any supported integer type int8, uint8, int16, uint16" (NKI 0.6): x != 0 as uint8
    p = nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=p, data=x, op0=nl.not_equal, operand0=0.0)
    nisa.select_reduce(dst=d, predicate=p, on_true=x, on_false=-5.0, reduce_res=r,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce)


REDUCE_RES_CALLS = {
    "activation": (lambda d, x, r: nisa.activation_reduce(dst=d, op=nl.exp, data=x, reduce_op=nl.add, reduce_res=r),
                   lambda x: np.exp(x).sum(axis=1, keepdims=True)),
    "range_select": (_range_select, lambda x: x[:, 1:3].max(axis=1, keepdims=True)),
    "select_reduce": (_select_reduce, lambda x: np.where(x != 0, x, -5.0).max(axis=1, keepdims=True)),
    "tensor_scalar_reduce": (lambda d, x, r: nisa.tensor_scalar_reduce(dst=d, data=x, op0=nl.multiply, operand0=2.0,
                                                                         reduce_op=nl.add, reduce_res=r),
                             lambda x: (2 * x).sum(axis=1, keepdims=True)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", sorted(REDUCE_RES_CALLS))
@pytest.mark.parametrize("res_shape", [(128, 2), (64, 1)])
def test_reduce_res_of_the_wrong_shape_is_refused_in_both_modes(mode, op, res_shape):
    """reduce_res holds one register per partition; a [128, 2] or [64, 1] one failed only in a full run (NumPy's
    reshape of the registers), and a timing run accepted it."""
    x = np.random.default_rng(2).random((128, 4), dtype=np.float32)
    err = _refused(_reduce_res_kernel(REDUCE_RES_CALLS[op][0], res_shape), (x,), mode)
    assert err.code == "nkisim_reduce_res_shape"
    # the docs' words (NKI 0.6 nki.isa.activation_reduce): a tile of one element per partition, never "a scalar"
    assert "reduce_res must be a SBUF/PSUM tile with the same partition axis size as the input tile" in str(err)
    assert "a scalar" not in str(err) and "shape (128, 1); got " + str(list(res_shape)) in str(err)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", sorted(REDUCE_RES_CALLS))
@pytest.mark.parametrize("res_shape", [(128, 1), (128,)])
def test_reduce_res_of_one_element_per_partition_runs_in_both_modes(mode, op, res_shape):
    x = np.random.default_rng(3).random((128, 4), dtype=np.float32)
    run = run_kernel(_reduce_res_kernel(REDUCE_RES_CALLS[op][0], res_shape), (x,), mode=mode)
    if mode == "full":
        np.testing.assert_allclose(run.outputs[1].reshape(128, 1), REDUCE_RES_CALLS[op][1](x), rtol=1e-6)


def _where_kernel(shapes, scalar_y=None):
    @nki.jit
    def kernel(*ins):
        ts = []
        for a, s in zip(ins, shapes):
            t = nl.ndarray(s, dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            ts.append(t)
        r = nl.where(ts[0], ts[1], ts[2] if scalar_y is None else scalar_y)
        out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=r)
        return out
    return kernel


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shapes", [[(128, 4), (128, 3), (128, 4)], [(128, 4), (128, 4), (128, 2)]])
def test_where_refuses_an_operand_that_cannot_fill_the_result_in_both_modes(mode, shapes):
    """nl.where's operands were broadcast only by NumPy in a full run (a device fault there, nothing in a timing
    run); both modes now refuse the shapes."""
    err = _refused(_where_kernel(shapes), tuple(np.ones(s, np.float32) for s in shapes), mode)
    assert err.code == "nkisim_shape_mismatch"
    assert str(err) == f"where: operand shapes {[list(s) for s in shapes]} are not compatible"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shapes", [[(128, 4), (128, 1), (128, 4)], [(128, 4), (128, 4), (1, 4)],
                                    [(128, 2, 3), (128, 1), (128, 2, 3)], [(128, 4), (128, 4)]])
def test_where_broadcasts_per_partition_and_row_operands_in_both_modes(mode, shapes):
    rng = np.random.default_rng(4)
    args = [(rng.random(shapes[0]) < 0.5).astype(np.float32)] + [rng.random(s, dtype=np.float32) for s in shapes[1:]]
    scalar_y = -2.0 if len(shapes) == 2 else None
    run = run_kernel(_where_kernel(shapes, scalar_y), tuple(args), mode=mode)
    if mode == "full":
        def fill(a):
            return np.broadcast_to(a.reshape(a.shape + (1,) * (len(shapes[0]) - a.ndim)), shapes[0])
        y = np.float32(scalar_y) if scalar_y is not None else fill(args[2])
        np.testing.assert_array_equal(run.outputs, np.where(args[0] != 0, fill(args[1]), y))
