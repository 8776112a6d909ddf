"""Assignment and accumulation into tensors: ``dst[...] = value`` and ``dst += value``.

A fresh instruction result assigned straight into another tensor (``dst[...] = nisa.tensor_copy(x)``,
``psum += nisa.nc_matmul(a, b)``) is *retargeted*: the instruction writes ``dst`` directly, as the compiler does,
instead of costing an extra copy.  Any other tile is copied (VectorE, or DMA when HBM is involved); a number fills.
"""

from __future__ import annotations

import math

import numpy as np

from nkisim.core import execute, partitions
from nkisim.core.access import check_oob, check_writable, mark_written, operand, psum_write, same_view, write
from nkisim.core.context import KernelContext, current
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, E_DMA, E_GPSIMD, E_TENSOR, E_UNKNOWN
from nkisim.core.ops.common import need_on_chip, parts_of
from nkisim.core.ops.dma import dma_copy
from nkisim.core.ops.elementwise import memset_into, tensor_copy, tensor_tensor
from nkisim.core.ops.tensor_engine import check_psum_bank
from nkisim.core.partitions import starts_ok
from nkisim.core.rules import fail
from nkisim.core.tensor import Tensor


def retargetable(ctx: KernelContext, value) -> bool:
    ref = ctx.last_result
    return ref is not None and ref() is value and ctx.last_instr is not None


def _retarget(ctx: KernelContext, dst: Tensor, accumulate: bool) -> None:
    ins = ctx.last_instr
    values = ctx.last_values
    src_tile = ctx.last_result()
    op = ins.op
    engine = ins.engine
    check_writable(dst)
    if engine == E_DMA:
        need_on_chip(dst, "dma_copy", "dst", (B_HBM, B_SBUF))
    elif op == "nc_matmul" or (op == "nc_transpose" and engine == E_TENSOR):
        need_on_chip(dst, op, "dst", (B_PSUM, B_SBUF))
        if dst.kind == B_SBUF:
            # TensorE only writes PSUM: assigning its result into SBUF (``w_sbuf[i] = nisa.nc_transpose(x)``,
            # done by kernels that passed on hardware, shared/nki-api.md 2.4) is an implicit PSUM -> SBUF copy.
            ctx.settle()
            if accumulate:
                tensor_tensor(dst, src_tile, "add", dst=dst, partition_broadcast=True)
            else:
                tensor_copy(src_tile, dtype=dst.dtype, dst=dst)
            return
    elif engine == E_GPSIMD and dst.kind == B_PSUM:
        fail("nkisim_gpsimd_psum", op=op, operand="dst")
    elif dst.kind == B_HBM:
        # compute engines cannot write HBM: the result stays in its SBUF tile and a DMA stores it, exactly as
        # when the same tile is assigned after another instruction (assign() -> dma_copy)
        ctx.settle()
        dma_copy(src_tile, dst, via="assign", ctx=ctx)
        return
    n_dst = math.prod(dst.shape)
    n_src = math.prod(src_tile.shape)
    if n_dst != n_src:
        if n_dst < n_src:
            fail("err_store_dst_shape_smaller_than_other_shape", dst=list(dst.shape), src=list(src_tile.shape))
        fail("nkisim_shape_mismatch", op=f"assignment from {op}", shapes=[list(dst.shape), list(src_tile.shape)],
             detail="")
    if op == "nc_matmul" or (op == "nc_transpose" and engine == E_TENSOR):
        check_psum_bank(ctx, dst, op)
    mask = ctx.last_mask
    if mask is not None:
        mask = np.broadcast_to(mask, src_tile.shape).reshape(dst.shape)
    if dst.oob:
        check_oob(dst, mask)
    ins.dsts = (operand(dst),)
    if engine != E_DMA and not starts_ok(ins.dsts):
        partitions.check(ins, ctx.mem.simulate, ctx.trace.meta, dsts=(dst,))  # the destination's start, the move
    if accumulate and op == "nc_matmul":
        ins.attrs["accumulate"] = True
    ctx.pending = None
    ctx.last_instr = None
    ctx.last_result = None
    ctx.last_values = None
    if values is None:
        return
    vals = np.asarray(values)
    if vals.shape != dst.shape:
        vals = vals.reshape(dst.shape)
    if op == "nc_matmul":
        psum_write(dst, vals, accumulate, mask)
    else:
        write(dst, execute.cast(vals, dst.dtype), mask)
        mark_written(dst, mask)


def assign(dst: Tensor, value) -> None:
    """``dst[idx] = value``: retarget a fresh result, or copy (Vector/DMA), or fill a scalar."""
    ctx = current("tensor assignment")
    if isinstance(value, Tensor):
        if retargetable(ctx, value):
            pend = ctx.acc_spelling
            if pend is None:
                _retarget(ctx, dst, accumulate=False)
                return
            if pend[0]() is value and same_view(pend[1], dst):
                ctx.acc_spelling = None
                _retarget(ctx, dst, accumulate=True)  # acc[...] = acc + nl.matmul(...): accumulation (2024)
                return
        ctx.settle()
        if same_view(value, dst):
            return  # ``t[idx] += x`` stores the in-place result back into the same view: nothing to copy
        if dst.kind == B_HBM or value.kind == B_HBM:
            dma_copy(value, dst, via="assign", ctx=ctx)
            return
        tensor_copy(value, dtype=dst.dtype, engine=E_UNKNOWN, dst=dst, op_name="tensor_copy")
        return
    if isinstance(value, (int, float, np.number, bool)):
        ctx.settle()
        check_writable(dst)
        memset_into(ctx, dst, value)
        return
    raise TypeError(f"cannot assign {type(value).__name__} to a tensor: use a tile, a scalar or an nki instruction")


def accumulate(dst: Tensor, other) -> None:
    """``dst += other``: joins a matmul accumulation group, else a VectorE add into dst."""
    ctx = current("+=")
    if isinstance(other, Tensor) and retargetable(ctx, other) and ctx.last_instr.op == "nc_matmul":
        _retarget(ctx, dst, accumulate=True)
        return
    ctx.settle()
    tensor_tensor(dst, other, "add", dst=dst, partition_broadcast=True, first_write_inits=True)


def into(dst: Tensor, result: Tensor) -> Tensor:
    """Write the instruction that just produced the fresh ``result`` into ``dst`` instead (the current API's
    dst-first calls, for builders without a ``dst=`` of their own): one instruction, ``dst``'s dtype, no copy.  A
    compute engine writes on-chip memory only, with the result's partitions and elements per partition."""
    ctx = current("dst")
    if not retargetable(ctx, result):
        raise RuntimeError("nkisim internal error: into() needs the result of the instruction just emitted")
    op = ctx.last_instr.op
    need_on_chip(dst, op, "dst")
    if parts_of(dst) != parts_of(result) or math.prod(dst.shape) != math.prod(result.shape):
        fail("nkisim_dst_mismatch", op=op, dst=list(dst.shape), result=list(result.shape),
             detail=" (same partitions and elements per partition)")
    _retarget(ctx, dst, accumulate=False)
    return dst
