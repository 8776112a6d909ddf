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

from nkisim.core import blocks, config, dtypes, execute
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, Buf, Engine, Instr, Trace
from nkisim.core.memory import Allocation, MemoryTracker, make_storage
from nkisim.core.rules import NKICapacityWarning, NKISimulationWarning, applies, fail
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
        self.era = config.toolchain_era(self.target)  # selects era-dependent rules (core/rules.py)
        self.limits = config.limits(self.target)
        self.full = mode == "full"
        self.trace = Trace(self.target, name)
        self.mem = MemoryTracker(self.limits, self.target)
        self.mem.position = self.trace.instrs.__len__
        self.pending: weakref.ref | None = None  # provisional result allocation, charged at the next call
        self.last_instr: Instr | None = None
        self.last_result: weakref.ref | None = None
        self.last_values: np.ndarray | None = None
        self.unwritten = None  # (weakref to the last result tile, its values, mask): written lazily by settle
        self.last_mask: np.ndarray | None = None  # mask= of the last retargetable result (set by ops.finish)
        self.acc_spelling = None  # (matmul result ref, acc view, materialize): 2024 `acc + nl.matmul(..)`
        self.direct_alloc: bool | None = None
        self.sbuf_arena = None
        self._where: dict = {}
        self.loc: str = "?"
        self.site = None
        self.kernel_code = None  # code object of the top-level kernel function (shared_hbm scope rule)
        self.reduce_regs: dict = {}  # engine -> its 128 reduction registers (ops.reduce_registers)
        self.dyn: dict = {}  # id(view) -> (weakref, index tiles) of dynamically indexed views (tensor.dynamic_tiles)
        # SPMD launch grid: sizes per axis (() without a grid), this program's ids, and the shared_hbm tensors of
        # the first program, which later programs receive again (shared_hbm is one tensor for the whole grid)
        self.grid: tuple[int, ...] = ()
        self.program_ids: tuple[int, ...] = ()
        self.shared_hbm: list[Tensor] | None = None
        self.shared_first: list[Tensor] = []
        self.shared_pos = 0
        # symbolic loops (nl.affine_range / nl.sequential_range) being run: [instance id, iteration] each, and the
        # direct placements their first iteration made (see traced_once)
        self.sym_loops: list[list[int]] = []
        self.traced: dict = {}
        self.traced_seen: dict = {}
        # neuronx-cc's middle end runs (no skip_middle_end_transformations) and, per statement, the transpose the
        # compiler inserted for nl.matmul's stationary at its previous execution (see hoisted_transpose)
        self.middle_end = True
        self.inserted_transposes: dict = {}

    # ---- bookkeeping shared by every front-end call -----------------------------------------------------
    def settle(self) -> None:
        """Start of every API call: charge the previous call's result tile if the kernel kept it, and locate
        the kernel statement making this call (for traces, allocation sites and error messages)."""
        if self.acc_spelling is not None:
            materialize = self.acc_spelling[2]
            self.acc_spelling = None
            materialize()
        if self.unwritten is not None:
            self._flush()
        ref = self.pending
        if ref is not None:
            self.pending = None
            alloc = ref()
            if alloc is not None and self.mem.charge(alloc):
                self.spill(alloc)
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

    def spill(self, alloc: Allocation) -> None:
        """Cost the compiler's spill of a PSUM tile that got no bank (MemoryTracker.charge): one VectorE
        PSUM -> SBUF copy of the whole tile, traced with ``psum_spill`` so the profile summary warns about it.
        The SBUF side shares the tile's storage: nothing is allocated or charged for it."""
        src = Tensor(alloc, alloc.base, 0, off=0)  # physical layout: partition axis first
        dst = Tensor(Allocation(B_SBUF, alloc.base, self.mem.new_phys(), None, "psum_spill", alloc.bytes_pp, None),
                     alloc.base, 0, off=0)
        self.emit("tensor_copy", Engine.VECTOR, (src,), (dst,), {"psum_spill": True})

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


_LOOP_IDS = [0]


