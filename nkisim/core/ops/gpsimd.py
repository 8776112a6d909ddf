"""GpSimd-side generators and gathers: ``iota``, ``affine_select``, ``sequence_bounds``, the flattened and local
gathers, the partition shuffle, and the random number generator (``rand``, ``random_seed``, ``dropout``)."""

from __future__ import annotations

import numpy as np

from nkisim.core import dtypes, execute
from nkisim.core.access import mark_written, read, write
from nkisim.core.context import current
from nkisim.core.dtypes import F32
from nkisim.core.indexing import IndexExpr
from nkisim.core.instr import B_SBUF, E_GPSIMD, E_VECTOR
from nkisim.core.ops.common import (
    as_rows,
    begin,
    check_partitions,
    check_writable,
    f32_values,
    finish,
    free_of,
    mask_values,
    need_on_chip,
    need_tensor,
    new_result,
    out_dtype,
    parts_of,
    per_partition_values,
    scalar_operand,
)
from nkisim.core.rules import fail
from nkisim.core.tensor import Tensor, parse_shape


def iota(expr, dtype, *, mask=None) -> Tensor:
    ctx = current("iota")
    ctx.settle()
    if isinstance(expr, IndexExpr):
        vals = expr.values
    elif isinstance(expr, (tuple, list)):
        raise TypeError("iota takes one nl.arange expression")
    else:
        vals = np.asarray(int(expr)).reshape(1, 1)
    if vals.ndim == 1:
        fail("err_1d_arange_not_supported", name="iota")
    out = new_result(ctx, vals.shape, dtypes.to_dtype(dtype))
    check_partitions(out, ctx.limits.pmax)
    ins = ctx.emit("iota", E_GPSIMD, (), (out,), {})
    values = vals.astype(np.int32).astype(F32) if ctx.full and dtypes.is_float(out.dtype) else (
        vals.astype(np.int64) if ctx.full else None)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape))


def _affine_values(op: str, dst: Tensor, pattern, offset, channel_multiplier) -> np.ndarray:
    """``offset + p * channel_multiplier + sum_k step_k * i_k`` per element of ``dst`` (int64), the free positions
    walked by ``pattern = [[step, num], ...]`` in row-major order (nki.isa.iota / affine_select, NKI 0.6: "the number
    of elements per partition in dst matches the product" of the nums)."""
    pairs = [(int(st), int(n)) for st, n in pattern]
    if not pairs or len(pairs) > 4 or any(n < 1 for _, n in pairs):
        fail("nkisim_bad_argument", op=op, detail=f"pattern {pattern!r} must be 1 to 4 [step, num] pairs, nums >= 1")
    count = 1
    for _, n in pairs:
        count *= n
    if count != free_of(dst):
        fail("nkisim_dst_mismatch", op=op, dst=list(dst.shape), result=[parts_of(dst), count],
             detail=f" (the pattern's {count} elements per partition)")
    free = np.zeros(1, dtype=np.int64)
    for st, n in pairs:
        free = (free[:, None] + st * np.arange(n, dtype=np.int64)[None, :]).reshape(-1)
    rows = np.arange(parts_of(dst), dtype=np.int64)[:, None] * int(channel_multiplier)
    return (int(offset) + rows + free[None, :]).reshape(dst.shape)


def iota_pattern(dst: Tensor, pattern, offset=0, channel_multiplier=0) -> Tensor:
    """``nisa.iota(dst, pattern, offset, channel_multiplier)`` (the current API): int32 arithmetic, cast to dst's
    dtype; dst in SBUF (GpSimdE)."""
    ctx = current("iota")
    ctx.settle()
    dst = need_tensor(dst, "iota", "dst")
    need_on_chip(dst, "iota", "dst", (B_SBUF,))
    check_writable(dst)
    check_partitions(dst, ctx.limits.pmax)
    values = _affine_values("iota", dst, pattern, offset, channel_multiplier)  # validates pattern in timing mode too
    ctx.emit("iota", E_GPSIMD, (), (dst,), {})
    if ctx.full:
        v = values.astype(np.int32)
        write(dst, execute.cast(v.astype(F32) if dtypes.is_float(dst.dtype) else v.astype(np.int64), dst.dtype))
    return dst


