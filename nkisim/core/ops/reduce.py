"""Reductions and scans: along the free axes (VectorE ``tensor_reduce`` and the fused ``tensor_scalar_reduce``),
across partitions (GpSimd), running scans, batch-norm statistics, range/predicated selects that reduce into the
engines' registers, and the top-8 search instructions."""

from __future__ import annotations

import numpy as np

from nkisim.core import dtypes, execute
from nkisim.core.access import mark_written, write
from nkisim.core.context import current
from nkisim.core.dtypes import F32
from nkisim.core.instr import B_PSUM, E_GPSIMD, E_VECTOR
from nkisim.core.ops.common import (
    REDUCE,
    RESET_REDUCE,
    as_rows,
    begin,
    check_reduce_res,
    check_writable,
    deliver,
    engine_checks,
    f32_values,
    finish,
    free_of,
    mask_values,
    need_int,
    need_tensor,
    new_result,
    out_dtype,
    parts_of,
    per_partition_values,
    reduce_registers,
    result_tile,
    scalar_operand,
    write_side,
)
from nkisim.core.ops.elementwise import unary_operands, v4_operators
from nkisim.core.rules import NKIError, applies, fail
from nkisim.core.tensor import Tensor


def tensor_reduce(op: str, data, axis, *, negate: bool = False, keepdims: bool = False, dtype=None, mask=None,
                  op_name: str = "tensor_reduce", dst: Tensor | None = None) -> Tensor:
    ctx = current(op_name)
    ctx.settle()
    data = need_tensor(data, op_name, "data")
    engine_checks(op_name, E_VECTOR, [(data, "data")], ctx)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nd = data.ndim
    norm = []
    for ax in axes:
        ax = int(ax)
        if not -nd <= ax < nd:  # not the partition axis: no axis at all (numpy's AxisError, in the rule's words)
            fail("nkisim_bad_argument", op=op_name, detail=f"axis {ax} is out of range for a {nd}-D tile: the free "
                 f"axes are 1 to {nd - 1}" if nd > 1 else f"axis {ax}: a 1-D tile has no free axis")
        if ax < 0:
            ax += nd
        if ax == 0:
            fail("nkisim_reduce_partition_axis", op=op_name, axis=axis)
        norm.append(ax)
    # Trailing contiguous axes only in the current API, where the compiler refuses the rest (nki.isa.tensor_reduce,
    # NKI 0.6; the 0.3 migration note on tensor_reduce's axis handling).  The legacy API's docs (2.26:
    # "the reduction axes must be consecutive ... [1, 3, 4] is not" legal) read as a rule too, but its compiler
    # took any free axes: kernels reducing axis=(1, 3), (2, 4) or [3, 5] (2x2 max-pool windows of a 4-/5-/6-D
    # view) passed the course on trn1/trn2 hardware (shared/nki-api.md, tensor_reduce and "Emulation
    # requirements" 8; the calibration corpus's seed004, rows, weights, alloc and pooling kernels), so the legacy
    # front end accepts them: refusing would reject kernels the real toolchain ran.
    if sorted(norm) != list(range(nd - len(norm), nd)) and applies("nkisim_reduce_axes", ctx.era):
        fail("nkisim_reduce_axes", op=op_name, axes=tuple(axes), ndim=nd)
    if op not in execute.REDUCE:
        fail("nkisim_bad_argument", op=op_name, detail=f"'{op}' is not a reduction operator")
    if execute.ALU[op][1]:  # bitvec reductions: "the input/output data types must be integer types" (isa docs)
        need_int(op_name, op, (data, "data"))
    out_shape = tuple(1 if i in norm else d for i, d in enumerate(data.shape)) if keepdims else \
        tuple(d for i, d in enumerate(data.shape) if i not in norm)
    if len(out_shape) == 1:
        out_shape = out_shape  # (P,) result of a full free-axis reduction
    out_dt = dtypes.to_dtype(dtype) if dtype is not None else data.dtype
    out = result_tile(ctx, out_shape, out_dt, dst, op_name)
    ins = ctx.emit("tensor_reduce", E_VECTOR, (data,), (out,), {"alu": op, "axes": tuple(norm)})
    m_out, m_in = _reduce_mask(mask, out.shape, data, op)
    values = None
    if ctx.full:
        v = f32_values(data)
        if m_in is not None:
            v = np.where(m_in, v, np.asarray(_REDUCE_IDENTITY[op], dtype=v.dtype))
        values = None if m_in is not None else _extremes(op, v, tuple(norm), keepdims)
        if values is None:
            values = execute.REDUCE[op](v, axis=tuple(norm), keepdims=keepdims)
        values = np.asarray(values, dtype=v.dtype if v.dtype.kind in "iub" else F32)
        if negate:
            values = -values
    return deliver(ctx, ins, out, values, m_out, dst)


