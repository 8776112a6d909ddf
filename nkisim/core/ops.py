"""The NKI front end's instruction builders, shared by nki.language and nki.isa.

Every function validates its operands against the constraint catalogue, emits exactly one instruction per
hardware instruction into the trace, and (in full mode) computes the values with nkisim.core.execute.  Results
that the kernel assigns straight into another tensor (``dst[...] = nisa.tensor_copy(x)``,
``psum += nisa.nc_matmul(a, b)``) are *retargeted*: the instruction writes ``dst`` directly, as the compiler does,
instead of costing an extra copy.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from nkisim.core import dtypes, execute
from nkisim.core.dtypes import F32
from nkisim.core.indexing import Mask
from nkisim.core.instr import (
    B_HBM,
    B_PSUM,
    B_SBUF,
    E_DMA,
    E_GPSIMD,
    E_SCALAR,
    E_TENSOR,
    E_UNKNOWN,
    E_VECTOR,
    Buf,
    Engine,
)
from nkisim.core.memory import BUF_NAMES
from nkisim.core.rules import NKIError, fail
from nkisim.core.runtime import PSUM_SPEC, SBUF_SPEC, KernelContext, allocate, current
from nkisim.core.tensor import Tensor, dynamic_tiles, read, write

ENGINE_LABEL = {E_TENSOR: "Tensor", E_VECTOR: "Vector", E_SCALAR: "Scalar",
                E_GPSIMD: "GpSimd", E_DMA: "DMA"}

# ------------------------------------------------------------------------------------------------------------
# operand helpers


def shape_str(t: Tensor, name: str) -> str:
    return f"{name}{list(t.shape)}"


def need_tensor(x, op: str, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        fail("nkisim_bad_argument", op=op, detail=f"operand '{name}' must be a tile, got {type(x).__name__}")
    return x


def need_on_chip(t: Tensor, op: str, name: str, allowed: tuple[Buf, ...] = (B_SBUF, B_PSUM)) -> None:
    if t._a.buf not in allowed:
        fail("err_unsupported_memory", operand=name, op=op,
             expected="|".join(sorted(BUF_NAMES[b] for b in allowed)), got=BUF_NAMES[t._a.buf])  # 'psum|sbuf'


def check_partitions(t: Tensor, limit: int) -> int:
    p = t.shape[t._pd] if t.shape else 1
    if p > limit:
        fail("err_num_partition_exceed_arch_limit", n=p, limit=limit)
    return p


def parts_of(t: Tensor) -> int:
    return t.shape[t._pd] if t.shape else 1


def free_of(t: Tensor) -> int:
    p = parts_of(t)
    n = 1
    for d in t.shape:
        n *= d
    return n // p if p else 0


def mask_values(mask, shape, *tiles) -> np.ndarray | None:
    """The mask= predicate at every element of an access of ``shape``.

    A mask is a predicate over the index variables of the access: when ``tiles`` (the instruction's operands)
    were indexed with nl.arange/nl.mgrid expressions, it is evaluated per element through those variables, so
    predicates built from differently laid out expressions (a partition arange with an mgrid over the free axes,
    or over fewer axes than the operand) apply as NKI applies them.  Otherwise it broadcasts partition-first.
    Operands that run out of bounds are checked here, against the positions the mask leaves enabled.
    """
    if mask is None:  # the per-instruction common case
        for t in tiles:
            if t is not None and t._oob:
                check_oob(t, None)
        return None
    shape = tuple(shape)
    m = None
    if isinstance(mask, Mask):
        if mask.named is not None:
            layout = None
            for t in tiles:
                if t is not None and t._axv:
                    layout = dict(t._axv) if layout is None else {**t._axv, **layout}
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
    for t in tiles:
        if t is not None and t._oob:
            check_oob(t, m if m is not None and tuple(t.shape) == shape else None)
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
        return np.broadcast_to(_fit(m, shape), shape)
    except ValueError:
        pass
    try:
        return np.broadcast_to(m, shape)  # a predicate over trailing free axes only
    except ValueError:
        fail("nkisim_shape_mismatch", op="mask", shapes=[list(m.shape), list(shape)], detail="")
    return m


def _fit(a: np.ndarray, shape) -> np.ndarray:
    """Right-pad a lower-rank array with unit dims so it broadcasts partition-first."""
    if a.ndim < len(shape):
        return a.reshape(a.shape + (1,) * (len(shape) - a.ndim))
    return a


def check_oob(t: Tensor, mask: np.ndarray | None) -> None:
    if not t._oob:
        return
    if mask is not None:
        ix = [np.broadcast_to(a, t.shape) for a in t._ix]
        bad = np.zeros(t.shape, dtype=bool)
        for a, n in zip(ix, t._v.shape):
            bad |= (a < 0) | (a >= n)
        if not np.any(bad & np.broadcast_to(mask, t.shape)):
            return
    fail("err_tensor_access_out_of_bound", **t.oob_message_fields())


def check_writable(t: Tensor) -> None:
    if t._a.immutable:
        fail("err_cannot_update_immutable_parameter", name=t._a.name)


def new_result(ctx: KernelContext, shape, dtype, buf: Buf = B_SBUF) -> Tensor:
    spec = SBUF_SPEC if buf == B_SBUF else PSUM_SPEC
    return allocate(shape, dtype, spec, provisional=True, ctx=ctx, name="result")


def finish(ctx: KernelContext, ins, out: Tensor, values, mask=None) -> Tensor:
    """Write computed values (full mode) into the fresh result tile and make it retargetable."""
    ctx.remember(ins, out, values)
    if values is not None:
        # written at the next API call (KernelContext.settle) unless `dst[...] = result` retargets it first
        ctx.unwritten = (weakref.ref(out._a), out._v, values, mask)
    ctx.last_mask = mask  # a retargeted masked result must leave the destination's masked-off elements alone
    return out


# ------------------------------------------------------------------------------------------------------------
# retargeting: dst[...] = <fresh result>, psum += <fresh matmul>


def _retargetable(ctx: KernelContext, value) -> bool:
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
        if dst._a.buf == B_SBUF:
            # TensorE only writes PSUM: assigning its result into SBUF (``w_sbuf[i] = nisa.nc_transpose(x)``,
            # done by kernels that passed on hardware, shared/nki-api.md 2.4) is an implicit PSUM -> SBUF copy.
            ctx.settle()
            if accumulate:
                tensor_tensor(dst, src_tile, "add", dst=dst, nl_style=True)
            else:
                tensor_copy(src_tile, dtype=dst.dtype, dst=dst)
            return
    elif engine == E_GPSIMD and dst._a.buf == B_PSUM:
        fail("nkisim_gpsimd_psum", op=op, operand="dst")
    elif dst._a.buf == B_HBM:
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
        _check_psum_bank(ctx, dst, op)
    mask = ctx.last_mask
    if mask is not None:
        mask = np.broadcast_to(mask, src_tile.shape).reshape(dst.shape)
    if dst._oob:
        check_oob(dst, mask)
    ins.dsts = (dst.operand(),)
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
        _psum_write(dst, vals, accumulate, mask)
    else:
        write(dst, execute.cast(vals, dst.dtype), mask)
        _mark_written(dst, mask)


def _mark_written(t: Tensor, mask: np.ndarray | None = None) -> None:
    """A PSUM region written by a non-matmul instruction holds data: a later ``+=`` matmul accumulates onto it
    instead of starting a fresh accumulation group (only never-written PSUM is overwritten by the first matmul)."""
    if t._a.acc is None:
        return
    if t._ix is None and mask is None:
        _acc_view(t)[...] = True
        return
    flags = _acc_view(t)
    if t._ix is None:
        flags[np.broadcast_to(mask, t.shape)] = True
        return
    ix = [np.broadcast_to(a, t.shape) for a in t._ix]
    if mask is not None:
        m = np.broadcast_to(mask, t.shape)
        ix = [a[m] for a in ix]
    flags[tuple(ix)] = True


def _acc_view(t: Tensor) -> np.ndarray:
    """The accumulation-group flags seen through the same view as ``t``."""
    a = t._a
    if a.acc is None:  # a provisional result: written in full by the instruction that produced it
        a.acc = np.ones(a.base.shape, dtype=bool)
    isz = t._v.itemsize
    # the ndarray constructor over the flags' buffer (one byte per element) is much cheaper than as_strided,
    # and checks the view stays inside the flags
    return np.ndarray(t._v.shape, dtype=np.bool_, buffer=a.acc, offset=t._off // isz,
                      strides=tuple(s // isz for s in t._v.strides))


def _psum_write(dst: Tensor, vals: np.ndarray, accumulate: bool, mask: np.ndarray | None = None) -> None:
    """Matmul accumulation group semantics: the first write to a region overwrites, later ones add (fp32).

    The same for every view: a destination indexed with index expressions (``acc[i_p, i_f] += nl.matmul(..)``)
    reads its flags and values through the same index arrays it writes through."""
    if dst._a.block_mod:
        _claim_slot(dst)
    if dst._ix is not None or mask is not None:
        flags = _acc_view(dst)
        vals = np.broadcast_to(vals, dst.shape)
        if dst._ix is not None:
            pos = tuple(np.broadcast_to(a, dst.shape) for a in dst._ix)
            if mask is not None:
                m = np.broadcast_to(mask, dst.shape)
                pos = tuple(a[m] for a in pos)
                vals = vals[m]
        else:
            pos = np.broadcast_to(mask, dst.shape)
            vals = vals[pos]
        if accumulate:
            new = np.where(flags[pos], dst._v[pos].astype(F32) + vals, vals)
        else:
            new = vals
        dst._v[pos] = execute.cast(np.asarray(new, dtype=F32), dst.dtype)
        flags[pos] = True
        return
    if dst._a.acc is None:  # provisional PSUM result: every element already belongs to an accumulation group
        if accumulate and dst._v.dtype == F32:
            dst._v += vals
        elif accumulate:
            dst._v[...] = execute.cast(dst._v.astype(F32) + vals, dst.dtype)
        else:
            dst._v[...] = execute.cast(vals, dst.dtype)
        return
    flags = _acc_view(dst)
    if accumulate and dst._v.dtype == F32 and flags.all():
        dst._v += vals  # the common case: accumulate in place in fp32
        return
    if accumulate:
        new = np.where(flags, dst._v.astype(F32) + vals, vals)
    else:
        new = vals
    dst._v[...] = execute.cast(np.asarray(new, dtype=F32), dst.dtype)
    flags[...] = True


def _claim_slot(dst: Tensor) -> None:
    """A logical block of a wrapped PSUM tensor (``psum.mod_alloc(num_bank_tiles=(1,))`` over 32 blocks, AWS's
    attention tutorial v9/v10) is a tile of its own: its first matmul starts a new accumulation group even though
    the previous logical block used the same bank."""
    from nkisim.core.tensor import LOGICAL_BLOCK

    lblk = LOGICAL_BLOCK.get(dst)
    if lblk is None:
        return
    a = dst._a
    owners = a.slot_owner
    if owners is None:
        owners = a.slot_owner = {}
    slot = lblk % a.block_mod
    if owners.get(slot, lblk) != lblk and a.acc is not None:
        if dst._ix is None:
            _acc_view(dst)[...] = False
        else:
            _acc_view(dst)[tuple(np.broadcast_to(x, dst.shape) for x in dst._ix)] = False
    owners[slot] = lblk


def _check_psum_bank(ctx: KernelContext, dst: Tensor, op: str) -> None:
    opnd = dst.operand()
    bank = ctx.limits.psum_bank_bytes
    r = opnd.region
    bb = dst._a.block_bytes
    if 0 < bb <= bank and r.b_lo // bb == (r.b_hi - 1) // bb:
        return  # one block of a block-dimension tensor: a (P, F) tile of its own, placed within one bank
    if r.b_lo // bank != (r.b_hi - 1) // bank:
        fail("nkisim_matmul_psum_bank", op=op, shape=list(dst.shape), nbytes=r.b_hi - r.b_lo, offset=r.b_lo,
             bank=bank)


def assign(dst: Tensor, value) -> None:
    """``dst[idx] = value``: retarget a fresh result, or copy (Vector/DMA), or fill a scalar."""
    ctx = current("tensor assignment")
    if isinstance(value, Tensor):
        if _retargetable(ctx, value):
            pend = ctx.acc_spelling
            if pend is None:
                _retarget(ctx, dst, accumulate=False)
                return
            if pend[0]() is value and pend[1]._a is dst._a and _same_view(pend[1], dst):
                ctx.acc_spelling = None
                _retarget(ctx, dst, accumulate=True)  # acc[...] = acc + nl.matmul(...): accumulation (2024)
                return
        ctx.settle()
        if value._a is dst._a and _same_view(value, dst):
            return  # ``t[idx] += x`` stores the in-place result back into the same view: nothing to copy
        if dst._a.buf == B_HBM or value._a.buf == B_HBM:
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


def _same_view(a: Tensor, b: Tensor) -> bool:
    """Two views of one allocation that address the same elements in the same order."""
    if a._off != b._off or a.shape != b.shape:
        return False
    if a._ix is None and b._ix is None:
        return a._v.shape == b._v.shape and a._v.strides == b._v.strides
    if a._ix is None or b._ix is None or a._v is not b._v:
        return False
    return all(x is y or np.array_equal(np.broadcast_to(x, a.shape), np.broadcast_to(y, a.shape))
               for x, y in zip(a._ix, b._ix))


def accumulate(dst: Tensor, other) -> None:
    """``dst += other``: joins a matmul accumulation group, else a VectorE add into dst."""
    ctx = current("+=")
    if isinstance(other, Tensor) and _retargetable(ctx, other) and ctx.last_instr.op == "nc_matmul":
        _retarget(ctx, dst, accumulate=True)
        return
    ctx.settle()
    tensor_tensor(dst, other, "add", dst=dst, nl_style=True)


# ------------------------------------------------------------------------------------------------------------
# data movement


def dma_copy(src: Tensor, dst: Tensor, *, via: str = "dma_copy", mask=None, dst_rmw_op: str | None = None,
             ctx: KernelContext | None = None, oob_skip: bool = False) -> None:
    if ctx is None:
        ctx = current("dma_copy")
        ctx.settle()
    if not isinstance(src, Tensor):
        need_tensor(src, "dma_copy", "src")
    if not isinstance(dst, Tensor):
        need_tensor(dst, "dma_copy", "dst")
    sa, da = src._a, dst._a
    if sa.buf == B_PSUM:
        need_on_chip(src, "dma_copy", "src", (B_HBM, B_SBUF))
    if da.buf == B_PSUM:
        need_on_chip(dst, "dma_copy", "dst", (B_HBM, B_SBUF))
    if da.immutable:
        check_writable(dst)
    n_dst = math.prod(dst.shape)
    if math.prod(src.shape) != n_dst:
        fail("nkisim_dma_element_mismatch", src=list(src.shape), dst=list(dst.shape))
    pmax = ctx.limits.pmax
    if sa.buf == B_SBUF and src.shape and src.shape[src._pd] > pmax:
        check_partitions(src, pmax)
    if da.buf == B_SBUF and dst.shape and dst.shape[dst._pd] > pmax:
        check_partitions(dst, pmax)
    if oob_skip and (src._oob or dst._oob):
        m = _oob_skip_mask(mask, src, dst)
    else:
        m = mask_values(mask, dst.shape, dst) if mask is not None or dst._oob else None
        if src._oob:
            mask_values(mask, src.shape, src)
    srcs = (src,)
    if ctx.dyn:  # indirect DMA: the index tiles are read too (software DGE builds the descriptors from them)
        srcs += dynamic_tiles(ctx, src) + dynamic_tiles(ctx, dst)
    ins = ctx.emit("dma_copy", E_DMA, srcs, (dst,),
                   {"bytes": n_dst * dst.dtype.itemsize, "via": via, "cast": src.dtype != dst.dtype})
    if dst_rmw_op is not None:
        ins.attrs["rmw"] = dst_rmw_op
    if ctx.full:
        vals = read(src)
        if vals.shape != dst.shape:
            vals = vals.reshape(dst.shape)
        if via == "atomic_rmw":
            _scatter_accumulate(dst, execute.to_f32(vals), m)
            return
        if dst_rmw_op is not None:
            vals = execute.alu(dst_rmw_op, execute.to_f32(read(dst)), execute.to_f32(vals))
        elif vals.dtype != dst.dtype:
            vals = execute.to_f32(vals)
        write(dst, execute.cast(vals, dst.dtype), m)


def _oob_skip_mask(mask, src: Tensor, dst: Tensor) -> np.ndarray:
    """dma_copy(oob_mode=nisa.oob_mode.skip): "Silently skips any operations involving out-of-bounds indices"
    (nki.isa.dma_copy docs, 2.26): the elements whose indirect source or destination index is out of bounds are
    not copied; the rest are, under the mask= predicate as usual."""
    keep = np.ones(dst.shape, dtype=bool)
    for t in (src, dst):
        if t._oob:
            ok = np.ones(t.shape, dtype=bool)
            for a, n in zip(t._ix, t._v.shape):
                a = np.broadcast_to(a, t.shape)
                ok &= (a >= 0) & (a < n)
            keep &= ok.reshape(dst.shape)
    flags = src._oob, dst._oob
    src._oob = dst._oob = False  # out-of-bounds positions are skipped, not errors: evaluate the mask alone
    try:
        m = mask_values(mask, dst.shape, dst) if mask is not None else None
    finally:
        src._oob, dst._oob = flags
    return keep if m is None else keep & np.broadcast_to(m, dst.shape)


def _scatter_accumulate(dst: Tensor, vals: np.ndarray, m) -> None:
    """dst += vals through a gather view, every position counted once per time it is addressed (atomic)."""
    base = dst._v
    ix = tuple(np.broadcast_to(a, dst.shape) for a in dst._ix)
    v = np.broadcast_to(vals, dst.shape)
    if m is not None:
        keep = np.broadcast_to(m, dst.shape)
        ix = tuple(a[keep] for a in ix)
        v = v[keep]
    flat = np.ravel_multi_index(tuple(a.reshape(-1) for a in ix), base.shape)
    uniq, inv = np.unique(flat, return_inverse=True)
    sums = np.zeros(uniq.size, dtype=F32)
    np.add.at(sums, inv, v.reshape(-1))
    pos = np.unravel_index(uniq, base.shape)
    base[pos] = execute.cast(execute.to_f32(base[pos]) + sums, base.dtype)


def atomic_rmw(dst, value, op: str, *, mask=None) -> None:
    """nl.atomic_rmw: dst = op(dst, value) on HBM through an indirect (tile-indexed) access, atomically: rows
    addressed several times accumulate every contribution.  2.2x docs: dst "only supports indirect dynamic indexing
    currently", op "only supports np.add currently".  A DMA with read-modify-write (cost: the DMA model)."""
    ctx = current("atomic_rmw")
    ctx.settle()
    dst = need_tensor(dst, "atomic_rmw", "dst")
    if dst._a.buf != B_HBM or not dynamic_tiles(ctx, dst):
        fail("nkisim_bad_argument", op="atomic_rmw", detail="dst must be an HBM tensor indexed with a dynamic "
             "(SBUF tile) index, e.g. t[indices_tile, nl.arange(M)[None, :]]: only indirect dynamic indexing is "
             "supported")
    if op != "add":
        fail("nkisim_bad_argument", op="atomic_rmw", detail=f"op must be np.add (the only atomic operation), not {op}")
    if not isinstance(value, Tensor):
        value = memset(dst.shape, value, dst.dtype)
        ctx.settle()
    dma_copy(value, dst, via="atomic_rmw", mask=mask, dst_rmw_op="add", ctx=ctx)


def hbm_init(ctx: KernelContext, t: Tensor, value) -> Tensor:
    """An HBM tensor created with an init value (2024 toolchain): the fill is one DMA write of the tensor."""
    ctx.emit("dma_copy", E_DMA, (), (t,), {"bytes": math.prod(t.shape) * t.dtype.itemsize, "via": "hbm_init",
                                           "cast": False, "value": float(value)})
    return t


def load(src: Tensor, *, mask=None, dtype=None, transpose: bool = False) -> Tensor:
    ctx = current("load")
    ctx.settle()
    src = need_tensor(src, "load", "src")
    if src._a.buf != B_HBM:
        fail("err_unsupported_memory", operand="src", op="load", expected="hbm", got=BUF_NAMES[src._a.buf])
    shape = src.shape
    if transpose:
        if len(shape) != 2:
            fail("err_exceed_max_supported_dimension", param=shape_str(src, "src"), op="load_transpose2d",
                 limit=2)
        shape = (shape[1], shape[0])
    if not shape:
        shape = (1,)
    if shape[0] > ctx.limits.pmax:
        fail("err_num_partition_exceed_arch_limit", n=shape[0], limit=ctx.limits.pmax)
    dt = dtypes.to_dtype(dtype) if dtype is not None else src.dtype
    out = new_result(ctx, shape, dt)
    if transpose:
        m = transposed_mask(mask, src, out.shape, np.transpose)
    else:
        m = mask_values(mask, out.shape, src)
    ins = ctx.emit("dma_copy", E_DMA, (src,) + dynamic_tiles(ctx, src) if ctx.dyn else (src,), (out,),
                   {"bytes": math.prod(shape) * dt.itemsize, "via": "load_transpose2d" if transpose else "load",
                    "cast": dt != src.dtype})
    values = None
    if ctx.full:
        v = read(src)
        if transpose:
            v = v.T
        values = execute.to_f32(v) if dt != src.dtype else v
        values = values.reshape(shape)
    return finish(ctx, ins, out, values, m)


def store(dst: Tensor, value, *, mask=None) -> None:
    ctx = current("store")
    ctx.settle()
    dst = need_tensor(dst, "store", "dst")
    if dst._a.buf != B_HBM:
        fail("err_unsupported_memory", operand="dst", op="store", expected="hbm", got=BUF_NAMES[dst._a.buf])
    value = need_tensor(value, "store", "value")
    if value._a.buf == B_PSUM:
        # nl.store of a PSUM tile inserts a copy to SBUF first (nki.language.store docstring)
        value = tensor_copy(value)
        ctx.settle()
    dma_copy(value, dst, via="store", mask=mask, ctx=ctx)


# ------------------------------------------------------------------------------------------------------------
# TensorE


_MATMUL_DTYPES = {"float8_e4m3", "float8_e4m3fn", "float8_e5m2", "bfloat16", "float16", "float32"}


def stage_psum_operand(ctx: KernelContext, t: Tensor, op_name: str, name: str) -> Tensor:
    """A matmul operand must sit in SBUF: TensorE reads only SBUF ("The nc_matmul instruction must read inputs
    from SBUF", nki.isa.nc_matmul, Neuron 2.21 docs). AWS's own legacy kernels nevertheless hand a PSUM tile
    straight to the matmul (nki-samples flash_attn_bwd: an nc_transpose result as stationary; the attention
    tutorial's attn_fwd_v1: an nl.transpose result as nl.matmul's y) and run on hardware and in
    nki.simulate_kernel, so the legacy compiler stages the tile through SBUF. nkisim does the same with an explicit
    VectorE PSUM->SBUF tensor_copy, so the copy is costed and shows in the profile under this op's name.  Direct
    allocation leaves no compiler-owned SBUF to stage through: there the documented error stands."""
    if t._a.buf == B_PSUM and not ctx.direct_alloc:
        staged = tensor_copy(t, op_name=op_name)
        ctx.settle()  # the copy's values land now: the matmul reads them below
        return staged
    need_on_chip(t, op_name, name, (B_SBUF,))
    return t


def nc_matmul(stationary: Tensor, moving: Tensor, *, is_transpose: bool = False, mask=None,
              op_name: str = "nc_matmul", double_row: bool = False, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False) -> Tensor:
    ctx = current(op_name)
    ctx.settle()
    stationary = need_tensor(stationary, op_name, "stationary")
    moving = need_tensor(moving, op_name, "moving")
    stationary = stage_psum_operand(ctx, stationary, op_name, "stationary")
    moving = stage_psum_operand(ctx, moving, op_name, "moving")
    if stationary._pd or moving._pd:
        fail("err_failed_to_infer_tile_from_local_tensor",
             name=(stationary if stationary._pd else moving)._a.name or "stationary/moving")
    lim = ctx.limits
    k1 = check_partitions(stationary, lim.pmax)
    k2 = check_partitions(moving, lim.pmax)
    if k1 != k2:
        fail("err_num_partition_mismatch", params=f"{shape_str(stationary, 'stationary')}, "
             f"{shape_str(moving, 'moving')}", op=op_name)
    if double_row:
        return _double_row_matmul(ctx, stationary, moving, k1, mask, op_name)
    m = free_of(stationary)
    n = free_of(moving)
    if m > lim.gemm_stationary_fmax:
        fail("nkisim_matmul_stationary_fmax", m=m, limit=lim.gemm_stationary_fmax, shape=list(stationary.shape))
    if n > lim.gemm_moving_fmax:
        fail("nkisim_matmul_moving_fmax", n=n, limit=lim.gemm_moving_fmax, shape=list(moving.shape))
    d1, d2 = dtypes.name(stationary.dtype), dtypes.name(moving.dtype)
    for d, who in ((d1, "stationary"), (d2, "moving")):
        if d not in _MATMUL_DTYPES:
            fail("nkisim_matmul_dtype", detail=f"{who} dtype {d} is not supported (fp8/bf16/fp16/tf32/fp32)")
    if (d1 == "float32") != (d2 == "float32"):
        fail("nkisim_matmul_dtype", detail=f"fp32/tf32 operands must pair with fp32/tf32, got {d1} and {d2}")
    out_shape = (m,) + tuple(moving.shape[1:]) if moving.ndim > 1 else (m, 1)
    out = new_result(ctx, out_shape, F32, B_PSUM)
    _check_psum_bank(ctx, out, op_name)
    attrs = {"K": k1, "M": m, "N": n, "accumulate": False, "is_transpose": bool(is_transpose)}
    # the ones/zeros hints make an fp32 matmul up to 2x faster (nki.isa.nc_matmul docs, is_*_onezero): the cost
    # model reads them (perf/model.py), so they travel with the instruction
    if is_stationary_onezero:
        attrs["is_stationary_onezero"] = True
    if is_moving_onezero:
        attrs["is_moving_onezero"] = True
    ins = ctx.emit("nc_matmul", E_TENSOR, (stationary, moving), (out,), attrs)
    values = None
    if ctx.full:
        s = execute.to_f32(read(stationary)).reshape(k1, m)
        mv = execute.to_f32(read(moving)).reshape(k1, n)
        if is_stationary_onezero or is_moving_onezero or is_transpose:
            _check_matmul_promises(ctx, op_name, attrs, (s, d1, is_stationary_onezero), (mv, d2, is_moving_onezero))
        values = (s.T @ mv).reshape(out_shape)
    return finish(ctx, ins, out, values, mask_values(mask, out_shape, stationary, moving))


def _check_matmul_promises(ctx: KernelContext, op_name: str, attrs: dict, stationary: tuple, moving: tuple) -> None:
    """The promises an nc_matmul's hints make about its data, checked on the values (full mode), because the cost
    model grants their speed-up (docs/grading-security.md, G3/G4).

    * ``is_*_onezero`` on an fp32 operand: the tile holds only 0 and 1 (the hint has no effect on other dtypes,
      nki.isa.nc_matmul).  Hardware runs fewer fp32 passes for it; what it computes for other values is not
      documented, so a broken promise is an error, not a silently exact product.
    * ``is_transpose``: on NeuronCore-v3 the transpose mode transposes the stationary and needs the [K, K]
      identity as the moving tile; anything else is an error.  On NeuronCore-v2 the flag only labels the
      instruction for the profiler ("Tensor Engine does not support transpose mode natively"): the matmul is
      computed and, with a moving tile that is not an identity, costed as the matmul it is."""
    for (vals, dtype, hinted), who in ((stationary, "stationary"), (moving, "moving")):
        if hinted and dtype == "float32":
            bad = (vals != 0) & (vals != 1)
            if bad.any():
                pos = tuple(int(i) for i in np.argwhere(bad)[0])
                fail("nkisim_matmul_onezero_hint", op=op_name, hint=f"is_{who}_onezero", operand=who, dtype=dtype,
                     value=float(vals[pos]), where=list(pos))
    if attrs.get("is_transpose"):
        mv = moving[0]
        k, n = mv.shape
        why = None
        if n != k:
            why = f"has {n} columns for {k} partitions"
        elif not np.array_equal(mv, np.eye(k, dtype=mv.dtype)):
            why = "is not the identity"
        if why is not None:
            if ctx.target == "trn1":
                attrs["is_transpose"] = False  # a profiler label on NeuronCore-v2: a plain matmul, costed as one
            else:
                fail("nkisim_matmul_transpose_mode", op=op_name, shape=[k, n], why=why)


def _double_row_matmul(ctx: KernelContext, stationary: Tensor, moving: Tensor, k: int, mask, op_name: str) -> Tensor:
    """FP8 double-row mode (NeuronCore-v3): stationary [K, 2, M] and moving [K, 2, N] hold two K-rows of fp8 per
    partition; the result [M, N] is st[:, 0].T @ mv[:, 0] + st[:, 1].T @ mv[:, 1] (contraction 2K) at the cycle cost
    of one [K, M] x [K, N] matmul ("Double FP8 mode, 2x matmul throughput by packing two FP8 weight/ifmap element
    pairs", nki.isa.matmul_perf_mode; AWS's nki-samples double_row_matmul uses these shapes)."""
    if ctx.target != "trn2":
        fail("nkisim_matmul_dtype", detail="perf_mode double_row needs NeuronCore-v3 (trn2); on NeuronCore-v2 "
             "performance mode is not supported")
    for t, who in ((stationary, "stationary"), (moving, "moving")):
        if t.dtype.name not in ("float8_e4m3", "float8_e4m3fn", "float8_e5m2"):
            fail("nkisim_matmul_dtype", detail=f"perf_mode double_row needs fp8 operands, {who} is {t.dtype.name}")
        if t.ndim != 3 or t.shape[1] != 2:
            fail("nkisim_matmul_dtype", detail=f"perf_mode double_row needs {who} of shape [K, 2, F], got "
                 f"{list(t.shape)}")
    lim = ctx.limits
    m, n = stationary.shape[2], moving.shape[2]
    if m > lim.gemm_stationary_fmax:
        fail("nkisim_matmul_stationary_fmax", m=m, limit=lim.gemm_stationary_fmax, shape=list(stationary.shape))
    if n > lim.gemm_moving_fmax:
        fail("nkisim_matmul_moving_fmax", n=n, limit=lim.gemm_moving_fmax, shape=list(moving.shape))
    out_shape = (m, n)
    out = new_result(ctx, out_shape, F32, B_PSUM)
    _check_psum_bank(ctx, out, op_name)
    ins = ctx.emit("nc_matmul", E_TENSOR, (stationary, moving), (out,),
                   {"K": 2 * k, "M": m, "N": n, "accumulate": False, "is_transpose": False,
                    "perf_mode": "double_row"})
    values = None
    if ctx.full:
        s = execute.to_f32(read(stationary)).reshape(k, 2, m)
        mv = execute.to_f32(read(moving)).reshape(k, 2, n)
        values = s[:, 0].T @ mv[:, 0] + s[:, 1].T @ mv[:, 1]
    return finish(ctx, ins, out, values, mask_values(mask, out_shape, stationary, moving))


def nc_transpose(data: Tensor, *, engine: Engine = E_UNKNOWN, dtype=None, mask=None,
                 op_name: str = "nc_transpose") -> Tensor:
    ctx = current(op_name)
    ctx.settle()
    data = need_tensor(data, op_name, "data")
    p = parts_of(data)
    f = free_of(data)
    lim = ctx.limits
    if engine == E_UNKNOWN:
        engine = E_TENSOR if (p > lim.vector_transpose_max or f > lim.vector_transpose_max
                                   or data._a.buf == B_SBUF) else E_VECTOR
    limit = lim.pmax if engine == E_TENSOR else lim.vector_transpose_max
    if p > limit or f > limit:
        fail("nkisim_transpose_limit", engine=ENGINE_LABEL.get(engine, str(engine)), shape=list(data.shape),
             limit=limit)
    if engine == E_TENSOR:
        need_on_chip(data, op_name, "data", (B_SBUF,))
        if ctx.direct_alloc:
            fail("err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel", op=op_name)
        out_buf = B_PSUM
    else:
        need_on_chip(data, op_name, "data")
        out_buf = B_SBUF
    dt = dtypes.to_dtype(dtype) if dtype is not None else data.dtype
    out = new_result(ctx, (f, p), data.dtype, out_buf)
    ins = ctx.emit("nc_transpose", engine, (data,), (out,), {"P": p, "F": f})
    values = execute.to_f32(read(data)).reshape(p, f).T if ctx.full else None
    out = finish(ctx, ins, out, values, transposed_mask(mask, data, (f, p), lambda m: m.reshape(p, f).T))
    if dt != data.dtype:
        # nki.isa.nc_transpose docs: "if [dtype is] specified and it's different from the data type of input tile
        # data, an additional nki.isa.cast instruction will be inserted to cast the transposed data"
        out = tensor_copy(out, dtype=dt, op_name=op_name)
    return out


# ------------------------------------------------------------------------------------------------------------
# Vector / Scalar / GpSimd


def _engine_checks(op: str, engine: Engine, tiles, ctx: KernelContext) -> None:
    lim = ctx.limits
    for t, name in tiles:
        need_on_chip(t, op, name)
        if engine == E_GPSIMD and t._a.buf == B_PSUM:
            fail("nkisim_gpsimd_psum", op=op, operand=name)
        n = free_of(t)
        cap = lim.vector_psum_fmax if t._a.buf == B_PSUM else lim.vector_sbuf_fmax
        if n > cap:
            fail("nkisim_free_size_limit", op=op, n=n, buffer=BUF_NAMES[t._a.buf], limit=cap)
        if t._pd:
            fail("err_failed_to_infer_tile_from_local_tensor", name=t._a.name or name)
        check_partitions(t, lim.pmax)


def _align(op: str, a: Tensor, b: Tensor, allow_partition_broadcast: bool):
    """Partition-first operand alignment of two tiles; returns (output shape, b reshaper)."""
    pa, pb = parts_of(a), parts_of(b)
    if pa != pb and not (allow_partition_broadcast and (pa == 1 or pb == 1)):
        fail("err_num_partition_mismatch", params=f"{shape_str(a, 'data1')}, {shape_str(b, 'data2')}", op=op)
    fa, fb = free_of(a), free_of(b)
    sa, sb = a.shape, b.shape
    if sa == sb:
        return sa, None
    if fb == fa and pa == pb:
        if len(sb) > len(sa) and sb[:len(sa)] == sa and all(d == 1 for d in sb[len(sa):]):
            # a [P] tile (a reduction without keepdims: "the input tile's shape with the specified axes
            # removed", nki.language.max/sum) against [P, 1]: tiles align on their first, partition, dimension
            # ("NKI infers the first dimension ... as the partition dimension", programming model), so the
            # result keeps the unit free axis: [P, 1], as AWS's flash_attn_bwd (nki-samples) relies on
            return sb, "swap"
        return sa, sa
    if fa == fb == 1 or (fb == 1 and pa == pb):
        return sa, (pb,) + (1,) * (len(sa) - 1)
    if fa == 1 and pa == pb:
        return sb, "swap"
    # numpy broadcasting after right-padding the lower-rank shape (partition-first alignment)
    ra = sa + (1,) * (len(sb) - len(sa))
    rb = sb + (1,) * (len(sa) - len(sb))
    try:
        out = np.broadcast_shapes(ra, rb)
    except ValueError:
        fail("nkisim_shape_mismatch", op=op, shapes=[list(sa), list(sb)], detail="")
    return tuple(out), "pad"


def _vals(t, shape=None):
    v = execute.to_f32(read(t))
    if shape is not None and v.shape != tuple(shape):
        v = _fit(v, shape)
    return v


_BOOL_RESULT = frozenset({"equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and",
                          "logical_or", "logical_xor"})


def binary(alu: str, x, y, *, dtype=None, mask=None):
    """nl.<alu>(x, y) and the Python operators on tiles: tile (op) tile, tile (op) scalar, scalar (op) scalar."""
    xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
    if dtype is None and alu in _BOOL_RESULT:
        dtype = np.bool_  # comparisons and logical ops default to dtype=bool (nki.language.less_equal docs)
    if xt and yt:
        return tensor_tensor(x, y, alu, dtype=dtype, mask=mask, nl_style=True, op_name=alu)
    if xt or yt:
        tile, scalar = (x, y) if xt else (y, x)
        if isinstance(scalar, np.ndarray):
            raise TypeError(f"nl.{alu}: host NumPy arrays cannot be kernel operands; load them as tiles")
        out_dt = dtype if dtype is not None else dtypes.promote(tile.dtype, scalar)
        return tensor_scalar(tile, alu, scalar, reverse0=not xt, dtype=out_dt, mask=mask, op_name=alu)
    return np.float32(execute.alu(alu, np.float32(x), np.float32(y)))


def broadcast_to(src: Tensor, shape) -> Tensor:
    dims = tuple(int(d) for d in shape)
    if tuple(src.shape) == dims:
        return src
    return tensor_copy(src, shape=dims, op_name="broadcast_to")


def _acc_plus_matmul(ctx: KernelContext, a, b) -> Tensor | None:
    """2024 toolchain: ``acc + <fresh matmul result>`` (both in PSUM) spells matmul accumulation into ``acc``.

    The matmul result is returned unchanged and remembered: assigned straight back into ``acc``
    (``acc[...] = acc + nl.matmul(..)``) the matmul joins acc's accumulation group, one instruction, exactly as
    ``acc += nl.matmul(..)``; used any other way, the sum is materialized into it at the next API call."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a._a.buf == B_PSUM and b._a.buf == B_PSUM):
        return None
    if ctx.last_instr is None or ctx.last_instr.op != "nc_matmul":
        return None
    if _retargetable(ctx, b):
        acc, mm = a, b
    elif _retargetable(ctx, a):
        acc, mm = b, a
    else:
        return None

    def materialize() -> None:
        fresh = ref()
        if fresh is not None:
            tensor_tensor(acc, fresh, "add", dst=fresh, nl_style=True, psum_pair=True, op_name="add")

    ref = weakref.ref(mm)
    ctx.acc_spelling = (ref, acc, materialize)
    return mm


def tensor_tensor(data1, data2, op: str, *, dtype=None, engine: Engine = E_UNKNOWN, mask=None,
                  dst: Tensor | None = None, nl_style: bool = False, op_name: str = "tensor_tensor",
                  psum_pair: bool = False) -> Tensor:
    ctx = current(op_name)
    if nl_style and op == "add" and dst is None and mask is None and dtype is None and ctx.era == "2024":
        mm = _acc_plus_matmul(ctx, data1, data2)
        if mm is not None:
            return mm
    ctx.settle()
    a = need_tensor(data1, op_name, "data1")
    b = need_tensor(data2, op_name, "data2")
    if engine == E_UNKNOWN:
        engine = E_GPSIMD if op == "power" else E_VECTOR
    _engine_checks(op_name, engine, [(a, "data1"), (b, "data2")], ctx)
    if engine == E_GPSIMD:
        _gpsimd_alu(ctx, op_name, op)
    if a._a.buf == B_PSUM and b._a.buf == B_PSUM and not psum_pair:
        fail("nkisim_two_inputs_in_psum", op=op_name)
    if execute.ALU.get(op, (None, False))[1]:
        _need_int(op_name, op, (a, "data1"), (b, "data2"))
    out_shape, how = _align(op_name, a, b, nl_style)
    if how == "swap":
        out_shape = b.shape
    out_dt = dtypes.to_dtype(dtype) if dtype is not None else dtypes.promote(a.dtype, b.dtype)
    if op in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal") and dtype is None \
            and nl_style:
        out_dt = np.dtype(np.uint8)
    if dst is None:
        out = new_result(ctx, out_shape, out_dt)
    else:
        out = dst
        check_writable(out)
        if math.prod(out.shape) < math.prod(out_shape):
            fail("err_store_dst_shape_smaller_than_other_shape", dst=list(out.shape), src=list(out_shape))
    m = mask_values(mask, out.shape, a, b, out)
    ins = ctx.emit("tensor_tensor", engine, (a, b), (out,), {"alu": op})
    values = None
    if ctx.full:
        va, vb = _vals(a), _vals(b)
        if how == "swap":
            va = va.reshape((parts_of(a),) + (1,) * (len(out_shape) - 1))
        elif how == "pad":
            va, vb = _fit(va, out_shape), _fit(vb, out_shape)
        elif how is not None:
            vb = vb.reshape(how)
        values = execute.alu(op, va, vb)
        if values.shape != tuple(out_shape):
            values = np.broadcast_to(values, out_shape)
        if out.shape != tuple(out_shape):
            values = np.asarray(values).reshape(out.shape)
    if dst is not None:
        if values is not None:
            write(out, execute.cast(np.asarray(values), out.dtype), m)
            _mark_written(out, m)
        return out
    return finish(ctx, ins, out, values, m)


def _need_int(op_name: str, alu: str, *operands) -> None:
    for t, name in operands:
        if dtypes.is_float(t.dtype):
            fail("nkisim_dtype_not_supported", op=op_name, dtype=t.dtype.name, operand=name,
                 detail=f" (bitvec operator '{alu}' needs integer tiles)")


# Operators GpSimd runs: the "Supported Engine" column of the NKI ALU operator table (nki.api.shared @2.26,
# tbl-aluop: Add and Multiply Vector/GpSIMD/Scalar, Power GpSIMD, Reverse Square Root GpSIMD/Scalar; every
# other operator Vector only).  Without the check a kernel could spread VectorE-only work (max, subtract, ...)
# over GpSimd, which the hardware does not run (grading security, G8).
_GPSIMD_ALU = frozenset({"add", "multiply", "power", "rsqrt"})


def _gpsimd_alu(ctx: KernelContext, op_name: str, *ops) -> None:
    bad = [o for o in ops if o is not None and o not in _GPSIMD_ALU]
    if bad:
        fail("nkisim_engine_op_unsupported", op=op_name, engine="GpSimd Engine", target=ctx.target,
             detail=f"GpSimd runs only add, multiply, power and rsqrt (NKI ALU operator table, supported engines), "
             f"not '{bad[0]}': use the Vector Engine")


def _scalar_engine_alu(ctx: KernelContext, op_name: str, op0, op1) -> None:
    """ScalarE runs tensor_scalar with multiply / add / multiply->add only (nki.isa).  On NeuronCore-v2 the 2.26
    docs (SH-226: "Add/Multiply on ScalarE only from NC-v3") rule it out; the 2024 toolchain's nki.isa (2.21)
    lists the same subset for "Vector or Scalar Engine" with no generation condition, so the 2024 era takes it."""
    if ctx.target == "trn1" and ctx.era != "2024":
        fail("nkisim_engine_op_unsupported", op=op_name, engine="Scalar Engine", target=ctx.target,
             detail="ScalarE arithmetic ops exist from NeuronCore-v3 on; use the Vector Engine")
    ops_used = tuple(o for o in (op0, op1) if o is not None)
    if ops_used not in (("multiply",), ("add",), ("multiply", "add")):
        fail("nkisim_engine_op_unsupported", op=op_name, engine="Scalar Engine", target=ctx.target,
             detail=f"only multiply, add or multiply->add are supported, got {' -> '.join(ops_used)}")


def _scalar_operand(ctx, op: str, data: Tensor, x, name: str):
    """A tensor_scalar/activation operand: python scalar or a (P, 1) / (P,) vector tile."""
    if x is None or isinstance(x, (int, float, np.number, bool)):
        return x, None
    x = need_tensor(x, op, name)
    need_on_chip(x, op, name)
    p = parts_of(data)
    if parts_of(x) != p or free_of(x) != 1:
        fail("nkisim_scalar_operand_shape", op=op, operand=name, p=p, shape=list(x.shape))
    return x, x


def tensor_scalar(data, op0: str, operand0, reverse0: bool = False, op1: str | None = None, operand1=None,
                  reverse1: bool = False, *, dtype=None, engine: Engine = E_UNKNOWN, mask=None,
                  op_name: str = "tensor_scalar") -> Tensor:
    ctx = current(op_name)
    ctx.settle()
    data = need_tensor(data, op_name, "data")
    if engine == E_UNKNOWN:
        engine = E_VECTOR
    _engine_checks(op_name, engine, [(data, "data")], ctx)
    if (op1 is None) != (operand1 is None):
        fail("nkisim_bad_argument", op=op_name, detail="op1 and operand1 must be given together")
    bitvec = [execute.ALU.get(opx, (None, False))[1] for opx in (op0, op1) if opx is not None]
    if len(bitvec) == 2 and bitvec[0] != bitvec[1]:
        # nki.isa.tensor_scalar docs: "The two operators, op0 and op1, in a tensor_scalar instruction must be of
        # the same type (both bitvec or both arithmetic)"
        fail("nkisim_bad_argument", op=op_name, detail=f"op0 '{op0}' and op1 '{op1}' must both be bitvec or both "
             "arithmetic operators (split the computation into two instructions)")
    for opx, bv in zip((op0, op1), bitvec):
        if bv:
            _need_int(op_name, opx, (data, "data"))
    if engine == E_SCALAR:
        _scalar_engine_alu(ctx, op_name, op0, op1)
    elif engine == E_GPSIMD:
        _gpsimd_alu(ctx, op_name, op0, op1)
    o0, t0 = _scalar_operand(ctx, op_name, data, operand0, "operand0")
    o1, t1 = _scalar_operand(ctx, op_name, data, operand1, "operand1")
    srcs = [data] + [t for t in (t0, t1) if t is not None]
    out_dt = dtypes.to_dtype(dtype) if dtype is not None else data.dtype
    out = new_result(ctx, data.shape, out_dt)
    m = mask_values(mask, out.shape, *srcs)
    attrs = {"alu0": op0}
    if op1 is not None:
        attrs["alu1"] = op1
    ins = ctx.emit("tensor_scalar", engine, srcs, (out,), attrs)
    values = None
    if ctx.full:
        v = _vals(data)
        pshape = (parts_of(data),) + (1,) * (data.ndim - 1)
        for opx, ox, rev in ((op0, o0, reverse0), (op1, o1, reverse1)):
            if opx is None:
                continue
            s = _vals(ox).reshape(pshape) if isinstance(ox, Tensor) else np.float32(ox)
            v = execute.alu(opx, s, v) if rev else execute.alu(opx, v, s)
        values = v
    return finish(ctx, ins, out, values, m)


def tensor_copy(src, *, dtype=None, engine: Engine = E_UNKNOWN, mask=None, dst: Tensor | None = None,
                op_name: str = "tensor_copy", shape=None) -> Tensor:
    ctx = current(op_name)
    ctx.settle()
    src = need_tensor(src, op_name, "src")
    auto = engine == E_UNKNOWN  # the compiler picks the engine by workload (nki.isa.tensor_copy docs)
    if auto:
        engine = E_VECTOR
    # ScalarE on NeuronCore-v2 copies through fp32 ("Scalar Engine on NeuronCore-v2 performs copy by first
    # casting the input tile to FP32 internally and then casting from FP32 to the output dtype", nki.isa.tensor_copy,
    # 2.21 and 2.26 docs; only the later, non-legacy API says "not supported on the Scalar Engine" for NC-v2)
    cast_via_f32 = engine == E_SCALAR and ctx.target == "trn1"
    _engine_checks(op_name, engine, [(src, "src")], ctx)
    out_dt = dtypes.to_dtype(dtype) if dtype is not None else src.dtype
    target_shape = tuple(shape) if shape is not None else src.shape
    if dst is None:
        out = new_result(ctx, target_shape, out_dt)
    else:
        out = dst
        check_writable(out)
        if dst._a.buf == B_PSUM and engine == E_GPSIMD:
            fail("nkisim_gpsimd_psum", op=op_name, operand="dst")
        if math.prod(out.shape) < math.prod(src.shape):
            fail("err_store_dst_shape_smaller_than_other_shape", dst=list(out.shape), src=list(src.shape))
    m = mask_values(mask, out.shape, src, out)
    ins = ctx.emit("tensor_copy", engine, (src,), (out,), {"auto_engine": True} if auto else {})
    values = None
    if ctx.full:
        v = read(src)
        if cast_via_f32:
            v = v.astype(F32)  # integers too: the documented precision loss (e.g. INT32)
        elif v.dtype != out.dtype:
            v = execute.to_f32(v)
        if v.shape != out.shape:
            if v.size == math.prod(out.shape):
                v = v.reshape(out.shape)
            else:
                try:
                    v = np.broadcast_to(_fit(v, out.shape), out.shape)
                except ValueError:
                    fail("nkisim_shape_mismatch", op=op_name, shapes=[list(src.shape), list(out.shape)], detail="")
        values = v
    if dst is not None:
        if values is not None:
            write(out, execute.cast(np.asarray(values), out.dtype), m)
            _mark_written(out, m)
        return out
    return finish(ctx, ins, out, values, m)


def tensor_reduce(op: str, data, axis, *, negate: bool = False, keepdims: bool = False, dtype=None, mask=None,
                  op_name: str = "tensor_reduce") -> Tensor:
    ctx = current(op_name)
    ctx.settle()
    data = need_tensor(data, op_name, "data")
    _engine_checks(op_name, E_VECTOR, [(data, "data")], ctx)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nd = data.ndim
    norm = []
    for ax in axes:
        ax = int(ax)
        if ax < 0:
            ax += nd
        if ax == 0 or not 0 < ax < nd:
            fail("nkisim_reduce_partition_axis", op=op_name, axis=axis)
        norm.append(ax)
    if op not in execute.REDUCE:
        fail("nkisim_bad_argument", op=op_name, detail=f"'{op}' is not a reduction operator")
    if execute.ALU[op][1]:  # bitvec reductions: "the input/output data types must be integer types" (isa docs)
        _need_int(op_name, op, (data, "data"))
    out_shape = tuple(1 if i in norm else d for i, d in enumerate(data.shape)) if keepdims else \
        tuple(d for i, d in enumerate(data.shape) if i not in norm)
    if len(out_shape) == 1:
        out_shape = out_shape  # (P,) result of a full free-axis reduction
    out_dt = dtypes.to_dtype(dtype) if dtype is not None else data.dtype
    out = new_result(ctx, out_shape, out_dt)
    ins = ctx.emit("tensor_reduce", E_VECTOR, (data,), (out,), {"alu": op, "axes": tuple(norm)})
    m_out, m_in = _reduce_mask(mask, out.shape, data, op)
    values = None
    if ctx.full:
        v = _vals(data)
        if m_in is not None:
            v = np.where(m_in, v, np.asarray(_REDUCE_IDENTITY[op], dtype=v.dtype))
        values = execute.REDUCE[op](v, axis=tuple(norm), keepdims=keepdims)
        values = np.asarray(values, dtype=v.dtype if v.dtype.kind in "iub" else F32)
        if negate:
            values = -values
    return finish(ctx, ins, out, values, m_out)


_REDUCE_IDENTITY = {"add": 0, "maximum": -np.inf, "minimum": np.inf, "multiply": 1}


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


def activation(func: str, data, *, bias=None, scale=1.0, dtype=None, mask=None, reduce_op=None,
               reduce_res: Tensor | None = None, reduce_cmd: int = 0, op_name: str = "activation") -> Tensor:
    ctx = current(op_name)
    ctx.settle()
    data = need_tensor(data, op_name, "data")
    _engine_checks(op_name, E_SCALAR, [(data, "data")], ctx)
    if func not in execute.ACTIVATION:
        fail("nkisim_bad_argument", op=op_name, detail=f"'{func}' is not an activation function")
    p = parts_of(data)
    if isinstance(bias, Tensor):
        if (dtypes.name(bias.dtype) not in ("float32", "float16", "bfloat16") or parts_of(bias) != p
                or free_of(bias) != 1):
            fail("err_activation_bias_invalid_type", p=p, got=f"{bias.dtype.name}{list(bias.shape)}")
    elif bias is not None and ctx.target == "trn1":
        fail("err_activation_bias_invalid_type", p=p, got=f"immediate {bias!r} (immediates need NeuronCore-v3)")
    if isinstance(scale, Tensor):
        if dtypes.name(scale.dtype) != "float32" or parts_of(scale) != p or free_of(scale) != 1:
            fail("err_activation_scale_invalid_type", p=p, got=f"{scale.dtype.name}{list(scale.shape)}")
    elif not isinstance(scale, (int, float, np.floating, np.integer)):
        fail("err_activation_scale_invalid_type", p=p, got=type(scale).__name__)
    if reduce_op not in (None, "add") and ctx.target == "trn1" and (reduce_res is not None or reduce_cmd):
        fail("nkisim_engine_op_unsupported", op=op_name, engine="Scalar Engine", target=ctx.target,
             detail=f"reduce_op '{reduce_op}': on NeuronCore-v2 the reduce_op can only be an addition "
             "(nki.isa.activation_reduce docs)")
    sc, ts = _scalar_operand(ctx, op_name, data, scale, "scale")
    bi, tb = _scalar_operand(ctx, op_name, data, bias, "bias")
    srcs = [data] + [t for t in (ts, tb) if t is not None]
    out_dt = dtypes.to_dtype(dtype) if dtype is not None else data.dtype
    out = new_result(ctx, data.shape, out_dt)
    ins = ctx.emit("activation", E_SCALAR, srcs, (out,), {"func": func,
                                                                "reduce": reduce_res is not None})
    values = None
    if ctx.full:
        v = _vals(data)
        pshape = (parts_of(data),) + (1,) * (data.ndim - 1)
        s = _vals(sc).reshape(pshape) if isinstance(sc, Tensor) else np.float32(sc if sc is not None else 1.0)
        b = _vals(bi).reshape(pshape) if isinstance(bi, Tensor) else np.float32(bi or 0.0)
        values = execute.activation(func, v * s + b)
    out = finish(ctx, ins, out, values, mask_values(mask, out.shape, *srcs))
    if ctx.full and (reduce_res is not None or reduce_cmd):
        regs = reduce_registers(ctx, E_SCALAR, reduce_cmd, reduce_op or "add", values.reshape(p, -1))
        if reduce_res is not None:
            write(reduce_res, execute.cast(regs.reshape(reduce_res.shape), reduce_res.dtype))
    return out


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


def invert(x, *, dtype=None, mask=None) -> Tensor:
    """nl.invert / ``~tile``: bitwise NOT of an integer tile (one VectorE instruction, x XOR all-ones); NOT of a
    bool tile."""
    if x.dtype == np.bool_:
        return tensor_scalar(x, "equal", 0, dtype=dtype if dtype is not None else np.bool_, mask=mask,
                             op_name="logical_not")
    if x.dtype.kind not in "iu":
        fail("nkisim_bad_argument", op="invert", detail=f"bitwise operations need an integer tile, got {x.dtype}")
    ones = -1 if x.dtype.kind == "i" else int(np.iinfo(x.dtype).max)
    return tensor_scalar(x, "bitwise_xor", ones, dtype=dtype, mask=mask, op_name="invert")


def select(condition, x, y, *, dtype=None, mask=None) -> Tensor:
    """nl.where: one VectorE instruction reading the predicate and both value operands."""
    ctx = current("where")
    ctx.settle()
    tiles = [t for t in (condition, x, y) if isinstance(t, Tensor)]
    if not tiles:
        raise TypeError("nl.where needs at least one tile operand")
    _engine_checks("where", E_VECTOR, [(t, "operand") for t in tiles], ctx)
    ref = max(tiles, key=lambda t: math.prod(t.shape))
    dts = [t.dtype for t in (x, y) if isinstance(t, Tensor)] or [F32]
    out_dt = dtypes.to_dtype(dtype) if dtype is not None else (dts[0] if len(dts) == 1 else dtypes.promote(*dts))
    out = new_result(ctx, ref.shape, out_dt)
    ins = ctx.emit("tensor_tensor", E_VECTOR, tiles, (out,), {"alu": "select"})
    values = None
    if ctx.full:
        def val(v):
            return _fit(execute.to_f32(read(v)), ref.shape) if isinstance(v, Tensor) else np.float32(v)
        values = np.where(val(condition) != 0, val(x), val(y))
    return finish(ctx, ins, out, values, mask_values(mask, out.shape, *tiles))


def dma_transpose(src: Tensor, axes=None, *, dtype=None, mask=None, two_byte_only: bool = False) -> Tensor:
    """DMA-engine transpose into a new SBUF tile (2-D (1,0), 3-D (2,1,0), 4-D (3,1,2,0)); ``two_byte_only`` for the
    explicit hwdge/swdge lowerings, which take 2-byte dtypes only."""
    ctx = current("dma_transpose")
    ctx.settle()
    src = need_tensor(src, "dma_transpose", "src")
    need_on_chip(src, "dma_transpose", "src", (B_HBM, B_SBUF))
    allowed = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
    if src.ndim not in allowed:
        fail("err_exceed_max_supported_dimension", param=shape_str(src, "src"), op="dma_transpose", limit=4)
    axes = tuple(axes) if axes is not None else allowed[src.ndim]
    if axes != allowed[src.ndim]:
        fail("nkisim_bad_argument", op="dma_transpose", detail=f"axes must be {allowed[src.ndim]} for a "
             f"{src.ndim}-D source, got {axes}")
    if two_byte_only and src.dtype.itemsize != 2:
        fail("nkisim_dtype_not_supported", op="dma_transpose", dtype=src.dtype.name, operand="src",
             detail=" (only 2-byte dtypes with dge_mode hwdge / swdge)")
    shape = tuple(src.shape[a] for a in axes)
    if shape[0] > ctx.limits.pmax:
        fail("err_num_partition_exceed_arch_limit", n=shape[0], limit=ctx.limits.pmax)
    dt = dtypes.to_dtype(dtype) if dtype is not None else src.dtype
    out = new_result(ctx, shape, dt)
    ins = ctx.emit("dma_copy", E_DMA, (src,), (out,), {"bytes": math.prod(shape) * dt.itemsize,
                                                             "via": "dma_transpose", "cast": dt != src.dtype})
    values = np.transpose(read(src), axes) if ctx.full else None
    return finish(ctx, ins, out, values, transposed_mask(mask, src, shape, lambda m: np.transpose(m, axes)))


def memset_into(ctx: KernelContext, dst: Tensor, value, engine: Engine = E_VECTOR) -> Tensor:
    need_on_chip(dst, "memset", "dst")
    if dst._oob:
        check_oob(dst, None)
    ins = ctx.emit("memset", engine, (), (dst,), {"value": float(value)})
    if ctx.full:
        write(dst, execute.cast(np.asarray(value, dtype=F32 if dtypes.is_float(dst.dtype) else np.int64),
                                dst.dtype))
        _mark_written(dst)
    del ins
    return dst


def memset(shape, value, dtype, *, engine: Engine = E_UNKNOWN, mask=None) -> Tensor:
    ctx = current("memset")
    ctx.settle()
    from nkisim.core.tensor import parse_shape

    dims, _ = parse_shape(shape)  # memset ignores par_dim: the first dimension is the partition dimension
    if engine == E_UNKNOWN:
        engine = E_VECTOR
    out = new_result(ctx, dims, dtypes.to_dtype(dtype))
    check_partitions(out, ctx.limits.pmax)
    ins = ctx.emit("memset", engine, (), (out,), {"value": float(value)})
    values = np.full(dims, value, dtype=F32 if dtypes.is_float(out.dtype) else np.int64) if ctx.full else None
    return finish(ctx, ins, out, values, mask_values(mask, dims))


def iota(expr, dtype, *, mask=None) -> Tensor:
    from nkisim.core.indexing import IndexExpr

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