class SymbolicRange:
    """``nl.affine_range`` / ``nl.sequential_range``: NKI traces the loop body once with a symbolic index, so Python
    side effects in the body (``cur_addr += size`` next to ``ncc.sbuf.mod_alloc(base_addr=cur_addr)`` in AWS's
    allocated kernels) happen once.  nkisim runs every iteration; it records which iteration is running so that
    direct placements can follow the traced-once rule (:func:`traced_once`)."""

    __slots__ = ("r",)

    def __init__(self, r: range) -> None:
        self.r = r

    def __len__(self) -> int:
        return len(self.r)

    def __getitem__(self, i):
        return self.r[i]

    def __iter__(self):
        ctx = active()
        if ctx is None:
            return iter(self.r)
        return _run_loop(ctx, self.r)


def _run_loop(ctx: KernelContext, r: range):
    _LOOP_IDS[0] += 1
    entry = [_LOOP_IDS[0], 0]
    loops = ctx.sym_loops
    loops.append(entry)
    try:
        for i in r:
            yield i
            entry[1] += 1
    finally:
        if loops and loops[-1] is entry:
            loops.pop()
        elif entry in loops:
            loops.remove(entry)


def traced_once(ctx: KernelContext, value):
    """The value a direct placement made at this statement in the first iteration of the enclosing symbolic loops
    (NKI traces the body once); the n-th placement of a Python-level repetition within one iteration maps to the
    n-th of the first iteration.  Outside symbolic loops the value is returned as given."""
    loops = ctx.sym_loops
    if not loops:
        return value
    key = (loops[0][0], ctx.site)
    its = tuple(e[1] for e in loops)
    first = ctx.traced.setdefault(key, [])
    n = ctx.traced_seen.get((key, its), 0)
    ctx.traced_seen[(key, its)] = n + 1
    if any(its):
        return first[n] if n < len(first) else value
    first.append(value)
    return value


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
        if fill is not None and not provisional and applies("err_hbm_tensor_with_init_value_not_supported",
                                                            ctx.era):
            fail("err_hbm_tensor_with_init_value_not_supported")
        if buffer.name == "shared_hbm" and site is not None and ctx.kernel_code is not None \
                and site[0] is not ctx.kernel_code:
            fail("err_shared_hbm_must_in_kernel_level")
        if buffer.name == "shared_hbm" and ctx.shared_hbm is not None:
            return _shared_again(ctx, dims, dt, name)
        base, view = make_storage(dims, 0, dt, fill, not ctx.full)
        alloc = Allocation(B_HBM, base, ctx.mem.new_phys(), None, name or "hbm", 0, None)
        t = Tensor(alloc, view, 0, off=0)
        if buffer.name == "shared_hbm" and ctx.grid:
            ctx.shared_first.append(t)
        return t
    if not dims:
        raise ValueError("on-chip tensors need at least one dimension (the partition dimension)")
    parts = dims[pdim]
    if parts > ctx.limits.pmax:
        fail("err_num_partition_exceed_arch_limit", n=parts, limit=ctx.limits.pmax)
    bytes_pp = dt.itemsize
    for i, d in enumerate(dims):
        if i != pdim:
            bytes_pp *= d
    if kind == B_PSUM and not provisional and ctx.era == "2024":
        per_tile = bytes_pp
        for d in dims[:pdim]:
            per_tile //= max(d, 1)  # block dimensions hold separate tiles
        bank = ctx.limits.psum_bank_bytes
        if per_tile > bank and applies("nkisim_psum_tile_fmax", ctx.era):
            fail("nkisim_psum_tile_fmax", name=name or "tile", shape=list(dims), n=per_tile // dt.itemsize,
                 nbytes=per_tile, limit=bank // 4, bank=bank)
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
    nblocks = 1
    for d in dims[:pdim]:
        nblocks *= d
    if nblocks > 1 and kind == B_SBUF and not provisional:
        # block dimensions are logical tiles, not physical ones (nki.compiler.sbuf.alloc; NKI Block Dimension
        # Migration Guide): charge one block now, check per-block liveness at the end of the run (core.blocks)
        block_pp = bytes_pp // nblocks
        alloc = Allocation(kind, base, mem.phys_for(site, kind, block_pp), site, name, bytes_pp, mem)
        alloc.block_bytes = block_pp
        mem.track_blocks(alloc, nblocks)
        mem.charge(alloc)
        return Tensor(alloc, view, pdim, off=0)
    alloc = Allocation(kind, base, mem.phys_for(site, kind, bytes_pp, provisional), site, name, bytes_pp, mem)
    if nblocks > 1:
        alloc.block_bytes = bytes_pp // nblocks  # PSUM: each block is a tile of its own, within one bank
    if not provisional and mem.charge(alloc):
        ctx.spill(alloc)
    if kind == B_PSUM and ctx.full and not provisional:
        # per-element "written" flags of the matmul accumulation groups; provisional PSUM results (acc None) were
        # written by the instruction that produced them, i.e. all flags set
        alloc.acc = np.zeros(base.shape, dtype=bool)
    return Tensor(alloc, view, pdim, off=0)


def _shared_again(ctx: KernelContext, dims, dt, name: str) -> Tensor:
    """The n-th shared_hbm tensor of a later SPMD program is the n-th of the first program (visible to all)."""
    i = ctx.shared_pos
    ctx.shared_pos += 1
    if i >= len(ctx.shared_hbm):
        raise ValueError(f"SPMD program {ctx.program_ids} creates more shared_hbm tensors than program "
                         f"{(0,) * len(ctx.grid)}: every program of a launch grid must create the same ones")
    t = ctx.shared_hbm[i]
    if tuple(t.shape) != tuple(dims) or t.dtype != dt:
        raise ValueError(f"SPMD program {ctx.program_ids} creates shared_hbm tensor '{name or t._a.name}' "
                         f"{list(dims)} {dt.name}, but program {(0,) * len(ctx.grid)} created it as "
                         f"{list(t.shape)} {t.dtype.name}")
    return t


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
    if getattr(value, "__nkisim_placeholder__", False):  # nt.tensor[[shape], dtype]: shape only (nki.benchmark)
        if ctx.full:
            raise TypeError(f"argument '{name}' is {value!r}, a shape-only placeholder: it has no values, so it can "
                            "only be passed to nki.benchmark (timing); pass a NumPy array to run the kernel")
        dt = dtypes.to_dtype(value.dtype)
        alloc = Allocation(B_HBM, np.empty(value.shape, dtype=dt), ctx.mem.new_phys(), None, name, 0, None)
        alloc.immutable = True
        return Tensor(alloc, alloc.base, 0, off=0)
    if isinstance(value, np.ndarray) or (hasattr(value, "__array__") and hasattr(value, "dtype")
                                        and not isinstance(value, (Tensor, np.generic))):
        arr = np.asarray(value)
        dt = dtypes.to_dtype(arr.dtype)
        base = np.array(arr, dtype=dt, copy=True, order="C") if ctx.full else np.empty(arr.shape, dtype=dt)
        alloc = Allocation(B_HBM, base, ctx.mem.new_phys(), None, name, 0, None)
        alloc.immutable = True
        return Tensor(alloc, base, 0, off=0)
    return value


def host_tensor(ctx: KernelContext, value, name: str) -> Tensor:
    """A read-only HBM tensor holding host data (kernel arguments, nl.shared_constant)."""
    return _wrap_arg(ctx, value, name)


def _to_numpy(value, simulate: bool = False):
    if isinstance(value, Tensor):
        if value._a.buf != B_HBM and simulate:
            import warnings

            warnings.warn(NKISimulationWarning(
                f"kernel returned on-chip tensor '{value._a.name}' ({value.buffer}): AWS's simulator returns its "
                "values, but top-level kernel outputs must be HBM tensors, so compiling it (nki.baremetal, "
                "the grader, Trainium) fails"), stacklevel=4)
        elif value._a.buf != B_HBM:
            raise TypeError(f"kernel returned on-chip tensor '{value._a.name}' ({value.buffer}); top-level kernel "
                            "outputs must be HBM tensors created with nl.ndarray(..., buffer=nl.hbm) or "
                            "nl.shared_hbm")
        from nkisim.core.tensor import read

        return np.array(read(value), copy=True)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_numpy(v, simulate) for v in value)
    if value is None:
        return None
    # Only device tensors leave a kernel: a host value (e.g. a NumPy array built in kernel code) is not an output.
    raise TypeError(f"kernel returned a {type(value).__name__}; a kernel must return the HBM tensor(s) it wrote "
                    "(nl.ndarray(..., buffer=nl.hbm)), a tuple of them, or None")