_REDUCE_IDENTITY = {"add": 0, "maximum": -np.inf, "minimum": np.inf, "multiply": 1}
_EXTREMES = {"maximum": np.maximum, "minimum": np.minimum}


def _extremes(op: str, v: np.ndarray, axes: tuple, keepdims: bool) -> np.ndarray | None:
    """``np.max`` / ``np.min`` of ``v`` over a few small ``axes`` (a max-pool's 2x2 windows, ``axis=(3, 4)`` of a
    permuted view), as the elementwise extreme of the ``v[..., i, j]`` slices: NumPy's reduction walks such a view
    four bytes at a time (1.6 ms for a [128, 1, 111, 2, 2] window view of a PSUM tile, against 42 us).

    The same bits as NumPy's, or None (the caller reduces as before): over values that are not NaN the extreme is
    the same value whatever the order, and its bits are too unless it is zero (-0.0 and +0.0 compare equal, so which
    one an order keeps depends on the order); a NaN in the input makes the result NaN.  So a result holding no NaN
    and no zero is exact; any other is recomputed by NumPy."""
    uf = _EXTREMES.get(op)
    if uf is None or not axes or v.dtype.kind not in "fiu":
        return None
    sizes = [v.shape[a] for a in axes]
    count = 1
    for n in sizes:
        count *= n
    if count < 2 or count > 16:
        return None
    out = None
    index = [slice(None)] * v.ndim
    for flat in range(count):
        for a, n in zip(reversed(axes), reversed(sizes)):  # row-major over the reduced axes
            index[a] = flat % n
            flat //= n
        piece = v[tuple(index)]
        if out is None:
            out = np.array(piece, copy=True)
        else:
            uf(out, piece, out=out)
    if v.dtype.kind == "f" and (np.isnan(out).any() or not out.all()):
        return None
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(v.shape)))
    return out


def _reduce_mask(mask, out_shape, data: Tensor, op: str):
    """(mask over the output, mask over the input) of a reduction: a predicate over the reduced (input) axes, e.g.
    ``nl.sum(t, axis=[-2, -1], mask=(i_h < H) & (i_w < W))`` in AWS's adaptive pooling sample, leaves the masked-off
    input elements out of the reduction (they count as the operator's identity)."""
    if mask is None:
        return mask_values(None, out_shape, data), None
    try:
        return mask_values(mask, out_shape, data), None
    except NKIError as exc:
        if exc.code != "nkisim_shape_mismatch" or op not in _REDUCE_IDENTITY:
            raise
        return None, mask_values(mask, data.shape, data)


