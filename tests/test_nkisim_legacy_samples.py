"""Kernel patterns of AWS's legacy-API samples that nkisim had to learn (issue 13, part B), in kernels of our own.

Each test checks values against an independent NumPy computation.
"""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nkisim.core.rules import NKIError
from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate

RNG = np.random.default_rng(13)


# ---------------------------------------------------------------------------------------------------------------
# direct PSUM allocation: wrapped blocks indexed by index expressions; a re-declared tile starts a new
# accumulation group


@nki.jit
def _rowtiles_matmul(xT, w):
    """out[r] = xT[:, r-tile].T @ w for two row tiles, with a 2-block PSUM tensor wrapped onto one bank and the
    accumulator re-declared (same bank) per row tile, as direct-allocation kernels do."""
    k, s = xT.shape
    n = w.shape[1]
    out = nl.ndarray((s, n), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:n]
    wt = nl.ndarray((k // 128, nl.par_dim(128), n), dtype=w.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    for kk in nl.affine_range(k // 128):
        wt[kk] = nl.load(w[kk * 128 + i_p, i_f])
    xs = nl.ndarray((k // 128, nl.par_dim(128), s), dtype=xT.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    for kk in nl.affine_range(k // 128):
        xs[kk] = nl.load(xT[nl.ds(kk * 128, 128), :])
    for r in nl.affine_range(s // 128):
        # two blocks, one bank: block 1 aliases block 0 (num_bank_tiles=(1,)); indexed with mgrid expressions
        scratch = nl.ndarray((2, nl.par_dim(128), n), dtype=nl.float32,
                             buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)))
        acc = nl.ndarray((1, nl.par_dim(128), n), dtype=nl.float32,
                         buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))
        for kk in nl.affine_range(k // 128):
            acc[0] += nisa.nc_matmul(xs[kk, :, nl.ds(r * 128, 128)], wt[kk])
        scratch[1, i_p, i_f] = nl.copy(acc[0])  # lands on bank 0 (wrapped)
        o = nl.ndarray((nl.par_dim(128), n), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
        o[...] = nl.copy(scratch[0, i_p, i_f])  # reads the same bank
        nl.store(out[r * 128 + i_p, i_f], value=o)
    return out


def test_direct_psum_wrapped_blocks_and_fresh_accumulation_groups():
    x = RNG.normal(size=(256, 256)).astype(np.float32)
    w = RNG.normal(size=(256, 128)).astype(np.float32)
    got = run_kernel(_rowtiles_matmul, (np.ascontiguousarray(x.T), w)).outputs
    # every row tile is its own sum over k: no accumulation carried over from the previous row tile
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------------------------------------------------------
# nc_matmul perf_mode double_row (FP8 double-row mode of NeuronCore-v3)


def _fp8(a):
    return nl.static_cast(a, nl.float8_e4m3)


@nki.jit
def _double_row(st, mv, mode):
    out = nl.ndarray((st.shape[-1], mv.shape[-1]), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.load(st)
    m = nl.load(mv)
    ps = nl.ndarray((st.shape[-1], mv.shape[-1]), dtype=nl.float32, buffer=nl.psum)
    ps[...] = nisa.nc_matmul(s, m, perf_mode=mode)
    nl.store(out, value=nl.copy(ps))
    return out


@pytest.mark.parametrize("mode", ["double_row_gen3", "double_row"])
def test_double_row_matmul_contracts_both_rows(mode):
    st = _fp8(RNG.uniform(-4, 4, size=(128, 2, 128)))
    mv = _fp8(RNG.uniform(-4, 4, size=(128, 2, 512)))
    run = run_kernel(_double_row, (st, mv, mode), target="trn2")
    s, m = st.astype(np.float32), mv.astype(np.float32)
    ref = s[:, 0].T @ m[:, 0] + s[:, 1].T @ m[:, 1]
    np.testing.assert_allclose(run.outputs, ref, rtol=1e-5, atol=1e-2)
    # cycle cost of one [128,128]x[128,512] fp8 matmul (2x throughput), flops of the 2K contraction
    single = run_kernel(_double_row, (_fp8(RNG.uniform(size=(128, 128))),
                                      _fp8(RNG.uniform(size=(128, 512))), None), target="trn2")
    mm = [i for i in run.trace.instrs if i.op == "nc_matmul"]
    assert len(mm) == 1 and mm[0].attrs["K"] == 256
    busy = estimate(run.trace).engine_busy_us["TensorE"]
    assert busy > 0 and busy == pytest.approx(estimate(single.trace).engine_busy_us["TensorE"], rel=1e-6)


def test_double_row_matmul_needs_fp8_and_trn2():
    st = nl.static_cast(RNG.uniform(size=(128, 2, 128)), nl.bfloat16)
    mv = nl.static_cast(RNG.uniform(size=(128, 2, 512)), nl.bfloat16)
    with pytest.raises(NKIError, match="fp8"):
        run_kernel(_double_row, (st, mv, "double_row_gen3"), target="trn2")
    with pytest.raises(NKIError, match="NeuronCore-v3"):
        run_kernel(_double_row, (_fp8(st.astype(np.float32)), _fp8(mv.astype(np.float32)), "double_row_gen3"),
                   target="trn1")
    with pytest.raises(ValueError, match="perf_mode"):
        run_kernel(_double_row, (st, mv, "quadruple"), target="trn2")


# ---------------------------------------------------------------------------------------------------------------
# SBUF capacity by liveness: a tile whose name the kernel never reads again does not count (neuronx-cc allocates
# by liveness), a tile some live name or list can still reach does


W = 27000  # fp32 columns: 108,000 B per partition; two such tiles do not fit (212,984 B usable on trn2)


@nki.jit
def _rebind_each_iteration(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0]):
        big = nl.ndarray((nl.par_dim(128), W), dtype=nl.float32, buffer=nl.sbuf)  # last iteration's big is dead
        big[...] = nl.load(a[i])
        nl.store(out[i], value=big)
    return out


@nki.jit
def _temporary_after_loop(a):
    out = nl.ndarray((a.shape[0] + 1, 128, W), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0]):
        t = nl.load(a[i])
        nl.store(out[i], value=t)
    u = nl.ndarray((nl.par_dim(128), W), dtype=nl.float32, buffer=nl.sbuf)  # t is never read again
    u[...] = 3.0
    nl.store(out[a.shape[0]], value=u)
    return out


@pytest.mark.slow
def test_dead_names_do_not_hold_sbuf():
    a = RNG.normal(size=(3, 128, W)).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(_rebind_each_iteration, (a,)).outputs, a)
    got = run_kernel(_temporary_after_loop, (a,)).outputs
    np.testing.assert_array_equal(got[:3], a)
    np.testing.assert_array_equal(got[3], np.full((128, W), 3.0, np.float32))


def test_tiles_still_read_later_count():
    @nki.jit
    def read_later(a):
        out = nl.ndarray((2, 128, W), dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a[0])
        y = nl.ndarray((nl.par_dim(128), W), dtype=nl.float32, buffer=nl.sbuf)  # x is still needed
        y[...] = 1.0
        nl.store(out[0], value=x)
        nl.store(out[1], value=y)
        return out

    @nki.jit
    def dead_name_live_list(a):
        out = nl.ndarray((2, 128, W), dtype=a.dtype, buffer=nl.shared_hbm)
        keep = []
        x = nl.load(a[0])
        keep.append(x)
        y = nl.ndarray((nl.par_dim(128), W), dtype=nl.float32, buffer=nl.sbuf)  # x dead, but keep holds it
        y[...] = 1.0
        nl.store(out[0], value=keep[0])
        return out

    @nki.jit
    def loop_carried(a):
        out = nl.ndarray((128, W), dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((nl.par_dim(128), W), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.sequential_range(a.shape[0]):
            t = nl.ndarray((nl.par_dim(128), W), dtype=nl.float32, buffer=nl.sbuf)  # acc is read next iteration
            t[...] = nl.load(a[i])
            acc[...] = nl.add(acc, t)
        nl.store(out, value=acc)
        return out

    a = RNG.normal(size=(2, 128, W)).astype(np.float32)
    # both tiles are live at once and do not fit: the compiler spills one (issue 33), the values stay right
    r = run_kernel(read_later, (a,))
    assert r.trace.meta["spill"]["saves"] >= 1
    np.testing.assert_array_equal(r.outputs, np.stack([a[0], np.ones_like(a[0])]))
    r = run_kernel(dead_name_live_list, (a,))
    assert r.trace.meta["spill"]["saves"] >= 1
    np.testing.assert_array_equal(r.outputs[0], a[0])
    # nl.add(acc, t) reads both and writes a third tile of the same size: more than one partition, GCA035
    with pytest.raises(NKIError, match="couldn't be allocated in SB"):
        run_kernel(loop_carried, (a,))


# ---------------------------------------------------------------------------------------------------------------
# nisa.local_gather


def _local_gather_ref(src, index, k, nvalid):
    """NumPy: per 16-partition group, the index slice flattened partition-first, the first nvalid offsets, k
    contiguous elements of each partition's own flattened row at each offset."""
    p = src.shape[0]
    flat = src.reshape(p, -1)
    per_core = 16 * (index.size // p)
    out = np.full((p, per_core * k), np.nan, np.float32)
    for c in range(p // 16):
        offs = index[16 * c:16 * c + 16].reshape(16, -1).flatten(order="F")[:nvalid].astype(np.int64)
        cols = (offs[:, None] + np.arange(k)[None, :]).reshape(-1)
        out[16 * c:16 * c + 16, :nvalid * k] = flat[16 * c:16 * c + 16][:, cols]
    return out.reshape((p,) + index.shape[1:] + (16, k))


@nki.jit
def _local_gather_kernel(src, index, k, nvalid):
    out = nl.ndarray((src.shape[0],) + index.shape[1:] + (16, k), dtype=src.dtype, buffer=nl.shared_hbm)
    g = nisa.local_gather(nl.load(src), nl.load(index), k, nvalid)
    nl.store(out, value=g)
    return out


@pytest.mark.parametrize("p,k,nvalid", [(128, 4, 64), (32, 1, None), (64, 2, 40)])
def test_local_gather_matches_numpy(p, k, nvalid):
    src = RNG.normal(size=(p, 64, 4)).astype(np.float32)
    index = (RNG.integers(0, 64, size=(p, 4)) * 4).astype(np.uint16)  # element offsets, k <= 4 stays in bounds
    run = run_kernel(_local_gather_kernel, (src, index, k, nvalid))
    ref = _local_gather_ref(src, index, k, 16 * 4 if nvalid is None else nvalid)
    got = run.outputs
    filled = ~np.isnan(ref)
    np.testing.assert_array_equal(got[filled], ref[filled])
    assert filled.sum() == p * (16 * 4 if nvalid is None else nvalid) * k


def test_local_gather_cost_follows_isa_formula():
    from nkisim.perf.costs import costs_for
    from nkisim.perf.model import CostModel

    src = RNG.normal(size=(128, 64, 4)).astype(np.float32)
    index = (RNG.integers(0, 64, size=(128, 4)) * 4).astype(np.uint16)
    tc = costs_for("trn2")
    for k, nvalid in ((4, 64), (1, 32)):
        run = run_kernel(_local_gather_kernel, (src, index, k, nvalid), mode="timing")
        (ins,) = [i for i in run.trace.instrs if i.op == "local_gather"]
        c = ((28 + 4 * k) / (4 * k)) / min(4 / 4, k)
        cycles = max(tc.min_ii_cycles, nvalid * k / c) + tc.gpsimd_start_cycles
        assert CostModel(tc).compute_cost(ins).ii_ns == pytest.approx(cycles / tc.gpsimd_ghz, rel=1e-6)


def test_local_gather_constraints():
    src = np.zeros((128, 64), np.float32)
    with pytest.raises(NKIError, match="uint16"):
        run_kernel(_local_gather_kernel, (src, np.zeros((128, 4), np.int32), 1, None))
    with pytest.raises(NKIError, match="num_elem_per_idx"):
        run_kernel(_local_gather_kernel, (src, np.zeros((128, 4), np.uint16), 3, None))
    with pytest.raises(NKIError, match="num_valid_indices"):
        run_kernel(_local_gather_kernel, (src, np.zeros((128, 4), np.uint16), 1, 65))
    with pytest.raises(NKIError, match="multiple of 16"):
        run_kernel(_local_gather_kernel, (np.zeros((8, 64), np.float32), np.zeros((8, 4), np.uint16), 1, None))


# ---------------------------------------------------------------------------------------------------------------
# run-time (dynamic) indices: indirect DMA, nl.atomic_rmw, nisa.tensor_copy_dynamic_src / _dst


@nki.jit
def _gather_rows(data, idx):
    out = nl.ndarray((idx.shape[0], data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(idx.shape[0])[:, None]
    i_f = nl.arange(data.shape[1])[None, :]
    rows = nl.load(idx[i_p, nl.arange(1)[None, :]])  # indices live in SBUF
    nl.store(out, value=nl.load(data[rows[i_p, 0], i_f]))
    return out


@nki.jit
def _scatter_rows_by_iota(src, stride):
    out = nl.ndarray((src.shape[0] * stride, src.shape[1]), dtype=src.dtype, buffer=nl.shared_hbm)
    rows = nisa.iota(stride * nl.arange(src.shape[0])[:, None], dtype=np.int32)
    nl.store(out[rows, nl.arange(src.shape[1])[None, :]], value=nl.load(src))
    return out


def test_indirect_dma_gathers_and_scatters_rows():
    data = RNG.normal(size=(128, 96)).astype(np.float32)
    idx = RNG.integers(0, 128, size=(40, 1)).astype(np.int32)
    run = run_kernel(_gather_rows, (data, idx))
    np.testing.assert_array_equal(run.outputs, data[idx[:, 0]])
    # the gather DMA reads the index tile: a dependency on the load that produced it
    dmas = [i for i in run.trace.instrs if i.op == "dma_copy"]
    idx_load, gather = dmas[0], dmas[1]
    assert len(gather.srcs) == 2 and gather.srcs[1].region == idx_load.dsts[0].region
    src = RNG.normal(size=(32, 64)).astype(np.float32)
    got = run_kernel(_scatter_rows_by_iota, (src, 3)).outputs
    np.testing.assert_array_equal(got[::3], src)
    # timing mode has no index values: the access still runs and is costed
    assert estimate(run_kernel(_gather_rows, (data, idx), mode="timing").trace).makespan_us > 0


def test_dynamic_index_must_be_an_sbuf_integer_tile():
    @nki.jit
    def float_index(data, idx):
        out = nl.ndarray((8, 16), dtype=data.dtype, buffer=nl.shared_hbm)
        f = nl.load(idx)
        nl.store(out, value=nl.load(data[f, nl.arange(16)[None, :]]))
        return out

    with pytest.raises(NKIError, match="must hold integers"):
        run_kernel(float_index, (np.zeros((16, 16), np.float32), np.zeros((8, 1), np.float32)))

    @nki.jit
    def out_of_range(data, idx):
        out = nl.ndarray((8, 16), dtype=data.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(data[nl.load(idx), nl.arange(16)[None, :]]))
        return out

    with pytest.raises(NKIError, match="Out-of-bound access"):
        run_kernel(out_of_range, (np.zeros((16, 16), np.float32), np.full((8, 1), 16, np.int32)))


@nki.jit
def _histogram_rows(init, idx, val):
    t = nl.ndarray(init.shape, dtype=init.dtype, buffer=nl.shared_hbm)
    nl.store(t, value=nl.load(init))
    rows = nl.load(idx)
    nl.atomic_rmw(t[rows, nl.arange(val.shape[1])[None, :]], value=nl.load(val), op=np.add)
    return t


@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
def test_atomic_rmw_accumulates_repeated_rows(dtype):
    init = nl.static_cast(RNG.normal(size=(16, 64)), dtype if dtype != "bfloat16" else nl.bfloat16)
    idx = np.array([3, 5, 3, 0, 3, 15, 5, 1], np.int32)[:, None]
    val = nl.static_cast(RNG.normal(size=(8, 64)), init.dtype)
    got = run_kernel(_histogram_rows, (init, idx, val)).outputs.astype(np.float32)
    ref = init.astype(np.float32)
    np.add.at(ref, idx[:, 0], val.astype(np.float32))  # every addressed row gets every contribution
    np.testing.assert_allclose(got, ref, rtol=1e-2 if dtype == "bfloat16" else 1e-6, atol=1e-2)


def test_atomic_rmw_constraints():
    @nki.jit
    def static_dst(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.atomic_rmw(t[0:8, 0:8], value=nl.load(a), op=np.add)
        return t

    with pytest.raises(NKIError, match="only indirect dynamic indexing"):
        run_kernel(static_dst, (np.zeros((8, 8), np.float32),))

    @nki.jit
    def maximum(a, idx):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.atomic_rmw(t[nl.load(idx), nl.arange(8)[None, :]], value=nl.load(a), op=np.maximum)
        return t

    with pytest.raises(NKIError, match="np.add"):
        run_kernel(maximum, (np.zeros((8, 8), np.float32), np.zeros((8, 1), np.int32)))


@nki.jit
def _pick_columns(x, offs):
    out = nl.ndarray((x.shape[0], offs.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.load(x)
    o = nl.load(offs)
    res = nl.ndarray((x.shape[0], offs.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    ip, jf = nl.mgrid[0:x.shape[0], 0:1]
    for b in nl.affine_range(offs.shape[1]):
        res[ip, b] = nisa.tensor_copy_dynamic_src(xs[ip, o[0, b] + jf])
    nl.store(out, value=res)
    return out


@nki.jit
def _place_columns(x, offs, width):
    out = nl.ndarray((x.shape[0], width), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.load(x)
    o = nl.load(offs)
    res = nl.zeros((x.shape[0], width), dtype=x.dtype, buffer=nl.sbuf)
    ip, jf = nl.mgrid[0:x.shape[0], 0:1]
    for b in nl.affine_range(offs.shape[1]):
        nisa.tensor_copy_dynamic_dst(dst=res[ip, o[0, b] + jf], src=xs[ip, b + jf])
    nl.store(out, value=res)
    return out


def test_tensor_copy_dynamic_src_and_dst():
    x = RNG.normal(size=(128, 64)).astype(np.float32)
    offs = np.array([[5, 9, 0, 63, 9]], np.int32)
    run = run_kernel(_pick_columns, (x, offs))
    np.testing.assert_array_equal(run.outputs, x[:, offs[0]])
    small = RNG.normal(size=(128, 4)).astype(np.float32)
    offs2 = np.array([[3, 15, 0, 7]], np.int32)
    ref = np.zeros((128, 16), np.float32)
    ref[:, offs2[0]] = small
    np.testing.assert_array_equal(run_kernel(_place_columns, (small, offs2, 16)).outputs, ref)
    # cost: max(MIN_II_DYNAMIC ~ 600, N) VectorE cycles (ISA-226); the offset tile is a source of each copy
    from nkisim.perf.costs import costs_for
    from nkisim.perf.model import CostModel

    tc = costs_for("trn2")
    dyn = [i for i in run.trace.instrs if i.op == "tensor_copy_dynamic_src"]
    assert len(dyn) == 5 and all(len(i.srcs) == 2 for i in dyn)
    assert CostModel(tc).compute_cost(dyn[0]).ii_ns == pytest.approx(600 / tc.vector_ghz, rel=1e-6)


def test_tensor_copy_dynamic_needs_a_dynamic_offset():
    @nki.jit
    def static(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.tensor_copy_dynamic_src(nl.load(x)))
        return out

    with pytest.raises(NKIError, match="dynamic offset"):
        run_kernel(static, (np.zeros((8, 8), np.float32),))


# ---------------------------------------------------------------------------------------------------------------
# nl.all_reduce: one program along the reduced axes (a copy); several raise "does not support ... yet"


@nki.jit
def _all_reduce_kernel(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.all_reduce(nl.load(a), op=np.add, program_axes=0, dtype=nl.float32))
    return out


def test_all_reduce_single_program_and_grid():
    from nkisim.frontends._unsupported import NkisimUnsupportedError

    a = nl.static_cast(RNG.normal(size=(32, 16)), nl.bfloat16)
    np.testing.assert_array_equal(run_kernel(_all_reduce_kernel, (a,)).outputs, a.astype(np.float32))
    np.testing.assert_array_equal(run_kernel(_all_reduce_kernel[1], (a,)).outputs, a.astype(np.float32))
    with pytest.raises(NkisimUnsupportedError, match="nkisim does not support nl.all_reduce across 2 SPMD"):
        run_kernel(_all_reduce_kernel[2], (a,))


# ---------------------------------------------------------------------------------------------------------------
# reductions masked over their input axes; indirect DMA through a computed index tile


@nki.jit
def _masked_window_sum(a, h_valid, w_valid):
    out = nl.ndarray((a.shape[0],), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    i_h = nl.arange(a.shape[1])[None, :, None]
    i_w = nl.arange(a.shape[2])[None, None, :]
    s = nl.sum(t, axis=[-2, -1], mask=(i_h < h_valid) & (i_w < w_valid), dtype=nl.float32)
    nl.store(out, value=s)
    return out


def test_reduction_mask_over_the_reduced_axes():
    a = RNG.normal(size=(64, 6, 5)).astype(np.float32)
    got = run_kernel(_masked_window_sum, (a, 4, 3)).outputs
    np.testing.assert_allclose(got, a[:, :4, :3].sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)


@nki.jit
def _upsample_rows_nearest(data, out_rows):
    """out[r] = data[floor(r * in_rows / out_rows)], the source row computed on the engines and used as an
    indirect DMA index (masked past the last output row)."""
    out = nl.ndarray((out_rows, data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
    scale = data.shape[0] / out_rows
    for t in nl.affine_range((out_rows + 127) // 128):
        i_p = t * 128 + nl.arange(128)[:, None]
        i_f = nl.arange(data.shape[1])[None, :]
        pos = nisa.iota(i_p, dtype=nl.int32)
        src_row = nl.floor(nl.multiply(pos, scale, dtype=nl.float32), dtype=nl.int32)
        rows = nl.load(data[src_row, i_f], mask=(i_p < out_rows))
        nl.store(out[i_p, i_f], value=rows, mask=(i_p < out_rows))
    return out


def test_indirect_load_through_computed_indices():
    data = RNG.normal(size=(70, 48)).astype(np.float32)
    got = run_kernel(_upsample_rows_nearest, (data, 200)).outputs
    src = np.floor(np.arange(200, dtype=np.float32) * np.float32(70 / 200)).astype(int)  # fp32 engine math
    np.testing.assert_array_equal(got, data[src])