def launch_grid(kernel) -> tuple[tuple[int, ...], list[int] | None]:
    """SPMD grid of a launcher (``kernel[2, 3]`` sets ``nki_grid`` on the wrapper): sizes and, when the grid maps
    programs to several NeuronCores (``nl.nc``), the core of each program in row-major order."""
    seen = 0
    while kernel is not None and seen < 8:
        grid = getattr(kernel, "nki_grid", None)
        if grid is not None:
            return tuple(grid), getattr(kernel, "nki_cores", None)
        kernel = getattr(kernel, "func", None)
        seen += 1
    return (), None


def run_kernel(kernel, args=(), kwargs=None, *, mode: str = "full", target: str | None = None,
               simulate: bool = False) -> KernelRun:
    """Run a kernel on NumPy inputs; returns its outputs and instruction trace.

    A kernel launched on an SPMD grid (``kernel[b, h]``) runs once per program, in row-major order, on the same
    inputs; ``trace.meta['spmd']`` records where each program's instructions start and which core runs it.
    ``simulate`` is ``nki.simulate_kernel`` / ``nki.jit(mode='simulation')``: capacity limits the compiler enforces
    only warn (:class:`~nkisim.core.rules.NKICapacityWarning`), and so does returning an on-chip tile
    (:class:`~nkisim.core.rules.NKISimulationWarning`).
    """
    fn = unwrap(kernel)
    grid, cores = launch_grid(kernel)
    name = getattr(fn, "__name__", "kernel")
    if target is None:
        target = declared_target(kernel)
    ctx = KernelContext(target, mode, name)
    ctx.mem.simulate = simulate
    ctx.middle_end = not has_directive(kernel, "skip_middle_end_transformations")
    ctx.kernel_code = ctx.mem.stop_code = getattr(fn, "__code__", None)
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
        _apply_annotations(fn, names, hbm_args, hbm_kwargs)
        writes_args = _writes_args(kernel)
        if writes_args:
            for t in (*hbm_args, *hbm_kwargs.values()):
                if isinstance(t, Tensor) and t._a.buf == B_HBM:
                    t._a.immutable = False
        if grid:
            ret = _run_grid(ctx, fn, grid, cores, hbm_args, hbm_kwargs)
        else:
            ret = fn(*hbm_args, **hbm_kwargs)
        ctx.settle()
        blocks.finish(ctx.mem, ctx.trace)
        _check_outputs_written(ctx, ret)
        ctx.trace.meta["outputs"] = [
            {"phys": t._a.phys, "shape": list(t.shape), "dtype": t.dtype.name, "bytes": t._a.base.nbytes}
            for t in (ret if isinstance(ret, (tuple, list)) else (ret,)) if isinstance(t, Tensor)]
        outputs = _to_numpy(ret, simulate) if ctx.full else None
        if writes_args and ctx.full:
            _copy_back(args, hbm_args, kwargs, hbm_kwargs)
        if ctx.mem.overflows:
            _warn_capacity(name, ctx.mem.overflows)
    finally:
        if blas is not None:
            blas.restore_original_limits()
        if gc_was_enabled:
            gc.enable()
        np.seterr(**old_err)
        _STACK.pop()
        ctx.mem.closed = True
    return KernelRun(outputs, ctx.trace, ctx.target, ctx.mem.peak[B_SBUF], ctx.mem.peak[B_PSUM])


