"""``nki.language`` operations that are several instructions (or none), shared by every front end.

What the compiler emits for them is semantics, not API: tensors created with an init value (a memset, except a
zeroed PSUM accumulator, which costs nothing), ``nl.matmul`` (a PSUM operand staged through SBUF, the TensorE
transpose of ``x``), ``nl.transpose``, ``nl.softmax``, ``nl.rms_norm``, ``nl.mean``, ``nl.var`` and
``nl.loop_reduce``.  A front end's ``nl`` functions translate their arguments (operators, axes, dtypes) and call
these; no front end composes instructions itself.
"""

from __future__ import annotations

import numpy as np

from nkisim.core.access import allocation, array, operand
from nkisim.core.buffers import BufferSpec, allocate
from nkisim.core.context import KernelContext, current
from nkisim.core.dtypes import F32
from nkisim.core.instr import B_HBM, E_TENSOR, E_VECTOR
from nkisim.core.ops import dma, elementwise, reduce, tensor_engine
from nkisim.core.ops.common import need_tensor
from nkisim.core.rules import fail
from nkisim.core.tensor import Tensor


def filled(shape, dtype, buffer: BufferSpec | None, name: str, value) -> Tensor:
    """``nl.zeros`` / ``nl.ones`` / ``nl.full``: on-chip init values cost a memset instruction, as the compiler emits
    one.  A zeroed PSUM accumulator costs nothing when a matmul consumes it: the first matmul of the accumulation
    group overwrites (trainium arch guide, "Near-memory accumulation"); the scheduler elides the memset then, and
    runs it when VectorE/ScalarE read the zeros as data (perf/scheduler.py, _materialize)."""
    ctx = current("nl.zeros")
    ctx.settle()
    kind = getattr(buffer, "kind", None)
    if kind == B_HBM:
        # rejected by the 2025 toolchain; the 2024 one filled it (rules.py, era note)
        return dma.hbm_init(ctx, allocate(shape, dtype, buffer, name=name, ctx=ctx, fill=value), value)
    if getattr(buffer, "direct", None) is not None:
        fail("nkisim_direct_alloc", detail="tensors with an init value cannot be created with direct allocation "
             "(err_tensor_creation_on_scratchpad_with_init_value_not_supported)")
    t = allocate(shape, dtype, buffer, name=name, ctx=ctx, poison=False)  # the memset writes every element
    elementwise.memset_into(ctx, t, value, E_VECTOR)
    return t


def matmul(x, y, *, transpose_x: bool = False, mask=None) -> Tensor:
    """``nl.matmul``: x @ y (or x.T @ y with transpose_x=True) on TensorE; result in PSUM, fp32.  Without
    ``transpose_x`` the compiler transposes ``x`` on TensorE first (reading SBUF: a PSUM ``x`` is staged)."""
    if not transpose_x:
        ctx = current("matmul")
        ctx.settle()
        if x.ndim != 2:
            fail("err_exceed_max_supported_dimension", param=f"x{list(x.shape)}", op="matmul", limit=2)
        x = tensor_engine.stage_psum_operand(ctx, need_tensor(x, "matmul", "x"), "matmul", "x")
        hoisted = hoisted_transpose(ctx, x)
        if hoisted is not None:
            x = hoisted
        else:
            src = x
            xt = tensor_engine.nc_transpose(x, engine=E_TENSOR, op_name="matmul")
            x = elementwise.tensor_copy(xt, op_name="matmul")
            remember_transpose(ctx, src, x)
    return tensor_engine.nc_matmul(x, y, mask=mask, op_name="matmul")


def hoisted_transpose(ctx: KernelContext, src: Tensor) -> Tensor | None:
    """The SBUF copy of the transpose the compiler inserted for ``nl.matmul(x, y)`` (no ``transpose_x``) at this
    statement's previous execution, when ``x`` is the same, unchanged view: a loop-invariant computation of the
    loops iterating between the two executions, which the 2024 toolchain's middle end hoists out of them
    (MODEL.md, "Issue 27, nl.matmul's inserted transpose").  None: transpose again (trn2's 2025 toolchain, or
    under skip_middle_end_transformations, keeps the instruction where the kernel put it)."""
    if ctx.era != "2024" or not ctx.middle_end:
        return None
    hit = ctx.inserted_transposes.get(ctx.site)
    if hit is None:
        return None
    key, pos, tile = hit
    if key != _view_key(src):
        return None
    reg = operand(src).region
    for ins in ctx.trace.instrs[pos:]:
        for d in ins.dsts:
            r = d.region
            if r.phys == reg.phys and r.buf == reg.buf and r.p_lo < reg.p_hi and reg.p_lo < r.p_hi \
                    and r.b_lo < reg.b_hi and reg.b_lo < r.b_hi:
                return None  # written since: not invariant
    return tile


def remember_transpose(ctx: KernelContext, src: Tensor, tile: Tensor) -> None:
    if ctx.era == "2024" and ctx.middle_end:
        ctx.inserted_transposes[ctx.site] = (_view_key(src), len(ctx.trace.instrs), tile)