def tensor_scalar_reduce(data, op0: str, operand0, reduce_op: str, reduce_res: Tensor | None, *,
                         reverse0: bool = False, reduce_cmd: int = RESET_REDUCE, reduce_init=None,
                         negate: bool = False, dtype=None, mask=None) -> Tensor:
    """out = data op0 operand0, reduced over the free axes into VectorE's accumulation registers (VectorE).

    ``reduce_cmd`` (NKI 0.6 nki.isa.tensor_scalar_reduce, "Accumulator behavior"): reset_reduce restarts the
    registers from this result, reduce accumulates onto them, load_reduce starts from ``reduce_init``; the registers
    are shared with range_select, select_reduce and tensor_scalar_cumulative.  ``reduce_res`` (one element per
    partition) reads them out, negated if ``negate`` ("does not modify the internal reduction registers"); None
    leaves the result in the registers (a reduction chain's non-final steps)."""
    op = "tensor_scalar_reduce"
    tiles = [(data, "data")] + ([(reduce_res, "reduce_res")] if reduce_res is not None else [])
    ctx, checked = begin(op, E_VECTOR, tiles)
    d, r = checked[0], (checked[1] if reduce_res is not None else None)
    v4_operators(ctx, op, op0)
    # "op0 can only be arithmetic operation ... Bitvec operators are not supported in this API"; the reduce_op is
    # one of the legal reduction operators (nki.isa.tensor_scalar_reduce, NKI 0.6 and 2.26)
    if execute.ALU.get(op0, (None, False))[1]:
        fail("nkisim_bad_argument", op=op, detail=f"op0 must be an arithmetic operator, not the bitvec '{op0}'")
    if reduce_op not in execute.REDUCE or execute.ALU[reduce_op][1]:
        fail("nkisim_bad_argument", op=op, detail=f"'{reduce_op}' is not an arithmetic reduction operator")
    if op0 in execute.UNARY_ALU:  # nl.abs (nki-library's rmsnorm/layernorm kernels): VectorE runs it
        operand0 = unary_operands(ctx, op, E_VECTOR, op0, operand0)[0]
    if r is not None and (parts_of(r) != parts_of(d) or free_of(r) != 1):
        fail("nkisim_reduce_res_shape", op=op, p=parts_of(d), shape=list(r.shape))
    cmd = int(reduce_cmd)
    if cmd not in (REDUCE, RESET_REDUCE, LOAD_REDUCE):
        fail("nkisim_bad_argument", op=op, detail="reduce_cmd must be reset_reduce, reduce or load_reduce")
    if (cmd == LOAD_REDUCE) != (reduce_init is not None):
        fail("nkisim_bad_argument", op=op, detail="reduce_init is given exactly when reduce_cmd is load_reduce")
    s0, t0 = scalar_operand(ctx, op, d, operand0, "operand0")
    si, ti = scalar_operand(ctx, op, d, reduce_init, "reduce_init")
    out = new_result(ctx, d.shape, out_dtype(dtype, d))
    srcs = [d] + [t for t in (t0, ti) if t is not None]
    ins = ctx.emit("tensor_scalar", E_VECTOR, srcs, (out, r) if r is not None else (out,),
                   {"alu0": op0, "reduce": True})
    values = None
    if ctx.full:
        v, s = f32_values(d), per_partition_values(s0, d)
        values = execute.alu(op0, s, v) if reverse0 else execute.alu(op0, v, s)
        rows = as_rows(np.asarray(values, dtype=F32))
        p = rows.shape[0]
        if cmd == LOAD_REDUCE:
            regs = ctx.reduce_regs.get(E_VECTOR)
            if regs is None:
                regs = ctx.reduce_regs[E_VECTOR] = np.zeros((128, 1), dtype=F32)
            init = per_partition_values(si, d).reshape(-1, 1) if isinstance(si, Tensor) else np.float32(si)
            regs[:p] = np.broadcast_to(init, (p, 1))
        regs = reduce_registers(ctx, E_VECTOR, REDUCE if cmd == LOAD_REDUCE else cmd, reduce_op, rows)
        if r is not None:
            write_side(r, -regs if negate else regs)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, *[t for t in (d, r, out) if t is not None]))


_PARTITION_REDUCE = ("add", "average", "maximum", "bitwise_or", "bitwise_and")


def tensor_partition_reduce(op: str, data, *, dtype=None, mask=None, strict: bool = False) -> Tensor:
    """Reduce across the partitions: [P, free...] -> [1, free...] (GpSimdE).  ``strict``: only NKI 0.6's operators
    ("op: the reduction operator (add, average, max, bitwise_or, bitwise_and)", nki.isa.tensor_partition_reduce)."""
    ctx, (d,) = begin("tensor_partition_reduce", E_GPSIMD, [(data, "data")])
    if op not in execute.REDUCE or (strict and op not in _PARTITION_REDUCE):
        fail("nkisim_bad_argument", op="tensor_partition_reduce", detail=f"'{op}' is not a reduction operator"
             + (" of tensor_partition_reduce (add, average, max, bitwise_or, bitwise_and)" if strict else ""))
    out = new_result(ctx, (1,) + tuple(d.shape[1:]), out_dtype(dtype, d))
    ins = ctx.emit("tensor_partition_reduce", E_GPSIMD, (d,), (out,), {"alu": op})
    values = execute.REDUCE[op](f32_values(d), axis=0, keepdims=True) if ctx.full else None
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, out))


