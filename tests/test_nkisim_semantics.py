"""nkisim front-end semantics: HBM opacity, poisoning, PSUM accumulation groups, retargeting, capacity,
indexing and views, launchers and the API surface real kernels use."""

from __future__ import annotations

import logging

import ml_dtypes
import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest
from nkisim_util import raises_rule

from nkisim.core.instr import Buf
from nkisim.core.rules import NKIError
from nkisim.core.runtime import run_kernel
from nkisim.core.tensor import Tensor


def run(kernel, *args, **kwargs):
    return run_kernel(kernel, args, kwargs).outputs


def _store(r):
    out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.hbm)
    nl.store(out, r)
    return out


A = np.arange(128 * 64, dtype=np.float32).reshape(128, 64) / 100


# ---------------------------------------------------------------------------------------------------------
# HBM opacity: kernel code can never read host data


@pytest.mark.parametrize("action,fragment", [
    (lambda a: np.asarray(a), "np.asarray"),
    (lambda a: np.array(a), "np.asarray"),
    (lambda a: a + 1, "arithmetic"),
    (lambda a: 1 + a, "arithmetic"),
    (lambda a: a * a, "arithmetic"),
    (lambda a: -a, "arithmetic"),
    (lambda a: list(a), "iteration"),
    (lambda a: [x for x in a], "iteration"),
    (lambda a: float(a), "Python number"),
    (lambda a: int(a[0, 0]), "Python number"),
    (lambda a: a.tolist(), "tolist"),
    (lambda a: bool(a), "truth value"),
    (lambda a: range(10)[a], "Python index"),
    (lambda a: np.asarray(a.reshape((64, 128))[3]), "np.asarray"),
])
def test_hbm_is_opaque(action, fragment):
    def k(a):
        action(a)

    with raises_rule("nkisim_hbm_opaque", "HBM tensor 'a'", fragment, "dma_copy"):
        run(k, A)


def test_hbm_public_attributes_do_not_expose_data():
    seen = {}

    def k(a):
        for name in dir(a):
            if not name.startswith("_"):
                seen[name] = getattr(a, name)

    run(k, A)
    assert {"shape", "dtype", "ndim", "reshape"} <= set(seen)
    for name, value in seen.items():
        assert not isinstance(value, (np.ndarray, memoryview, bytes)), name
        assert not hasattr(value, "__array_interface__"), name
    assert seen["shape"] == (128, 64) and seen["dtype"] == np.float32


def test_numpy_ufunc_on_hbm_is_rejected():
    def k(a):
        np.add(a, 1)

    with pytest.raises(TypeError):
        run(k, A)


def test_on_chip_tile_values_are_not_host_visible():
    def k(a):
        t = nl.load(a)
        if t:
            pass

    with raises_rule("err_ambiguous_tensor_truth_value", "truth value of an array"):
        run(k, A)

    def k2(a):
        float(nl.load(a)[0, 0])

    with raises_rule("err_dynamic_control_flow_not_supported", "depending on tensor value"):
        run(k2, A)


# ---------------------------------------------------------------------------------------------------------
# uninitialized memory is poisoned (NaN for floats, 4 for integers), as in AWS's simulator


@pytest.mark.parametrize("dt,poison", [(np.float32, np.nan), (np.float16, np.nan), (ml_dtypes.bfloat16, np.nan),
                                       (np.int32, 4), (np.uint8, 4)])
def test_uninitialized_tiles_are_poisoned(dt, poison):
    def k(a):
        t = nl.ndarray((128, 4), dtype=dt, buffer=nl.sbuf)
        nl.store(a_out := nl.ndarray((128, 4), dtype=dt, buffer=nl.hbm), t)
        return a_out

    out = run(k, A)
    if np.isnan(poison):
        assert np.isnan(out.astype(np.float32)).all()
    else:
        assert (out == poison).all()


def test_partially_written_tile_shows_poison():
    def k(a):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        t[:, 0:32] = nl.load(a[:, 0:32])
        return _store(nl.add(t, 1.0))

    out = run(k, A)
    np.testing.assert_array_equal(out[:, :32], A[:, :32] + 1)
    assert np.isnan(out[:, 32:]).all()


def test_partially_written_output_shows_poison():
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        nl.store(out[0:64], nl.load(a[0:64]))
        return out

    out = run(k, A)
    np.testing.assert_array_equal(out[:64], A[:64])
    assert np.isnan(out[64:]).all()


# ---------------------------------------------------------------------------------------------------------
# PSUM accumulation groups


X = (np.arange(128 * 128, dtype=np.float32).reshape(128, 128) % 7) / 7
Y = (np.arange(128 * 256, dtype=np.float32).reshape(128, 256) % 5) / 5
XY = X.T.astype(np.float64) @ Y


def test_first_matmul_into_fresh_psum_ndarray_overwrites_then_accumulates():
    def k(x, y):
        ps = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)  # poisoned, never zeroed
        xt, yt = nl.load(x), nl.load(y)
        ps += nisa.nc_matmul(xt, yt)
        first = _store(nl.copy(ps))
        ps += nisa.nc_matmul(xt, yt)
        ps += nisa.nc_matmul(xt, yt)
        return first, _store(nl.copy(ps))

    first, third = run(k, X, Y)
    np.testing.assert_allclose(first, XY, rtol=1e-6)
    np.testing.assert_allclose(third, 3 * XY, rtol=1e-6)


def test_zeros_psum_accumulates():
    def k(x, y):
        ps = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
        for _ in nl.affine_range(4):
            ps += nl.matmul(nl.load(x), nl.load(y), transpose_x=True)
        return _store(nl.copy(ps))

    np.testing.assert_allclose(run(k, X, Y), 4 * XY, rtol=1e-6)


def test_psum_tile_allocated_inside_loop_starts_fresh():
    def k(x, y):
        out = nl.ndarray((3, 128, 256), dtype=nl.float32, buffer=nl.hbm)
        xt, yt = nl.load(x), nl.load(y)
        for i in nl.affine_range(3):
            ps = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
            for _ in nl.affine_range(i + 1):
                ps += nisa.nc_matmul(xt, yt)
            nl.store(out[i], nl.copy(ps))
        return out

    out = run(k, X, Y)
    for i in range(3):
        np.testing.assert_allclose(out[i], (i + 1) * XY, rtol=1e-6)


def test_assignment_starts_a_new_group():
    def k(x, y):
        ps = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
        xt, yt = nl.load(x), nl.load(y)
        ps += nisa.nc_matmul(xt, yt)
        ps += nisa.nc_matmul(xt, yt)
        ps[...] = nisa.nc_matmul(xt, yt)  # overwrite: a new accumulation group
        a = _store(nl.copy(ps))
        ps += nisa.nc_matmul(xt, yt)
        return a, _store(nl.copy(ps))

    a, b = run(k, X, Y)
    np.testing.assert_allclose(a, XY, rtol=1e-6)
    np.testing.assert_allclose(b, 2 * XY, rtol=1e-6)


