"""Instruction builders for the less common nki.isa instructions (and nl.rand / nl.random_seed).

Same contract as nkisim.core.ops (kept separate so that module stays small): validate, emit exactly one
instruction into the trace, compute values only in full mode.  Op names are the ISA's; the cost model prices
them with the ISA-226 formulas (nkisim/perf/model.py).  Semantics are from the 2.2x nki.isa docs.
"""

from __future__ import annotations

import numpy as np

from nkisim.core import dtypes, execute
from nkisim.core.dtypes import F32
from nkisim.core.instr import B_HBM, B_PSUM, E_GPSIMD, E_SCALAR, E_UNKNOWN, E_VECTOR, Engine
from nkisim.core.ops import (
    _engine_checks,
    _mark_written,
    _scalar_operand,
    _vals,
    check_writable,
    finish,
    free_of,
    mask_values,
    need_on_chip,
    need_tensor,
    new_result,
    parts_of,
    reduce_registers,
)
from nkisim.core.rules import NKIError, fail
from nkisim.core.runtime import current
from nkisim.core.tensor import Tensor, dynamic_tiles, read, write


def _start(op: str, engine: Engine, tiles):
    ctx = current(op)
    ctx.settle()
    checked = []
    for t, name in tiles:
        t = need_tensor(t, op, name)
        checked.append(t)
    _engine_checks(op, engine, list(zip(checked, (n for _, n in tiles))), ctx)
    return ctx, checked


def _out_dtype(dtype, like: Tensor):
    return dtypes.to_dtype(dtype) if dtype is not None else like.dtype


def _rows(v: np.ndarray) -> np.ndarray:
    """[P, free...] values as [P, F] (the engines see the free axes flattened)."""
    return v.reshape(v.shape[0], -1)


def _per_partition(ctx, op: str, data: Tensor, x, name: str):
    """A scalar or a [P, 1] tile operand: (value for compute, tile to list as a source or None)."""
    return _scalar_operand(ctx, op, data, x, name)


def _pval(x, data: Tensor):
    if isinstance(x, Tensor):
        return _vals(x).reshape((parts_of(data),) + (1,) * (data.ndim - 1))
    return np.float32(x)


def _write_side(t: Tensor, values: np.ndarray) -> None:
    check_writable(t)
    write(t, execute.cast(np.asarray(values).reshape(t.shape), t.dtype))
    _mark_written(t)


# ---- selects ---------------------------------------------------------------------------------------------------
def affine_select(pred, on_true_tile, on_false_value, *, dtype=None, mask=None) -> Tensor:
    """out = pred ? on_true_tile : on_false_value, the predicate an affine expression of the tile's indices."""
    # AWS's flash_fwd (nki-samples reference/attention.py) selects straight from a PSUM tile and runs in AWS's
    # simulator and on hardware, so the GpSimd-cannot-read-PSUM rule is not applied to on_true_tile here.
    ctx, (src,) = _start("affine_select", E_VECTOR, [(on_true_tile, "on_true_tile")])
    out = new_result(ctx, src.shape, _out_dtype(dtype, src))
    m = mask_values(mask, out.shape, src, out)
    p = mask_values(pred, out.shape, src)  # the same affine-predicate evaluation as mask=
    if p is None:
        raise TypeError("affine_select: pred must be an affine predicate of nl.arange / nl.mgrid indices")
    ins = ctx.emit("affine_select", E_GPSIMD, (src,), (out,), {"value": float(on_false_value)})
    values = np.where(p, _vals(src), np.float32(on_false_value)) if ctx.full else None
    return finish(ctx, ins, out, values, m)


