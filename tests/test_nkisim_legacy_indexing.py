"""Legacy NKI indexing rules that attention-style kernels rely on (issue 13), with kernels of our own.

* An on-chip tile keeps its partition axis and at least one free axis: integers on every free axis leave a unit
  free axis (``buf[:, i]`` and ``buf[:, i, h]`` are [P, 1] tiles that can be indexed again as ``[:, 0]``).  Block
  axes before the partition axis and HBM tensors drop integer-indexed axes as NumPy does.
* ``nl.mgrid`` components are index variables: an access spans the variables it uses, so ``t[i_p, 0]`` with
  ``i_p`` from ``nl.mgrid[0:128, 0:32]`` is a [128, 1] access, and components of grids of different extents combine.

Every value check is against an independent NumPy computation.
"""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

RNG = np.random.default_rng(13)


def _store(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.hbm)
    nl.store(out, t)
    return out


# ---------------------------------------------------------------------------------------------------------------
# integer indexing of on-chip tiles


SEEN: list = []


@nki.jit
def _int_index_shapes(x):
    """x: (128, 4, 6) in HBM.  Records the shapes the front end gives."""
    t = nl.load(x)
    b = nl.ndarray((3, nl.par_dim(128), 6), dtype=x.dtype, buffer=nl.sbuf)
    c = nl.load(x[:, 0, :])  # (128, 6): a single free axis
    SEEN[:] = [tuple(v.shape) for v in (t[:, 1], t[:, 1, 2], t[:, 1, :], t[:, 1, 2][:, 0], b[1], b[1, :, 2], x[1],
                                        x[1, 2], x[:, 1, 2], c[:, 3])]
    return _store(t[:, 1, 2])


def test_integer_indexing_shapes_follow_the_tile_rule():
    x = RNG.standard_normal((128, 4, 6)).astype(np.float32)
    out = _int_index_shapes(x)
    np.testing.assert_array_equal(out, x[:, 1, 2][:, None])
    assert SEEN == [
        (128, 6),      # t[:, 1]: the trailing free axis remains, the integer one goes
        (128, 1),      # t[:, 1, 2]: integers on every free axis
        (128, 6),      # t[:, 1, :]: the same access spelled out
        (128, 1),      # ... and it can be indexed again as [:, 0]
        (128, 6),      # b[1]: a block axis before the partition axis is dropped
        (128, 1),      # b[1, :, 2]
        (4, 6),        # HBM keeps NumPy's rule
        (6,),
        (128,),
        (128, 1),      # c[:, 3]: the only free axis is an integer -> a unit free axis stays
    ]


@nki.jit
def _column_state(x):
    """Per-column running state written and read through integer-indexed views, as flash attention keeps its
    row statistics: ``state[:, j]`` handed to a helper that works on ``[:, 0]``."""
    p, n = x.shape
    ncol = n // 128
    state = nl.full((nl.par_dim(p), ncol), fill_value=-1e30, dtype=nl.float32, buffer=nl.sbuf)
    total = nl.zeros((nl.par_dim(p), ncol), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(ncol):
        tile = nl.load(x[:, nl.ds(j * 128, 128)])
        _update(state[:, j], total[:, j], tile)
    return _store(state), _store(total)


def _update(m_col, s_col, tile):
    m_tile = nisa.tensor_reduce(np.max, tile, axis=(1,))
    m_col[:, 0] = nl.maximum(m_col[:, 0], m_tile)
    e = nisa.activation(np.exp, tile, bias=nl.multiply(m_col[:, 0], -1.0))
    s_col[:, 0] = nl.sum(e, axis=1, keepdims=True)


def test_integer_indexed_state_columns_match_numpy():
    x = RNG.standard_normal((128, 512)).astype(np.float32)
    m, s = _column_state(x)
    blocks = x.reshape(128, 4, 128)
    m_ref = blocks.max(axis=2)
    s_ref = np.exp(blocks - m_ref[:, :, None]).sum(axis=2)
    np.testing.assert_allclose(m, m_ref, rtol=1e-6)
    np.testing.assert_allclose(s, s_ref, rtol=1e-5)


@nki.jit
def _free_int_roundtrip(x, i, j):
    t = nl.load(x)
    col = t[:, i, j]
    out = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.hbm)
    nl.store(out, nl.copy(col[:, 0]))
    return out


@settings(max_examples=15, deadline=None)
@given(p=st.integers(1, 128), a=st.integers(1, 5), b=st.integers(1, 5), data=st.data())
def test_integer_free_axes_read_the_numpy_element(p, a, b, data):
    i = data.draw(st.integers(0, a - 1))
    j = data.draw(st.integers(0, b - 1))
    x = RNG.standard_normal((p, a, b)).astype(np.float32)
    out = _free_int_roundtrip(x, i, j)
    np.testing.assert_array_equal(out, x[:, i, j][:, None])


# ---------------------------------------------------------------------------------------------------------------
# nl.mgrid components are index variables