def test_indexed_accumulate_into_psum_slices():
    def k(x, y):
        ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        xt, yt = nl.load(x), nl.load(y)
        for j in nl.affine_range(2):
            ps[:, j * 256:(j + 1) * 256] += nisa.nc_matmul(xt, yt)
            ps[:, j * 256:(j + 1) * 256] += nisa.nc_matmul(xt, yt)
        return _store(nl.copy(ps))

    run_ = run_kernel(k, (X, Y))
    np.testing.assert_allclose(run_.outputs, np.concatenate([2 * XY, 2 * XY], axis=1), rtol=1e-6)
    assert [i.op for i in run_.trace].count("nc_matmul") == 4
    assert [i.op for i in run_.trace].count("tensor_copy") == 1  # only nl.copy: no self-copies for `t[i] +=`


def test_fp16_psum_tile_stores_rounded_sums():
    x16, y16 = X.astype(np.float16), Y.astype(np.float16)

    def k(x, y):
        ps = nl.zeros((128, 256), nl.float16, buffer=nl.psum)
        for _ in nl.affine_range(2):
            ps += nisa.nc_matmul(nl.load(x), nl.load(y))
        return _store(nl.copy(ps))

    out = run(k, x16, y16)
    assert out.dtype == np.float16
    once = (x16.astype(np.float32).T @ y16.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(out, (once.astype(np.float32) * 2).astype(np.float16))


# ---------------------------------------------------------------------------------------------------------
# retargeting: the result of an instruction assigned into a tensor is written there by that one instruction


def _instrs(trace, op):
    return [i for i in trace if i.op == op]


def test_assign_tensor_copy_is_one_instruction():
    def k(a):
        t = nl.load(a)
        dst = nl.ndarray((128, 64), dtype=nl.float16, buffer=nl.sbuf)
        dst[...] = nisa.tensor_copy(t)
        return _store(dst)

    run_ = run_kernel(k, (A,))
    (tc,) = _instrs(run_.trace, "tensor_copy")
    store = run_.trace.instrs[-1]
    assert store.op == "dma_copy" and tc.dsts[0].region == store.srcs[0].region
    assert tc.dsts[0].dtype == "float16"
    np.testing.assert_array_equal(run_.outputs, A.astype(np.float16))


def test_psum_iadd_matmul_is_one_instruction():
    def k(x, y):
        ps = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
        ps += nisa.nc_matmul(nl.load(x), nl.load(y))
        return _store(nisa.tensor_copy(ps))

    run_ = run_kernel(k, (X, Y))
    (mm,) = _instrs(run_.trace, "nc_matmul")
    (tc,) = _instrs(run_.trace, "tensor_copy")
    assert mm.dsts[0].region == tc.srcs[0].region and mm.dsts[0].region.buf == Buf.PSUM
    assert mm.attrs["accumulate"] is True
    # a zeroed PSUM accumulator may or may not cost a memset; nothing else is emitted
    assert [i.op for i in run_.trace if i.op != "memset"] == ["dma_copy", "dma_copy", "nc_matmul", "tensor_copy",
                                                              "dma_copy"]
    np.testing.assert_allclose(run_.outputs, XY, rtol=1e-6)


@pytest.mark.parametrize("make", [lambda t: nl.add(t, t), lambda t: nl.exp(t), lambda t: nl.load_transpose2d(t),
                                  lambda t: nl.load(t)])
def test_assign_fresh_results_retarget(make):
    def k(a):
        src = a if make.__code__.co_names[-1].startswith("load") else nl.load(a)
        dst = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        dst[...] = make(src)
        return _store(dst)

    sq = np.arange(128 * 128, dtype=np.float32).reshape(128, 128) / 1e3
    run_ = run_kernel(k, (sq,))
    ops = [i.op for i in run_.trace]
    assert "tensor_copy" not in ops
    assert run_.trace.instrs[-2].dsts[0].region == run_.trace.instrs[-1].srcs[0].region


def test_assign_existing_tile_copies():
    """Assigning a tile that is not a fresh result is a real copy (PSUM -> SBUF evacuation)."""
    def k(x, y):
        ps = nisa.nc_matmul(nl.load(x), nl.load(y))
        res = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
        keep = ps
        res[...] = keep
        return _store(res)

    run_ = run_kernel(k, (X, Y))
    assert len(_instrs(run_.trace, "tensor_copy")) == 1
    np.testing.assert_allclose(run_.outputs, XY, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# capacity


def _sbuf_tile_kernel(nbytes: int):
    def k():
        t = nl.ndarray((128, nbytes), dtype=nl.uint8, buffer=nl.sbuf, name="big")
        t[...] = 1
    return k


@pytest.mark.parametrize("target,usable", [("trn2", 212984), ("trn1", 180224)])
def test_sbuf_exactly_full_passes_one_more_byte_fails(monkeypatch, target, usable):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    assert nl.tile_size.total_available_sbuf_size == usable
    run_ = run_kernel(_sbuf_tile_kernel(usable), ())
    assert run_.target == target and run_.peak_sbuf_bytes == usable
    with raises_rule("nkisim_sbuf_capacity", f"on {target}", f"{usable + 1} bytes per partition live",
                     f"capacity {usable}", "'big'"):
        run_kernel(_sbuf_tile_kernel(usable + 1), ())


def test_target_argument_overrides_environment(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    run_kernel(_sbuf_tile_kernel(180224), (), target="trn1")
    with raises_rule("nkisim_sbuf_capacity", "on trn1", "capacity 180224"):
        run_kernel(_sbuf_tile_kernel(180225), (), target="gen2")  # AWS's alias for NeuronCore-v2
    with pytest.raises(ValueError, match="unknown Neuron target"):
        run_kernel(_sbuf_tile_kernel(8), (), target="trn9")


def test_sbuf_capacity_names_largest_tiles():
    """Issue 33: live tiles past the usable bytes spill (core.spill); a tile that cannot fit even with every other
    tile spilled is the error, which names the largest live tiles."""
    def k(huge):
        a = nl.ndarray((128, 60 * 1024), dtype=nl.float16, buffer=nl.sbuf, name="a_big")
        b = nl.ndarray((128, 30 * 1024), dtype=nl.float32, buffer=nl.sbuf, name="b_big")
        c = nl.ndarray((128, 100), dtype=nl.float32, buffer=nl.sbuf, name="c_small")
        d = nl.ndarray((128, huge), dtype=nl.uint8, buffer=nl.sbuf, name="d_over")
        assert len((a, b, c, d)) == 4  # all four held live

    run_kernel(k, (1024,), target="trn2")  # 241,040 B live > 212,984: spills (none accessed: nothing moves)
    with raises_rule("nkisim_sbuf_capacity", "Largest live tiles", "'d_over'", "'a_big'", "'b_big'",
                     "122880 B/partition"):
        run_kernel(k, (212985,), target="trn2")


@pytest.mark.slow
def test_loop_allocation_is_not_counted_per_iteration():
    def k():
        for _ in nl.affine_range(1000):
            t = nl.ndarray((128, 100 * 1024), dtype=nl.uint8, buffer=nl.sbuf)
            t[...] = 0

    run_ = run_kernel(k, (), mode="timing")
    assert run_.peak_sbuf_bytes <= 2 * 100 * 1024
    run_ = run_kernel(k, ())
    assert len(run_.trace) == 1000


def test_live_tiles_kept_in_a_list_do_count():
    """Three 100 KiB tiles written and read back later do not fit together: they count (issue 33: the compiler
    spills one of them to device memory instead of failing, and the values stay right)."""
    def k(a):
        out = nl.ndarray((3, 128, 100 * 1024), dtype=nl.uint8, buffer=nl.shared_hbm)
        keep = []
        for i in nl.affine_range(3):
            keep.append(nl.load(a[i]))
        for i in nl.affine_range(3):
            nl.store(out[i], value=keep[i])
        return out

    a = np.random.default_rng(0).integers(0, 255, (3, 128, 100 * 1024), dtype=np.uint8)
    run_ = run_kernel(k, (a,))
    np.testing.assert_array_equal(run_.outputs, a)
    assert run_.peak_sbuf_bytes == 3 * 100 * 1024
    assert run_.trace.meta["spill"]["saves"] >= 1


def test_psum_eight_banks():
    def k(n, shape):
        keep = [nl.zeros(shape, nl.float32, buffer=nl.psum) for _ in range(n)]
        assert len(keep) == n

    def spills(n, shape) -> int:
        return sum(1 for i in run_kernel(k, (), {"n": n, "shape": shape}).trace.instrs if i.attrs.get("psum_spill"))

    assert spills(8, (128, 512)) == 0
    # beyond the 8 banks the compiler spills (tests/test_nkisim_psum_spill.py): one costed copy per spilled tile
    assert spills(9, (128, 512)) == 1
    # a PSUM tile occupies whole 2 KiB banks: nine tiny tiles still need nine banks
    assert spills(9, (128, 1)) == 1
    assert spills(4, (128, 2, 512)) == 0


def test_psum_bank_limit_of_one_matmul():
    def k(x, y):
        ps = nl.zeros((128, 1024), nl.float32, buffer=nl.psum)
        ps[:, 256:768] += nisa.nc_matmul(nl.load(x), nl.load(y))  # straddles banks 0 and 1

    y = np.ones((128, 512), np.float32)
    with raises_rule("nkisim_matmul_psum_bank", "2048 byte PSUM bank"):
        run_kernel(k, (X, y))


# ---------------------------------------------------------------------------------------------------------
# dtypes: NKI_PRECISE_FP, promotion corner cases


def test_precise_fp_off_stores_bf16_as_fp32(monkeypatch):
    a = np.full((4, 4), 1 + 2 ** -12, dtype=np.float32)  # not representable in bf16

    def k(x):
        t = nl.ndarray((4, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(src=x, dst=t)
        return _store(nl.multiply(t, 3.0, dtype=nl.bfloat16))

    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    out = run(k, a)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, a * 3)
    monkeypatch.setenv("NKI_PRECISE_FP", "1")
    out = run(k, a)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out, (a.astype(ml_dtypes.bfloat16).astype(np.float32) * 3).astype(ml_dtypes.bfloat16))


# ---------------------------------------------------------------------------------------------------------
# indexing, views, reshape


B = np.arange(6 * 8 * 10, dtype=np.float32).reshape(6, 8, 10)


@pytest.mark.parametrize("index", [
    (2,), (slice(1, 5),), (slice(None), 3), (Ellipsis, 4), (1, Ellipsis), (slice(0, 6, 2), slice(1, 8, 3)),
    (5, slice(None), slice(0, 10, 2)), (Ellipsis,), (slice(2, 4), Ellipsis, slice(3, 9)), (0, 0),
])
def test_basic_indexing_hbm_and_tiles(index):
    ref = B[index]

    def k(b):
        v = b[index]
        out = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.hbm)
        nl.store(out, nl.load(v))
        # same index on an SBUF tile of the whole tensor (6 partitions)
        t = nl.load(b)
        tv = t[index]
        out2 = nl.ndarray(tv.shape, dtype=tv.dtype, buffer=nl.hbm)
        nisa.dma_copy(src=tv, dst=out2)
        return out, out2

    o1, o2 = run(k, B)
    np.testing.assert_array_equal(o1, ref)
    np.testing.assert_array_equal(o2, ref)


def test_views_of_views_read_and_write():
    def k(b):
        out = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.hbm)
        zero = nl.zeros((6, 8, 10), nl.float32)
        nl.store(out, zero)
        inner = b[1:5, 2:8, :][1][0:3]  # rows 3..5 of B[2]... chained views
        t = nl.load(inner)
        o_view = out[1:5, 2:8, :][1][0:3]
        nl.store(o_view, value=t)
        return out

    out = run(k, B)
    ref = np.zeros_like(B)
    ref[2, 2:5, :] = B[2, 2:5, :]
    np.testing.assert_array_equal(out, ref)


def test_mgrid_and_arange_indexing():
    def k(b):
        x = b.reshape((48, 10))
        i_p, i_f = nl.mgrid[0:48, 0:5]
        t1 = nl.load(x[i_p, 2 * i_f + 1])  # odd columns
        g = nl.mgrid[0:48, 0:3]
        t2 = nl.load(x[g.p, g.x + 7])
        ip = nl.arange(16)[:, None]
        jf = nl.arange(10)[None, :]
        t3 = nl.load(x[32 + ip, jf])
        return _store(t1), _store(t2), _store(t3)

    t1, t2, t3 = run(k, B)
    x = B.reshape(48, 10)
    np.testing.assert_array_equal(t1, x[:, 1::2])
    np.testing.assert_array_equal(t2, x[:, 7:10])
    np.testing.assert_array_equal(t3, x[32:48])


def test_mgrid_store_and_maxpool_pattern():
    """The docs' max-pool idiom: 5-D index into a tile, nl.max over axes [2, 4]."""
    img = np.arange(16 * 8 * 8, dtype=np.float32).reshape(16, 8, 8) % 11

    def k(x):
        t = nl.load(x)
        i0, i1, i2, i3, i4 = nl.mgrid[0:16, 0:4, 0:2, 0:4, 0:2]
        pooled = nl.max(t[i0, 2 * i1 + i2, 2 * i3 + i4], axis=[2, 4])
        return _store(pooled)

    out = run(k, img)
    np.testing.assert_array_equal(out, img.reshape(16, 4, 2, 4, 2).max(axis=(2, 4)))


def test_block_dimensions():
    def k(a):
        blocks = nl.ndarray((4, nl.par_dim(128), 16), dtype=nl.float32, buffer=nl.sbuf)
        assert blocks.shape == (4, 128, 16)
        for i in nl.affine_range(4):
            blocks[i] = nl.load(a[:, i * 16:(i + 1) * 16])
        deep = nl.ndarray((2, 3, nl.par_dim(64), 8), dtype=nl.float32, buffer=nl.sbuf)
        deep[1, 2] = nl.load(a[0:64, 0:8])
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.hbm)
        for i in nl.affine_range(4):
            nl.store(out[:, i * 16:(i + 1) * 16], value=nl.multiply(blocks[i], 2.0))
        out2 = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.hbm)
        nl.store(out2, deep[1, 2])
        return out, out2

    o1, o2 = run(k, A)
    np.testing.assert_array_equal(o1, A * 2)
    np.testing.assert_array_equal(o2, A[0:64, 0:8])


