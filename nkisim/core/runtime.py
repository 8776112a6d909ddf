"""``run_kernel``: one kernel run from NumPy inputs to NumPy outputs and the instruction trace.

It wraps the host arrays as read-only HBM tensors (of the kernel's front end's tensor class), runs the kernel
function (once per program of an SPMD launch grid), checks what the kernel returns and hands back the trace.  The
kernel's calls go through :mod:`nkisim.core.context` (the running kernel), :mod:`nkisim.core.buffers` (tensor
creation) and the instruction builders of :mod:`nkisim.core.ops`.
"""

from __future__ import annotations

import ast
import gc
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nkisim import frontends
from nkisim.core import aps, blocks
from nkisim.core.access import OPERANDS, allocation, is_gather, own_copy, read
from nkisim.core.blas import one_blas_thread
from nkisim.core.buffers import wrap_host
from nkisim.core.context import KernelContext, pop, push
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, Trace
from nkisim.core.lockstep import Lockstep
from nkisim.core.ops.registers import ValuesNeeded, check_closed
from nkisim.core.rules import NKICapacityWarning, NKISimulationWarning, applies, fail, message
from nkisim.core.sharing import Member, ShareGroup
from nkisim.core.tensor import Tensor


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


def _to_numpy(value, simulate: bool = False):
    if isinstance(value, Tensor):
        if value.kind != B_HBM and simulate:
            import warnings

            warnings.warn(NKISimulationWarning(
                f"kernel returned on-chip tensor '{value.name}' ({value.buffer}): AWS's simulator returns its "
                "values, but top-level kernel outputs must be HBM tensors, so compiling it (nki.baremetal, "
                "the grader, Trainium) fails"), stacklevel=4)
        elif value.kind != B_HBM:
            raise TypeError(f"kernel returned on-chip tensor '{value.name}' ({value.buffer}); top-level kernel "
                            "outputs must be HBM tensors created with nl.ndarray(..., buffer=nl.hbm) or "
                            "nl.shared_hbm")
        values = read(value)
        if values is allocation(value).base and values.flags.writeable:
            # the whole storage of a tensor of this run: nothing writes it after the run, so it is handed over as
            # is (a 224x224 batch-4 output is 200 MB; copying it cost 2% of the grader's largest case)
            return values
        return np.array(values, copy=True)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_numpy(v, simulate) for v in value)
    if value is None:
        return None
    # Only device tensors leave a kernel: a host value (e.g. a NumPy array built in kernel code) is not an output.
    raise TypeError(f"kernel returned a {type(value).__name__}; a kernel must return the HBM tensor(s) it wrote "
                    "(nl.ndarray(..., buffer=nl.hbm)), a tuple of them, or None")


