"""DMA: copies between HBM and SBUF (``dma_copy``, ``nl.load`` / ``nl.store``), the DMA transpose and the atomic
read-modify-write of HBM.  Every DMA is one ``dma_copy`` instruction on the DMA queues; ``attrs['via']`` names the
API that issued it (the cost model prices transposes differently)."""

from __future__ import annotations

import math

import numpy as np

from nkisim.core import aps, dtypes, execute
from nkisim.core.access import check_writable, dynamic_tiles, in_bounds, read, runtime_bounds, scatter_add, write
from nkisim.core.context import KernelContext, current
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, E_DMA, E_SCALAR, E_SYNC, E_UNKNOWN, ENGINE_NAMES, Engine
from nkisim.core.memory import BUF_NAMES
from nkisim.core.ops.common import (
    check_partitions,
    finish,
    mask_values,
    need_on_chip,
    need_tensor,
    new_result,
    shape_str,
    transposed_mask,
)
from nkisim.core.ops.elementwise import memset, tensor_copy
from nkisim.core.rules import fail
from nkisim.core.tensor import Tensor


def check_dma_options(op: str, dge: str | None, *, priority=None, engine: Engine = E_UNKNOWN, src=None,
                      dst=None) -> None:
    """The options of NKI 0.6's ``nisa.dma_copy`` beyond the copy itself (nki/api/nki/isa/__init__.py):
    ``priority`` "DMA quality-of-service priority level 0-3 ... (NeuronCore-v4+ only)"; ``engine`` "the engine to
    use for HWDGE descriptor generation: nki.isa.engine.sync or nki.isa.engine.scalar. Only valid when
    dge_mode=nisa.dge_mode.hwdge"; and "Hardware based DGE is only supported for NeuronCore-v3 or newer" (not
    trn1).  ``dge``: the dge_mode's name, None for the compiler's choice."""
    ctx = current(op)
    if priority is not None:
        fail("nkisim_bad_argument", op=op, detail=f"priority={priority!r} is a NeuronCore-v4 (trn3) option; nkisim "
             "models trn1 and trn2, which take no DMA priority (leave it None)")
    if engine != E_UNKNOWN:
        if dge != "hwdge":
            fail("nkisim_bad_argument", op=op, detail="engine selects the hardware DGE's engine: it is only valid "
                 "with dge_mode=nisa.dge_mode.hwdge")
        if engine not in (E_SYNC, E_SCALAR):
            fail("nkisim_bad_argument", op=op, detail=f"the hardware DGE runs on nisa.engine.sync or "
                 f"nisa.engine.scalar, not {ENGINE_NAMES[engine]}")
    if dge == "hwdge" and ctx.target == "trn1":
        fail("nkisim_engine_op_unsupported", op=op, engine="the hardware DGE (dge_mode=hwdge)", target=ctx.target,
             detail="hardware based DGE is only supported for NeuronCore-v3 (trn2) or newer")
    if dge in ("hwdge", "none"):
        # nki-dge.rst: swdge "is the only mode that supports indirect (gather/scatter) operations"; hwdge "Does not
        # support indirect (gather/scatter) operations"; none "Cannot handle dynamic (runtime-computed) addresses or
        # indices" (dma_copy: "When either sw_dge or hw_dge mode is used, the src and dst tensors can have a dynamic
        # start address")
        for t, name in ((src, "src"), (dst, "dst")):
            how = aps.indirection(t) if t is not None else None
            if how == "vector" or (how == "scalar" and dge == "none"):
                what = "an indirect (gather/scatter) view" if how == "vector" else "a run-time (scalar_offset) view"
                fail("nkisim_bad_argument", op=op, detail=f"{name} is {what}, which dge_mode={dge} cannot address: "
                     + ("use dge_mode=swdge (or unknown)" if how == "vector" else "use swdge, hwdge or unknown"))