def tensor_tensor_scan(data0, data1, initial, op0: str, op1: str, *, reverse0: bool = False, reverse1: bool = False,
                       dtype=None, mask=None, strict: bool = False) -> Tensor:
    """Scan along the free axis: r[i] = (data0[i] op0 r[i-1]) op1 data1[i], r[-1] = initial (VectorE).
    ``strict``: "The two input tiles, data0 and data1 cannot both reside in PSUM" (NKI 0.6 docstring)."""
    ctx, (a, b) = begin("tensor_tensor_scan", E_VECTOR, [(data0, "data0"), (data1, "data1")])
    if strict and a.kind == B_PSUM and b.kind == B_PSUM:
        fail("nkisim_two_inputs_in_psum", op="tensor_tensor_scan")
    if tuple(a.shape) != tuple(b.shape):
        fail("nkisim_shape_mismatch", op="tensor_tensor_scan", shapes=[list(a.shape), list(b.shape)], detail="")
    init, ti = scalar_operand(ctx, "tensor_tensor_scan", a, initial, "initial")
    out = new_result(ctx, a.shape, out_dtype(dtype, a))
    ins = ctx.emit("tensor_tensor_scan", E_VECTOR, [a, b] + ([ti] if ti is not None else []), (out,),
                   {"alu0": op0, "alu1": op1})
    values = None
    if ctx.full:
        x, y = as_rows(f32_values(a)), as_rows(f32_values(b))
        r0 = per_partition_values(init, a).reshape(-1, 1) if isinstance(init, Tensor) else np.float32(init)
        r = np.broadcast_to(r0, (x.shape[0], 1)).astype(F32)
        res = np.empty_like(x)
        for i in range(x.shape[1]):
            xi = x[:, i:i + 1]
            t = execute.alu(op0, r, xi) if reverse0 else execute.alu(op0, xi, r)
            r = execute.alu(op1, y[:, i:i + 1], t) if reverse1 else execute.alu(op1, t, y[:, i:i + 1])
            r = np.asarray(r, dtype=F32)
            res[:, i:i + 1] = r
        values = res.reshape(a.shape)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, a, b, out))


# ---- statistics ------------------------------------------------------------------------------------------------
def bn_stats(data, *, dtype=None, mask=None) -> Tensor:
    """[P, F <= 512] -> [P, 6]: (count, mean, variance * count) of the even and of the odd elements (VectorE)."""
    ctx, (d,) = begin("bn_stats", E_VECTOR, [(data, "data")])
    f = free_of(d)
    if f > 512:
        fail("nkisim_bad_argument", op="bn_stats", detail=f"at most 512 elements per partition "
             f"(nl.tile_size.bn_stats_fmax), got {f}")
    out = new_result(ctx, (parts_of(d), 6), out_dtype(dtype, d))
    ins = ctx.emit("bn_stats", E_VECTOR, (d,), (out,), {})
    m_out, m_in = _input_mask(mask, out, d)
    values = None
    if ctx.full:
        v = as_rows(f32_values(d)).astype(np.float64)
        keep = np.ones(v.shape, dtype=bool) if m_in is None else as_rows(np.broadcast_to(m_in, d.shape))
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
    rows = as_rows(m_in).any(axis=1)
    return np.broadcast_to(rows.reshape((-1,) + (1,) * (len(out.shape) - 1)), out.shape), m_in


def bn_aggr(data, *, dtype=None, mask=None) -> Tensor:
    """[P, 3k] (count, mean, variance * count) tuples -> [P, 2]: (mean, variance) of all of them (VectorE)."""
    ctx, (d,) = begin("bn_aggr", E_VECTOR, [(data, "data")])
    f = free_of(d)
    if f % 3:
        fail("nkisim_bad_argument", op="bn_aggr", detail=f"the free size must be a multiple of 3, got {f}")
    out = new_result(ctx, (parts_of(d), 2), out_dtype(dtype, d))
    ins = ctx.emit("bn_aggr", E_VECTOR, (d,), (out,), {})
    values = None
    if ctx.full:
        t = as_rows(f32_values(d)).astype(np.float64).reshape(parts_of(d), -1, 3)
        cnt, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
        total = cnt.sum(axis=1)
        safe = np.where(total > 0, total, 1.0)
        mu = (cnt * mean).sum(axis=1) / safe
        var = (m2 + cnt * (mean - mu[:, None]) ** 2).sum(axis=1) / safe
        values = np.stack([mu, var], axis=1).astype(F32)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, out))