def test_block_dims_do_not_count_against_partition_limit():
    def k():
        t = nl.ndarray((8, nl.par_dim(128), 4), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = 0

    run(k)
    with raises_rule("err_num_partition_exceed_arch_limit", "number of partitions 129"):
        run_kernel(lambda: nl.ndarray((2, nl.par_dim(129), 4), dtype=nl.float32, buffer=nl.sbuf), ())


def test_compute_on_block_tensor_needs_a_tile():
    def k():
        t = nl.zeros((4, nl.par_dim(128), 16), nl.float32, buffer=nl.sbuf, name="blk")
        nl.exp(t)

    with raises_rule("err_failed_to_infer_tile_from_local_tensor", "tensor 'blk'"):
        run(k)


def test_reshape_forms():
    v = np.arange(128 * 24, dtype=np.float32)

    def k(x):
        h1 = x.reshape((128, 24))
        h2 = x.reshape(128, 4, 6)
        h3 = x.reshape(shape=(128, 2, 12))
        t = nl.load(h1)
        t1 = t.reshape((128, 4, 6))
        t2 = t.reshape(nl.par_dim(128), 2, 3, 4)
        t3 = t.reshape(shape=(128, 24.0))  # integral floats are accepted (students pass h / pool)
        out1 = nl.ndarray((128, 4, 6), dtype=x.dtype, buffer=nl.hbm)
        nl.store(out1, nl.add(t1, nl.load(h2)))
        out2 = nl.ndarray((128, 24), dtype=x.dtype, buffer=nl.hbm)
        nl.store(out2.reshape((128, 2, 3, 4)), t2)
        out3 = nl.ndarray((128, 24), dtype=x.dtype, buffer=nl.hbm)
        nl.store(out3, nl.add(t3, nl.load(h3).reshape((128, 24))))
        return out1, out2.reshape((3072,)), out3

    o1, o2, o3 = run(k, v)
    np.testing.assert_array_equal(o1, 2 * v.reshape(128, 4, 6))
    assert o2.shape == (3072,)
    np.testing.assert_array_equal(o2, v)
    np.testing.assert_array_equal(o3, 2 * v.reshape(128, 24))


def test_reshape_errors():
    def k(x):
        t = nl.load(x.reshape((128, 24)))
        t.reshape((128, 4, 6))[:, 1:3, 0:4].reshape((128, 8))  # a 2-D window cannot merge into one free dim

    with raises_rule("nkisim_reshape", "not contiguous"):
        run(k, np.zeros(128 * 24, np.float32))
    with raises_rule("nkisim_reshape", "number of elements"):
        run(lambda x: x.reshape((100, 3)), np.zeros(128 * 24, np.float32))
    with raises_rule("nkisim_reshape", "partition dimension"):
        run(lambda x: nl.load(x).reshape((64, 48)), np.zeros((128, 24), np.float32))


def test_returned_views_and_tuples_come_back_as_numpy():
    def k(a):
        out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.hbm)
        nl.store(out, nl.load(a))
        o2 = nl.ndarray((2, 64, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(o2.reshape((128, 64)), nl.load(a))
        return out.reshape((64, 128)), (o2, out[3])

    r = run(k, A)
    assert isinstance(r, tuple) and isinstance(r[1], tuple)
    assert isinstance(r[0], np.ndarray) and r[0].shape == (64, 128)
    np.testing.assert_array_equal(r[0], A.reshape(64, 128))
    np.testing.assert_array_equal(r[1][0], A.reshape(2, 64, 64))
    np.testing.assert_array_equal(r[1][1], A[3])


def test_out_of_bound_slice_error_text():
    x = np.zeros((128, 4000), np.float32)

    def k(x):
        return _store(nl.load(x[:, 0:4096]))

    with raises_rule("err_tensor_access_out_of_bound",
                     "Out-of-bound access for tensor `x` on dimension 1: index range [0, 4095] exceed dimension "
                     "size of 4000"):
        run(k, x)
    with raises_rule("err_tensor_access_out_of_bound", "on dimension 0"):
        run(lambda x: x[128], x)


def test_masked_out_of_bound_loads_and_stores_are_legal():
    x = np.arange(128 * 1000, dtype=np.float32).reshape(128, 1000)

    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)
        i_p, i_f = nl.mgrid[0:128, 0:512]
        for j in nl.affine_range(2):
            t = nl.load(x[i_p, j * 512 + i_f], mask=(j * 512 + i_f < 1000))
            nl.store(out[i_p, j * 512 + i_f], value=t, mask=(j * 512 + i_f < 1000))
        # a slice running past the end is legal under a mask as well
        s = nl.load(x[:, 512:1024], mask=(512 + i_f < 1000))
        out2 = nl.ndarray((128, 488), dtype=x.dtype, buffer=nl.hbm)
        nl.store(out2, s[:, 0:488])
        return out, out2

    out, out2 = run(k, x)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(out2, x[:, 512:])


def test_index_misuse_errors():
    def mix(a):
        i = nl.arange(64)[:, None]
        nl.load(a[i, :])

    with raises_rule("err_unsupported_mixing_basic_advanced_tensor_indexing", "Mixing basic"):
        run(mix, A)

    def one_d(a):
        nl.load(a[nl.arange(64), 0])

    with raises_rule("err_1d_arange_not_supported", "indexing tensor `a` with 1d arange"):
        run(one_d, A)

    def control(a):
        i = nl.arange(64)[:, None]
        if i > 3:
            pass

    with raises_rule("err_control_flow_condition_depending_on_arange", "Control-flow depending on `nl.arange`"):
        run(control, A)

    def assign_index(a):
        i = nl.arange(64)[:, None]
        i[0] = 3

    with raises_rule("err_cannot_assign_to_index", "'index' tensor does not support item assignment"):
        run(assign_index, A)


# ---------------------------------------------------------------------------------------------------------
# the API surface: names, launchers, decorators


@pytest.mark.parametrize("module,name", [(nl, "affine_rangee"), (nki, "device_print"), (nisa, "sbuf"),
                                         (nl, "dma_copy"), (nki, "sbuf"), (nl, "arrange"), (ncc, "mod_alloc")])
def test_misspelled_names_raise_attribute_error(module, name):
    with pytest.raises(AttributeError, match=name):
        getattr(module, name)


def test_import_paths_real_kernels_use():
    from neuronxcc import nki as nki2
    from neuronxcc.nki import baremetal, benchmark  # noqa: F401
    from neuronxcc.nki.language import par_dim  # noqa: F401

    assert nki2 is nki and nki.language is nl and nki.isa is nisa and nki.compiler is ncc
    assert nisa.constants.engine.vector == nisa.vector_engine == 5
    assert (nisa.engine.tensor, nisa.engine.scalar, nisa.engine.gpsimd, nisa.engine.sync) == (1, 2, 3, 6)
    assert (nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax,
            nl.tile_size.psum_fmax) == (128, 128, 512, 512)


def test_logging_off_after_import():
    logging.disable(logging.OFF)  # the 2024 starter does this right after importing nki
    try:
        assert logging.root.manager.disable == logging.OFF
    finally:
        logging.disable(logging.NOTSET)


def test_dma_copy_221_positional_form():
    def k(a):
        t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(a, t)
        out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.hbm)
        nisa.dma_copy(t, out)
        return out

    np.testing.assert_array_equal(run(k, A), A)