def dma_copy(src: Tensor, dst: Tensor, *, via: str = "dma_copy", mask=None, dst_rmw_op: str | None = None,
             ctx: KernelContext | None = None, oob_skip: bool = False, dge: str | None = None) -> None:
    """``dge``: the ``dge_mode`` the kernel asked for ("none", "swdge", "hwdge"; None = the compiler's choice),
    recorded for the cost model (grading security D2)."""
    if ctx is None:
        ctx = current("dma_copy")
        ctx.settle()
    if not isinstance(src, Tensor):
        need_tensor(src, "dma_copy", "src")
    if not isinstance(dst, Tensor):
        need_tensor(dst, "dma_copy", "dst")
    sk, dk = src.kind, dst.kind
    if sk == B_PSUM:
        need_on_chip(src, "dma_copy", "src", (B_HBM, B_SBUF))
    if dk == B_PSUM:
        need_on_chip(dst, "dma_copy", "dst", (B_HBM, B_SBUF))
    if dk == B_HBM:  # only HBM tensors (kernel arguments) are read-only
        check_writable(dst)
    n_dst = math.prod(dst.shape)
    if math.prod(src.shape) != n_dst:
        fail("nkisim_dma_element_mismatch", src=list(src.shape), dst=list(dst.shape))
    pmax = ctx.limits.pmax
    if sk == B_SBUF and src.shape and src.shape[src.pdim] > pmax:
        check_partitions(src, pmax)
    if dk == B_SBUF and dst.shape and dst.shape[dst.pdim] > pmax:
        check_partitions(dst, pmax)
    if oob_skip and (src.oob or dst.oob):
        m = _oob_skip_mask(mask, src, dst)
    else:
        m = mask_values(mask, dst.shape, dst) if mask is not None or dst.oob else None
        if src.oob:
            mask_values(mask, src.shape, src)
    srcs = (src,)
    indirect = ()
    if ctx.dyn:  # indirect DMA: the index tiles are read too (software DGE builds the descriptors from them)
        indirect = dynamic_tiles(ctx, src) + dynamic_tiles(ctx, dst)
        if indirect and ctx.full:  # run-time indices outside the tensor: skipped or a fault (S4)
            for t in (src, dst):
                ok = runtime_bounds(ctx, t, m if t is dst else None, skip=oob_skip)
                if ok is not None and oob_skip:
                    keep = ok.reshape(dst.shape)
                    m = keep if m is None else m & keep
        srcs += indirect
    cast = src.dtype != dst.dtype
    # a casting DMA reads the source's bytes and writes the destination's; which side bounds its rate is not
    # documented ("Cost not given": DMA, ISA; facts 5.2): charge the larger (grading security D1)
    itemsize = max(src.dtype.itemsize, dst.dtype.itemsize) if cast else dst.dtype.itemsize
    ins = ctx.emit("dma_copy", E_DMA, srcs, (dst,), {"bytes": n_dst * itemsize, "via": via, "cast": cast})
    if dst_rmw_op is not None:
        ins.attrs["rmw"] = dst_rmw_op
    if indirect or dge is not None:
        _mark_descriptors(ins.attrs, bool(indirect), dge)
    if ctx.full:
        vals = read(src)
        if vals.shape != dst.shape:
            vals = vals.reshape(dst.shape)
        if via == "atomic_rmw":
            scatter_add(dst, execute.to_f32(vals), m)
            return
        if dst_rmw_op is not None:
            vals = execute.alu(dst_rmw_op, execute.to_f32(read(dst)), execute.to_f32(vals))
        elif vals.dtype != dst.dtype:
            vals = execute.to_f32(vals)
        write(dst, execute.cast(vals, dst.dtype), m)


def _mark_descriptors(attrs: dict, indirect: bool, dge: str | None) -> None:
    """Record how the DMA's descriptors are built (grading security D2, D3; MODEL.md "DMA descriptor modes"):
    an indirect DMA or ``dge_mode=swdge`` is software DGE (GpSimd builds the descriptors: hardware DGE "cannot
    do indirect gather/scatter", A3/DGE); ``dge_mode=none`` uses host-built static descriptors; ``hwdge`` and the
    compiler's choice keep the target's default."""
    if indirect or dge == "swdge":
        attrs["dge"] = False
        attrs["swdge"] = True
    elif dge == "none":
        attrs["dge"] = False


def _oob_skip_mask(mask, src: Tensor, dst: Tensor) -> np.ndarray:
    """dma_copy(oob_mode=nisa.oob_mode.skip): "Silently skips any operations involving out-of-bounds indices"
    (nki.isa.dma_copy docs, 2.26): the elements whose indirect source or destination index is out of bounds are
    not copied; the rest are, under the mask= predicate as usual."""
    keep = np.ones(dst.shape, dtype=bool)
    for t in (src, dst):
        if t.oob:
            keep &= in_bounds(t).reshape(dst.shape)
    # out-of-bounds positions are skipped, not errors: evaluate the mask alone
    m = mask_values(mask, dst.shape, dst, check=False) if mask is not None else None
    return keep if m is None else keep & np.broadcast_to(m, dst.shape)