def range_select(on_true_tile, comp_op0: str, comp_op1: str, bound0, bound1, *, reduce_res=None,
                 reduce_op: str = "maximum", reduce_cmd: int = 0, range_start: int = 0,
                 on_false_value=-3.4028235e38, dtype=None, mask=None, strict: bool = False) -> Tensor:
    """out[p, j] = (comp_op0(j + range_start, bound0[p]) and comp_op1(j + range_start, bound1[p])) ? in : false
    value; each row's reduction goes into VectorE's reduction registers as ``reduce_cmd`` says (idle, reset, reduce,
    reset_reduce: ops.reduce_registers) and ``reduce_res`` reads the registers out.  ``strict``: NKI 0.6's
    constraints (nki.isa.range_select): comparison operators among equal/less/less_equal/greater/greater_equal,
    "on_true_tile must be one of the FP dtypes, and bound0/bound1 must be FP32 types", reduce_op "Currently only
    nl.maximum", on_false_value "Due to hardware constraints, this must be FP32_MIN"."""
    ctx, (src,) = begin("range_select", E_VECTOR, [(on_true_tile, "on_true_tile")])
    if ctx.target == "trn1":  # nki.isa.range_select docs: "Available only on NeuronCore-v3 and beyond."
        fail("nkisim_engine_op_unsupported", op="range_select", engine="Vector Engine", target=ctx.target,
             detail="range_select is available only on NeuronCore-v3 (trn2) and beyond")
    b0, t0 = scalar_operand(ctx, "range_select", src, bound0, "bound0")
    b1, t1 = scalar_operand(ctx, "range_select", src, bound1, "bound1")
    if strict:
        _range_select_rules(src, comp_op0, comp_op1, t0, t1, reduce_op, on_false_value)
    if reduce_res is not None:
        reduce_res = check_reduce_res("range_select", reduce_res, parts_of(src))
    out = new_result(ctx, src.shape, out_dtype(dtype, src))
    dsts = (out,) if reduce_res is None else (out, reduce_res)
    ins = ctx.emit("range_select", E_VECTOR, [src] + [t for t in (t0, t1) if t is not None], dsts,
                   {"alu": comp_op0, "reduce": reduce_res is not None})
    values = None
    if ctx.full:
        v = as_rows(f32_values(src))
        j = np.arange(v.shape[1], dtype=F32)[None, :] + np.float32(range_start)
        lo = per_partition_values(b0, src).reshape(-1, 1)
        hi = per_partition_values(b1, src).reshape(-1, 1)
        keep = execute.alu(comp_op0, j, lo).astype(bool) & execute.alu(comp_op1, j, hi).astype(bool)
        values = np.where(keep, v, np.float32(on_false_value)).reshape(src.shape)
        # the VectorE reduction registers persist across instructions; reduce_res only reads them out
        regs = reduce_registers(ctx, E_VECTOR, reduce_cmd, reduce_op, as_rows(values))
        if reduce_res is not None:
            write_side(reduce_res, regs)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, src, out))


_COMPARISONS = ("equal", "less", "less_equal", "greater", "greater_equal")


def _range_select_rules(src: Tensor, comp_op0, comp_op1, t0, t1, reduce_op, on_false_value) -> None:
    op = "range_select"
    bad = [c for c in (comp_op0, comp_op1) if c not in _COMPARISONS]
    if bad:
        fail("nkisim_bad_argument", op=op, detail=f"'{bad[0]}' is not a comparison operator (nl.equal, nl.less, "
             "nl.less_equal, nl.greater, nl.greater_equal)")
    if src.dtype.kind in "iub":
        fail("nkisim_bad_argument", op=op, detail=f"on_true_tile must have a floating-point dtype, got {src.dtype}")
    for t, name in ((t0, "bound0"), (t1, "bound1")):
        if t is None or t.dtype != F32:
            fail("nkisim_bad_argument", op=op, detail=f"{name} must be a float32 tile with one element per partition"
                 + (f", got {t.dtype}" if t is not None else ", got a number"))
    if reduce_op != "maximum":
        fail("nkisim_bad_argument", op=op, detail=f"reduce_op must be nl.maximum (the only one supported), got "
             f"'{reduce_op}'")
    if np.float32(on_false_value) != np.finfo(np.float32).min:
        fail("nkisim_bad_argument", op=op, detail=f"on_false_value must be FP32_MIN (-3.4028235e+38, a hardware "
             f"constraint), got {on_false_value!r}")


_SELECT_PREDICATES = frozenset(np.dtype(d) for d in (np.int8, np.uint8, np.int16, np.uint16))