def _add_kernel_body(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def add_skip(a, b):
    return _add_kernel_body(a, b)


@nki.jit(mode="simulation", platform_target="trn2")
def add_param_jit(a, b):
    return _add_kernel_body(a, b)


@nki.baremetal(disable_allocation_opt=True)
def add_baremetal_deco(a, b):
    return _add_kernel_body(a, b)


@pytest.mark.parametrize("launch", [
    lambda k, a, b: k(a, b),
    lambda k, a, b: nki.baremetal(k)(a, b),
    lambda k, a, b: nki.baremetal(k, disable_allocation_opt=False, additional_compile_opt="--disable-dge",
                                  artifacts_dir="/nonexistent")(a, b),
    lambda k, a, b: nki.simulate_kernel(k, a, b),
    lambda k, a, b: nki.simulate(k)(a, b),
    lambda k, a, b: run_kernel(k, (a, b)).outputs,
], ids=["direct", "baremetal", "baremetal-kwargs", "simulate_kernel", "simulate", "run_kernel"])
@pytest.mark.parametrize("kernel", [add_skip, add_param_jit, add_baremetal_deco], ids=["skip", "jit-args", "bm"])
def test_launchers(launch, kernel):
    a, b = A, A[::-1].copy()
    np.testing.assert_array_equal(launch(kernel, a, b), a + b)


def test_baremetal_reuse_and_scalar_kwargs():
    @nki.jit
    def scaled(a, factor=1.0):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        nl.store(out, nl.multiply(nl.load(a), factor))
        return out

    k = nki.baremetal(scaled)
    for f in (1.0, 2.0, np.float32(3.0)):
        np.testing.assert_array_equal(k(A, factor=f), A * np.float32(f))


@nki.compiler.skip_middle_end_transformations
@nki.jit
def _transpose_helper(t):
    """Called inside another kernel: takes and returns on-chip tiles."""
    return nisa.tensor_copy(nisa.nc_transpose(t))


@nki.jit
def uses_nested_jit(a):
    out = nl.ndarray((64, 128), dtype=a.dtype, buffer=nl.hbm)
    nl.store(out, _transpose_helper(nl.load(a)))
    return out


def test_nested_jit_call_inside_kernel():
    np.testing.assert_array_equal(uses_nested_jit(A), A.T)


def test_device_print(capsys):
    def k(a):
        t = nl.load(a[0:2, 0:3])
        nl.device_print("tile-a", t)
        nl.device_print("tile-b", x=t)

    run(k, A)
    out = capsys.readouterr().out
    assert "tile-a" in out and "tile-b" in out and "0.01" in out


def test_api_outside_kernel():
    with raises_rule("err_nki_api_outside_of_nki_kernel", "Calling NKI API outside of NKI kernels"):
        nl.zeros((4, 4), nl.float32)


def test_kernel_inputs_are_immutable():
    def k(a):
        nl.store(a[0:4], nl.zeros((4, 64), nl.float32))

    with raises_rule("err_cannot_update_immutable_parameter", "Cannot update immutable parameter 'a'"):
        run(k, A)


def test_output_never_written():
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm, name="result")
        for i in nl.affine_range(0):  # zero-trip loop
            nl.store(out[i], nl.load(a[i]))
        return out

    with raises_rule("err_tensor_output_not_written_to", "'result'"):
        run(k, A)