def range_select(on_true_tile, comp_op0: str, comp_op1: str, bound0, bound1, *, reduce_res=None,
                 reduce_op: str = "maximum", reduce_cmd: int = 0, range_start: int = 0,
                 on_false_value=-3.4028235e38, dtype=None, mask=None) -> Tensor:
    """out[p, j] = (comp_op0(j + range_start, bound0[p]) and comp_op1(j + range_start, bound1[p])) ? in : false
    value; each row's reduction goes into VectorE's reduction registers as ``reduce_cmd`` says (idle, reset, reduce,
    reset_reduce: ops.reduce_registers) and ``reduce_res`` reads the registers out."""
    ctx, (src,) = _start("range_select", E_VECTOR, [(on_true_tile, "on_true_tile")])
    if ctx.target == "trn1":  # nki.isa.range_select docs: "Available only on NeuronCore-v3 and beyond."
        fail("nkisim_engine_op_unsupported", op="range_select", engine="Vector Engine", target=ctx.target,
             detail="range_select is available only on NeuronCore-v3 (trn2) and beyond")
    b0, t0 = _per_partition(ctx, "range_select", src, bound0, "bound0")
    b1, t1 = _per_partition(ctx, "range_select", src, bound1, "bound1")
    out = new_result(ctx, src.shape, _out_dtype(dtype, src))
    dsts = (out,) if reduce_res is None else (out, reduce_res)
    ins = ctx.emit("range_select", E_VECTOR, [src] + [t for t in (t0, t1) if t is not None], dsts,
                   {"alu": comp_op0, "reduce": reduce_res is not None})
    values = None
    if ctx.full:
        v = _rows(_vals(src))
        j = np.arange(v.shape[1], dtype=F32)[None, :] + np.float32(range_start)
        lo = _pval(b0, src).reshape(-1, 1)
        hi = _pval(b1, src).reshape(-1, 1)
        keep = execute.alu(comp_op0, j, lo).astype(bool) & execute.alu(comp_op1, j, hi).astype(bool)
        values = np.where(keep, v, np.float32(on_false_value)).reshape(src.shape)
        # the VectorE reduction registers persist across instructions; reduce_res only reads them out
        regs = reduce_registers(ctx, E_VECTOR, reduce_cmd, reduce_op, _rows(values))
        if reduce_res is not None:
            _write_side(reduce_res, regs)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, src, out))


def select_reduce(dst: Tensor, predicate, on_true, on_false, *, reduce_res=None, reduce_cmd: int = 0,
                  reduce_op: str = "maximum", reverse_pred: bool = False, dtype=None, mask=None) -> Tensor:
    """dst = predicate ? on_true : on_false (VectorE, in place), each row's max going into VectorE's reduction
    registers as ``reduce_cmd`` says ("reset_reduce: Reset accumulators to -inf, then accumulate"; the registers
    are shared with range_select) and ``reduce_res`` reading them out (2.26 nki.isa.select_reduce docs)."""
    op = "select_reduce"
    ctx, (d, p, t) = _start(op, E_VECTOR, [(dst, "dst"), (predicate, "predicate"), (on_true, "on_true")])
    check_writable(d)
    if parts_of(p) != parts_of(d) or parts_of(t) != parts_of(d) or free_of(p) != free_of(d) \
            or free_of(t) != free_of(d):
        fail("nkisim_shape_mismatch", op=op, shapes=[list(d.shape), list(p.shape), list(t.shape)],
             detail=": dst, predicate and on_true must have the same partitions and elements per partition")
    if reduce_op != "maximum":
        fail("nkisim_bad_argument", op=op, detail=f"reduce_op must be max (np.max / nl.maximum), got '{reduce_op}'")
    fv, tf = _per_partition(ctx, op, t, on_false, "on_false")
    srcs = [p, t] + ([tf] if tf is not None else [])
    dsts = (d,) if reduce_res is None else (d, reduce_res)
    ctx.emit(op, E_VECTOR, srcs, dsts, {"reduce": reduce_res is not None})
    m = mask_values(mask, d.shape, p, t, d)
    if ctx.full:
        cond = _rows(_vals(p)) != 0
        if reverse_pred:
            cond = ~cond
        vals = np.where(cond, _rows(_vals(t)), _pval(fv, t).reshape(-1, 1) if isinstance(fv, Tensor)
                        else np.float32(fv))
        if reduce_res is not None or reduce_cmd:
            regs = reduce_registers(ctx, E_VECTOR, reduce_cmd, "maximum", vals)
            if reduce_res is not None:
                _write_side(reduce_res, regs)
        out_dt = _out_dtype(dtype, d)
        write(d, execute.cast(execute.cast(vals, out_dt).reshape(d.shape), d.dtype), m)
        _mark_written(d, m)
    return d