def affine_select_pattern(dst: Tensor, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op: str,
                          offset=0) -> Tensor:
    """``nisa.affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset)`` (the
    current API): ``dst = on_true_tile where cmp_op(affine, 0) else on_false_value`` (GpSimdE; dst and on_true_tile
    in SBUF; selected inputs of another dtype go through fp32)."""
    ctx, (src,) = begin("affine_select", E_GPSIMD, [(on_true_tile, "on_true_tile")])
    dst = need_tensor(dst, "affine_select", "dst")
    need_on_chip(dst, "affine_select", "dst", (B_SBUF,))
    need_on_chip(src, "affine_select", "on_true_tile", (B_SBUF,))
    check_writable(dst)
    if parts_of(src) != parts_of(dst) or free_of(src) != free_of(dst):
        fail("nkisim_dst_mismatch", op="affine_select", dst=list(dst.shape), result=list(src.shape),
             detail=" (on_true_tile's partitions and elements per partition)")
    affine = _affine_values("affine_select", dst, pattern, offset, channel_multiplier)
    ctx.emit("affine_select", E_GPSIMD, (src,), (dst,), {"value": float(on_false_value)})
    if ctx.full:
        keep = execute.alu(cmp_op, affine.astype(F32), np.float32(0)).astype(bool)
        vals = np.where(keep, f32_values(src).reshape(dst.shape), np.float32(on_false_value))
        write(dst, execute.cast(vals, dst.dtype))
    return dst


# ---- selects ---------------------------------------------------------------------------------------------------
def affine_select(pred, on_true_tile, on_false_value, *, dtype=None, mask=None) -> Tensor:
    """out = pred ? on_true_tile : on_false_value, the predicate an affine expression of the tile's indices."""
    # AWS's flash_fwd (nki-samples reference/attention.py) selects straight from a PSUM tile and runs in AWS's
    # simulator and on hardware, so the GpSimd-cannot-read-PSUM rule is not applied to on_true_tile here.
    ctx, (src,) = begin("affine_select", E_VECTOR, [(on_true_tile, "on_true_tile")])
    out = new_result(ctx, src.shape, out_dtype(dtype, src))
    m = mask_values(mask, out.shape, src, out)
    p = mask_values(pred, out.shape, src)  # the same affine-predicate evaluation as mask=
    if p is None:
        raise TypeError("affine_select: pred must be an affine predicate of nl.arange / nl.mgrid indices")
    ins = ctx.emit("affine_select", E_GPSIMD, (src,), (out,), {"value": float(on_false_value)})
    values = np.where(p, f32_values(src), np.float32(on_false_value)) if ctx.full else None
    return finish(ctx, ins, out, values, m)


def sequence_bounds(segment_ids, *, dtype=None) -> Tensor:
    """[1, n] segment ids -> [1, 2, n]: for every element the start index and the end index (one past the last)
    of its run of equal ids; padding (id 0) gets start n and end -1 (2.26 nki.isa.sequence_bounds docs and their
    NumPy equivalent, test_nki_isa_sequence_bounds.py).  GpSimdE."""
    op = "sequence_bounds"
    ctx, (s,) = begin(op, E_GPSIMD, [(segment_ids, "segment_ids")])
    if parts_of(s) != 1:
        fail("nkisim_bad_argument", op=op, detail=f"the partition dimension must be 1, got {list(s.shape)}")
    for d in (s.dtype, dtypes.to_dtype(dtype) if dtype is not None else s.dtype):
        if dtypes.name(d) not in ("float32", "int32"):
            fail("nkisim_dtype_not_supported", op=op, dtype=dtypes.name(d), operand="segment_ids/dtype",
                 detail=" (np.float32 or np.int32 only)")
    n = free_of(s)
    out = new_result(ctx, (1, 2, n), out_dtype(dtype, s))
    ins = ctx.emit(op, E_GPSIMD, (s,), (out,), {})
    values = None
    if ctx.full:
        ids = as_rows(f32_values(s))[0]
        i = np.arange(n)
        pad = ids == 0
        first = np.r_[True, ids[1:] != ids[:-1]]
        last = np.r_[ids[1:] != ids[:-1], True]
        start = np.maximum.accumulate(np.where(first, i, 0))
        end = np.minimum.accumulate(np.where(last, i, n - 1)[::-1])[::-1] + 1
        values = np.stack([np.where(pad, n, start), np.where(pad, -1, end)]).astype(F32)[None]
    return finish(ctx, ins, out, values, None)