def test_shared_hbm_only_at_kernel_level():
    def helper(shape):
        return nl.ndarray(shape, dtype=nl.float32, buffer=nl.shared_hbm)

    def k(a):
        out = helper(a.shape)
        nl.store(out, nl.load(a))
        return out

    with raises_rule("err_shared_hbm_must_in_kernel_level", "top level kernel scope"):
        run(k, A)


def test_hbm_with_init_value():
    with raises_rule("err_hbm_tensor_with_init_value_not_supported", "Creating HBM tensor with init value"):
        run(lambda: nl.zeros((4, 4), nl.float32, buffer=nl.shared_hbm))


def test_tensor_class_is_not_array_like():
    seen = []

    def k(a):
        seen.append(isinstance(a, Tensor) and a.buffer == "hbm" and a._a.buf == Buf.HBM)
        t = nl.load(a)
        seen.append(t.buffer == "sbuf")

    run(k, A)
    assert seen == [True, True]
    with pytest.raises(NKIError):
        run(lambda a: np.asarray(a), A)


def test_masked_results_leave_masked_off_elements_alone():
    """mask= limits the elements an instruction writes, also when its result is assigned into a tensor."""
    a = np.ones((8, 8), np.float32)

    def k(x):
        i_p, i_f = nl.mgrid[0:8, 0:8]
        t = nl.load(x)
        d1 = nl.zeros((8, 8), nl.float32)
        d1[...] = nl.add(t, 1.0, mask=(i_f < 4))
        d2 = nl.zeros((8, 8), nl.float32)
        d2[...] = nl.load(x, mask=(i_p >= 2))
        fresh = nl.add(t, 1.0, mask=(i_f < 4))  # a fresh result: masked-off elements stay poisoned
        return _store(d1), _store(d2), _store(fresh)

    d1, d2, fresh = run(k, a)
    cols, rows = np.mgrid[0:8, 0:8][::-1]
    np.testing.assert_array_equal(d1, np.where(cols < 4, 2.0, 0.0))
    np.testing.assert_array_equal(d2, np.where(rows >= 2, 1.0, 0.0))
    np.testing.assert_array_equal(fresh[:, :4], 2.0)
    assert np.isnan(fresh[:, 4:]).all()