def sequence_bounds(segment_ids, *, dtype=None) -> Tensor:
    """[1, n] segment ids -> [1, 2, n]: for every element the start index and the end index (one past the last)
    of its run of equal ids; padding (id 0) gets start n and end -1 (2.26 nki.isa.sequence_bounds docs and their
    NumPy equivalent, test_nki_isa_sequence_bounds.py).  GpSimdE."""
    op = "sequence_bounds"
    ctx, (s,) = _start(op, E_GPSIMD, [(segment_ids, "segment_ids")])
    if parts_of(s) != 1:
        fail("nkisim_bad_argument", op=op, detail=f"the partition dimension must be 1, got {list(s.shape)}")
    for d in (s.dtype, dtypes.to_dtype(dtype) if dtype is not None else s.dtype):
        if dtypes.name(d) not in ("float32", "int32"):
            fail("nkisim_dtype_not_supported", op=op, dtype=dtypes.name(d), operand="segment_ids/dtype",
                 detail=" (np.float32 or np.int32 only)")
    n = free_of(s)
    out = new_result(ctx, (1, 2, n), _out_dtype(dtype, s))
    ins = ctx.emit(op, E_GPSIMD, (s,), (out,), {})
    values = None
    if ctx.full:
        ids = _rows(_vals(s))[0]
        i = np.arange(n)
        pad = ids == 0
        first = np.r_[True, ids[1:] != ids[:-1]]
        last = np.r_[ids[1:] != ids[:-1], True]
        start = np.maximum.accumulate(np.where(first, i, 0))
        end = np.minimum.accumulate(np.where(last, i, n - 1)[::-1])[::-1] + 1
        values = np.stack([np.where(pad, n, start), np.where(pad, -1, end)]).astype(F32)[None]
    return finish(ctx, ins, out, values, None)


def tensor_copy_predicated(src, dst: Tensor, predicate, *, reverse_pred: bool = False, dtype=None,
                           mask=None) -> Tensor:
    """dst = predicate ? src : dst, in place (VectorE).  ``src`` may be a number: "If src is a scalar, the scalar is
    copied to the dst tile" (2.26 nki.isa.tensor_copy_predicated docs)."""
    scalar = isinstance(src, (bool, int, float, np.number))
    tiles = [(dst, "dst"), (predicate, "predicate")]
    if not scalar:
        tiles.insert(0, (src, "src"))
    ctx, checked = _start("tensor_copy_predicated", E_VECTOR, tiles)
    s, d, p = (np.float32(src), *checked) if scalar else checked
    check_writable(d)
    ctx.emit("tensor_copy_predicated", E_VECTOR, (p, d) if scalar else (s, p, d), (d,), {})
    m = mask_values(mask, d.shape, p, d) if scalar else mask_values(mask, d.shape, s, p, d)  # bounds-checks too
    if ctx.full:
        cond = _vals(p, d.shape) != 0
        if reverse_pred:
            cond = ~cond
        if m is not None:
            cond = cond & m
        sv = s if scalar else np.broadcast_to(_vals(s, d.shape), d.shape)
        new = np.where(np.broadcast_to(cond, d.shape), sv, _vals(d))
        write(d, execute.cast(new, d.dtype))
        _mark_written(d)
    return d


# ---- arithmetic ------------------------------------------------------------------------------------------------
def scalar_tensor_tensor(data, op0: str, operand0, op1: str, operand1, *, reverse0: bool = False,
                         reverse1: bool = False, dtype=None, engine: Engine = E_UNKNOWN, mask=None) -> Tensor:
    """out = (data op0 operand0) op1 operand1: operand0 a scalar or [P, 1] tile, operand1 a tile like data."""
    engine = E_VECTOR if engine == E_UNKNOWN else engine
    ctx, (d, o1) = _start("scalar_tensor_tensor", engine, [(data, "data"), (operand1, "operand1")])
    if tuple(o1.shape) != tuple(d.shape):
        fail("nkisim_shape_mismatch", op="scalar_tensor_tensor", shapes=[list(d.shape), list(o1.shape)], detail="")
    s0, t0 = _per_partition(ctx, "scalar_tensor_tensor", d, operand0, "operand0")
    out = new_result(ctx, d.shape, _out_dtype(dtype, d) if dtype is not None else dtypes.promote(d.dtype, o1.dtype))
    srcs = [d, o1] + ([t0] if t0 is not None else [])
    ins = ctx.emit("scalar_tensor_tensor", engine, srcs, (out,), {"alu0": op0, "alu1": op1})
    values = None
    if ctx.full:
        v, s = _vals(d), _pval(s0, d)
        v = execute.alu(op0, s, v) if reverse0 else execute.alu(op0, v, s)
        w = _vals(o1)
        values = execute.alu(op1, w, v) if reverse1 else execute.alu(op1, v, w)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, o1, out))