def _warn_capacity(name: str, overflows: list[str]) -> None:
    """One warning per simulated run that the compiler would reject for capacity (first problem, and a count)."""
    import warnings

    more = f" ({len(overflows) - 1} more allocation(s) over the limit)" if len(overflows) > 1 else ""
    warnings.warn(NKICapacityWarning(
        f"kernel '{name}': {overflows[0]}{more}. nki.simulate_kernel does not check capacity, as AWS's simulator "
        "does not; compiling it (nki.baremetal, nki.benchmark, the grader, Trainium) fails"), stacklevel=3)


def has_directive(kernel, name: str) -> bool:
    """Whether a compiler directive (``nki.compiler.skip_middle_end_transformations``, ...) wraps the kernel."""
    seen = 0
    while kernel is not None and seen < 8:
        if getattr(kernel, "directive", None) == name:
            return True
        kernel = getattr(kernel, "func", None)
        seen += 1
    return False


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
    reg = src.operand().region
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
    op = t.operand()
    return (id(t._a), op.region, tuple(t.shape), t._v.strides)


def declared_target(kernel) -> str | None:
    """The ``platform_target`` a kernel was decorated with (``@nki.jit(platform_target='trn2')``,
    ``nki.trace(platform_target=...)``, as AWS's doc tests and kernels declare trn2-only code); None when it names
    none, so NEURON_PLATFORM_TARGET_OVERRIDE / the default decides.  An explicit ``run_kernel(target=...)`` wins."""
    seen = 0
    while kernel is not None and seen < 8:
        opts = getattr(kernel, "options", None)
        if isinstance(opts, dict) and opts.get("platform_target"):
            return str(opts["platform_target"])
        kernel = getattr(kernel, "func", None)
        seen += 1
    return None