def gather_flattened(data, indices, *, dtype=None, mask=None) -> Tensor:
    """nl.gather_flattened: out[p, ...] = data[p].flatten()[indices[p, ...]] (indices uint32, shape of the output;
    out-of-bounds indices give garbage on hardware, NaN/poison here) (GpSimdE)."""
    ctx, (d, ix) = begin("gather_flattened", E_GPSIMD, [(data, "data"), (indices, "indices")])
    if not 2 <= d.ndim <= 4 or not 2 <= ix.ndim <= 4:
        fail("nkisim_bad_argument", op="gather_flattened", detail="data and indices must be 2-, 3- or 4-dimensional")
    if parts_of(d) != parts_of(ix):
        fail("err_num_partition_mismatch", params=f"data{list(d.shape)}, indices{list(ix.shape)}",
             op="gather_flattened")
    if ix.dtype != np.uint32:
        fail("nkisim_dtype_not_supported", op="gather_flattened", dtype=ix.dtype.name, operand="indices",
             detail=" (indices must be uint32)")
    out = new_result(ctx, ix.shape, out_dtype(dtype, d))
    ins = ctx.emit("gather_flattened", E_GPSIMD, (d, ix), (out,), {})
    values = None
    if ctx.full:
        v = as_rows(f32_values(d))
        k = as_rows(np.asarray(read(ix))).astype(np.int64)
        ok = k < v.shape[1]
        got = np.take_along_axis(v, np.where(ok, k, 0), axis=1)
        values = np.where(ok, got, np.float32(np.nan)).reshape(ix.shape)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, ix, out))