def tensor_scalar_reduce(data, op0: str, operand0, reduce_op: str, reduce_res: Tensor, *, reverse0: bool = False,
                         dtype=None, mask=None) -> Tensor:
    """out = data op0 operand0, and reduce_res[p] = reduce_op over the free axes of out (VectorE)."""
    ctx, (d, r) = _start("tensor_scalar_reduce", E_VECTOR, [(data, "data"), (reduce_res, "reduce_res")])
    if parts_of(r) != parts_of(d) or free_of(r) != 1:
        fail("nkisim_scalar_operand_shape", op="tensor_scalar_reduce", operand="reduce_res", p=parts_of(d),
             shape=list(r.shape))
    s0, t0 = _per_partition(ctx, "tensor_scalar_reduce", d, operand0, "operand0")
    out = new_result(ctx, d.shape, _out_dtype(dtype, d))
    ins = ctx.emit("tensor_scalar", E_VECTOR, [d] + ([t0] if t0 is not None else []), (out, r),
                   {"alu0": op0, "reduce": True})
    values = None
    if ctx.full:
        v, s = _vals(d), _pval(s0, d)
        values = execute.alu(op0, s, v) if reverse0 else execute.alu(op0, v, s)
        _write_side(r, execute.REDUCE[reduce_op](_rows(np.asarray(values, dtype=F32)), axis=1, keepdims=True))
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, r, out))


def tensor_partition_reduce(op: str, data, *, dtype=None, mask=None) -> Tensor:
    """Reduce across the partitions: [P, free...] -> [1, free...] (GpSimdE)."""
    ctx, (d,) = _start("tensor_partition_reduce", E_GPSIMD, [(data, "data")])
    if op not in execute.REDUCE:
        fail("nkisim_bad_argument", op="tensor_partition_reduce", detail=f"'{op}' is not a reduction operator")
    out = new_result(ctx, (1,) + tuple(d.shape[1:]), _out_dtype(dtype, d))
    ins = ctx.emit("tensor_partition_reduce", E_GPSIMD, (d,), (out,), {"alu": op})
    values = execute.REDUCE[op](_vals(d), axis=0, keepdims=True) if ctx.full else None
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, out))


def tensor_tensor_scan(data0, data1, initial, op0: str, op1: str, *, reverse0: bool = False, reverse1: bool = False,
                       dtype=None, mask=None) -> Tensor:
    """Scan along the free axis: r[i] = (data0[i] op0 r[i-1]) op1 data1[i], r[-1] = initial (VectorE)."""
    ctx, (a, b) = _start("tensor_tensor_scan", E_VECTOR, [(data0, "data0"), (data1, "data1")])
    if tuple(a.shape) != tuple(b.shape):
        fail("nkisim_shape_mismatch", op="tensor_tensor_scan", shapes=[list(a.shape), list(b.shape)], detail="")
    init, ti = _per_partition(ctx, "tensor_tensor_scan", a, initial, "initial")
    out = new_result(ctx, a.shape, _out_dtype(dtype, a))
    ins = ctx.emit("tensor_tensor_scan", E_VECTOR, [a, b] + ([ti] if ti is not None else []), (out,),
                   {"alu0": op0, "alu1": op1})
    values = None
    if ctx.full:
        x, y = _rows(_vals(a)), _rows(_vals(b))
        r = np.broadcast_to(_pval(init, a).reshape(-1, 1) if isinstance(init, Tensor) else np.float32(init),
                            (x.shape[0], 1)).astype(F32)
        res = np.empty_like(x)
        for i in range(x.shape[1]):
            xi = x[:, i:i + 1]
            t = execute.alu(op0, r, xi) if reverse0 else execute.alu(op0, xi, r)
            r = execute.alu(op1, y[:, i:i + 1], t) if reverse1 else execute.alu(op1, t, y[:, i:i + 1])
            r = np.asarray(r, dtype=F32)
            res[:, i:i + 1] = r
        values = res.reshape(a.shape)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, a, b, out))