def _view_key(t: Tensor) -> tuple:
    return (id(allocation(t)), operand(t).region, tuple(t.shape), array(t).strides)


def transpose(x, *, dtype=None, mask=None) -> Tensor:
    """``nl.transpose``: a 2-D tile of at most 128 x 128, transposed on TensorE."""
    if x.ndim > 2:
        fail("err_exceed_max_supported_dimension", param=f"x{list(x.shape)}", op="transpose", limit=2)
    for i, d in enumerate(x.shape):
        if d > 128:
            fail("err_size_of_dimension_exceed_arch_limit", dim=i, param=f"x{list(x.shape)}", op="transpose",
                 limit=128)
    return tensor_engine.nc_transpose(x, engine=E_TENSOR, dtype=dtype, mask=mask, op_name="transpose")


def composite_dtype(dtype, compute_dtype, x):
    """Result dtype of nl.softmax / nl.rms_norm: nki.language.rms_norm docs (2.2x): "currently `dtype` and
    `compute_dtype` behave the same, both sets internal compute and return dtype"."""
    if dtype is not None:
        return dtype
    return compute_dtype if compute_dtype is not None else x.dtype


def softmax(x, axis, *, dtype=None, compute_dtype=None) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along free axis ``axis`` (reduce, subtract, exp, reduce, reciprocal,
    multiply)."""
    m = reduce.tensor_reduce("maximum", x, axis, keepdims=True, dtype=F32, op_name="softmax")
    shifted = elementwise.tensor_tensor(x, m, "subtract", dtype=F32, partition_broadcast=True, op_name="softmax")
    e = elementwise.activation("exp", shifted, dtype=F32, op_name="softmax")
    s = reduce.tensor_reduce("add", e, axis, keepdims=True, dtype=F32, op_name="softmax")
    r = elementwise.activation("reciprocal", s, dtype=F32, op_name="softmax")
    return elementwise.tensor_tensor(e, r, "multiply", dtype=composite_dtype(dtype, compute_dtype, x),
                                     partition_broadcast=True, op_name="softmax")


def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None) -> Tensor:
    """x * w / sqrt(mean(x^2) + epsilon) along free axis ``axis``."""
    sq = elementwise.activation("square", x, dtype=F32, op_name="rms_norm")
    ss = reduce.tensor_reduce("add", sq, axis, keepdims=True, dtype=F32, op_name="rms_norm")
    ms = elementwise.tensor_scalar(ss, "multiply", 1.0 / n, op1="add", operand1=float(epsilon), op_name="rms_norm")
    inv = elementwise.activation("rsqrt", ms, dtype=F32, op_name="rms_norm")
    xn = elementwise.tensor_tensor(x, inv, "multiply", dtype=F32, partition_broadcast=True, op_name="rms_norm")
    return elementwise.tensor_tensor(xn, w, "multiply", dtype=composite_dtype(dtype, compute_dtype, x),
                                     partition_broadcast=True, op_name="rms_norm")


def _count(x, axis) -> tuple[tuple, int]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    count = 1
    for ax in axes:
        count *= x.shape[ax]
    return axes, count


def mean(x, axis, *, dtype=None, mask=None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean; "float32 intermediate and return values are used for integer inputs" (nki.language.mean
    docs), other inputs keep their dtype unless ``dtype`` is given."""
    s = reduce.tensor_reduce("add", x, axis, dtype=F32, mask=mask, keepdims=keepdims, op_name="mean")
    _, count = _count(x, axis)
    if dtype is None:
        dtype = F32 if np.dtype(x.dtype).kind in "iub" else x.dtype
    return elementwise.tensor_scalar(s, "multiply", 1.0 / count, dtype=dtype, op_name="mean")


def var(x, axis, *, dtype=None, mask=None) -> Tensor:
    """Population variance along free axis/axes ``axis``: mean((x - mean(x))^2), composed like nl.softmax."""
    axes, count = _count(x, axis)
    s = reduce.tensor_reduce("add", x, axes, dtype=F32, mask=mask, keepdims=True, op_name="var")
    m = elementwise.tensor_scalar(s, "multiply", 1.0 / count, dtype=F32, op_name="var")
    d = elementwise.tensor_tensor(x, m, "subtract", dtype=F32, partition_broadcast=True, op_name="var")
    sq = elementwise.activation("square", d, dtype=F32, op_name="var")
    ss = reduce.tensor_reduce("add", sq, axes, dtype=F32, mask=mask, op_name="var")
    return elementwise.tensor_scalar(ss, "multiply", 1.0 / count, dtype=dtype if dtype is not None else x.dtype,
                                     op_name="var")


def loop_reduce(dst, x, alu: str, *, dtype=None, mask=None) -> Tensor:
    """``b = nl.loop_reduce(a, op, [k])``: ``b = op(b, a)`` written in place into the destination ``b``
    (nki.language.loop_reduce docs: "The destination tile is also the rhs input to op")."""
    return elementwise.tensor_tensor(dst, x, alu, dtype=dtype, mask=mask, dst=dst, partition_broadcast=True,
                                     op_name="loop_reduce", first_write_inits=True)