def select_reduce(dst: Tensor, predicate, on_true, on_false, *, reduce_res=None, reduce_cmd: int = 0,
                  reduce_op: str = "maximum", reverse_pred: bool = False, dtype=None, mask=None,
                  strict: bool = False) -> Tensor:
    """dst = predicate ? on_true : on_false (VectorE, in place), each row's max going into VectorE's reduction
    registers as ``reduce_cmd`` says ("reset_reduce: Reset accumulators to -inf, then accumulate"; the registers
    are shared with range_select) and ``reduce_res`` reading them out (2.26 nki.isa.select_reduce docs)."""
    op = "select_reduce"
    ctx, (d, p, t) = begin(op, E_VECTOR, [(dst, "dst"), (predicate, "predicate"), (on_true, "on_true")])
    check_writable(d)
    if parts_of(p) != parts_of(d) or parts_of(t) != parts_of(d) or free_of(p) != free_of(d) \
            or free_of(t) != free_of(d):
        fail("nkisim_shape_mismatch", op=op, shapes=[list(d.shape), list(p.shape), list(t.shape)],
             detail=": dst, predicate and on_true must have the same partitions and elements per partition")
    if reduce_op != "maximum":
        fail("nkisim_bad_argument", op=op, detail=f"reduce_op must be max (np.max / nl.maximum), got '{reduce_op}'")
    fv, tf = scalar_operand(ctx, op, t, on_false, "on_false")
    if reduce_res is not None:
        reduce_res = check_reduce_res(op, reduce_res, parts_of(d))
    if strict:
        # NKI 0.6 (nki.isa.select_reduce): "on_true can be any supported dtype except tfloat32, int32, uint32";
        # "predicate dtype can be any supported integer type int8, uint8, int16, uint16"; "reduce_res dtype must
        # of float type"; "Either on_true or predicate may be in PSUM, but not both simultaneously"
        if dtypes.name(t.dtype) in ("tfloat32", "int32", "uint32"):
            fail("nkisim_bad_argument", op=op, detail=f"on_true cannot be {dtypes.name(t.dtype)}")
        if p.dtype not in _SELECT_PREDICATES:
            fail("nkisim_bad_argument", op=op, detail=f"predicate must be int8, uint8, int16 or uint16, got {p.dtype}")
        if reduce_res is not None and reduce_res.dtype.kind in "iub":
            fail("nkisim_bad_argument", op=op, detail=f"reduce_res must have a float dtype, got {reduce_res.dtype}")
        if t.kind == B_PSUM and p.kind == B_PSUM:
            fail("nkisim_two_inputs_in_psum", op=op)
    srcs = [p, t] + ([tf] if tf is not None else [])
    dsts = (d,) if reduce_res is None else (d, reduce_res)
    ctx.emit(op, E_VECTOR, srcs, dsts, {"reduce": reduce_res is not None})
    m = mask_values(mask, d.shape, p, t, d)
    if ctx.full:
        cond = as_rows(f32_values(p)) != 0
        if reverse_pred:
            cond = ~cond
        false_vals = per_partition_values(fv, t).reshape(-1, 1) if isinstance(fv, Tensor) else np.float32(fv)
        vals = np.where(cond, as_rows(f32_values(t)), false_vals)
        if reduce_res is not None or reduce_cmd:
            regs = reduce_registers(ctx, E_VECTOR, reduce_cmd, "maximum", vals)
            if reduce_res is not None:
                write_side(reduce_res, regs)
        out_dt = out_dtype(dtype, d)
        write(d, execute.cast(execute.cast(vals, out_dt).reshape(d.shape), d.dtype), m)
        mark_written(d, m)
    return d


# ---- top-8 search ----------------------------------------------------------------------------------------------
def max8(src, *, dtype=None, mask=None) -> Tensor:
    """The 8 largest values of each partition, descending: [P, F >= 8] -> [P, 8] (VectorE)."""
    ctx, (s,) = begin("max8", E_VECTOR, [(src, "src")])
    f = free_of(s)
    if not 8 <= f <= 16384:
        fail("nkisim_bad_argument", op="max8", detail=f"the free size must be in [8, 16384], got {f}")
    out = new_result(ctx, (parts_of(s), 8), out_dtype(dtype, s))
    ins = ctx.emit("max8", E_VECTOR, (s,), (out,), {})
    values = -np.sort(-as_rows(f32_values(s)), axis=1)[:, :8] if ctx.full else None
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, s, out))


def _first_positions(v: np.ndarray, vals: np.ndarray, *, reverse: bool = False,
                     missing: int | None = None) -> np.ndarray:
    """Per partition, the position of the first element equal to each of vals; a value repeated in vals takes the
    next unused occurrence, in the order vals are visited (``reverse``: vals[7] first).  A value with no (unused)
    occurrence gets ``missing``; ``None`` keeps the legacy result (its first occurrence, or 0 when absent)."""
    p, f = v.shape
    idx = np.zeros(vals.shape, dtype=np.int64)
    order = range(vals.shape[1] - 1, -1, -1) if reverse else range(vals.shape[1])
    for r in range(p):
        used: set[int] = set()
        row = vals[r]
        for k in order:
            hits = np.flatnonzero(v[r] == row[k])
            pos = next((int(h) for h in hits if int(h) not in used), None)
            if pos is None:
                pos = missing if missing is not None else (int(hits[0]) if hits.size else 0)
            else:
                used.add(pos)
            idx[r, k] = pos
    return idx