def local_gather(src_buffer, index, num_elem_per_idx: int = 1, num_valid_indices=None, *, mask=None) -> Tensor:
    """nisa.local_gather (GpSimdE): each of the 8 GpSimd cores serves 16 partitions; it flattens its 16-partition
    slice of ``index`` partition-first, keeps the first ``num_valid_indices`` (default all), and every partition p
    of the slice gathers ``num_elem_per_idx`` contiguous elements of its own flattened ``src_buffer`` row at each of
    those element offsets (2.26 nki.isa.local_gather docs and their NumPy semantics).  Result
    ``[P, *index.free, 16, num_elem_per_idx]`` (the docs' example: index [128, 4] -> [128, 4, 16, 4]); positions
    past ``num_valid_indices`` are left unwritten, out-of-bounds offsets read poison (undefined on hardware)."""
    op = "local_gather"
    ctx, (s, ix) = begin(op, E_GPSIMD, [(src_buffer, "src_buffer"), (index, "index")])
    k = int(num_elem_per_idx)
    p = parts_of(s)
    if p % 16 or parts_of(ix) != p:
        fail("nkisim_bad_argument", op=op, detail=f"src_buffer and index must have the same partition count, a "
             f"multiple of 16 (got {list(s.shape)} and {list(ix.shape)})")
    if k not in (1, 2, 4, 8, 16, 32):
        fail("nkisim_bad_argument", op=op, detail=f"num_elem_per_idx must be 1, 2, 4, 8, 16 or 32 (got {k})")
    if ix.dtype.name not in ("uint16", "int16"):
        fail("nkisim_dtype_not_supported", op=op, dtype=ix.dtype.name, operand="index",
             detail=" (indices must be uint16)")
    per_core = 16 * free_of(ix)
    nvalid = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 0 < nvalid <= per_core:
        fail("nkisim_bad_argument", op=op, detail=f"num_valid_indices must be in [1, {per_core}] (the index "
             f"elements of one 16-partition slice), got {nvalid}")
    if nvalid > 4096:
        fail("nkisim_bad_argument", op=op, detail=f"at most 4096 indices per GpSimd core, got {nvalid}")
    out_shape = (p,) + tuple(ix.shape[1:]) + (16, k)
    out = new_result(ctx, out_shape, s.dtype)
    ins = ctx.emit(op, E_GPSIMD, (s, ix), (out,), {"k": (k, nvalid)})
    values = None
    if ctx.full:
        v = as_rows(f32_values(s))
        width = v.shape[1]
        ind = as_rows(np.asarray(read(ix))).astype(np.int64)
        res = np.full((p, per_core * k), np.float32(np.nan), dtype=np.float32)
        cols = np.arange(k)
        for c in range(p // 16):
            rows = slice(16 * c, 16 * c + 16)
            offs = ind[rows].flatten(order="F")[:nvalid]
            pos = offs[:, None] + cols[None, :]  # [nvalid, k] element offsets
            ok = (pos >= 0) & (pos < width)
            got = v[rows][:, np.where(ok, pos, 0).reshape(-1)]
            res[rows, : nvalid * k] = np.where(ok.reshape(-1)[None, :], got, np.float32(np.nan))
        values = res.reshape(out_shape)
    return finish(ctx, ins, out, values, mask_values(mask, out_shape, s, ix, out))


# ---- data movement within partitions ---------------------------------------------------------------------------
def nc_stream_shuffle(src, dst: Tensor, shuffle_mask, *, dtype=None, mask=None, strict: bool = False) -> Tensor:
    """Within each group of 32 partitions, dst partition i receives src partition shuffle_mask[i] (255: left
    unchanged) (VectorE, in place).  ``strict``: "dst must have same data type as src" (NKI 0.6 docstring)."""
    ctx, (s, d) = begin("nc_stream_shuffle", E_VECTOR, [(src, "src"), (dst, "dst")])
    if strict and s.dtype != d.dtype:
        fail("nkisim_dst_mismatch", op="nc_stream_shuffle", dst=f"{list(d.shape)} {d.dtype}",
             result=f"{list(s.shape)} {s.dtype}", detail=" (dst has src's dtype)")
    need_on_chip(d, "nc_stream_shuffle", "dst")
    check_writable(d)
    sm = [int(x) for x in shuffle_mask]
    if len(sm) != 32 or any(not (0 <= x < 32 or x == 255) for x in sm):
        fail("nkisim_bad_argument", op="nc_stream_shuffle", detail="shuffle_mask must list 32 source partitions "
             "(0-31, or 255 to leave a destination partition unchanged)")
    if free_of(s) != free_of(d):
        fail("nkisim_shape_mismatch", op="nc_stream_shuffle", shapes=[list(s.shape), list(d.shape)], detail="")
    mask_values(mask, d.shape, s, d)  # bounds-checks over-long views (the shuffle itself ignores mask=)
    ctx.emit("nc_stream_shuffle", E_VECTOR, (s,), (d,), {})
    if ctx.full:
        sv, dv = as_rows(f32_values(s)), as_rows(f32_values(d)).copy()
        for i in range(parts_of(d)):
            k = sm[i % 32]
            j = (i // 32) * 32 + k
            if k != 255 and j < sv.shape[0]:
                dv[i] = sv[j]
        write(d, execute.cast(dv.reshape(d.shape), d.dtype))
        mark_written(d)
    return d


# ---- random numbers --------------------------------------------------------------------------------------------
def _rng(ctx) -> np.random.Generator:
    rng = getattr(ctx, "rng", None)
    if rng is None:
        rng = ctx.rng = np.random.default_rng(0)
    return rng


def random_seed(seed) -> None:
    """Seed the engines' random number generator (nkisim: a NumPy generator; values differ from hardware)."""
    ctx = current("random_seed")
    ctx.settle()
    if isinstance(seed, Tensor):
        ctx.emit("random_seed", E_VECTOR, (seed,), (), {})
        value = int(np.asarray(read(seed)).reshape(-1)[0]) if ctx.full else 0
    else:
        ctx.emit("random_seed", E_VECTOR, (), (), {})
        value = int(seed)
    ctx.rng = np.random.default_rng(value & 0xFFFFFFFF)


def rand(shape, dtype=F32, *, mask=None) -> Tensor:
    """A new tile of uniform random values in [0, 1) (GpSimdE)."""
    ctx = current("rand")
    ctx.settle()
    dims, _ = parse_shape(shape)
    out = new_result(ctx, dims, dtypes.to_dtype(dtype))
    ins = ctx.emit("rand", E_GPSIMD, (), (out,), {})
    values = _rng(ctx).random(dims, dtype=np.float32) if ctx.full else None
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, out))


