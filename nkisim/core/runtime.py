"""Kernel runs: the active context, allocation, instruction emission and ``run_kernel``.

Each front-end call goes through :func:`current` (the running kernel), :func:`allocate` (storage with liveness
and capacity) and :meth:`KernelContext.emit` (append the :class:`Instr` to the trace).  Values are computed by
the caller only when ``ctx.full`` is true, so timing-only runs produce the same trace without the arithmetic.
"""

from __future__ import annotations

import gc
import os
import sys
import weakref
from dataclasses import dataclass

import numpy as np

from nkisim.core import config, dtypes, execute
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, Buf, Engine, Instr, Trace
from nkisim.core.memory import Allocation, MemoryTracker, make_storage
from nkisim.core.rules import fail
from nkisim.core.tensor import Tensor, parse_shape

_NKISIM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Frames in these directories are the emulator itself; the first frame outside them is the kernel statement.
# (Only core/ and api/: kernels that live elsewhere in the package, e.g. calibration kernels, are user code.)
_FRONT_END_DIRS = (os.path.join(_NKISIM_DIR, "core") + os.sep, os.path.join(_NKISIM_DIR, "api") + os.sep)
_STACK: list[KernelContext] = []


class KernelContext:
    """State of one kernel run: trace, memory tracker, the last retargetable result."""

    def __init__(self, target: str | None, mode: str, name: str) -> None:
        if mode not in ("full", "timing"):
            raise ValueError(f"mode must be 'full' or 'timing', not {mode!r}")
        self.target = config.normalize_target(target)
        self.limits = config.limits(self.target)
        self.full = mode == "full"
        self.trace = Trace(self.target, name)
        self.mem = MemoryTracker(self.limits, self.target)
        self.pending: weakref.ref | None = None  # provisional result allocation, charged at the next call
        self.last_instr: Instr | None = None
        self.last_result: weakref.ref | None = None
        self.last_values: np.ndarray | None = None
        self.unwritten = None  # (weakref to the last result tile, its values, mask): written lazily by settle
        self.last_mask: np.ndarray | None = None  # mask= of the last retargetable result (set by ops.finish)
        self.direct_alloc: bool | None = None
        self.sbuf_arena = None
        self._where: dict = {}
        self.loc: str = "?"
        self.site = None
        self.kernel_code = None  # code object of the top-level kernel function (shared_hbm scope rule)

    # ---- bookkeeping shared by every front-end call -----------------------------------------------------
    def settle(self) -> None:
        """Start of every API call: charge the previous call's result tile if the kernel kept it, and locate
        the kernel statement making this call (for traces, allocation sites and error messages)."""
        if self.unwritten is not None:
            self._flush()
        ref = self.pending
        if ref is not None:
            self.pending = None
            alloc = ref()
            if alloc is not None:
                self.mem.charge(alloc)
        self.last_instr = None
        self.last_result = None
        self.last_values = None
        f = sys._getframe(2)  # skip settle and its caller (always an ops or api function)
        pkg = _FRONT_END_DIRS
        while f is not None and f.f_code.co_filename.startswith(pkg):
            f = f.f_back
        if f is None:
            self.loc, self.site = "?", None
            return
        key = (f.f_code, f.f_lineno)
        w = self._where.get(key)
        if w is None:
            w = self._where[key] = f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno}"
        self.loc, self.site = w, key

    def emit(self, op: str, engine: Engine, srcs, dsts, attrs: dict) -> Instr:
        instrs = self.trace.instrs
        if len(srcs) == 1:
            so = (srcs[0].operand(),)
        else:
            so = tuple([t.operand() for t in srcs])
        do = (dsts[0].operand(),) if len(dsts) == 1 else tuple([t.operand() for t in dsts])
        ins = Instr(len(instrs), op, engine, so, do, attrs, self.loc)
        instrs.append(ins)
        return ins

    def _flush(self) -> None:
        """Write the last result's values into its tile if the tile is still alive (it was not retargeted), through
        any view: the weak reference is to the allocation, the write goes to the result's own full view."""
        ref, view, values, mask = self.unwritten
        self.unwritten = None
        if ref() is None:
            return
        v = execute.cast(np.asarray(values), view.dtype)
        if v.shape != view.shape:
            v = v.reshape(view.shape) if v.size == view.size else np.broadcast_to(
                v.reshape(v.shape + (1,) * (view.ndim - v.ndim)), view.shape)
        if mask is None:
            view[...] = v
            return
        # fresh results skip the poison fill; masked-off elements must read as unwritten
        view[...] = np.asarray(dtypes.poison_value(view.dtype), dtype=view.dtype)
        m = np.broadcast_to(mask, view.shape)
        view[m] = np.broadcast_to(v, view.shape)[m]

    def remember(self, ins: Instr, result: Tensor, values) -> None:
        """Make ``result`` retargetable: ``dst[...] = result`` rewrites the instruction's destination."""
        self.last_instr = ins
        self.last_result = weakref.ref(result)
        self.last_values = values
        self.pending = weakref.ref(result._a)