def atomic_rmw(dst, value, op: str, *, mask=None) -> None:
    """nl.atomic_rmw: dst = op(dst, value) on HBM through an indirect (tile-indexed) access, atomically: rows
    addressed several times accumulate every contribution.  2.2x docs: dst "only supports indirect dynamic indexing
    currently", op "only supports np.add currently".  A DMA with read-modify-write (cost: the DMA model)."""
    ctx = current("atomic_rmw")
    ctx.settle()
    dst = need_tensor(dst, "atomic_rmw", "dst")
    if dst.kind != B_HBM or not dynamic_tiles(ctx, dst):
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
    if src.kind != B_HBM:
        fail("err_unsupported_memory", operand="src", op="load", expected="hbm", got=BUF_NAMES[src.kind])
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
    idx = dynamic_tiles(ctx, src) if ctx.dyn else ()
    if idx and ctx.full:
        runtime_bounds(ctx, src, m)  # run-time indices outside the tensor: a fault (S4)
    ins = ctx.emit("dma_copy", E_DMA, (src,) + idx, (out,),
                   {"bytes": math.prod(shape) * max(dt.itemsize, src.dtype.itemsize),  # D1: see dma_copy
                    "via": "load_transpose2d" if transpose else "load", "cast": dt != src.dtype})
    if idx:
        _mark_descriptors(ins.attrs, True, None)
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
    if dst.kind != B_HBM:
        fail("err_unsupported_memory", operand="dst", op="store", expected="hbm", got=BUF_NAMES[dst.kind])
    value = need_tensor(value, "store", "value")
    if value.kind == B_PSUM:
        # nl.store of a PSUM tile inserts a copy to SBUF first (nki.language.store docstring)
        value = tensor_copy(value)
        ctx.settle()
    dma_copy(value, dst, via="store", mask=mask, ctx=ctx)


def dma_transpose(src: Tensor, axes=None, *, dtype=None, mask=None, two_byte_only: bool = False,
                  dst: Tensor | None = None, dge: str | None = None, oob_skip: bool = False) -> Tensor:
    """DMA-engine transpose into a new SBUF tile (2-D (1,0), 3-D (2,1,0), 4-D (3,1,2,0)) or into ``dst`` (the
    current API: "dst.shape matches the transposed src.shape exactly, including rank", NKI 0.4 migration guide);
    ``two_byte_only`` for the explicit hwdge/swdge lowerings, which take 2-byte dtypes only.  ``dge``: the current
    API's ``dge_mode`` ("unknown" / "hwdge" / "swdge" / "none"; None: not checked, the legacy API): its documented
    constraints are checked, and a ``src`` with a ``vector_offset`` is the software-DGE gather-transpose
    (``dst = src[indices.T.flatten()[:src.shape[0]], :].T``, NKI 0.6 docstring)."""
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
    indirect = dynamic_tiles(ctx, src) if ctx.dyn else ()
    if dge is not None:
        _transpose_dge_rules(ctx, src, dge, indirect)
    if two_byte_only and src.dtype.itemsize != 2:
        fail("nkisim_dtype_not_supported", op="dma_transpose", dtype=src.dtype.name, operand="src",
             detail=" (only 2-byte dtypes with dge_mode hwdge / swdge)")
    shape = tuple(src.shape[a] for a in axes)
    if shape[0] > ctx.limits.pmax:
        fail("err_num_partition_exceed_arch_limit", n=shape[0], limit=ctx.limits.pmax)
    if dst is not None:
        dst = need_tensor(dst, "dma_transpose", "dst")
        # the current API (dge given): "dst: the destination of transpose, must be a tile in SBUF"; "src.dtype ==
        # dst.dtype" (nki.isa.dma_transpose, NKI 0.6)
        need_on_chip(dst, "dma_transpose", "dst", (B_SBUF,) if dge is not None else (B_HBM, B_SBUF))
        if dge is not None and dst.dtype != src.dtype:
            fail("nkisim_dst_mismatch", op="dma_transpose", dst=f"{list(dst.shape)} {dst.dtype}",
                 result=f"{list(src.shape)} {src.dtype}", detail=" (src.dtype == dst.dtype: a transpose does not cast)")
        check_writable(dst)
        if tuple(dst.shape) != shape:
            fail("nkisim_dst_mismatch", op="dma_transpose", dst=list(dst.shape), result=list(shape),
                 detail=" (the transposed source shape, rank included)")
        dtype = dst.dtype
    dt = dtypes.to_dtype(dtype) if dtype is not None else src.dtype
    out = new_result(ctx, shape, dt) if dst is None else dst
    ins = ctx.emit("dma_copy", E_DMA, (src,) + indirect, (out,),
                   {"bytes": math.prod(shape) * max(dt.itemsize, src.dtype.itemsize), "via": "dma_transpose",
                    "cast": dt != src.dtype})  # D1
    if indirect:
        _mark_descriptors(ins.attrs, True, None)  # the gather-transpose is software DGE ("dma_gather_transpose")
    elif dge == "none":
        _mark_descriptors(ins.attrs, False, "none")  # host-built descriptors: the static issue cost
    values = np.transpose(read(src), axes) if ctx.full else None
    m = transposed_mask(mask, src, shape, lambda m: np.transpose(m, axes))
    if indirect and ctx.full:  # run-time indices outside the tensor: skipped rows or a fault (S4)
        ok = runtime_bounds(ctx, src, None, skip=oob_skip)
        if ok is not None:
            keep = np.transpose(ok, axes)
            m = keep if m is None else m & keep
    if dst is None:
        return finish(ctx, ins, out, values, m)
    if values is not None:
        write(dst, execute.cast(execute.to_f32(values) if dt != src.dtype else values, dst.dtype), m)
    return dst