# ---------------------------------------------------------------------------------------------------------
# the trace: timing mode, physical buffer reuse, result tiles and capacity


def _trace_key(trace):
    return [(i.op, i.engine, tuple(o.region for o in i.srcs), tuple(o.region for o in i.dsts),
             tuple(o.shape for o in i.dsts), i.attrs.get("accumulate")) for i in trace]


@pytest.mark.parametrize("which", ["stream2025", "tiled2024", "matmul"])
def test_timing_mode_trace_equals_full_mode_trace(which):
    from nkisim_util import load_kernels

    rng = np.random.default_rng(0)
    if which == "matmul":
        kernel = load_kernels("matmul_tutorial").matmul_tiled_nisa
        args = (rng.random((256, 128), dtype=np.float32), rng.random((256, 1024), dtype=np.float32))
        kwargs = {}
    elif which == "stream2025":
        kernel = load_kernels("vector_add_2025").vector_add_stream
        args, kwargs = (rng.random(25600, dtype=np.float32),) * 2, {"free_dim": 20}
    else:
        kernel = load_kernels("vector_add_2024").vector_add_tiled
        args, kwargs = (rng.random(2560, dtype=np.float32),) * 2, {}
    full = run_kernel(kernel, args, kwargs)
    timing = run_kernel(kernel, args, kwargs, mode="timing")
    assert timing.outputs is None and full.outputs is not None
    assert _trace_key(full.trace) == _trace_key(timing.trace)
    assert (full.peak_sbuf_bytes, full.peak_psum_bytes) == (timing.peak_sbuf_bytes, timing.peak_psum_bytes)


def test_loop_tiles_reuse_physical_buffers():
    """A tile allocated at the same site after the previous one died reuses its buffer, oldest first once
    ROTATION_DEPTH dead ones are free (the compiler materialises loop-local tiles in several copies)."""
    from nkisim.core.memory import ROTATION_DEPTH

    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        for i in nl.affine_range(10):
            t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a[i], dst=t)
            nisa.dma_copy(src=t, dst=out[i])
        return out

    x = np.arange(10 * 128 * 64, dtype=np.float32).reshape(10, 128, 64)
    run_ = run_kernel(k, (x,))
    np.testing.assert_array_equal(run_.outputs, x)
    loads = [i for i in run_.trace if i.dsts[0].region.buf == Buf.SBUF]
    assert len(loads) == 10
    phys = [i.dsts[0].region.phys for i in loads]
    assert len(set(phys)) == ROTATION_DEPTH + 1  # the live one plus the rotating dead ones
    assert phys == (phys[: ROTATION_DEPTH + 1] * len(phys))[: len(phys)]  # strict rotation, oldest first
    assert run_.peak_sbuf_bytes == 2 * 64 * 4


def _column_sum(t, f, w):
    prod = nl.multiply(t[:, w:w + 3], f)
    return nl.sum(prod, axis=1, keepdims=True)


def test_buffer_rotation_does_not_depend_on_python_lifetimes():
    """A temporary a helper drops at its return and one a variable keeps until the next iteration rotate
    through the same buffers: the compiler's copy count cannot depend on Python scoping, so the same kernel
    written with a helper times the same."""
    from nkisim.perf import estimate

    def make(helper):
        def k(img, filt):
            out = nl.ndarray((128, 64), dtype=img.dtype, buffer=nl.hbm)
            t, f = nl.load(img), nl.load(filt)
            o = nl.ndarray((128, 64), dtype=img.dtype, buffer=nl.sbuf)
            for w in nl.affine_range(64):
                if helper:
                    o[:, w:w + 1] = _column_sum(t, f, w)
                else:
                    prod = nl.multiply(t[:, w:w + 3], f)
                    o[:, w:w + 1] = nl.sum(prod, axis=1, keepdims=True)
            nl.store(out, o)
            return out
        return k

    img = np.random.default_rng(3).random((128, 66), dtype=np.float32)
    filt = np.random.default_rng(4).random((128, 3), dtype=np.float32)
    runs = [run_kernel(make(h), (img, filt)) for h in (False, True)]
    expected = np.stack([(img[:, w:w + 3] * filt).sum(axis=1) for w in range(64)], axis=1)
    for r in runs:
        np.testing.assert_allclose(r.outputs, expected, rtol=1e-5)
    phys = [[i.dsts[0].region.phys for i in r.trace if i.op == "tensor_tensor"] for r in runs]
    from nkisim.core.memory import ROTATION_DEPTH

    assert [len(set(p)) for p in phys] == [ROTATION_DEPTH + 1] * 2
    assert estimate(runs[0].trace).nc_latency_us == pytest.approx(estimate(runs[1].trace).nc_latency_us)


def _phys_of(trace, op: str, buf: Buf) -> list[int]:
    return [i.dsts[0].region.phys for i in trace if i.op == op and i.dsts[0].region.buf == buf]


def _bank_sized_accumulator(site: int):
    """A fresh (128, 512) fp32 PSUM accumulator (one bank) from one of three allocation sites (source lines)."""
    if site == 0:
        return nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    if site == 1:
        return nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    return nl.zeros((128, 512), nl.float32, buffer=nl.psum)


def _run_accumulators(sites: list[int]) -> tuple[list[int], object]:
    """out[n] = w.T @ x through a fresh accumulator from ``sites[n]``, in that order; the PSUM buffer ids the
    matmuls wrote (one per accumulator) and the run, its values checked against NumPy."""

    def k(x, w):
        out = nl.ndarray((len(sites), 128, 512), dtype=nl.float32, buffer=nl.hbm)
        xs, ws = nl.load(x), nl.load(w)
        for n, site in enumerate(sites):
            acc = _bank_sized_accumulator(site)
            acc += nisa.nc_matmul(ws, xs)
            nl.store(out[n], nl.copy(acc))
        return out

    rng = np.random.default_rng(len(sites))
    x = rng.random((128, 512), dtype=np.float32)
    w = rng.random((128, 128), dtype=np.float32)
    r = run_kernel(k, (x, w))
    np.testing.assert_allclose(r.outputs, np.broadcast_to(w.T @ x, (len(sites), 128, 512)), rtol=1e-5)
    return _phys_of(r.trace, "nc_matmul", Buf.PSUM), r