def reciprocal(data, *, dtype=None, mask=None, engine: Engine = E_UNKNOWN) -> Tensor:
    """1 / data element-wise on VectorE, or on ScalarE when asked (nki.isa.reciprocal docs: ``engine`` is
    vector_engine, scalar_engine or unknown_engine; the compiler's pick for unknown is modelled as VectorE)."""
    if engine not in (E_UNKNOWN, E_VECTOR, E_SCALAR):
        fail("nkisim_bad_argument", op="reciprocal", detail="engine must be nki.isa.vector_engine, "
             "nki.isa.scalar_engine or nki.isa.unknown_engine")
    eng = E_SCALAR if engine == E_SCALAR else E_VECTOR
    ctx, (d,) = _start("reciprocal", eng, [(data, "data")])
    out = new_result(ctx, d.shape, _out_dtype(dtype, d))
    ins = ctx.emit("reciprocal", eng, (d,), (out,), {})
    values = np.float32(1.0) / _vals(d) if ctx.full else None
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, out))


# ---- statistics ------------------------------------------------------------------------------------------------
def bn_stats(data, *, dtype=None, mask=None) -> Tensor:
    """[P, F <= 512] -> [P, 6]: (count, mean, variance * count) of the even and of the odd elements (VectorE)."""
    ctx, (d,) = _start("bn_stats", E_VECTOR, [(data, "data")])
    f = free_of(d)
    if f > 512:
        fail("nkisim_bad_argument", op="bn_stats", detail=f"at most 512 elements per partition "
             f"(nl.tile_size.bn_stats_fmax), got {f}")
    out = new_result(ctx, (parts_of(d), 6), _out_dtype(dtype, d))
    ins = ctx.emit("bn_stats", E_VECTOR, (d,), (out,), {})
    m_out, m_in = _input_mask(mask, out, d)
    values = None
    if ctx.full:
        v = _rows(_vals(d)).astype(np.float64)
        keep = np.ones(v.shape, dtype=bool) if m_in is None else _rows(np.broadcast_to(m_in, d.shape))
        cols = []
        for half, k in ((v[:, 0::2], keep[:, 0::2]), (v[:, 1::2], keep[:, 1::2])):
            n = k.sum(axis=1).astype(np.float64)
            safe = np.where(n > 0, n, 1.0)
            mean = np.where(k, half, 0.0).sum(axis=1) / safe
            m2 = np.where(k, (half - mean[:, None]) ** 2, 0.0).sum(axis=1)
            cols += [n, mean, m2]
        values = np.stack(cols, axis=1).astype(F32)
    return finish(ctx, ins, out, values, m_out)


def _input_mask(mask, out: Tensor, data: Tensor):
    """(mask over the output, mask over the input) of an instruction whose output is shaped differently from its
    input.  A predicate over the output's index variables masks output elements; one over the input's free
    indices (AWS's layernorm tutorial v2: ``nisa.bn_stats(x[i_p, j*512 + i_f], mask=(j*512 + i_f < F))`` on the
    last, partial chunk) leaves the masked-off input elements out, and only partitions with no element left keep
    their old output."""
    try:
        return mask_values(mask, out.shape, data, out), None
    except NKIError as exc:
        if exc.code != "nkisim_shape_mismatch":
            raise
    m_in = np.broadcast_to(mask_values(mask, data.shape, data), data.shape)
    rows = _rows(m_in).any(axis=1)
    return np.broadcast_to(rows.reshape((-1,) + (1,) * (len(out.shape) - 1)), out.shape), m_in


def bn_aggr(data, *, dtype=None, mask=None) -> Tensor:
    """[P, 3k] (count, mean, variance * count) tuples -> [P, 2]: (mean, variance) of all of them (VectorE)."""
    ctx, (d,) = _start("bn_aggr", E_VECTOR, [(data, "data")])
    f = free_of(d)
    if f % 3:
        fail("nkisim_bad_argument", op="bn_aggr", detail=f"the free size must be a multiple of 3, got {f}")
    out = new_result(ctx, (parts_of(d), 2), _out_dtype(dtype, d))
    ins = ctx.emit("bn_aggr", E_VECTOR, (d,), (out,), {})
    values = None
    if ctx.full:
        t = _rows(_vals(d)).astype(np.float64).reshape(parts_of(d), -1, 3)
        cnt, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
        total = cnt.sum(axis=1)
        safe = np.where(total > 0, total, 1.0)
        mu = (cnt * mean).sum(axis=1) / safe
        var = (m2 + cnt * (mean - mu[:, None]) ** 2).sum(axis=1) / safe
        values = np.stack([mu, var], axis=1).astype(F32)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, out))