def _top8_shapes(op: str, d: Tensor, v8: Tensor, *, low: int) -> None:
    """The documented operand sizes of nc_find_index8 / nc_match_replace8 (nki.isa, SDK 2.26 and NKI 0.6): "The vals
    tensor must have exactly 8 elements per partition"; data "between 8 and 16,384 elements per partition"
    (find_index8) / "no more than 16,384" (match_replace8); "data and vals must have the same number of
    partitions"."""
    if free_of(v8) != 8:
        fail("nkisim_bad_argument", op=op, detail=f"vals must have exactly 8 elements per partition, got "
             f"{free_of(v8)} (shape {list(v8.shape)})")
    if not low <= free_of(d) <= 16384:
        fail("nkisim_bad_argument", op=op, detail=f"data must have {'between 8 and' if low == 8 else 'at most'} "
             f"16,384 elements per partition, got {free_of(d)}")
    if parts_of(d) != parts_of(v8):
        fail("err_num_partition_mismatch", params="data, vals", op=op)


def _all_ones(dt: np.dtype) -> int:
    """The all-ones bit pattern of an index dtype, as the integer it reads as (0xFFFFFFFF for uint32, -1 for
    int32)."""
    return -1 if dt.kind != "u" else int(np.iinfo(dt).max)


def nc_find_index8(data, vals, *, dtype=np.uint32, mask=None) -> Tensor:
    """Per partition, the index in data of each of the 8 values in vals: -> [P, 8] (VectorE).

    NKI 0.6 (the ``nki`` era), release notes, Bug Fixes: "unmatched slots now return all-ones, matching hardware
    (previously returned 0, a valid index). Duplicate search values now advance through successive occurrences,
    instead of all mapping to the first match"; the docstring: "0xFFFFFFFF for uint32, 0xFFFF for uint16".  The
    legacy API's docs call an absent value undefined behaviour; its result is kept."""
    ctx, (d, v8) = begin("nc_find_index8", E_VECTOR, [(data, "data"), (vals, "vals")])
    _top8_shapes("nc_find_index8", d, v8, low=8)
    out_dt = dtypes.to_dtype(dtype)
    if out_dt.name not in ("uint16", "uint32"):
        fail("nkisim_dtype_not_supported", op="nc_find_index8", dtype=out_dt.name, operand="dst",
             detail=" (\"The output will contain exactly 8 elements per partition and will be uint16 or uint32 "
             "type\")")
    out = new_result(ctx, (parts_of(d), 8), out_dt)
    ins = ctx.emit("nc_find_index8", E_VECTOR, (d, v8), (out,), {})
    values = None
    if ctx.full:
        missing = _all_ones(out.dtype) if ctx.era == "nki" else None
        values = _first_positions(as_rows(f32_values(d)), as_rows(f32_values(v8))[:, :8], missing=missing)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, v8, out))


def nc_match_replace8(data, vals, imm, *, dst_idx: Tensor | None = None, dtype=None, mask=None) -> Tensor:
    """data with the first occurrence of each of the 8 values per partition replaced by imm; their positions go to
    dst_idx when given (VectorE).

    Repeated values in vals: the legacy API's NumPy equivalent (SDK 2.2x docs) visits vals in order, each taking
    the next unreplaced occurrence; NKI 0.6 "iterates values in reverse to match hardware tie-break ordering"
    (release notes, Bug Fixes), so vals[7] takes the first occurrence (docstring example: data [1, 2, 3, 4, 8 x 7],
    vals [3, 8 x 7] -> dst_idx [2, 10, 9, 8, 7, 6, 5, 4]).  A value left without an occurrence replaces nothing
    and its dst_idx slot is 0 in the ``nki`` era (the legacy NumPy equivalent's zero-initialised indices; no 0.6
    document names it)."""
    ctx, (d, v8) = begin("nc_match_replace8", E_VECTOR, [(data, "data"), (vals, "vals")])
    _top8_shapes("nc_match_replace8", d, v8, low=1)
    out = new_result(ctx, d.shape, out_dtype(dtype, d))
    dsts = (out,) if dst_idx is None else (out, dst_idx)
    ins = ctx.emit("nc_match_replace8", E_VECTOR, (d, v8), dsts, {})
    values = None
    if ctx.full:
        v = as_rows(f32_values(d)).copy()
        if ctx.era == "nki":
            f = v.shape[1]
            pos = _first_positions(v, as_rows(f32_values(v8))[:, :8], reverse=True, missing=f)
            padded = np.concatenate([v, np.zeros((v.shape[0], 1), dtype=v.dtype)], axis=1)
            np.put_along_axis(padded, pos, np.float32(imm), axis=1)  # column f: the unmatched, dropped
            v = padded[:, :f]
            pos = np.where(pos == f, 0, pos)
        else:
            pos = _first_positions(v, as_rows(f32_values(v8))[:, :8])
            np.put_along_axis(v, pos, np.float32(imm), axis=1)
        values = v.reshape(d.shape)
        if dst_idx is not None:
            write_side(dst_idx, pos)
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, d, v8, out))