def test_rotating_psum_copies_fit_the_eight_banks():
    """Three bank-sized accumulators per iteration would rotate through 15 banks; PSUM has 8, so live
    accumulators plus the dead copies kept for rotation stay within them (and the values are unaffected)."""
    from nkisim.core.memory import ROTATION_DEPTH

    banks, _ = _run_accumulators([0, 1, 2] * 6)
    assert ROTATION_DEPTH + 1 < len(set(banks)) <= 8


def test_dead_copies_of_an_earlier_loop_give_way():
    """A finished loop's rotating PSUM copies do not starve a later loop's: the later loop takes over their
    banks and still rotates through ROTATION_DEPTH + 1 of them."""
    from nkisim.core.memory import ROTATION_DEPTH

    banks, _ = _run_accumulators([0] * 8 + [1] * 8)
    first, second = banks[:8], banks[8:]
    assert len(set(first)) == len(set(second)) == ROTATION_DEPTH + 1
    assert len(set(banks)) <= 8
    assert set(first) & set(second)  # the second loop reuses banks the first one left


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_rotating_sbuf_copies_fit_sbuf(target):
    """A 72 KiB-per-partition tile loaded every iteration: only as many copies as usable SBUF holds (trn1 176
    KiB: two, trn2 208 KiB: two), not ROTATION_DEPTH + 1."""
    from nkisim.core.config import limits

    free = 18432

    def k(a):
        out = nl.ndarray((4, 128, free), dtype=a.dtype, buffer=nl.hbm)
        for i in nl.affine_range(4):
            t = nl.load(a[i])
            nl.store(out[i], t)
        return out

    a = np.random.default_rng(6).random((4, 128, free), dtype=np.float32)
    r = run_kernel(k, (a,), target=target)
    np.testing.assert_array_equal(r.outputs, a)
    loads = [i.dsts[0].region.phys for i in r.trace if i.dsts and i.dsts[0].region.buf == Buf.SBUF]
    assert len(loads) == 4
    assert len(set(loads)) == limits(target).sbuf_usable_bytes // (free * 4) == 2


def test_kept_results_count_against_capacity():
    def k(a):
        keep = [nl.exp(nl.load(a)) for _ in range(3)]  # 3 x 100 KiB per partition of fp32 results
        assert len(keep) == 3

    run_ = run_kernel(k, (np.zeros((128, 25600), np.float32),), mode="timing")
    assert run_.peak_sbuf_bytes >= 3 * 102400  # counted; never read again, so nothing has to spill (issue 33)
    assert "spill" not in run_.trace.meta

    def k2(a):
        for _ in range(3):
            nl.exp(nl.load(a))  # dropped results free their space

    run_kernel(k2, (np.zeros((128, 25600), np.float32),), mode="timing")


def test_loop_iterators():
    def k(a):
        out = nl.ndarray((8, 64), dtype=a.dtype, buffer=nl.hbm)
        rows = []
        for i in nl.sequential_range(0, 8, 2):
            rows.append(i)
            nl.store(out[i], nl.load(a[i]))
        for i in nl.static_range(1, 8, 2):
            rows.append(i)
            nl.store(out[i], nl.load(a[i]))
        for i in nl.affine_range(3):
            assert isinstance(i, int) and (i % 2 == 0 or i == 1)
        assert rows == [0, 2, 4, 6, 1, 3, 5, 7]
        return out

    np.testing.assert_array_equal(run(k, A), A[:8])


def test_nl_partition_broadcast_and_1d_vectors():
    row = np.arange(8, dtype=np.float32).reshape(1, 8)
    col = np.arange(128, dtype=np.float32)

    def k(r, c, a):
        t = nl.load(a[:, 0:8])
        return _store(nl.add(nl.load(r), t)), _store(nl.multiply(t, nl.load(c)))

    o1, o2 = run(k, row, col, A)
    np.testing.assert_array_equal(o1, row + A[:, 0:8])
    np.testing.assert_array_equal(o2, A[:, 0:8] * col[:, None])


def test_scalar_assignment_and_load_cast():
    def k(a):
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = 1.5
        t[:, 2:4] = 5
        h = nl.load(a[:, 0:8], dtype=nl.float16)
        return _store(t), _store(h)

    t, h = run(k, A)
    ref = np.full((128, 8), 1.5, np.float32)
    ref[:, 2:4] = 5
    np.testing.assert_array_equal(t, ref)
    assert h.dtype == np.float16
    np.testing.assert_array_equal(h, A[:, 0:8].astype(np.float16))


def test_kernel_arguments_by_keyword_and_names():
    names = []

    def k(first, second, scale=1):
        names.extend([first.name, second.name])
        out = nl.ndarray(first.shape, dtype=first.dtype, buffer=nl.hbm)
        nl.store(out, nl.multiply(nl.add(nl.load(first), nl.load(second)), scale))
        return out

    out = run(k, second=A, first=A, scale=2)
    np.testing.assert_array_equal(out, 4 * A)
    assert names == ["first", "second"]


def test_direct_allocation_blocks_wrap_modulo_num_free_tiles():
    """Six 1000-column tiles rotate through four physical slots; the good kernel stays correct."""
    from nkisim_util import load_kernels

    k24 = load_kernels("vector_add_2024")
    rng = np.random.default_rng(5)
    a, b = rng.random(768000, dtype=np.float32), rng.random(768000, dtype=np.float32)
    out = nki.baremetal(k24.vector_add_direct_allocation)(a, b)
    np.testing.assert_allclose(out.reshape(-1), a + b, rtol=1e-6)
    run_ = run_kernel(k24.vector_add_direct_allocation, (a, b))
    loads = [i for i in run_.trace if i.op == "dma_copy" and i.dsts[0].region.buf == Buf.SBUF]
    slots = {(i.dsts[0].region.b_lo, i.dsts[0].region.b_hi) for i in loads}
    assert len(loads) == 12 and len(slots) == 8  # a and b tiles: 4 slots each, reused by tiles 4 and 5