_HWDGE_TRANSPOSE_ROWS = (1, 2, 4, 8, 16)


def _transpose_dge_rules(ctx: KernelContext, src: Tensor, dge: str, indirect: tuple) -> None:
    """nki.isa.dma_transpose's documented constraints (NKI 0.6 docstring, "DMA Direct Transpose Constraints" and
    "DMA Indirect Transpose Constraints"; release notes 0.6: hwdge "now accepts src.shape[0] in {1,2,4,8,16} ...
    (previously required ==16) and src.shape[-1] <= 128 (previously required ==128)").

    A direct transpose also takes ``dge_mode=none``: the docstring lists only unknown and hwdge, but AWS's DGE deep
    dive (nki/deep-dives/nki-dge.rst, "How .ap() Affects DGE Mode") gives a static dma_transpose "none, hwdge, or
    compiler-selected" and ``.ap()`` with ``scalar_offset`` any mode, and AWS's nki-library passes
    ``dge_mode=3`` (none) to its MLP TKG bias transpose, which runs on Trainium.  It is the DMA-engine transpose
    with descriptors pre-computed on the host: no hwdge shape limits, the static issue cost (MODEL.md, "DMA
    descriptor modes")."""
    op = "dma_transpose"
    if indirect:
        if dge not in ("unknown", "swdge"):
            fail("nkisim_bad_argument", op=op, detail=f"a source with vector_offset is a software-DGE transpose: "
                 f"dge_mode must be unknown or swdge, not {dge}")
        if ctx.target == "trn1":
            fail("nkisim_engine_op_unsupported", op=op, engine="DMA", target=ctx.target,
                 detail="the indirect (gather) transpose is TRN2+ only")
        idx = indirect[0]
        i0, i1 = idx.shape[0], idx.shape[1]
        problems = [
            (src.ndim == 4 and src.shape[1] != 1 and src.shape[2] != 1, "a 4-D src needs shape[1] or shape[2] == 1"),
            (src.shape[-1] > 128, f"src.shape[-1] = {src.shape[-1]} must be <= 128"),
            (src.dtype.itemsize != 2, f"src.dtype must be 2 bytes, got {src.dtype.name}"),
            (src.shape[0] % 16 != 0, f"src.shape[0] = {src.shape[0]} must be divisible by 16"),
            (not (16 <= i0 <= 128 and i0 % 16 == 0), f"indices.shape[0] = {i0} must be in [16, 128] and divisible "
             "by 16"),
            (i1 > 1 and i0 != 128, "indices.shape[0] must be exactly 128 when indices.shape[1] > 1"),
            (idx.dtype != np.uint32, f"indices.dtype must be uint32, got {idx.dtype.name}"),
        ]
    else:
        if dge not in ("unknown", "hwdge", "none"):
            fail("nkisim_bad_argument", op=op, detail=f"a direct transpose takes dge_mode unknown, hwdge or none, not "
                 f"{dge} (swdge is the gather-transpose of a source with vector_offset)")
        if dge != "hwdge":
            return
        if ctx.target == "trn1":  # "Hardware based DGE is only supported for NeuronCore-v3 or newer"
            fail("nkisim_engine_op_unsupported", op=op, engine="the hardware DGE (dge_mode=hwdge)", target=ctx.target,
                 detail="hardware based DGE is only supported for NeuronCore-v3 (trn2) or newer")
        rows = src.shape[0]
        # The docstring keeps "For 2-d input tiles, src.shape[0] == 16" while the 0.6 release notes relax
        # src.shape[0] to {1, 2, 4, 8, 16} without naming a rank: nkisim follows the release notes for 2-D too.
        problems = [
            (rows not in _HWDGE_TRANSPOSE_ROWS, f"src.shape[0] = {rows} must be in {{1, 2, 4, 8, 16}}"),
            (src.ndim > 2 and (rows * src.shape[-2]) % 16 != 0,
             f"(src.shape[0] * src.shape[-2]) = {rows * src.shape[-2] if src.ndim > 2 else 0} must be a multiple "
             "of 16"),
            (src.shape[-1] > 128, f"src.shape[-1] = {src.shape[-1]} must be <= 128"),
            (src.dtype.itemsize != 2, f"src.dtype must be 2 bytes, got {src.dtype.name}"),
        ]
    bad = [why for cond, why in problems if cond]
    if bad:
        fail("nkisim_bad_argument", op=op, detail=("the indirect transpose: " if indirect else
                                                  "dge_mode=hwdge: ") + "; ".join(bad))