# ---- cumulative tensor-scalar ----------------------------------------------------------------------------------
_CUMULATIVE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")
_CUMULATIVE_RESET = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}
LOAD_REDUCE = 4  # nisa.reduce_cmd.load_reduce


def tensor_scalar_cumulative(src, dst: Tensor, op0: str, imm0, op1: str, imm1=None, *, reduce_cmd: int = 3) -> Tensor:
    """``reg = op1(op0(src[i], imm0), reg); dst[i] = reg`` along each partition's (flattened) free elements
    (VectorE, nki.isa.tensor_scalar_cumulative, NKI 0.6).  ``reduce_cmd``: reset_reduce starts ``reg`` at op1's
    identity (0 for add/subtract, 1 for multiply, -inf/+inf for max/min), reduce continues from VectorE's
    accumulation registers (shared with range_select, select_reduce, tensor_scalar_reduce), load_reduce starts at
    ``imm1``; the final ``reg`` stays in the registers."""
    op = "tensor_scalar_cumulative"
    ctx, (s, d) = begin(op, E_VECTOR, [(src, "src"), (dst, "dst")])
    check_writable(d)
    if op1 not in _CUMULATIVE_OPS:
        fail("nkisim_bad_argument", op=op, detail=f"op1 must be add, subtract, multiply, maximum or minimum, got "
             f"'{op1}'")
    if execute.ALU.get(op0, (None, True))[1]:
        fail("nkisim_bad_argument", op=op, detail=f"op0 must be an arithmetic operator, got '{op0}'")
    for t, name in ((s, "src"), (d, "dst")):
        if t.dtype.name in ("int32", "uint32", "bool"):
            fail("nkisim_dtype_not_supported", op=op, dtype=t.dtype.name, operand=name,
                 detail=" (BF16, FP16, FP32, FP8, UINT8, UINT16, INT8, INT16 only: INT32/UINT32 are an ISA "
                 "limitation)")
    if parts_of(s) != parts_of(d) or free_of(s) != free_of(d):
        fail("nkisim_shape_mismatch", op=op, shapes=[list(s.shape), list(d.shape)],
             detail=": src and dst must have the same partitions and elements per partition")
    cmd = int(reduce_cmd)
    if cmd not in (REDUCE, RESET_REDUCE, LOAD_REDUCE):
        fail("nkisim_bad_argument", op=op, detail="reduce_cmd must be reset_reduce, reduce or load_reduce")
    if cmd == LOAD_REDUCE and imm1 is None:
        fail("nkisim_bad_argument", op=op, detail="reduce_cmd=load_reduce needs imm1 (the accumulator's start)")
    s0, t0 = scalar_operand(ctx, op, s, imm0, "imm0")
    s1, t1 = scalar_operand(ctx, op, s, imm1, "imm1")
    srcs = [s] + [t for t in (t0, t1) if t is not None]
    ctx.emit(op, E_VECTOR, srcs, (d,), {"alu0": op0, "alu1": op1})
    if ctx.full:
        p = parts_of(s)
        v = as_rows(f32_values(s))
        scal = per_partition_values(s0, s).reshape(-1, 1) if isinstance(s0, Tensor) else np.float32(s0)
        x = np.asarray(execute.alu(op0, v, scal), dtype=F32)
        regs = ctx.reduce_regs.get(E_VECTOR)
        if regs is None:
            regs = ctx.reduce_regs[E_VECTOR] = np.zeros((128, 1), dtype=F32)
        if cmd == RESET_REDUCE:
            reg = np.full((p, 1), _CUMULATIVE_RESET[op1], dtype=F32)
        elif cmd == LOAD_REDUCE:
            reg = np.broadcast_to(per_partition_values(s1, s).reshape(-1, 1) if isinstance(s1, Tensor)
                                  else np.float32(s1), (p, 1)).astype(F32)
        else:
            reg = regs[:p].copy()
        out = np.empty_like(x)
        if op1 == "subtract":  # reg = x[i] - reg: no NumPy accumulate for it
            for i in range(x.shape[1]):
                reg = x[:, i:i + 1] - reg
                out[:, i:i + 1] = reg
        else:
            ufunc = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum}[op1]
            out = ufunc.accumulate(np.concatenate([reg, x], axis=1), axis=1, dtype=F32)[:, 1:]
        if out.shape[1]:
            regs[:p] = out[:, -1:]
        write(d, execute.cast(out.reshape(d.shape), d.dtype))
        mark_written(d)
    return d