# ---- top-8 search ----------------------------------------------------------------------------------------------
def max8(src, *, dtype=None, mask=None) -> Tensor:
    """The 8 largest values of each partition, descending: [P, F >= 8] -> [P, 8] (VectorE)."""
    ctx, (s,) = _start("max8", E_VECTOR, [(src, "src")])
    f = free_of(s)
    if not 8 <= f <= 16384:
        fail("nkisim_bad_argument", op="max8", detail=f"the free size must be in [8, 16384], got {f}")
    out = new_result(ctx, (parts_of(s), 8), _out_dtype(dtype, s))
    ins = ctx.emit("max8", E_VECTOR, (s,), (out,), {})
    values = -np.sort(-_rows(_vals(s)), axis=1)[:, :8] if ctx.full else None
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, s, out))


def _first_positions(v: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Per partition, the position of the first element equal to each of vals (duplicates take later positions)."""
    p, f = v.shape
    idx = np.zeros(vals.shape, dtype=np.int64)
    for r in range(p):
        used: set[int] = set()
        for k, x in enumerate(vals[r]):
            hits = np.flatnonzero(v[r] == x)
            pos = next((int(h) for h in hits if int(h) not in used), int(hits[0]) if hits.size else 0)
            used.add(pos)
            idx[r, k] = pos
    return idx


def nc_find_index8(data, vals, *, dtype=np.uint32, mask=None) -> Tensor:
    """Per partition, the index in data of each of the 8 values in vals: -> [P, 8] (VectorE)."""
    ctx, (d, v8) = _start("nc_find_index8", E_VECTOR, [(data, "data"), (vals, "vals")])
    out = new_result(ctx, (parts_of(d), 8), dtypes.to_dtype(dtype))
    ins = ctx.emit("nc_find_index8", E_VECTOR, (d, v8), (out,), {})
    values = _first_positions(_rows(_vals(d)), _rows(_vals(v8))[:, :8]) if ctx.full else None
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, v8, out))


def nc_match_replace8(data, vals, imm, *, dst_idx: Tensor | None = None, dtype=None, mask=None) -> Tensor:
    """data with the first occurrence of each of the 8 values per partition replaced by imm; their positions go to
    dst_idx when given (VectorE)."""
    ctx, (d, v8) = _start("nc_match_replace8", E_VECTOR, [(data, "data"), (vals, "vals")])
    out = new_result(ctx, d.shape, _out_dtype(dtype, d))
    dsts = (out,) if dst_idx is None else (out, dst_idx)
    ins = ctx.emit("nc_match_replace8", E_VECTOR, (d, v8), dsts, {})
    values = None
    if ctx.full:
        v = _rows(_vals(d)).copy()
        pos = _first_positions(v, _rows(_vals(v8))[:, :8])
        np.put_along_axis(v, pos, np.float32(imm), axis=1)
        values = v.reshape(d.shape)
        if dst_idx is not None:
            _write_side(dst_idx, pos)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, v8, out))


# ---- data movement within partitions ---------------------------------------------------------------------------
def nc_stream_shuffle(src, dst: Tensor, shuffle_mask, *, dtype=None, mask=None) -> Tensor:
    """Within each group of 32 partitions, dst partition i receives src partition shuffle_mask[i] (255: left
    unchanged) (VectorE, in place)."""
    ctx, (s, d) = _start("nc_stream_shuffle", E_VECTOR, [(src, "src"), (dst, "dst")])
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
        sv, dv = _rows(_vals(s)), _rows(_vals(d)).copy()
        for i in range(parts_of(d)):
            k = sm[i % 32]
            j = (i // 32) * 32 + k
            if k != 255 and j < sv.shape[0]:
                dv[i] = sv[j]
        write(d, execute.cast(dv.reshape(d.shape), d.dtype))
        _mark_written(d)
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
    from nkisim.core.tensor import parse_shape

    dims, _ = parse_shape(shape)
    out = new_result(ctx, dims, dtypes.to_dtype(dtype))
    ins = ctx.emit("rand", E_GPSIMD, (), (out,), {})
    values = _rng(ctx).random(dims, dtype=np.float32) if ctx.full else None
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, out))


def dropout(data, prob, *, dtype=None, mask=None) -> Tensor:
    """Zero each element with probability prob (a scalar or a [P, 1] tile), no rescaling (VectorE)."""
    ctx, (d,) = _start("dropout", E_VECTOR, [(data, "data")])
    pr, tp = _per_partition(ctx, "dropout", d, prob, "prob")
    out = new_result(ctx, d.shape, _out_dtype(dtype, d))
    ins = ctx.emit("tensor_scalar", E_VECTOR, [d] + ([tp] if tp is not None else []), (out,), {"alu0": "dropout"})
    values = None
    if ctx.full:
        drop = _rng(ctx).random(d.shape, dtype=np.float32) < _pval(pr, d)
        values = np.where(drop, np.float32(0.0), _vals(d))
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, out))


def gather_flattened(data, indices, *, dtype=None, mask=None) -> Tensor:
    """nl.gather_flattened: out[p, ...] = data[p].flatten()[indices[p, ...]] (indices uint32, shape of the output;
    out-of-bounds indices give garbage on hardware, NaN/poison here) (GpSimdE)."""
    ctx, (d, ix) = _start("gather_flattened", E_GPSIMD, [(data, "data"), (indices, "indices")])
    if not 2 <= d.ndim <= 4 or not 2 <= ix.ndim <= 4:
        fail("nkisim_bad_argument", op="gather_flattened", detail="data and indices must be 2-, 3- or 4-dimensional")
    if parts_of(d) != parts_of(ix):
        fail("err_num_partition_mismatch", params=f"data{list(d.shape)}, indices{list(ix.shape)}",
             op="gather_flattened")
    if ix.dtype != np.uint32:
        fail("nkisim_dtype_not_supported", op="gather_flattened", dtype=ix.dtype.name, operand="indices",
             detail=" (indices must be uint32)")
    out = new_result(ctx, ix.shape, _out_dtype(dtype, d))
    ins = ctx.emit("gather_flattened", E_GPSIMD, (d, ix), (out,), {})
    values = None
    if ctx.full:
        v = _rows(_vals(d))
        k = _rows(np.asarray(read(ix))).astype(np.int64)
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
    ctx, (s, ix) = _start(op, E_GPSIMD, [(src_buffer, "src_buffer"), (index, "index")])
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
        v = _rows(_vals(s))
        width = v.shape[1]
        ind = _rows(np.asarray(read(ix))).astype(np.int64)
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


def tensor_copy_dynamic(src, dst=None, *, which: str, dtype=None, engine: Engine = E_UNKNOWN, mask=None) -> Tensor:
    """nisa.tensor_copy_dynamic_src / _dst: an on-chip copy whose source (``which='src'``) or destination
    (``'dst'``) is addressed at a run-time offset held in an SBUF tile (``t[ix, idx_tile[0, i] + iy]``).  Cost
    ``max(MIN_II_DYNAMIC, N)``, MIN_II_DYNAMIC ~ 600 cycles (ISA-226); the index tile is a source (dependency)."""
    op = f"tensor_copy_dynamic_{which}"
    ctx = current(op)
    ctx.settle()
    src = need_tensor(src, op, "src")
    view = src
    if which == "dst":
        dst = need_tensor(dst, op, "dst")
        view = dst
    tiles = dynamic_tiles(ctx, view)
    if not tiles:
        fail("nkisim_bad_argument", op=op, detail=f"{which} must be addressed at a dynamic offset held in an SBUF "
             f"tile, e.g. t[ix, idx_tile[0, i] + iy] (use nisa.tensor_copy for static addresses)")
    if view._a.buf == B_HBM:
        need_on_chip(view, op, which)
    if engine == E_UNKNOWN:
        engine = E_VECTOR
    checks = [(src, "src")] + ([(dst, "dst")] if dst is not None else [])
    _engine_checks(op, engine, checks, ctx)
    if dst is None:
        out = new_result(ctx, src.shape, _out_dtype(dtype, src))
    else:
        out = dst
        check_writable(out)
        if engine == E_GPSIMD and out._a.buf == B_PSUM:
            fail("nkisim_gpsimd_psum", op=op, operand="dst")
        if free_of(out) * parts_of(out) != free_of(src) * parts_of(src):
            fail("nkisim_shape_mismatch", op=op, shapes=[list(src.shape), list(out.shape)],
                 detail=" (same partitions and elements per partition)")
    m = mask_values(mask, out.shape, src, out)
    ins = ctx.emit(op, engine, (src,) + tiles, (out,), {})
    values = None
    if ctx.full:
        v = read(src)
        values = (execute.to_f32(v) if v.dtype != out.dtype else v).reshape(out.shape)
    if dst is None:
        return finish(ctx, ins, out, values, m)
    if values is not None:
        write(out, execute.cast(values, out.dtype), m)
        _mark_written(out)
    return out