def lockstep_launch(kernel) -> bool:
    """Whether a launcher runs its programs in lockstep on the cores of a Logical NeuronCore (``kernel[2]`` of the
    current API sets ``nki_lockstep``): :func:`_run_lockstep`."""
    seen = 0
    while kernel is not None and seen < 8:
        if getattr(kernel, "nki_grid", None) is not None:
            return bool(getattr(kernel, "nki_lockstep", False))
        kernel = getattr(kernel, "func", None)
        seen += 1
    return False


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
               simulate: bool = False, frontend: frontends.FrontEnd | None = None, stream=None,
               graded: bool = False, hbm_dir: str | None = None) -> KernelRun:
    """Run a kernel on NumPy inputs; returns its outputs and instruction trace.

    A timing run of a kernel whose control flow depends on data (a dynamic loop over a register loaded from
    memory: ``nl.while_loop``, ``nl.fori_loop``) computes the values after all: it runs again in full mode, and its
    outputs are still None.  A run-time error of the device program (``core.ops.registers.fault``) is raised once
    the kernel's Python has returned.

    A kernel launched on an SPMD grid (``kernel[b, h]``) runs once per program, in row-major order, on the same
    inputs; ``trace.meta['spmd']`` records where each program's instructions start and which core runs it.
    ``simulate`` is ``nki.simulate_kernel`` / ``nki.jit(mode='simulation')``: capacity limits the compiler enforces
    only warn (:class:`~nkisim.core.rules.NKICapacityWarning`), and so does returning an on-chip tile
    (:class:`~nkisim.core.rules.NKISimulationWarning`).

    ``stream`` (a ``nkisim.stream.Recorder``) writes the program the kernel's Python makes down as plain data, for
    another process to execute (the grader's parent, docs/grading-security.md).

    ``graded`` is set by the grader's sandboxed child alone (grader/child.py): the run serves a score, so what a
    kernel could read from the grading machine is refused (``nl.shared_constant`` of a file path, C7 in
    docs/grading-security.md).  It is the caller's argument, kept in the run's context, which kernel code cannot
    reach (private names); a kernel cannot turn it off.

    ``hbm_dir`` (full mode): the kernel's HBM tensors of a NumPy dtype and at least 1 MiB are held in ``.npy`` files
    of that directory, mapped shared, instead of in memory; an output handed back is then the data of its file
    (``core.buffers.hbm_file``), which a caller that writes it to a file can rename instead of copying
    (grader/child.py's replays).  Nothing a kernel computes or can observe changes.
    """
    if mode == "timing":
        try:
            return _run_kernel(kernel, args, kwargs, mode, target, simulate, frontend, stream, graded)
        except ValuesNeeded:
            run = _run_kernel(kernel, args, kwargs, "full", target, simulate, frontend, stream, graded, hbm_dir)
            run.outputs = None
            return run
    return _run_kernel(kernel, args, kwargs, mode, target, simulate, frontend, stream, graded, hbm_dir)


# The lockstep group member (core.sharing.Member) whose function runs in this thread, set by run_shared: the direct
# runs it makes share products as a replayed member's do (nkisim.stream's _Replayer.share).
_MEMBER = threading.local()


