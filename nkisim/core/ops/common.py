"""What every instruction builder shares: operand checks, mask evaluation, fresh results, engine limits, registers.

The instruction builders (the other modules of this package) validate a call against the constraint catalogue
(``nkisim/core/rules.py``), emit exactly one instruction per hardware instruction into the trace and, in full mode,
compute the values with ``nkisim.core.execute``.  A builder either writes a destination the caller gives (``dst=``,
the current API's dst-first calls) or returns a fresh *provisional* result tile (:func:`new_result` +
:func:`finish`) that ``dst[...] = result`` retargets (``nkisim.core.ops.assign``).
"""

from __future__ import annotations

import numpy as np

from nkisim.core import dtypes, execute
from nkisim.core.access import (
    check_bounds,
    check_oob,
    check_writable,
    deferred_write,
    index_layout,
    mark_written,
    read,
    write,
)
from nkisim.core.buffers import PSUM_SPEC, SBUF_SPEC, allocate
from nkisim.core.context import KernelContext, current
from nkisim.core.dtypes import F32
from nkisim.core.indexing import Mask
from nkisim.core.instr import B_PSUM, B_SBUF, E_DMA, E_GPSIMD, E_SCALAR, E_TENSOR, E_VECTOR, Buf, Engine
from nkisim.core.memory import BUF_NAMES
from nkisim.core.rules import fail
from nkisim.core.tensor import Tensor

__all__ = ["check_oob", "check_writable"]  # re-exported for the builders: storage checks live in core.access


ENGINE_LABEL = {E_TENSOR: "Tensor", E_VECTOR: "Vector", E_SCALAR: "Scalar",
                E_GPSIMD: "GpSimd", E_DMA: "DMA"}


def shape_str(t: Tensor, name: str) -> str:
    return f"{name}{list(t.shape)}"