def current(api: str = "") -> KernelContext:
    if not _STACK:
        fail("err_nki_api_outside_of_nki_kernel", api=api or "nki API")
    return _STACK[-1]


def active() -> KernelContext | None:
    return _STACK[-1] if _STACK else None


class BufferSpec:
    """A memory space argument (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm, ncc.sbuf.mod_alloc(...))."""

    __slots__ = ("kind", "name", "direct")

    def __init__(self, kind: Buf, name: str, direct=None) -> None:
        self.kind = kind
        self.name = name
        self.direct = direct

    def __repr__(self) -> str:
        return f"nl.{self.name}"


def allocate(shape, dtype, buffer: BufferSpec | None, *, name: str = "", fill=None, provisional: bool = False,
             ctx: KernelContext | None = None, site=None) -> Tensor:
    """Create a tensor in ``buffer``; on-chip tensors are checked against the partition limit and capacity."""
    if ctx is None:
        ctx = current("nl.ndarray")
        ctx.settle()
    if buffer is None:
        buffer = SBUF_SPEC
    elif not isinstance(buffer, BufferSpec):
        raise TypeError(f"buffer must be nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or nl.private_hbm, not {buffer!r}")
    dims, pdim = parse_shape(shape)
    dt = dtypes.to_dtype(dtype if dtype is not None else np.float32)
    kind = buffer.kind
    if site is None:
        site = ctx.site
    if kind == B_HBM:
        if fill is not None and not provisional:
            fail("err_hbm_tensor_with_init_value_not_supported")
        if buffer.name == "shared_hbm" and site is not None and ctx.kernel_code is not None \
                and site[0] is not ctx.kernel_code:
            fail("err_shared_hbm_must_in_kernel_level")
        base, view = make_storage(dims, 0, dt, fill, not ctx.full)
        alloc = Allocation(B_HBM, base, ctx.mem.new_phys(), None, name or "hbm", 0, None)
        return Tensor(alloc, view, 0, off=0)
    if not dims:
        raise ValueError("on-chip tensors need at least one dimension (the partition dimension)")
    parts = dims[pdim]
    if parts > ctx.limits.pmax:
        fail("err_num_partition_exceed_arch_limit", n=parts, limit=ctx.limits.pmax)
    bytes_pp = dt.itemsize
    for i, d in enumerate(dims):
        if i != pdim:
            bytes_pp *= d
    if buffer.direct is not None:
        return buffer.direct.place(ctx, dims, pdim, dt, name, bytes_pp)
    if kind == B_SBUF and not provisional:
        if ctx.direct_alloc is True:
            fail("nkisim_direct_alloc", detail="automatic (nl.sbuf) and direct (ncc.sbuf.mod_alloc) allocation "
                 "cannot be mixed in one kernel")
        ctx.direct_alloc = False
    # A provisional result is written in full right after allocation (ops.finish poisons it first when a mask
    # leaves elements unwritten), so it skips the poison fill.
    base, view = make_storage(dims, pdim, dt, fill, not ctx.full or provisional)
    mem = ctx.mem
    alloc = Allocation(kind, base, mem.phys_for(site, kind), site, name, bytes_pp, mem)
    if not provisional:
        mem.charge(alloc)
    if kind == B_PSUM and ctx.full and not provisional:
        # per-element "written" flags of the matmul accumulation groups; provisional PSUM results (acc None) were
        # written by the instruction that produced them, i.e. all flags set
        alloc.acc = np.zeros(base.shape, dtype=bool)
    return Tensor(alloc, view, pdim, off=0)


SBUF_SPEC = BufferSpec(B_SBUF, "sbuf")
PSUM_SPEC = BufferSpec(B_PSUM, "psum")
HBM_SPEC = BufferSpec(B_HBM, "hbm")


@dataclass
class KernelRun:
    """Outputs (NumPy, None in timing mode) and the instruction trace of one kernel run."""

    outputs: object
    trace: Trace
    target: str
    peak_sbuf_bytes: int = 0
    peak_psum_bytes: int = 0


def unwrap(kernel):
    """The Python function behind an nki.jit / baremetal / benchmark / skip_middle_end wrapper."""
    seen = 0
    while hasattr(kernel, "func") and seen < 8:
        kernel = kernel.func
        seen += 1
    return kernel