def test_psum_accumulation_groups_in_block_and_3d_psum_tiles():
    rng = np.random.default_rng(6)
    x, y = rng.random((128, 128), dtype=np.float32), rng.random((128, 512), dtype=np.float32)

    def k(xh, yh):
        ps = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        ps2 = nl.ndarray((128, 2, 512), dtype=nl.float32, buffer=nl.psum)
        xt, yt = nl.load(xh), nl.load(yh)
        out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.hbm)
        for i in nl.affine_range(2):
            for _ in nl.affine_range(i + 1):
                ps[i] += nisa.nc_matmul(xt, yt)
                ps2[:, i, :] += nisa.nc_matmul(xt, yt)
            nl.store(out[i], nl.copy(ps[i]))
            nl.store(out[2 + i], nl.copy(ps2[:, i, :]))
        return out

    out = run(k, x, y)
    ref = x.T.astype(np.float64) @ y
    for i, factor in enumerate((1, 2, 1, 2)):
        np.testing.assert_allclose(out[i], factor * ref, rtol=1e-6)


def test_kernel_must_return_device_tensors():
    with pytest.raises(TypeError, match="kernel returned a ndarray"):
        run(lambda a: np.zeros((4, 4), np.float32), A)
    with pytest.raises(TypeError, match="on-chip tensor"):
        run(lambda a: nl.load(a), A)


def test_indexed_sbuf_accumulate_is_one_vector_add():
    def k(a):
        acc = nl.zeros((128, 64), nl.float32)
        x = nl.load(a)
        acc[:, 0:32] += x[:, 0:32]
        acc += x
        return _store(acc)

    run_ = run_kernel(k, (A,))
    ref = A.copy()
    ref[:, :32] *= 2
    np.testing.assert_array_equal(run_.outputs, ref)
    assert [i.op for i in run_.trace if i.engine.name != "DMA"] == ["memset", "tensor_tensor", "tensor_tensor"]


def test_tensor_engine_result_assigned_into_sbuf_is_an_implicit_copy():
    """``w_sbuf[i] = nisa.nc_transpose(x)`` (kernels that passed on hardware do this): TensorE writes PSUM, then
    a copy moves the result into the SBUF slot; ``sbuf += nc_matmul`` is a PSUM result added on VectorE."""
    a = (np.arange(128 * 128, dtype=np.float32).reshape(128, 128) % 17) / 17

    def k(x):
        w = nl.ndarray((2, nl.par_dim(128), 128), dtype=nl.float16, buffer=nl.sbuf)
        t = nl.load(x)
        w[1] = nisa.nc_transpose(t)
        acc = nl.zeros((128, 128), nl.float32)
        acc[...] = nisa.nc_matmul(t, t)
        acc += nisa.nc_matmul(t, t)
        return _store(w[1]), _store(acc)

    run_ = run_kernel(k, (a,))
    wt, acc = run_.outputs
    np.testing.assert_array_equal(wt, a.T.astype(np.float16))
    np.testing.assert_allclose(acc, 2 * (a.T.astype(np.float64) @ a), rtol=1e-6)
    ops = [(i.op, i.dsts[0].region.buf.name) for i in run_.trace if i.engine.name != "DMA"]
    assert ops == [("nc_transpose", "PSUM"), ("tensor_copy", "SBUF"), ("memset", "SBUF"), ("nc_matmul", "PSUM"),
                   ("tensor_copy", "SBUF"), ("nc_matmul", "PSUM"), ("tensor_tensor", "SBUF")]


def test_assigning_a_result_into_hbm_stores_it():
    """``out[...] = r`` behaves the same whether or not another instruction ran after ``r`` was computed."""
    def k(a):
        t = nl.load(a)
        out1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        out2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        r = nl.exp(t)
        out1[...] = r  # r is the last result
        r2 = nl.exp(t)
        nl.exp(t)
        out2[...] = r2  # r2 is not
        return out1, out2

    run_ = run_kernel(k, (A,))
    for o in run_.outputs:
        np.testing.assert_allclose(o, np.exp(A), rtol=1e-6)
    assert [i.op for i in run_.trace] == ["dma_copy", "activation", "dma_copy", "activation", "activation",
                                          "dma_copy"]


def test_hbm_cannot_be_pickled_or_copied():
    import copy
    import pickle

    for action in (pickle.dumps, copy.copy, copy.deepcopy, lambda a: a.__getstate__()):
        def k(a, action=action):
            action(a)

        with raises_rule("nkisim_hbm_opaque", "pickling or copying"):
            run(k, A)


def test_matmul_accumulates_onto_psum_written_by_other_instructions():
    """Only never-written PSUM is overwritten by the first matmul; data put there by a memset, a copy or a
    transpose is accumulated onto."""
    x, y = np.ones((128, 128), np.float32), np.ones((128, 64), np.float32)

    def k(xh, yh):
        xt, yt = nl.load(xh), nl.load(yh)
        p1 = nl.full((128, 64), 1.0, nl.float32, buffer=nl.psum)
        p1 += nisa.nc_matmul(xt, yt)
        p2 = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        p2[...] = nl.copy(yt)
        p2 += nisa.nc_matmul(xt, yt)
        p3 = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        p3[...] = 2.0
        p3 += nisa.nc_matmul(xt, yt)
        p4 = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        p4[...] = nisa.nc_transpose(xt)
        p4 += nisa.nc_matmul(xt, xt)
        return tuple(_store(nl.copy(p)) for p in (p1, p2, p3, p4))

    outs = run(k, x, y)
    for o, want in zip(outs, (129.0, 129.0, 130.0, 129.0)):
        assert (o == want).all(), (o[0, 0], want)


def test_instructions_record_the_kernel_statement():
    import inspect

    def k(a):
        t = nl.load(a)
        r = nl.exp(t)
        return _store(r)

    first = inspect.getsourcelines(k)[1]
    run_ = run_kernel(k, (A,))
    here = "test_nkisim_semantics.py"
    assert [i.where for i in run_.trace][:2] == [f"{here}:{first + 1}", f"{here}:{first + 2}"]
    assert run_.trace.instrs[-1].where.startswith(here)  # the store inside the _store helper


def test_masked_3d_mgrid_gather_with_scalar_indices():
    """2024 conv pattern: X[b, k*128 + i_par, h0 + i_row, i_col] with a mask for the ragged last row block."""
    x = np.random.default_rng(7).random((2, 256, 10, 6), dtype=np.float32)

    def k(xh):
        out = nl.ndarray(xh.shape, dtype=xh.dtype, buffer=nl.hbm)
        i_par, i_row, i_col = nl.mgrid[0:128, 0:4, 0:6]
        for b in nl.affine_range(2):
            for kk in nl.affine_range(2):
                for h0 in nl.affine_range(3):
                    m = (h0 * 4 + i_row < 10)
                    t = nl.load(xh[b, kk * 128 + i_par, h0 * 4 + i_row, i_col], mask=m)
                    nl.store(out[b, kk * 128 + i_par, h0 * 4 + i_row, i_col], value=t, mask=m)
        return out

    np.testing.assert_array_equal(run(k, x), x)