def need_tensor(x, op: str, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        fail("nkisim_bad_argument", op=op, detail=f"operand '{name}' must be a tile, got {type(x).__name__}")
    return x


def need_on_chip(t: Tensor, op: str, name: str, allowed: tuple[Buf, ...] = (B_SBUF, B_PSUM)) -> None:
    if t.kind not in allowed:
        fail("err_unsupported_memory", operand=name, op=op,
             expected="|".join(sorted(BUF_NAMES[b] for b in allowed)), got=BUF_NAMES[t.kind])  # 'psum|sbuf'


def check_partitions(t: Tensor, limit: int) -> int:
    p = t.shape[t.pdim] if t.shape else 1
    if p > limit:
        fail("err_num_partition_exceed_arch_limit", n=p, limit=limit)
    return p


def parts_of(t: Tensor) -> int:
    return t.shape[t.pdim] if t.shape else 1


def free_of(t: Tensor) -> int:
    shape = t.shape
    if not shape:
        return 1
    p = shape[t.pdim]
    n = 1
    for d in shape:
        n *= d
    return n // p if p else 0


def mask_values(mask, shape, *tiles, check: bool = True) -> np.ndarray | None:
    """The mask= predicate at every element of an access of ``shape``.

    A mask is a predicate over the index variables of the access: when ``tiles`` (the instruction's operands)
    were indexed with nl.arange/nl.mgrid expressions, it is evaluated per element through those variables, so
    predicates built from differently laid out expressions (a partition arange with an mgrid over the free axes,
    or over fewer axes than the operand) apply as NKI applies them.  Otherwise it broadcasts partition-first.
    Operands that run out of bounds are checked here (unless ``check`` is false), against the positions the mask
    leaves enabled.
    """
    if mask is None:  # the per-instruction common case
        if check:
            for t in tiles:
                if t is not None and t.oob:
                    check_oob(t, None)
        return None
    shape = tuple(shape)
    m = None
    if isinstance(mask, Mask):
        if mask.named is not None:
            layout = None
            for t in tiles:
                if t is not None and index_layout(t):
                    layout = dict(index_layout(t)) if layout is None else {**index_layout(t), **layout}
            m = mask.over(shape, layout)
        if m is None:
            if mask.values is None:
                fail("nkisim_shape_mismatch", op="mask", shapes=[list(mask.named[0].shape), list(shape)],
                     detail=": the predicate's index variables do not all index this instruction's operands")
            m = _broadcast_mask(mask.values, shape)
    elif isinstance(mask, (bool, np.bool_)):
        m = np.broadcast_to(np.asarray(bool(mask)), shape)
    else:
        raise TypeError("mask= must be a predicate built from nl.arange/nl.mgrid comparisons")
    if check:
        check_bounds(tiles, m, shape)
    return m


def transposed_mask(mask, src: Tensor, out_shape: tuple, to_out) -> np.ndarray | None:
    """The mask= predicate over the result of a transposing instruction (``to_out`` lays a source-shaped array out
    like the result).

    A mask is a predicate over the index variables of the access: it selects *source* elements
    (``nc_transpose(t[i_p, i_f], mask=(i_p < 64))``, ``load_transpose2d(a[i_p, i_f], mask=(i_p < M))``), which land
    where their values land.  So it is evaluated over the source, through the source's index variables or, for a
    sliced source, positionally, and transposed with the values: the same kernel written with slices or with index
    expressions computes the same thing."""
    m = mask_values(mask, tuple(src.shape), src)  # also the source's out-of-bounds check, under the predicate
    return None if m is None else np.ascontiguousarray(to_out(m)).reshape(out_shape)


def _broadcast_mask(m: np.ndarray, shape: tuple) -> np.ndarray:
    try:
        return np.broadcast_to(pad_dims(m, shape), shape)
    except ValueError:
        pass
    try:
        return np.broadcast_to(m, shape)  # a predicate over trailing free axes only
    except ValueError:
        fail("nkisim_shape_mismatch", op="mask", shapes=[list(m.shape), list(shape)], detail="")
    return m


def pad_dims(a: np.ndarray, shape) -> np.ndarray:
    """Right-pad a lower-rank array with unit dims so it broadcasts partition-first."""
    if a.ndim < len(shape):
        return a.reshape(a.shape + (1,) * (len(shape) - a.ndim))
    return a


def new_result(ctx: KernelContext, shape, dtype, buf: Buf = B_SBUF) -> Tensor:
    spec = SBUF_SPEC if buf == B_SBUF else PSUM_SPEC
    return allocate(shape, dtype, spec, provisional=True, ctx=ctx, name="result")


def result_tile(ctx: KernelContext, shape, dtype, dst: Tensor | None, op_name: str, engine: Engine = E_VECTOR,
                buf: Buf = B_SBUF) -> Tensor:
    """The tile a compute instruction writes: a fresh provisional result, or ``dst`` (the current API's dst-first
    calls), which must be on chip, writable by ``engine`` and hold the result's partitions and elements per
    partition (its own dtype is the result's: "The float32 computation results are cast to dst.dtype",
    nki.isa.tensor_scalar)."""
    if dst is None:
        return new_result(ctx, shape, dtype, buf)
    dst = need_tensor(dst, op_name, "dst")
    kind = dst.kind
    if kind != B_SBUF and kind != B_PSUM:
        need_on_chip(dst, op_name, "dst")
    if kind == B_PSUM and engine == E_GPSIMD:
        fail("nkisim_gpsimd_psum", op=op_name, operand="dst")
    check_writable(dst)
    if dst.pdim == 0 and dst.shape == shape:  # the common case
        return dst
    p = shape[0] if shape else 1
    n = 1
    for d in shape:
        n *= d
    if parts_of(dst) != p or free_of(dst) * parts_of(dst) != n:
        fail("nkisim_dst_mismatch", op=op_name, dst=list(dst.shape), result=list(shape),
             detail=" (same partitions and elements per partition)")
    return dst


def deliver(ctx: KernelContext, ins, out: Tensor, values, mask, dst: Tensor | None) -> Tensor:
    """End of a compute instruction: a fresh result is finished (:func:`finish`: written lazily, retargetable); a
    destination is written now, cast to its dtype, and its PSUM elements count as written."""
    if dst is None:
        return finish(ctx, ins, out, values, mask)
    if values is not None:
        v = np.asarray(values)
        if v.shape != out.shape:
            v = v.reshape(out.shape)
        write(out, execute.cast(v, out.dtype), mask)
    if out.kind == B_PSUM:  # in both modes: the accumulate rules read the flags
        mark_written(out, mask)
    return out


def finish(ctx: KernelContext, ins, out: Tensor, values, mask=None) -> Tensor:
    """Write computed values (full mode) into the fresh result tile and make it retargetable."""
    ctx.remember(ins, out, values)
    if values is not None:
        # written at the next API call (KernelContext.settle) unless `dst[...] = result` retargets it first
        ctx.unwritten = deferred_write(out, values, mask)
    ctx.last_mask = mask  # a retargeted masked result must leave the destination's masked-off elements alone
    return out


def engine_checks(op: str, engine: Engine, tiles, ctx: KernelContext) -> None:
    lim = ctx.limits
    for t, name in tiles:
        need_on_chip(t, op, name)
        if engine == E_GPSIMD and t.kind == B_PSUM:
            fail("nkisim_gpsimd_psum", op=op, operand=name)
        n = free_of(t)
        cap = lim.vector_psum_fmax if t.kind == B_PSUM else lim.vector_sbuf_fmax
        if n > cap:
            fail("nkisim_free_size_limit", op=op, n=n, buffer=BUF_NAMES[t.kind], limit=cap)
        if t.pdim:
            fail("err_failed_to_infer_tile_from_local_tensor", name=t.name or name)
        check_partitions(t, lim.pmax)


def f32_values(t, shape=None):
    v = execute.to_f32(read(t))
    if shape is not None and v.shape != tuple(shape):
        v = pad_dims(v, shape)
    return v


def need_int(op_name: str, alu: str, *operands) -> None:
    for t, name in operands:
        if dtypes.is_float(t.dtype):
            fail("nkisim_dtype_not_supported", op=op_name, dtype=t.dtype.name, operand=name,
                 detail=f" (bitvec operator '{alu}' needs integer tiles)")


def scalar_operand(ctx, op: str, data: Tensor, x, name: str):
    """A tensor_scalar/activation operand: python scalar or a (P, 1) / (P,) vector tile."""
    if x is None or isinstance(x, (int, float, np.number, bool)):
        return x, None
    x = need_tensor(x, op, name)
    need_on_chip(x, op, name)
    p = parts_of(data)
    if parts_of(x) != p or free_of(x) != 1:
        fail("nkisim_scalar_operand_shape", op=op, operand=name, p=p, shape=list(x.shape))
    return x, x


def begin(op: str, engine: Engine, tiles):
    ctx = current(op)
    ctx.settle()
    checked = []
    for t, name in tiles:
        t = need_tensor(t, op, name)
        checked.append(t)
    engine_checks(op, engine, list(zip(checked, (n for _, n in tiles))), ctx)
    return ctx, checked


def out_dtype(dtype, like: Tensor):
    return dtypes.to_dtype(dtype) if dtype is not None else like.dtype


def as_rows(v: np.ndarray) -> np.ndarray:
    """[P, free...] values as [P, F] (the engines see the free axes flattened)."""
    return v.reshape(v.shape[0], -1)


def per_partition_values(x, data: Tensor):
    if isinstance(x, Tensor):
        return f32_values(x).reshape((parts_of(data),) + (1,) * (data.ndim - 1))
    return np.float32(x)


def write_side(t: Tensor, values: np.ndarray) -> None:
    check_writable(t)
    write(t, execute.cast(np.asarray(values).reshape(t.shape), t.dtype))
    mark_written(t)


def check_reduce_res(op: str, reduce_res, parts: int) -> Tensor:
    """``reduce_res`` reads one reduction register per partition out: a writable tile of ``parts`` partitions and
    one element each.  Checked before any value is computed, so a timing run refuses what a full run does (issue
    31: a [128, 2] reduce_res failed only when the registers were reshaped into it)."""
    r = need_tensor(reduce_res, op, "reduce_res")
    if parts_of(r) != parts or free_of(r) != 1:
        fail("nkisim_reduce_res_shape", op=op, p=parts, shape=list(r.shape))
    check_writable(r)
    return r


# reduce_cmd values (nisa.reduce_cmd): idle, reset, reduce, reset_reduce
RESET, REDUCE, RESET_REDUCE = 1, 2, 3


def reduce_registers(ctx, engine, cmd: int, reduce_op: str, rows: np.ndarray) -> np.ndarray:
    """The engine's 128 per-partition reduction registers after an instruction with ``reduce_cmd=cmd``.

    nki.isa.activation (2.2x docs, 2.26 stub): "There are 128 registers on the scalar engine for storing
    reduction results ... accu_registers = reduce_op(accu_registers, reduce_op(output, axis=<FreeAxis>))";
    reset zeroes them, idle leaves them alone, reduce accumulates onto them, reset_reduce restarts from this
    instruction's result; passing ``reduce_res`` reads them out.  They persist across instructions, so a chain
    reset_reduce -> reduce -> reduce(reduce_res=r) puts the reduction of all three into r (AWS's range_select
    chaining example, test_nki_isa_range_select.py).  Returns the registers of the instruction's partitions.
    """
    regs = ctx.reduce_regs.get(engine)
    if regs is None:
        regs = ctx.reduce_regs[engine] = np.zeros((128, 1), dtype=F32)
    p = rows.shape[0]
    cmd = int(cmd)
    if cmd == RESET:
        regs[:p] = 0
    elif cmd in (REDUCE, RESET_REDUCE):
        red = np.asarray(execute.REDUCE[reduce_op](rows, axis=1, keepdims=True), dtype=F32)
        regs[:p] = red if cmd == RESET_REDUCE else execute.alu(reduce_op, regs[:p], red)
    return regs[:p]