def _wrap_arg(ctx: KernelContext, value, name: str):
    if isinstance(value, np.ndarray) or (hasattr(value, "__array__") and hasattr(value, "dtype")
                                        and not isinstance(value, (Tensor, np.generic))):
        arr = np.asarray(value)
        dt = dtypes.to_dtype(arr.dtype)
        base = np.array(arr, dtype=dt, copy=True, order="C") if ctx.full else np.empty(arr.shape, dtype=dt)
        alloc = Allocation(B_HBM, base, ctx.mem.new_phys(), None, name, 0, None)
        alloc.immutable = True
        return Tensor(alloc, base, 0, off=0)
    return value


def _to_numpy(value):
    if isinstance(value, Tensor):
        if value._a.buf != B_HBM:
            raise TypeError(f"kernel returned on-chip tensor '{value._a.name}' ({value.buffer}); top-level kernel "
                            "outputs must be HBM tensors created with nl.ndarray(..., buffer=nl.hbm) or "
                            "nl.shared_hbm")
        from nkisim.core.tensor import read

        return np.array(read(value), copy=True)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_numpy(v) for v in value)
    if value is None:
        return None
    # Only device tensors leave a kernel: a host value (e.g. a NumPy array built in kernel code) is not an output.
    raise TypeError(f"kernel returned a {type(value).__name__}; a kernel must return the HBM tensor(s) it wrote "
                    "(nl.ndarray(..., buffer=nl.hbm)), a tuple of them, or None")


def run_kernel(kernel, args=(), kwargs=None, *, mode: str = "full", target: str | None = None) -> KernelRun:
    """Run a kernel on NumPy inputs; returns its outputs and instruction trace."""
    fn = unwrap(kernel)
    name = getattr(fn, "__name__", "kernel")
    ctx = KernelContext(target, mode, name)
    ctx.kernel_code = getattr(fn, "__code__", None)
    kwargs = dict(kwargs or {})
    _STACK.append(ctx)
    blas = _single_thread_blas()
    old_err = np.seterr(all="ignore")  # NaN poison and fp16 overflow are data, not warnings
    # The trace holds ~10^5 small objects; cyclic GC passes over them would dominate the run time. Tiles die by
    # reference counting (capacity tracking relies on that), so the cycle collector is not needed meanwhile.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        names = _arg_names(fn, len(args))
        hbm_args = [_wrap_arg(ctx, a, n) for a, n in zip(args, names)]
        hbm_kwargs = {k: _wrap_arg(ctx, v, k) for k, v in kwargs.items()}
        ret = fn(*hbm_args, **hbm_kwargs)
        ctx.settle()
        _check_outputs_written(ctx, ret)
        ctx.trace.meta["outputs"] = [
            {"phys": t._a.phys, "shape": list(t.shape), "dtype": t.dtype.name, "bytes": t._a.base.nbytes}
            for t in (ret if isinstance(ret, (tuple, list)) else (ret,)) if isinstance(t, Tensor)]
        outputs = _to_numpy(ret) if ctx.full else None
    finally:
        if blas is not None:
            blas.restore_original_limits()
        if gc_was_enabled:
            gc.enable()
        np.seterr(**old_err)
        _STACK.pop()
        ctx.mem.closed = True
    return KernelRun(outputs, ctx.trace, ctx.target, ctx.mem.peak[B_SBUF], ctx.mem.peak[B_PSUM])


def _check_outputs_written(ctx: KernelContext, ret) -> None:
    """err_tensor_output_not_written_to: a returned HBM tensor the kernel created but no instruction wrote."""
    outs = [t for t in (ret if isinstance(ret, (tuple, list)) else (ret,))
            if isinstance(t, Tensor) and t._a.buf == B_HBM and not t._a.immutable]
    if not outs:
        return
    written = {d.region.phys for ins in ctx.trace.instrs for d in ins.dsts if d.region.buf == B_HBM}
    for t in outs:
        if t._a.phys not in written:
            fail("err_tensor_output_not_written_to", name=t._a.name)


def _single_thread_blas():
    """Kernels issue many small GEMMs (<= 128x128x512): BLAS threads only add contention, so use one."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: without it NumPy keeps its default threading
        return None
    return threadpool_limits(limits=1, user_api="blas")


def _arg_names(fn, n: int) -> list[str]:
    code = getattr(fn, "__code__", None)
    names = list(code.co_varnames[: code.co_argcount]) if code is not None else []
    names += [f"arg{i}" for i in range(len(names), n)]
    return names[:n]