@nki.jit
def _mgrid_column_writes(x):
    """Row max of each 128-column block written with ``m[i_p, j]``, ``i_p`` from an mgrid over (128, nblk)."""
    p, n = x.shape
    nblk = n // 128
    m = nl.ndarray((nl.par_dim(p), nblk), dtype=nl.float32, buffer=nl.sbuf)
    i_p, i_b = nl.mgrid[0:p, 0:nblk]
    for j in nl.affine_range(nblk):
        tile = nl.load(x[:, nl.ds(j * 128, 128)])
        m[i_p, j] = nisa.tensor_reduce(np.max, tile, axis=(1,), negate=True)
    total = nisa.tensor_reduce(np.add, m[i_p, i_b], axis=(1,), keepdims=True)
    return _store(m), _store(total)


def test_mgrid_component_with_an_integer_is_a_column_access():
    x = RNG.standard_normal((128, 512)).astype(np.float32)
    m, total = _mgrid_column_writes(x)
    m_ref = -x.reshape(128, 4, 128).max(axis=2)
    np.testing.assert_array_equal(m, m_ref)
    np.testing.assert_allclose(total, m_ref.sum(axis=1, keepdims=True), rtol=1e-6)


@nki.jit
def _mgrid_mixed_extents(x):
    """``t[i_p, k * 64 + i_f]`` with i_p from a (128, 256) grid and i_f from a (1, 64) grid: a [128, 64] access."""
    p, n = x.shape
    t = nl.load(x)
    i_p, _ = nl.mgrid[0:p, 0:n]
    _, i_f = nl.mgrid[0:1, 0:64]
    out = nl.ndarray((n // 64, p, 64), dtype=x.dtype, buffer=nl.hbm)
    for k in nl.affine_range(n // 64):
        nl.store(out[k], nl.multiply(t[i_p, k * 64 + i_f], 2.0))
    return out


def test_mgrid_components_of_different_extents_combine():
    x = RNG.standard_normal((128, 256)).astype(np.float32)
    out = _mgrid_mixed_extents(x)
    np.testing.assert_array_equal(out, (2 * x).reshape(128, 4, 64).transpose(1, 0, 2))


@nki.jit
def _mgrid_dense_combination(x):
    p, n = x.shape
    i_p, i_f = nl.mgrid[0:p, 0:n]
    ramp = nisa.iota(i_p * n + i_f, dtype=nl.float32)
    t = nl.load(x[i_p, i_f])
    keep = nisa.affine_select(pred=(i_p >= i_f), on_true_tile=t, on_false_value=0.0)
    return _store(ramp), _store(keep)


def test_mgrid_arithmetic_still_spans_the_full_grid():
    x = RNG.standard_normal((64, 96)).astype(np.float32)
    ramp, keep = _mgrid_dense_combination(x)
    np.testing.assert_array_equal(ramp, np.arange(64 * 96, dtype=np.float32).reshape(64, 96))
    np.testing.assert_array_equal(keep, np.where(np.arange(64)[:, None] >= np.arange(96)[None, :], x, 0.0))


def test_mgrid_component_shapes():
    i_p, i_f = nl.mgrid[0:128, 0:512]
    assert i_p.shape == (128, 1) and i_f.shape == (1, 512)
    assert (i_p * 512 + i_f).shape == (128, 512)
    (i_only,) = nl.mgrid[0:128]
    assert i_only.shape == (1, 128)


@pytest.mark.parametrize("spelling", ["slice", "mgrid"])
def test_column_write_spellings_agree(spelling):
    x = RNG.standard_normal((128, 384)).astype(np.float32)

    @nki.jit
    def k(x):
        p, n = x.shape
        m = nl.ndarray((nl.par_dim(p), n // 128), dtype=nl.float32, buffer=nl.sbuf)
        i_p, _ = nl.mgrid[0:p, 0:n // 128]
        for j in nl.affine_range(n // 128):
            r = nisa.tensor_reduce(np.add, nl.load(x[:, nl.ds(j * 128, 128)]), axis=(1,))
            if spelling == "slice":
                m[:, j] = r
            else:
                m[i_p, j] = r
        return _store(m)

    np.testing.assert_allclose(k(x), x.reshape(128, 3, 128).sum(axis=2), rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# direct allocation: the block index wraps modulo num_free_tiles under index expressions too


@pytest.mark.parametrize("spelling", ["slice", "mgrid"])
def test_wrapped_blocks_indexed_with_expressions(spelling):
    import neuronxcc.nki.compiler as ncc

    x = RNG.standard_normal((4, 128, 64)).astype(np.float32)

    @nki.jit
    def k(x):
        nblk, p, f = x.shape
        # 4 logical blocks rotate through 2 physical slots (double buffering, as AWS's allocated kernels do)
        buf = nl.ndarray((nblk, nl.par_dim(p), f), dtype=nl.float32,
                         buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)
        i_p, i_f = nl.mgrid[0:p, 0:f]
        for b in nl.sequential_range(nblk):
            if spelling == "slice":
                buf[b, :, :] = nl.load(x[b])
                nl.store(out[b], nl.multiply(buf[b, :, :], 3.0))
            else:
                buf[b, i_p, i_f] = nl.load(x[b])
                nl.store(out[b], nl.multiply(buf[b, i_p, i_f], 3.0))
        return out

    np.testing.assert_array_equal(nki.baremetal(k)(x), 3 * x)


# ---------------------------------------------------------------------------------------------------------------
# NKI traces an affine_range / sequential_range body once: direct placements computed in the body hold for every
# iteration, and a PSUM tensor allocated in the body starts fresh accumulation groups each iteration


@nki.jit
def _allocated_rowsum_loop(x):
    """Per 128-row block: PSUM accumulation of x_blk.T @ ones over column chunks, with every buffer directly
    allocated inside the loop body from a running address (``cur += ...``), as AWS's allocated kernels do."""
    import functools

    import neuronxcc.nki.compiler as ncc

    nblk, p, f = x.shape
    cur = 0
    ones = nl.ndarray((nl.par_dim(p), 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
    cur += 4
    ones[...] = nisa.memset((p, 1), 1.0, dtype=nl.float32)
    out = nl.ndarray((nblk, f // 128, 128, 1), dtype=nl.float32, buffer=nl.hbm)

    def bank(bank_map, idx, pdim_size, fdim_size):
        return (bank_map[idx], 0, 0)

    for b in nl.affine_range(nblk):
        xt = nl.ndarray((nl.par_dim(p), f), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
        cur += 60000  # (xt plus reserved space) in NKI this runs once: every iteration uses the same addresses
        res = nl.ndarray((nl.par_dim(128), 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
        cur += 4
        acc = nl.ndarray((f // 128, nl.par_dim(128), 1), dtype=nl.float32,
                         buffer=ncc.psum.alloc(functools.partial(bank, {(i,): 1 + i for i in range(f // 128)})))
        xt[...] = nl.load(x[b])
        for c in nl.affine_range(f // 128):
            for r in nl.affine_range(2):  # two halves of the partitions, accumulated
                acc[c] += nisa.nc_matmul(xt[nl.ds(r * (p // 2), p // 2), nl.ds(c * 128, 128)],
                                         ones[nl.ds(r * (p // 2), p // 2), :])
            res[...] = nl.copy(acc[c])
            nl.store(out[b, c], res)
    return out


def test_direct_placements_in_a_loop_body_are_traced_once():
    x = RNG.standard_normal((6, 128, 256)).astype(np.float32)  # 6 x 60000 B per partition only fits once
    out = nki.baremetal(_allocated_rowsum_loop)(x)
    ref = x.sum(axis=1).reshape(6, 2, 128, 1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_python_range_inside_a_symbolic_loop_still_places_each_repetition():
    import neuronxcc.nki.compiler as ncc

    x = RNG.standard_normal((2, 128, 64)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((2, 2, 128, 64), dtype=nl.float32, buffer=nl.hbm)
        for b in nl.affine_range(2):
            cur = 0
            tiles = []
            for j in range(2):  # unrolled by NKI: two distinct tensors at distinct addresses
                t = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
                cur += 64 * 4
                t[...] = nl.multiply(nl.load(x[b]), float(j + 1))
                tiles.append(t)
            for j in range(2):
                nl.store(out[b, j], tiles[j])
        return out

    out = nki.baremetal(k)(x)
    np.testing.assert_array_equal(out[:, 0], x)
    np.testing.assert_array_equal(out[:, 1], 2 * x)


def test_wrapped_psum_blocks_start_their_own_accumulation_groups():
    """Four logical PSUM blocks wrap onto one bank (``num_bank_tiles=(1,)``); each accumulates two matmuls and must
    hold its own sum, not the previous block's plus its own."""
    import neuronxcc.nki.compiler as ncc

    a = RNG.standard_normal((4, 2, 128, 128)).astype(np.float32)
    b = RNG.standard_normal((128, 256)).astype(np.float32)

    @nki.jit
    def k(a, b):
        nq = a.shape[0]
        cur = 0
        bt = nl.ndarray((nl.par_dim(128), 256), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
        cur += 256 * 4
        at = nl.ndarray((nl.par_dim(128), 2, 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
        cur += 2 * 128 * 4
        res = nl.ndarray((nl.par_dim(128), 256), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
        acc = nl.ndarray((nq, nl.par_dim(128), 256), dtype=nl.float32,
                         buffer=ncc.psum.mod_alloc(base_bank=3, num_bank_tiles=(1,)))
        bt[...] = nl.load(b)
        out = nl.ndarray((nq, 128, 256), dtype=nl.float32, buffer=nl.hbm)
        for q in nl.sequential_range(nq):
            for j in nl.affine_range(2):
                at[:, j, :] = nl.load(a[q, j])
                acc[q, :, :] += nisa.nc_matmul(at[:, j, :], bt)
            res[...] = nisa.tensor_copy(acc[q, :, :])
            nl.store(out[q], res)
        return out

    out = nki.baremetal(k)(a, b)
    ref = np.einsum("qjkm,kn->qmn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