def _writes_args(kernel) -> bool:
    """Whether the kernel follows the output-argument convention (``nki.trace``): it stores its results into
    arguments the caller passed (``simulate_kernel(kernel, in_tensor, out_tensor)``)."""
    seen = 0
    while kernel is not None and seen < 8:
        if getattr(kernel, "nki_writes_args", False):
            return True
        kernel = getattr(kernel, "func", None)
        seen += 1
    return False


def _copy_back(args, hbm_args, kwargs, hbm_kwargs) -> None:
    """Write the kernel's stores into the caller's NumPy arguments (output-argument convention)."""
    pairs = list(zip(args, hbm_args)) + [(kwargs[k], hbm_kwargs[k]) for k in kwargs]
    for host, t in pairs:
        if isinstance(host, np.ndarray) and isinstance(t, Tensor) and host.flags.writeable:
            np.copyto(host, t._a.base.reshape(host.shape).astype(host.dtype, copy=False), casting="unsafe")


# physical NeuronCores per chip (shared/trainium-facts.md "cores per chip": trn1 2, trn2 8)
_PHYSICAL_CORES = {"trn1": 2, "trn2": 8}


def _run_grid(ctx: KernelContext, fn, grid, cores, args, kwargs):
    """Run every program of the launch grid in row-major order; returns the last program's return value."""
    import itertools

    if cores:
        have = _PHYSICAL_CORES.get(ctx.target, 1)
        if max(cores) >= have:
            raise ValueError(f"the launch grid spreads programs over {max(cores) + 1} NeuronCores with nl.nc, but a "
                             f"{ctx.target} chip has {have}; use nl.spmd_dim(nl.nc(n), m) to give each core several "
                             "programs")
    ctx.grid = grid
    ctx.shared_first = []
    starts: list[int] = []
    ret = None
    for k, ids in enumerate(itertools.product(*(range(n) for n in grid))):
        ctx.settle()
        ctx.program_ids = ids
        if k == 1:
            ctx.shared_hbm = ctx.shared_first
        ctx.shared_pos = 0
        starts.append(len(ctx.trace.instrs))
        ret = fn(*args, **kwargs)
    ctx.trace.meta["spmd"] = {"grid": list(grid), "program_start": starts,
                              "program_core": list(cores) if cores else [0] * len(starts)}
    return ret


def _apply_annotations(fn, names, args, kwargs) -> None:
    """Kernel parameters annotated ``nt.tensor[shape]`` must match (err_annotation_shape_mismatch); parameters
    annotated ``nt.mutable_tensor`` / ``nt.tensor[nt.mutable]`` may be written in place."""
    notes = getattr(fn, "__annotations__", None)
    if not notes:
        return
    bound = dict(zip(names, args))
    bound.update(kwargs)
    for pname, note in notes.items():
        t = bound.get(pname)
        if not isinstance(t, Tensor):
            continue
        if isinstance(note, str):  # postponed (from __future__ import annotations): evaluate it as Python would
            try:
                note = eval(note, getattr(fn, "__globals__", {}))  # noqa: S307 - the kernel's own code
            except Exception:
                if "mutable" in note:
                    t._a.immutable = False
                continue
        shape = getattr(note, "nki_shape", None)
        if shape is not None and tuple(shape) != tuple(t.shape):
            fail("err_annotation_shape_mismatch", name=pname, got=list(t.shape), expected=list(shape))
        if getattr(note, "nki_mutable", False):
            t._a.immutable = False


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