def run_shared(fns: list[Callable[[], Any]]) -> tuple[list, list, dict]:
    """Call each of ``fns`` in a thread of its own, in lockstep (:class:`~nkisim.core.sharing.ShareGroup`): the
    full-mode :func:`run_kernel` calls a function makes (not on a launch grid) reuse the products of bit-identical
    operands that the functions before it computed at the same matmul.  Returns each function's return value,
    the exception it raised (None when it returned) and figures (``hits``/``misses``: reused and computed products,
    ``cpu_seconds`` per function, ``stopped_sharing``: whether the group stopped sharing as not paying).

    This is :func:`nkisim.stream.replay_group` for kernels run directly from their Python: Part 2's harness runs
    its three batch-4 224x224 correctness cases (the same X and W) so.  Each run's outputs, trace and errors are the
    ones it makes alone (core/sharing.py says why).  The BLAS thread count and the cycle collector are set once for
    the whole group (each run would restore them at its end, under the feet of the runs still going)."""
    group = ShareGroup(len(fns))

    def member(k: int, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            _MEMBER.member = Member(group, k)
            try:
                return fn()
            finally:
                _MEMBER.member = None

        return run

    blas = _single_thread_blas()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        results, errors = group.run([member(k, fn) for k, fn in enumerate(fns)])
    finally:
        blas.release()
        if gc_was_enabled:
            _freeze()
            gc.enable()
    return list(results), list(errors), {"hits": group.hits, "misses": group.misses,
                                         "cpu_seconds": list(group.cpu_seconds), "stopped_sharing": not group.sharing}


def _run_kernel(kernel, args, kwargs, mode: str, target: str | None, simulate: bool,
                frontend: frontends.FrontEnd | None, stream=None, graded: bool = False,
                hbm_dir: str | None = None) -> KernelRun:
    fn = unwrap(kernel)
    grid, cores = launch_grid(kernel)
    lockstep = bool(grid) and lockstep_launch(kernel)
    name = getattr(fn, "__name__", "kernel")
    if target is None:
        target = declared_target(kernel)
    if frontend is None:
        frontend = frontend_of(kernel)
    ctx = KernelContext(target, mode, name, frontend)
    if not grid:  # a member of run_shared's group (grid launches never hand over, as in stream.replay_group)
        ctx.share = getattr(_MEMBER, "member", None)
    ctx.mem.simulate = simulate
    ctx.graded = bool(graded)
    ctx.hbm_dir = hbm_dir
    ctx.middle_end = not has_directive(kernel, "skip_middle_end_transformations")
    ctx.kernel_code = ctx.mem.stop_code = getattr(fn, "__code__", None)
    kwargs = dict(kwargs or {})
    if applies("nkisim_kernel_signature", ctx.era):
        _check_signature(fn, name, args, kwargs)
    push(ctx)
    blas = _single_thread_blas()
    old_err = np.seterr(all="ignore")  # NaN poison and fp16 overflow are data, not warnings
    # The trace holds ~10^5 small objects; cyclic GC passes over them would dominate the run time. Tiles die by
    # reference counting (capacity tracking relies on that), so the cycle collector is not needed meanwhile.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    _thaw()
    try:
        names = _arg_names(fn, len(args))
        hbm_args = [wrap_host(ctx, a, n, borrow=True) for a, n in zip(args, names)]
        hbm_kwargs = {k: wrap_host(ctx, v, k, borrow=True) for k, v in kwargs.items()}
        _apply_annotations(fn, names, hbm_args, hbm_kwargs)
        writes_args = _writes_args(kernel)
        if writes_args:
            for t in (*hbm_args, *hbm_kwargs.values()):
                if isinstance(t, Tensor) and t.kind == B_HBM:
                    allocation(t).immutable = False
        if stream is not None:
            stream.begin(ctx, kernel, names, hbm_args, hbm_kwargs)
        for t in (*hbm_args, *hbm_kwargs.values()):
            if isinstance(t, Tensor) and t.kind == B_HBM and not allocation(t).immutable:
                own_copy(t)  # an argument the kernel may write: not the caller's array (wrap_host's borrow)
        try:
            if lockstep:
                ret = _run_lockstep(ctx, fn, grid, hbm_args, hbm_kwargs)
            elif grid:
                ret = _run_grid(ctx, fn, grid, cores, hbm_args, hbm_kwargs)
            else:
                ret = fn(*hbm_args, **hbm_kwargs)
            if stream is not None:
                stream.end(ctx, ret)
        except BaseException:
            # the device program failed first: its error, not what followed in Python (but a dynamic_range body the
            # exception left is a consequence: the exception is the error, core.ops.registers.DynamicRange)
            if ctx.fault is not None and ctx.fault is not ctx.open_body and not _recorded_whole(ctx, stream):
                raise ctx.fault from None
            raise
        if not lockstep:
            check_closed(ctx)
            if ctx.fault is not None:
                if _recorded_whole(ctx, stream):
                    return KernelRun(None, ctx.trace, ctx.target, ctx.mem.peak[B_SBUF], ctx.mem.peak[B_PSUM])
                # a run-time error of the device program (core.ops.registers.fault): raised only now, once the
                # kernel's Python has returned, so kernel code could not catch it to learn a bit about the data
                raise ctx.fault
            ctx.settle()
            blocks.finish(ctx.mem, ctx.trace)
        _check_outputs_written(ctx, ret)
        _check_output_views(ret)
        _check_output_buffers(ctx, ret, simulate)
        ctx.trace.meta["outputs"] = [
            {"phys": allocation(t).phys, "shape": list(t.shape), "dtype": t.dtype.name,
             "bytes": allocation(t).base.nbytes}
            for t in (ret if isinstance(ret, (tuple, list)) else (ret,)) if isinstance(t, Tensor)]
        outputs = _to_numpy(ret, simulate) if ctx.full else None
        if writes_args and ctx.full:
            _copy_back(args, hbm_args, kwargs, hbm_kwargs)
        if ctx.mem.overflows:
            _warn_capacity(name, ctx.mem.overflows)
        if "partition_rule" in ctx.trace.meta:
            _warn_partition_rule(name, ctx.trace.meta["partition_rule"])
    finally:
        blas.release()
        OPERANDS.clear()
        if gc_was_enabled:
            _freeze()
            gc.enable()
        np.seterr(**old_err)
        pop()
        ctx.mem.closed = True
    return KernelRun(outputs, ctx.trace, ctx.target, ctx.mem.peak[B_SBUF], ctx.mem.peak[B_PSUM])


def _check_signature(fn, name: str, args, kwargs) -> None:
    """The NKI 0.3+ compiler's argument rules: no ``list`` arguments (tuples are hashable, so compilations can be
    cached on them) and no keyword-only separator in the kernel's signature (NKI migration guide, 0.2 -> 0.3)."""
    for i, v in enumerate(args):
        if isinstance(v, list):
            fail("nkisim_kernel_signature", kernel=name, detail=f"argument {i} is a list; the compiler does not "
                 "support list as a kernel argument type: pass a tuple")
    for k, v in kwargs.items():
        if isinstance(v, list):
            fail("nkisim_kernel_signature", kernel=name, detail=f"argument '{k}' is a list; the compiler does not "
                 "support list as a kernel argument type: pass a tuple")
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_kwonlyargcount:
        fail("nkisim_kernel_signature", kernel=name, detail="the compiler does not support the * separator in kernel "
             "signatures: move the parameters with defaults to the end of the signature instead")


# Whether the objects in the collector's permanent generation are the ones _freeze put there (None: nothing frozen).
_FROZEN: list[bool] = [False]


def _freeze() -> None:
    """Put every object the collector tracks -- above all the run's trace, about six per instruction (Instr,
    Operand, Region, operand tuples) -- into its permanent generation until the next run (``_thaw``).

    Re-enabling the collector after a run otherwise starts a young-generation pass over the whole trace at the next
    allocation, then a middle and a full one: three traversals of ~600,000 objects for a 100,000-instruction run,
    0.8 of the 5.4 CPU s of ``part1/run_benchmark.py --kernel tiled`` (issue 35).  The trace has no reference
    cycles: it dies by reference counting whether frozen or not; freezing only defers the collection of cyclic
    garbage (of the caller's too) to the first full pass after the next run.  Left alone when someone else froze
    objects (``gc.freeze`` is theirs then: a forking server's)."""
    if gc.get_freeze_count() and not _FROZEN[0]:
        return
    gc.freeze()
    _FROZEN[0] = True


def _thaw() -> None:
    """Give what the last run froze back to the collector (its oldest generation) before a new run."""
    if _FROZEN[0]:
        _FROZEN[0] = False
        gc.unfreeze()


def _warn_capacity(name: str, overflows: list[str]) -> None:
    """One warning per simulated run that the compiler would reject for capacity (first problem, and a count)."""
    import warnings

    more = f" ({len(overflows) - 1} more allocation(s) over the limit)" if len(overflows) > 1 else ""
    warnings.warn(NKICapacityWarning(
        f"kernel '{name}': {overflows[0]}{more}. nki.simulate_kernel does not check capacity, as AWS's simulator "
        "does not; compiling it (nki.baremetal, nki.benchmark, the grader, Trainium) fails"), stacklevel=3)


def _warn_partition_rule(name: str, rec: dict) -> None:
    """One warning per simulated run that breaks the start-partition rule (core.partitions): the first violation
    and a count."""
    import warnings

    more = f" ({rec['count'] - 1} more instruction(s) break it)" if rec["count"] > 1 else ""
    warnings.warn(NKISimulationWarning(
        f"kernel '{name}', {rec['where']}: {rec['first']}{more}. AWS's simulator runs it; compiling it (nki.baremetal, "
        "nki.benchmark, the grader, Trainium) fails"), stacklevel=3)


def has_directive(kernel, name: str) -> bool:
    """Whether a compiler directive (``nki.compiler.skip_middle_end_transformations``, ...) wraps the kernel."""
    seen = 0
    while kernel is not None and seen < 8:
        if getattr(kernel, "directive", None) == name:
            return True
        kernel = getattr(kernel, "func", None)
        seen += 1
    return False


def frontend_of(kernel) -> frontends.FrontEnd:
    """The front end a kernel is written for: the one whose launcher wraps it (``nki_frontend``, the registry key),
    else the one whose namespace the kernel function's module imported (a plain function handed to ``run_kernel``),
    else legacy.  Launchers carry the key, not the :class:`~nkisim.frontends.FrontEnd` (whose ``load`` imports
    modules): kernel code can read a launcher's attributes, and only registered front ends are ever used."""
    seen = 0
    obj = kernel
    while obj is not None and seen < 8:
        fe = getattr(obj, "nki_frontend", None)
        if isinstance(fe, str) and fe in frontends.BY_KEY:
            return frontends.BY_KEY[fe]
        obj = getattr(obj, "func", None)
        seen += 1
    found = {frontends.of_module(getattr(v, "__name__", ""))
             for v in getattr(unwrap(kernel), "__globals__", {}).values() if isinstance(v, type(sys))}
    found.discard(None)
    if len(found) == 1:
        return found.pop()
    return frontends.LEGACY


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


def _recorded_whole(ctx: KernelContext, stream) -> bool:
    """A timing run writing its program down (``nkisim.stream``: the grader's specializing child) whose dynamic loops
    needed register values to execute (``ValuesNeeded``): the program is recorded whole all the same (a loop's body
    is recorded once, before it executes; the calls after the fault are recorded and run dry), and the process that
    replays it computes the values and makes every check.  So the recording is not rerun with values, as a timing
    run otherwise is (``run_kernel``): the process running the kernel's Python never holds device data, which the
    screen-only closures rely on (docs/grading-security.md L2), and the recording run's own post-checks (outputs
    written, returned views) are the replay's.  An error the kernel's Python raises after the fault is its error."""
    return stream is not None and not ctx.full and isinstance(ctx.fault, ValuesNeeded)


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
            np.copyto(host, allocation(t).base.reshape(host.shape).astype(host.dtype, copy=False), casting="unsafe")


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
        if ctx.stream is not None:
            ctx.stream.event(["program", list(ids)])
        if k == 1:
            ctx.shared_hbm = ctx.shared_first
        ctx.shared_pos = 0
        starts.append(len(ctx.trace.instrs))
        ret = fn(*args, **kwargs)
    ctx.trace.meta["spmd"] = {"grid": list(grid), "program_start": starts,
                              "program_core": list(cores) if cores else [0] * len(starts)}
    return ret


def _run_lockstep(ctx: KernelContext, fn, grid, args, kwargs):
    """An LNC=2 launch: one program per physical NeuronCore, each with its own context (SBUF, PSUM, registers,
    trace), run in lockstep so that ``nisa.sendrecv`` / ``nisa.core_barrier`` meet (core.lockstep).  Afterwards the
    cores' traces are concatenated into ``ctx``'s (core 0's), core 1's sequence numbers and explicit edges shifted,
    and ``trace.meta['spmd']`` says where core 1 starts and how many synchronisations the cores made.  Returns the
    last core's return value, as a grid run returns its last program's."""
    cores = [ctx] + [_core_context(ctx) for _ in range(1, grid[0])]
    shared: list = []
    for k, c in enumerate(cores):
        c.grid = tuple(grid)
        c.program_ids = (k,)
        c.shared_hbm = c.shared_first = shared  # one list: whichever core creates the n-th shared tensor first
        c.shared_pos = 0
    launch = Lockstep(cores)
    try:
        try:
            results = launch.run(fn, args, kwargs)
        except BaseException:
            fault = _first_fault(cores, launch)
            if fault is not None:  # a core's device program failed first: its error
                raise fault from None
            raise
        for c in cores:
            check_closed(c)
        fault = _first_fault(cores, launch)
        if fault is not None:
            raise fault
        for c in cores:
            c.settle()
            blocks.finish(c.mem, c.trace)
    finally:
        for c in cores[1:]:
            c.mem.closed = True
    starts = [0]
    trace = ctx.trace
    for c in cores[1:]:
        starts.append(len(trace.instrs))
        _append_trace(trace, c.trace)
        for buf in (B_SBUF, B_PSUM):
            ctx.mem.peak[buf] = max(ctx.mem.peak[buf], c.mem.peak[buf])
        ctx.mem.overflows.extend(c.mem.overflows)
    trace.meta["spmd"] = {"grid": list(grid), "program_start": starts, "program_core": list(range(len(cores))),
                          "syncs": launch.syncs}
    return results[-1]


def _first_fault(cores: list[KernelContext], launch: Lockstep) -> BaseException | None:
    """The run-time error to report: a core's own fault (an access outside a tensor, ...) before the failed
    synchronisation it leads to (a faulted core synchronises no more, so the other core's wait fails), and that
    failure otherwise."""
    for c in cores:
        if c.fault is not None and c.fault is not launch.failure:
            return c.fault
    return launch.failure


def _core_context(ctx: KernelContext) -> KernelContext:
    """A context for another NeuronCore of ``ctx``'s launch: same target, mode, kernel and checks; physical buffer
    ids drawn from ``ctx``'s counter, so that no two tensors of the launch share one (the shared HBM tensors are
    ``ctx``'s, and each core's schedule keys its dependencies on them)."""
    c = KernelContext(ctx.target, "full" if ctx.full else "timing", ctx.trace.kernel_name, ctx.frontend)
    c.mem.simulate = ctx.mem.simulate
    c.middle_end = ctx.middle_end
    c.kernel_code = c.mem.stop_code = ctx.kernel_code
    c.mem.new_phys = ctx.mem.new_phys
    return c


def _append_trace(trace: Trace, other: Trace) -> None:
    """Append ``other``'s instructions (another core's program) to ``trace``, renumbered; merge its metadata."""
    off = len(trace.instrs)
    for ins in other.instrs:
        ins.seq += off
        a = ins.attrs
        if a and "after" in a:
            ins.attrs = {**a, "after": tuple(j + off for j in a["after"])}
    trace.instrs.extend(other.instrs)
    meta, more = trace.meta, other.meta
    if "partition_rule" in more:
        if "partition_rule" in meta:
            meta["partition_rule"]["count"] += more["partition_rule"]["count"]
        else:
            meta["partition_rule"] = more["partition_rule"]
    if "spill" in more:
        mine = meta.setdefault("spill", {k: 0 for k in more["spill"]})
        for k, v in more["spill"].items():
            mine[k] = mine.get(k, 0) + v
    if "unaliased_placements" in more:
        meta["unaliased_placements"] = int(meta.get("unaliased_placements", 0)) + int(more["unaliased_placements"])


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
                note = _postponed_annotation(note, fn)
            except Exception:
                if "mutable" in note:
                    allocation(t).immutable = False
                continue
        shape = getattr(note, "nki_shape", None)
        if shape is not None and tuple(shape) != tuple(t.shape):
            fail("err_annotation_shape_mismatch", name=pname, got=list(t.shape), expected=list(shape))
        if getattr(note, "nki_mutable", False):
            allocation(t).immutable = False


# The annotation grammar: names, public attributes, subscripts, tuples and lists, constants, arithmetic.
_NOTE_NODES = (ast.Expression, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Constant, ast.Slice,
               ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.expr_context)


def _postponed_annotation(note: str, fn):
    """A postponed (string) annotation's value, evaluated in the kernel's globals as Python would, but only within
    the annotation grammar (``nt.tensor[128, 64]``, ``nt.mutable_tensor``).  The string is code the static screen
    never parses: evaluated whole, ``(x := ().__class__.__base__.__subclasses__() ...)`` reached any module and put
    tensor storage in a global for the kernel (a host transpose scored 12 of 12).  Anything else (calls,
    comprehensions, assignment expressions, private or dunder names) raises ValueError."""
    tree = ast.parse(note, mode="eval")
    for node in ast.walk(tree):
        if (not isinstance(node, _NOTE_NODES) or (isinstance(node, ast.Attribute) and node.attr.startswith("_"))
                or (isinstance(node, ast.Name) and node.id.startswith("_"))):
            raise ValueError(f"annotation {note!r}: only names, attributes, subscripts and constants are evaluated")
    return eval(compile(tree, "<annotation>", "eval"), getattr(fn, "__globals__", {}), {})  # noqa: S307 - checked


def _check_outputs_written(ctx: KernelContext, ret) -> None:
    """err_tensor_output_not_written_to: a returned HBM tensor the kernel created but no instruction wrote."""
    outs = [t for t in (ret if isinstance(ret, (tuple, list)) else (ret,))
            if isinstance(t, Tensor) and t.kind == B_HBM and not allocation(t).immutable]
    if not outs:
        return
    # from the end: outputs are written last, so the walk usually stops within the last few instructions
    unwritten = {allocation(t).phys for t in outs}
    for ins in reversed(ctx.trace.instrs):
        for d in ins.dsts:
            r = d.region
            if r.phys in unwritten and r.buf == B_HBM:
                unwritten.discard(r.phys)
        if not unwritten:
            return
    for t in outs:
        if allocation(t).phys in unwritten:
            fail("err_tensor_output_not_written_to", name=t.name)


def _check_output_views(ret) -> None:
    """A returned HBM tensor is the tensor's storage as it lies: the tensor itself or a reshape of it (its elements
    in row-major order from the first).  A permuted, sliced, strided or gathered view copies no data on the device,
    so returning one would hand the host values no instruction wrote in that layout (a transpose for the price of
    a contiguous copy: docs/grading-security.md S12); checked in both modes."""
    for t in (ret if isinstance(ret, (tuple, list)) else (ret,)):
        if not isinstance(t, Tensor) or t.kind != B_HBM:
            continue
        n = 1
        for d in t.shape:
            n *= d
        if aps.is_contiguous(t) and aps.element_offset(t) == 0 and n == allocation(t).base.size:
            continue
        what = ("gathered" if is_gather(t) else "partial" if n != allocation(t).base.size else
                "reordered or strided")
        fail("nkisim_output_view", name=t.name, what=what)


def _check_output_buffers(ctx: KernelContext, ret, simulate: bool) -> None:
    """Where the rule era asks for it (the current API): returned HBM tensors the kernel created live in
    ``nl.shared_hbm``.  Under simulation a warning (AWS's simulator runs the kernel), else the compiler's error."""
    if not applies("nkisim_output_buffer", ctx.era):
        return
    for t in (ret if isinstance(ret, (tuple, list)) else (ret,)):
        if isinstance(t, Tensor) and t.kind == B_HBM and allocation(t).space not in ("shared_hbm", "argument"):
            if simulate:
                import warnings

                warnings.warn(NKISimulationWarning(message("nkisim_output_buffer", name=t.name,
                                                           buffer=allocation(t).space)), stacklevel=4)
            else:
                fail("nkisim_output_buffer", name=t.name, buffer=allocation(t).space)


def _single_thread_blas() -> one_blas_thread:
    """Kernels issue many small GEMMs (<= 128x128x512): BLAS threads only add contention, so use one; and the values
    must not depend on the machine's cores (core/blas.py: the process's one limiter, whichever thread holds it)."""
    return one_blas_thread().hold()


def _arg_names(fn, n: int) -> list[str]:
    code = getattr(fn, "__code__", None)
    names = list(code.co_varnames[: code.co_argcount]) if code is not None else []
    names += [f"arg{i}" for i in range(len(names), n)]
    return names[:n]