def dropout(data, prob, *, dtype=None, mask=None, strict: bool = False) -> Tensor:
    """Zero each element with probability prob (a scalar or a [P, 1] tile), no rescaling (VectorE).  ``strict``:
    NKI 0.6's rules (nki.isa.dropout): "prob data type must be float32"; "The output data type dst.dtype must match
    the input data type data.dtype"."""
    ctx, (d,) = begin("dropout", E_VECTOR, [(data, "data")])
    pr, tp = scalar_operand(ctx, "dropout", d, prob, "prob")
    if strict:
        if tp is not None and tp.dtype != F32:
            fail("nkisim_bad_argument", op="dropout", detail=f"prob must be float32, got a {tp.dtype.name} tile")
        if dtype is not None and dtypes.to_dtype(dtype) != d.dtype:
            fail("nkisim_dst_mismatch", op="dropout", dst=f"{dtypes.to_dtype(dtype)}", result=f"{d.dtype}",
                 detail=" (dst has data's dtype)")
    out = new_result(ctx, d.shape, out_dtype(dtype, d))
    ins = ctx.emit("tensor_scalar", E_VECTOR, [d] + ([tp] if tp is not None else []), (out,), {"alu0": "dropout"})
    values = None
    if ctx.full:
        drop = _rng(ctx).random(d.shape, dtype=np.float32) < per_partition_values(pr, d)
        values = np.where(drop, np.float32(0.0), f32_values(d))
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, out))


# ---- index extraction --------------------------------------------------------------------------------------------
def nonzero_with_count(src, dst: Tensor, index_offset: int = 0, padding_val: int = -1) -> Tensor:
    """On partitions 0, 16, ..., 112 (each GpSimd core's first partition): ``dst[p] = [indices of the nonzero
    elements of src[p] + index_offset, padding_val ..., count]`` (nki.isa.nonzero_with_count, NeuronCore-v3+); the
    other partitions of ``dst`` are left as they are."""
    op = "nonzero_with_count"
    ctx, (s, d) = begin(op, E_GPSIMD, [(src, "src"), (dst, "dst")])
    check_writable(d)
    if ctx.target == "trn1":
        fail("nkisim_engine_op_unsupported", op=op, engine="GpSimd Engine", target=ctx.target,
             detail="nonzero_with_count exists from NeuronCore-v3 (trn2) on")
    for t, name in ((s, "src"), (d, "dst")):
        if t.kind != B_SBUF:
            need_on_chip(t, op, name, (B_SBUF,))
    if s.dtype.name not in ("float32", "int32"):
        fail("nkisim_dtype_not_supported", op=op, dtype=s.dtype.name, operand="src", detail=" (float32 or int32)")
    if d.dtype.name != "int32":
        fail("nkisim_dtype_not_supported", op=op, dtype=d.dtype.name, operand="dst", detail=" (int32)")
    if parts_of(s) != parts_of(d) or free_of(d) != free_of(s) + 1:
        fail("nkisim_shape_mismatch", op=op, shapes=[list(s.shape), list(d.shape)],
             detail=": dst has src's partitions and one more element per partition (the count)")
    ctx.emit(op, E_GPSIMD, (s,), (d,), {})
    if ctx.full:
        v = as_rows(np.asarray(read(s)))
        out = as_rows(np.asarray(read(d))).copy()
        f = v.shape[1]
        for p in range(0, v.shape[0], 16):
            idx = np.flatnonzero(v[p] != 0)
            row = np.full(f + 1, int(padding_val), dtype=np.int64)
            row[:idx.size] = idx + int(index_offset)
            row[f] = idx.size
            out[p] = row.astype(np.int32)
        write(d, out.reshape(d.shape))
        mark_written(d)
    return d


def topk(src, val_dst: Tensor, idx_dst: Tensor, n: int) -> None:
    """The K largest of ``n`` bf16 values and their indices (nki.isa.topk, new in NKI 0.6, GpSimdE).

    The docstring: "The source tile is interpreted as a 16-partition snake layout: elements 0..15 fill partitions
    0..15 of free-dim column 0, elements 16..31 fill column 1, etc."; ``val_dst`` receives "the K largest values in
    ascending order (BF16)", ``idx_dst`` "the original 0-based indices of those values (uint32)"; K is
    ``val_dst``'s free size.  nkisim reads one snake per group of 16 partitions (one GpSimd core's partitions) and
    writes the group's result to each of its 16 partitions [INFERRED: the docstring says "each partition operates
    independently" and gives no other placement].  Equal values: the lower index is selected first and, within
    the ascending result, comes first [nkisim's choice; not documented].  Cost: the docstring's estimate,
    ``4*n + K`` GpSimd cycles (perf/model.py)."""
    op = "topk"
    ctx, (s, v, ix) = begin(op, E_GPSIMD, [(src, "src"), (val_dst, "val_dst"), (idx_dst, "idx_dst")])
    for t, name in ((s, "src"), (v, "val_dst"), (ix, "idx_dst")):
        if t.kind != B_SBUF:
            need_on_chip(t, op, name, (B_SBUF,))
    check_writable(v)
    check_writable(ix)
    for t, name, want in ((s, "src", "bfloat16"), (v, "val_dst", "bfloat16"), (ix, "idx_dst", "uint32")):
        if t.dtype.name != want:
            fail("nkisim_dtype_not_supported", op=op, dtype=t.dtype.name, operand=name, detail=f" ({want})")
    n = int(n)
    parts, k, cols = parts_of(s), free_of(v), free_of(s)
    problems = [
        (not 8 <= n < 65536, f"n = {n} must be in [8, 65536)"),
        (not (1 <= k < 32768 and k <= n), f"K = {k} (val_dst's free size) must be in [1, 32768) and <= n"),
        (cols < -(-n // 16), f"src has {cols} columns, fewer than ceil(n / 16) = {-(-n // 16)}"),
        (parts % 16 != 0, f"the partition dim ({parts}) must be a multiple of 16"),
        (parts_of(v) != parts or parts_of(ix) != parts or free_of(ix) != k,
         f"val_dst {list(v.shape)} and idx_dst {list(ix.shape)} must both be [{parts}, K]"),
    ]
    bad = [why for cond, why in problems if cond]
    if bad:
        fail("nkisim_bad_argument", op=op, detail="; ".join(bad))
    ctx.emit(op, E_GPSIMD, (s,), (v, ix), {"n": n, "k": k})
    if ctx.full:
        rows = as_rows(f32_values(s))
        vals = np.empty((parts, k), dtype=F32)
        idxs = np.empty((parts, k), dtype=np.uint32)
        for g in range(0, parts, 16):
            snake = rows[g:g + 16].T.reshape(-1)[:n]  # element e: partition g + e % 16, column e // 16
            chosen = np.argsort(-snake, kind="stable")[:k]  # largest first, ties by lower index
            order = chosen[np.argsort(snake[chosen], kind="stable")]  # ascending by value
            vals[g:g + 16] = snake[order]
            idxs[g:g + 16] = order.astype(np.uint32)
        write(v, execute.cast(vals, v.dtype).reshape(v.shape))
        write(ix, idxs.reshape(ix.shape))
        mark_written(v)
        mark_written(ix)


# ---- the GpSimd lanes' XORWOW generators ---------------------------------------------------------------------------
XORWOW_WORDS = 6  # "src_seeds element count for XORWOW must be 6 elements (GpSimd)" (nki.isa.rand_set_state)


def xorwow_step(state: np.ndarray) -> np.ndarray:
    """One XORWOW step (Marsaglia 2003, "Xorshift RNGs") of every lane; ``state`` [lanes, 6] uint32 as (x, y, z, w,
    v, d), updated in place; returns the 32-bit outputs ``v + d``.  The word order in SBUF is nkisim's choice: the
    docs name the algorithm and the count of 6, not the layout."""
    x = state[:, 0]
    t = x ^ (x >> np.uint32(2))
    state[:, 0:4] = state[:, 1:5]
    v = state[:, 4]
    state[:, 4] = (v ^ (v << np.uint32(4))) ^ (t ^ (t << np.uint32(1)))
    state[:, 5] += np.uint32(362437)
    return state[:, 4] + state[:, 5]


def _lanes(ctx) -> np.ndarray:
    st = getattr(ctx, "gpsimd_rng", None)
    if st is None:  # an unseeded engine: undocumented start state; nkisim derives one from its own generator
        st = ctx.gpsimd_rng = _rng(ctx).integers(1, 2 ** 32, size=(128, XORWOW_WORDS), dtype=np.uint32)
    return st


def _state_tile(t: Tensor, op: str, name: str) -> None:
    if t.dtype != np.uint32 or free_of(t) != XORWOW_WORDS:
        fail("nkisim_bad_argument", op=op, detail=f"{name} must be uint32 with {XORWOW_WORDS} elements per partition "
             f"(the GpSimd XORWOW state), got {t.dtype}{list(t.shape)}")


def _gpsimd_rng_only(ctx, op: str, engine) -> None:
    if engine != E_GPSIMD:
        fail("nkisim_engine_op_unsupported", op=op, engine="Vector Engine", target=ctx.target,
             detail="the Vector Engine's PRNG state is accessible from NeuronCore-v4 (trn3) on: use the GpSimd "
             "engine")
    if ctx.target == "trn1":
        fail("nkisim_engine_op_unsupported", op=op, engine="GpSimd Engine", target=ctx.target,
             detail="PRNG state access exists from NeuronCore-v3 (trn2) on")


def rand_set_state(src_seeds, engine=E_GPSIMD) -> None:
    """Seed lane p's XORWOW generator with row p of ``src_seeds`` [P, 6] uint32 (SBUF)."""
    op = "rand_set_state"
    ctx, (s,) = begin(op, E_GPSIMD, [(src_seeds, "src_seeds")])
    _gpsimd_rng_only(ctx, op, engine)
    need_on_chip(s, op, "src_seeds", (B_SBUF,))
    _state_tile(s, op, "src_seeds")
    ctx.emit(op, E_GPSIMD, (s,), (), {})
    if ctx.full:
        _lanes(ctx)[:parts_of(s)] = as_rows(np.asarray(read(s)))


def rand_get_state(dst: Tensor, engine=E_GPSIMD) -> Tensor:
    """Store lane p's XORWOW state into row p of ``dst`` [P, 6] uint32 (SBUF)."""
    op = "rand_get_state"
    ctx, (d,) = begin(op, E_GPSIMD, [(dst, "dst")])
    _gpsimd_rng_only(ctx, op, engine)
    check_writable(d)
    _state_tile(d, op, "dst")
    ctx.emit(op, E_GPSIMD, (), (d,), {})
    if ctx.full:
        write(d, _lanes(ctx)[:parts_of(d)].copy().reshape(d.shape))
        mark_written(d)
    return d


def rng(dst: Tensor, engine=E_VECTOR) -> Tensor:
    """32 random bits per element of ``dst``, truncated to its (integer) dtype's least significant bits
    (nki.isa.rng).  GpSimd: lane p's XORWOW generator fills partition p's elements in order (NeuronCore-v3+).
    Vector: nkisim's own generator (``set_rng_seed``), whose bits differ from the hardware's (the Vector PRNG's
    algorithm and seeding are not documented)."""
    op = "rng"
    ctx, (d,) = begin(op, engine, [(dst, "dst")])
    check_writable(d)
    if d.dtype.name not in ("int8", "int16", "int32", "uint8", "uint16", "uint32"):
        fail("nkisim_dtype_not_supported", op=op, dtype=d.dtype.name, operand="dst",
             detail=" (int8, int16, int32, uint8, uint16 or uint32)")
    if engine == E_GPSIMD and ctx.target == "trn1":
        fail("nkisim_engine_op_unsupported", op=op, engine="GpSimd Engine", target=ctx.target,
             detail="rng runs on GpSimd from NeuronCore-v3 (trn2) on; use the Vector Engine")
    ctx.emit(op, engine, (), (d,), {})
    if ctx.full:
        p, f = parts_of(d), free_of(d)
        if engine == E_GPSIMD:
            lanes = _lanes(ctx)
            bits = np.empty((p, f), dtype=np.uint32)
            sub = lanes[:p].copy()
            for i in range(f):
                bits[:, i] = xorwow_step(sub)
            lanes[:p] = sub
        else:
            bits = _rng(ctx).integers(0, 2 ** 32, size=(p, f), dtype=np.uint32)
        write(d, bits.astype(d.dtype).reshape(d.shape))  # astype keeps the low bits (two's complement)
        mark_written(d)
    return d
