"""Engine-sequencer registers, the dynamic loops they drive and run-time scalar offsets: the one place where the
kernel's Python (the specialization) and the device's values (the execution) are kept apart.

"Each engine sequencer ... maintains its own set of physical registers for scalar operations (64x 32-bit registers
per engine sequencer)"; "these registers are primarily used to specify dynamic loop boundaries and while loop
conditions" (nki.isa.register_alloc, NKI 0.6).  "Under the tracer frontend a register's value is not known while
the kernel is being built" (nki.isa.VirtualRegister); a ``dynamic_range`` loop is "a hardware loop instruction ...
a single copy of the body is generated and the hardware iterates over it at runtime", its variable "a device
register, not a Python int" (aws-neuron-sdk nki/deep-dives/nki-dynamic-loops.rst); and "the only constructs that
survive specialization and become runtime operations are nki.isa.* calls and dynamic_range loops" (NKI language
guide, "Specialization").  So in nkisim:

* a :class:`Register` is a name: its value lives in the executor (``KernelContext.regs``), never on the object;
* a dynamic loop (``nl.fori_loop``, ``nl.while_loop``, ``nl.dynamic_range``) runs its Python body ONCE, with a
  symbolic index register, in *record* mode: the front-end calls the body makes are recorded (:func:`api`), not
  executed (the trace goes to a scratch trace, no values, no accumulation flags, no register writes); the core
  then executes the recorded body once per iteration (:func:`_execute`), with the index in the executor, as the
  hardware runs its one body.  The kernel's Python runs the same number of times whatever the data;
* a view with a run-time ``scalar_offset`` (``nkisim.core.aps.dynamic_ap``) is resolved by the executor just
  before each instruction that uses it (:func:`api`), and costed without the offset (the whole tensor it may touch);
* a run-time error (an offset outside its tensor, a register needed but not computed) is a *fault*
  (:func:`fault`): the run stops executing and the error is raised when the kernel's Python has returned
  (``run_kernel``), with no value in its text, so the kernel cannot catch it to learn a bit.

Tensors allocated by the body while it is recorded are allocated once and reused by every iteration ("Tensors
allocated inside the loop body are allocated once and reused across iterations", nki-dynamic-loops.rst): the
executed calls get the recorded allocations back (``KernelContext.alloc_hook``).

The sequencer instructions (``register_move``/``register_load``/``register_store``) are traced on SyncE: which
sequencer the compiler picks is not documented, and their cost is a guess (``perf/model.py``).
"""

from __future__ import annotations

import functools
import itertools
import types
import weakref

import numpy as np

from nkisim.core import access, aps, execute
from nkisim.core.access import mark_written, read, write
from nkisim.core.context import LIVE, TRAMPOLINES, KernelContext, active, current
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, E_SYNC, Trace
from nkisim.core.ops import partition_broadcast
from nkisim.core.ops.common import check_writable, need_on_chip, need_tensor
from nkisim.core.rules import DeviceFault, DeviceIndexFault, NKIError, fail
from nkisim.core.sealed import Sealed, readonly_slots
from nkisim.core.tensor import Tensor

_MASK32 = 0xFFFFFFFF
_IDS = itertools.count(1)


class ValuesNeeded(RuntimeError, metaclass=Sealed):
    """Control flow needs a register value that a timing run did not compute (``run_kernel`` reruns in full)."""


class _Abort(Exception):
    """Unwinds the executor after a fault (internal: caught by the executor, never seen by kernel code)."""


def _int32(value: int) -> int:
    """Wrap to a signed 32-bit register value."""
    v = int(value) & _MASK32
    return v - (1 << 32) if v >= 1 << 31 else v


class Register:
    """A virtual register: a name.  Its 32-bit value (or why it is unknown) lives in the executor
    (``KernelContext.regs``); nothing on the object depends on it."""

    __slots__ = ("_rid",)

    def __init__(self) -> None:
        self._rid = next(_IDS)

    def __repr__(self) -> str:
        return f"VirtualRegister(#{self.rid})"


# the register's name is read-only to kernel code (a forged rid would alias another register's executor slot)
readonly_slots(Register, rid="_rid")


# ---- the executor's state -------------------------------------------------------------------------------------------
_UNSET = "it was allocated without a value and never written"
# The induction registers of ``nl.dynamic_range`` loops: "frozen: you cannot write to it with register_move or
# register_load" (nki/get-started/nki-language-guide.rst, "Dynamic Control Flow"); register ids are never reused.
_FROZEN: set[int] = set()
# Open ``nl.no_reorder()`` blocks per running kernel, counted by the current API's front end: "Register-based dynamic
# loops (nl.fori_loop, nl.while_loop) are not supported inside a no_reorder block" (nl.no_reorder, NKI 0.6).
_NO_REORDER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def no_reorder_block(delta: int) -> None:
    """Enter (+1) or leave (-1) a ``no_reorder`` block of the running kernel (see ``_NO_REORDER``)."""
    ctx = active()
    if ctx is not None:
        _NO_REORDER[ctx] = _NO_REORDER.get(ctx, 0) + delta


def _no_dynamic_loop_in_no_reorder(ctx: KernelContext, op: str) -> None:
    if _NO_REORDER.get(ctx, 0) > 0:
        fail("nkisim_bad_argument", op=op, detail="register-based dynamic loops (nl.fori_loop, nl.while_loop, "
             "nl.dynamic_range) are not supported inside a no_reorder block; static loops (range, nl.static_range) "
             "are, and a no_reorder block inside the loop body is")


def _writable(dst: Register, op: str) -> None:
    if dst.rid in _FROZEN:
        fail("nkisim_bad_argument", op=op, detail="the induction variable of a dynamic_range loop is frozen: "
             "register_move and register_load cannot write it")


def _get(ctx: KernelContext, r: Register, op: str) -> int:
    """A register's value, for the executor.  Unknown (timing mode, or never written): a fault."""
    v = ctx.regs.get(r.rid, _UNSET)
    if isinstance(v, str):
        if v == _UNSET:
            fault(ctx, DeviceFault(f"{op}: the register was read before any value was written to it"))
        else:
            fault(ctx, ValuesNeeded(f"{op}: the register's value is unknown ({v}); nkisim runs dynamic loops by "
                                    "their values, so it needs them (timing mode computes no values)"))
        raise _Abort
    return v


def _set(ctx: KernelContext, r: Register, value) -> None:
    ctx.regs[r.rid] = _int32(value) if not isinstance(value, str) else value


def fault(ctx: KernelContext, exc: BaseException) -> None:
    """Record a run-time error of the device program: the first one is raised by ``run_kernel`` after the kernel's
    Python returns; from now on nothing executes (``ctx.faulted``)."""
    if ctx.fault is None:
        ctx.fault = exc
    ctx.faulted = True


def known(x, op: str):
    """An immediate (Python int) or a register, as an executor value."""
    if isinstance(x, Register):
        return _get(current(op), x, op)
    return int(x)


def _need_bound(x, op: str) -> None:
    if isinstance(x, Register):
        return
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return
    raise TypeError(f"{op}: loop bounds are integers or VirtualRegisters, got {type(x).__name__}")


# ---- registers --------------------------------------------------------------------------------------------------
def immediate(r: Register, value) -> None:
    """An immediate value for a new register (``nisa.register_alloc(5)``): set where it executes (no instruction:
    the compiler allocates registers; a value is an immediate)."""
    ctx = current("register_alloc")
    if ctx.stream is not None and not ctx.api_depth:
        ctx.stream.event(["set", r.rid, int(value)])
    _effect(ctx, ("set", r, int(value)))


def _effect(ctx: KernelContext, step: tuple) -> None:
    """A register effect without an instruction: recorded in a loop body being recorded, else done now."""
    if ctx.recording is not None:
        ctx.recording.append(step)
    elif not ctx.faulted:
        _set(ctx, step[1], step[2])


def _one_element(t: Tensor, op: str, name: str) -> Tensor:
    t = need_tensor(t, op, name)
    if int(np.prod(t.shape)) != 1:
        fail("nkisim_bad_argument", op=op, detail=f"{name} must hold exactly one element (shape [1] or [1, 1]), "
             f"got {list(t.shape)}")
    if t.kind == B_PSUM:
        need_on_chip(t, op, name, (B_SBUF, B_HBM))
    if t.dtype.itemsize > 4:
        fail("nkisim_bad_argument", op=op, detail=f"{name}: registers hold 32-bit values, not {t.dtype}")
    return t


def _executing(ctx: KernelContext) -> bool:
    return ctx.recording is None and not ctx.faulted


def register_move(dst: Register, src) -> None:
    """``dst = src`` (an immediate integer or another register): one sequencer instruction, no memory access."""
    ctx = current("register_move")
    ctx.settle()
    _writable(dst, "register_move")
    if not isinstance(src, Register) and not (isinstance(src, (int, np.integer)) and not isinstance(src, bool)):
        raise TypeError(f"nisa.register_move: src must be an integer or a VirtualRegister, got {type(src).__name__}")
    ctx.emit("register_move", E_SYNC, (), (), {})
    if _executing(ctx):
        if isinstance(src, Register):
            v = ctx.regs.get(src.rid, _UNSET)
            ctx.regs[dst.rid] = v
        else:
            _set(ctx, dst, src)


def register_load(dst: Register, src: Tensor) -> None:
    """``dst = src[0]`` from one element in SBUF or HBM (integers as they are, floats converted as the era casts:
    core.execute.cast)."""
    ctx = current("register_load")
    ctx.settle()
    _writable(dst, "register_load")
    src = _one_element(src, "register_load", "src")
    ctx.emit("register_load", E_SYNC, (src,), (), {})
    if not _executing(ctx):
        return
    if ctx.full:
        v = np.asarray(read(src)).reshape(-1)[0]
        _set(ctx, dst, int(execute.cast(np.asarray([v]), np.dtype(np.int64))[0]) if v.dtype.kind == "f" else int(v))
    else:
        ctx.regs[dst.rid] = "it was loaded from memory in a timing run"


def register_store(dst: Tensor, src: Register) -> None:
    """``dst[0] = src`` into one element in SBUF or HBM, cast to dst's dtype."""
    ctx = current("register_store")
    ctx.settle()
    dst = _one_element(dst, "register_store", "dst")
    if not isinstance(src, Register):
        raise TypeError(f"nisa.register_store: src must be a VirtualRegister, got {type(src).__name__}")
    check_writable(dst)
    ctx.emit("register_store", E_SYNC, (), (dst,), {})
    if _executing(ctx) and ctx.full:
        value = _get(ctx, src, "nisa.register_store")
        write(dst, execute.cast(np.asarray(value, dtype=np.int64).reshape(dst.shape), dst.dtype))
        mark_written(dst)


# ---- recording and executing front-end calls ------------------------------------------------------------------
def api(fn):
    """Wrap a front-end function that makes instructions: recorded while a dynamic loop body is being recorded,
    run with its run-time-offset views resolved otherwise.  Nested front-end calls belong to the outermost."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not LIVE[0]:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - told apart below; a rule's error is raised again
                return _failed(fn, args, kwargs, exc)
        ctx = active()
        if ctx is None or ctx.api_depth:
            return fn(*args, **kwargs)
        st = ctx.stream
        if st is not None:  # the program is being written down (nkisim.stream): record, then make the call
            token = st.before(ctx, key, args, kwargs)
            try:
                res = _dispatch(ctx, fn, args, kwargs)
            except BaseException:
                st.after(ctx, token, None, True)
                raise
            st.after(ctx, token, res, False)
            return res
        return _dispatch(ctx, fn, args, kwargs)

    key = _streamable(fn)
    call.nkisim_api = fn
    TRAMPOLINES.add(call.__code__)
    return call


# (module, name) of every front-end function a recorded instruction stream may name (nkisim.stream replays only these)
STREAMABLE: set = set()


def _streamable(fn) -> str:
    STREAMABLE.add((fn.__module__, fn.__name__))
    return f"{fn.__module__}:{fn.__name__}"


def stream_only(fn):
    """Wrap a front-end function that makes no instruction but whose effect the program needs (an allocation, a
    register): recorded when the program is being written down (nkisim.stream), a plain call otherwise."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not LIVE[0]:
            return fn(*args, **kwargs)
        ctx = active()
        st = ctx.stream if ctx is not None and not ctx.api_depth else None
        if st is None:
            return fn(*args, **kwargs)
        token = st.before(ctx, key, args, kwargs)
        ctx.api_depth = 1
        try:
            res = fn(*args, **kwargs)
        except BaseException:
            st.after(ctx, token, None, True)
            raise
        finally:
            ctx.api_depth = 0
        st.after(ctx, token, res, False)
        return res

    key = _streamable(fn)
    TRAMPOLINES.add(call.__code__)
    return call


def wrap_recorded(namespace: dict, exclude=()) -> None:
    """Wrap (:func:`stream_only`) every public function a front-end module defines, but those in ``exclude``: the
    legacy API's calls, which a recorded stream replays (nkisim.stream) but which have no dynamic loops, registers
    or run-time offsets for :func:`api` to handle.  Off a recording a wrapped call costs one list read."""
    mod = namespace.get("__name__")
    for name, obj in list(namespace.items()):
        if name.startswith("_") or name in exclude or not isinstance(obj, types.FunctionType):
            continue
        if obj.__module__ == mod:
            namespace[name] = stream_only(obj)


def _dispatch(ctx: KernelContext, fn, args, kwargs):
    """One front-end call at the kernel's level: recorded into the dynamic loop body being recorded, run dry after
    a fault, else run with its run-time-offset views resolved."""
    if ctx.recording is not None:
        return _record(ctx, fn, args, kwargs)
    if ctx.faulted:
        return _dry_call(ctx, fn, args, kwargs, None)
    ctx.api_depth = 1
    try:
        if ctx.dyn_views:
            return _call_resolved(ctx, fn, args, kwargs)
        return fn(*args, **kwargs)
    except _Abort:  # a fault (recorded): the kernel's Python gets what the call returns, nothing executes
        ctx.api_depth = 0
        return _dry_call(ctx, fn, args, kwargs, None)
    except Exception as exc:  # noqa: BLE001 - told apart by _failed; a rule's error is raised again
        ctx.api_depth = 0
        return _failed(fn, args, kwargs, exc)
    finally:
        ctx.api_depth = 0


def _failed(fn, args, kwargs, exc: Exception):
    """An exception out of a front-end call: a rule the call breaks whatever the data (raised again, now, as the
    compiler raises it: every catalogue error, and whatever the call raises without values too), or an error of
    the values it computed (a fault: raised once the kernel's Python has
    returned, naming no value; the call returns what it returns without values).  Told apart by running the call
    again without values: what it raises then does not depend on the data.  Raised inside the call, an error of the
    values was a reader of device data: a ``try`` around the call learnt a bit per call, and the text could carry
    a value (docs/grading-security.md S10).  Only the exception path pays for this."""
    ctx = active()
    # a catalogue error is a rule, whatever the values (value checks record faults instead: S10; and the rules on
    # PSUM flags hold in both modes, S4, though a dry run skips them)
    if ctx is None or not ctx.full or ctx.recording is not None or isinstance(exc, (ValuesNeeded, NKIError)):
        raise exc
    try:
        res = _dry_call(ctx, fn, args, kwargs, None)
    except Exception:  # noqa: BLE001 - the call fails without values too: the rule's own error
        raise exc from None
    fault(ctx, values_fault(getattr(fn, "__name__", "an instruction"), exc))
    LIVE[0] = True  # later calls take the executor's path, which runs them dry once the run has faulted
    return res


def values_fault(name: str, exc: BaseException, where: str = "") -> DeviceFault:
    """The fault for an error of the values an instruction computed: its name and the error's type, never the
    error's text (which may carry a value computed on the device, docs/grading-security.md S10)."""
    return DeviceFault(f"{name}: {type(exc).__name__} while the device program computed its values{where} (a run-time "
                       "error of the device program; nkisim does not print run-time values)")


def wrap_api(namespace: dict, exclude=()) -> None:
    """Wrap (:func:`api`) every public function a front-end module defines, but those in ``exclude``."""
    mod = namespace.get("__name__")
    for name, obj in list(namespace.items()):
        if name.startswith("_") or name in exclude or not isinstance(obj, types.FunctionType):
            continue
        if obj.__module__ == mod:
            namespace[name] = api(obj)


_PLAIN = (Tensor, Register, int, float, complex, str, bytes, type(None), type(Ellipsis), slice, range, np.generic,
          np.ndarray, np.dtype, type)


def _freeze(x):
    """A recorded argument as the executor will use it: lists and dicts copied as they are at the call (the kernel
    may change them afterwards), and nothing whose methods are kernel code.  The executor runs the recorded call
    once per iteration; an object of the kernel's own class (a ``__float__``, ``__index__`` or ``__eq__`` the
    front end calls) would run kernel Python per iteration, which could count them: refused."""
    if isinstance(x, list):
        return [_freeze(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_freeze(v) for v in x)
    if isinstance(x, dict):
        return {k: _freeze(v) for k, v in x.items()}
    if isinstance(x, (set, frozenset)):
        return frozenset(_freeze(v) for v in x)
    if isinstance(x, _PLAIN) or _library_object(x):
        return x
    raise NotImplementedError(f"nkisim does not support passing a {type(x).__name__} to an instruction inside a "
                              "dynamic loop body: pass tensors, registers, numbers or the API's own objects")


def _library_object(x) -> bool:
    """An object of nkisim's API or of NumPy (operators like ``nl.add``, enums, buffers, replica groups, NumPy's own
    functions and ufuncs), not one the kernel defined or one wrapping the kernel's code.  Decided by what the object
    is, not by the module its type lives in: Python's own types (module ``builtins``) hold kernel code as often as
    not (a bound method of the kernel's object, a generator, ``map``/``filter``, ``iter(f, sentinel)``, a
    ``staticmethod``), and NumPy wraps it on request (``np.vectorize(f)``, ``np.frompyfunc(f, ...)``); so of the
    builtins only functions of a module (``max``) pass, and a NumPy ufunc only when it is NumPy's own."""
    if isinstance(x, np.ufunc):
        return getattr(np, x.__name__, None) is x
    if isinstance(x, types.BuiltinFunctionType):
        owner = x.__self__
        return (owner is None or isinstance(owner, types.ModuleType)) and (x.__module__ or "").startswith(
            ("builtins", "numpy", "nkisim.", "ml_dtypes", "math"))
    if isinstance(x, types.FunctionType):
        mod = x.__module__ or ""
    elif isinstance(x, np.vectorize):
        return False
    else:
        mod = getattr(type(x), "__module__", "") or ""
    return mod.startswith(("nkisim.", "numpy", "ml_dtypes", "enum")) or mod in ("nki", "neuronxcc")


def _record(ctx: KernelContext, fn, args, kwargs):
    """Record one call of a body being recorded, running it without executing anything (checks and allocations
    happen: they are the compiler's; the allocations are kept for the executed iterations)."""
    allocs: list = []
    ctx.recording.append(("call", fn, _freeze(args), _freeze(kwargs), allocs))
    return _dry_call(ctx, fn, args, kwargs, allocs)


def _dry_call(ctx: KernelContext, fn, args, kwargs, allocs: list | None):
    """Run ``fn`` with nothing executed: its instructions go to a scratch trace, no values, no flags.  ``allocs``
    receives the tensors it allocates (None: allocations are not kept).

    When recording (``allocs`` given), what the compiler inserts around the call survives the scratch trace as the
    same body unrolled would have it: a PSUM spill of the call's result (``KernelContext.spill`` at the settle
    ending the call) is a step of the body (the context appends it while recording), replayed after the call in
    every iteration; a kernel-wide constant the call made first (the ones of a partition broadcast,
    ``partition_broadcast.owe_ones``) is emitted and written in the real trace now, before the loop, once."""
    full, trace, hook = ctx.full, ctx.trace, ctx.alloc_hook
    ctx.settle()
    ctx.full = False
    ctx.trace = Trace(trace.target, trace.kernel_name)
    access.FROZEN[0] += 1
    ctx.api_depth = 1
    ones = len(ctx.partition_ones)
    if allocs is not None:
        def keep(make):
            t = make()
            allocs.append(t)
            return t
        ctx.alloc_hook = keep
    try:
        return fn(*args, **kwargs)
    finally:
        ctx.settle()
        ctx.api_depth = 0
        access.FROZEN[0] -= 1
        ctx.full, ctx.trace, ctx.alloc_hook = full, trace, hook
        if allocs is not None and len(ctx.partition_ones) != ones:
            partition_broadcast.owe_ones(ctx, list(ctx.partition_ones.values())[ones:])


def _call_resolved(ctx: KernelContext, fn, args, kwargs):
    """``fn(*args, **kwargs)`` with the run-time-offset views among its arguments resolved for it only: afterwards
    (returned, faulted or raised) each scalar-offset view is back at its symbolic state, so no executor value stays
    in a view the kernel's Python holds (docs/grading-security.md S4: nothing computed on the device is
    observable), and each vector-offset view back at its stand-in rows.  Called only when the kernel made such views
    (``ctx.dyn_views``): other calls pay nothing."""
    undo: list = []
    try:
        _resolve_args(ctx, args, kwargs, undo)
        return fn(*args, **kwargs)
    finally:
        for v, state in undo:
            aps.restore(v, state)


def _resolve_args(ctx: KernelContext, args, kwargs, undo: list) -> None:
    """Resolve the run-time-offset views among a call's arguments for the executor (values only: a timing run
    needs no addresses, the cost of such a view does not depend on them); ``undo`` receives each run-time-offset
    view's symbolic state (the view and ``aps.symbolic_state`` of it) for the caller to restore."""
    for x in itertools.chain(args, kwargs.values()):
        if isinstance(x, (list, tuple)):
            for y in x:
                if isinstance(y, (list, tuple)):
                    for z in y:
                        _resolve(ctx, z, undo)
                else:
                    _resolve(ctx, y, undo)
        else:
            _resolve(ctx, x, undo)


def _resolve(ctx: KernelContext, x, undo: list) -> None:
    recipe = getattr(x, "_recipe", None) if isinstance(x, Tensor) else None
    if recipe is None:
        return
    if not ctx.full:
        return
    src = recipe.source
    if isinstance(recipe, aps.VectorRecipe):  # one row index per partition, read now (the device reads them now)
        ctx.settle()
        undo.append((x, aps.symbolic_state(x)))
        aps.resolve_vector(x, np.asarray(read(src)).astype(np.int64))  # out of range: the DMA decides
        return
    if isinstance(src, Register):
        value = _get(ctx, src, "scalar_offset")
    else:
        ctx.settle()
        value = int(np.asarray(read(src)).reshape(-1)[0])
    undo.append((x, aps.symbolic_state(x)))
    try:
        aps.resolve(x, value)
    except NKIError:
        fault(ctx, DeviceIndexFault(
            f"{recipe.where}: the run-time scalar_offset moves the access pattern {recipe.pattern} of "
            f"'{x.name}' outside its tensor (an out-of-bounds DMA on the device; nkisim does not print run-time "
            "values)"))
        raise _Abort from None


# ---- dynamic loops ------------------------------------------------------------------------------------------------
def _begin(ctx: KernelContext) -> tuple:
    """Start recording a body.  The tiles its Python allocates itself (``nl.ndarray``; its calls keep theirs in
    their steps) are collected: with the calls' they are the body's tiles, new in every iteration of the body
    unrolled (see :func:`_end`)."""
    ctx.settle()
    LIVE[0] = True
    own: list = []

    def collect(make):
        t = make()
        own.append(t)
        return t

    saved = (ctx.recording, len(ctx.trace.instrs), ctx.alloc_hook, own)
    ctx.recording = []
    ctx.alloc_hook = collect
    return saved


def _end(ctx: KernelContext, saved) -> list:
    """The recorded body, opened by a ``fresh`` step over every tile it allocates: each iteration starts them as
    new allocations would (no PSUM accumulation group open, ``access.fresh``), as the same body unrolled allocates
    them anew, where the hardware's one body reuses the memory with the compiler's flags ("allocated once and
    reused across iterations", nki-dynamic-loops.rst)."""
    body = ctx.recording
    ctx.recording, n, ctx.alloc_hook, own = saved
    ctx.settle()
    tiles = own + [t for step in body if step[0] == "call" for t in step[4]]
    if tiles:
        body.insert(0, ("fresh", tiles))
    if len(ctx.trace.instrs) != n and not all(ins.attrs.get(partition_broadcast.OWED)
                                               for ins in ctx.trace.instrs[n:]):
        # a call that bypassed the executor's wrapper made instructions while the body was recorded (those the
        # recorder owes the kernel, partition_broadcast.owe_ones, excepted)
        del ctx.trace.instrs[n:]
        raise NotImplementedError("nkisim does not support this call inside a dynamic loop body yet (it is not "
                                  "recorded): use the nisa.* instructions there")
    return body


def _stream_push(ctx: KernelContext):
    """The program's recorder (nkisim.stream), with a new loop body opened in it; None when none is recording."""
    st = ctx.stream
    if st is not None:
        st.push(ctx)
    return st


def _run_or_record(ctx: KernelContext, node: tuple) -> None:
    """A recorded loop inside a body being recorded is a step of that body; at top level it executes now."""
    if ctx.recording is not None:
        ctx.recording.append(node)
        return
    if ctx.faulted:
        return
    ctx.api_depth = 1
    try:
        _step(ctx, node)
    except _Abort:
        pass
    except (ValuesNeeded, NKIError) as exc:  # texts that name no run-time value
        fault(ctx, exc)
    except Exception as exc:  # noqa: BLE001 - a run-time error of the device program is a fault (see fault)
        fault(ctx, values_fault("a dynamic loop", exc))
    finally:
        ctx.api_depth = 0
        if ctx.stream is not None:
            ctx.stream.executed(ctx)


def _execute(ctx: KernelContext, body: list) -> None:
    starts: list[int] = []  # open ``no_reorder`` blocks of the body: where their instructions start
    for step in body:
        if step[0] == "order":  # a ``with nl.no_reorder():`` block of the body (core.context.NoReorder)
            ctx.settle()
            if step[1]:
                starts.append(len(ctx.trace.instrs))
            else:
                for ins in ctx.trace.instrs[starts.pop():]:
                    ins.attrs["in_order"] = True
        else:
            _step(ctx, step)


def _step(ctx: KernelContext, step: tuple) -> None:
    kind = step[0]
    if kind == "call":
        _, fn, args, kwargs, allocs = step
        served = iter(allocs)
        hook = ctx.alloc_hook

        def serve(make):
            t = next(served, None)
            return make() if t is None else t

        ctx.alloc_hook = serve
        try:
            if ctx.dyn_views:
                _call_resolved(ctx, fn, args, kwargs)
            else:
                fn(*args, **kwargs)
        except (_Abort, ValuesNeeded, NKIError):
            raise
        except Exception as exc:  # noqa: BLE001 - the recorded call ran dry without it: an error of the values
            fault(ctx, values_fault(getattr(fn, "__name__", "an instruction"), exc, " in a dynamic loop body"))
            raise _Abort from None
        finally:
            ctx.alloc_hook = hook
    elif kind == "set":
        _set(ctx, step[1], step[2])
    elif kind == "fresh":
        for t in step[1]:
            access.fresh(t)
    elif kind == "spill":  # the compiler's copy of a PSUM tile the body allocated (KernelContext.spill)
        ctx.settle()
        ctx.spill(step[1])
    elif kind == "for":
        _, index, lower, upper, stride, body = step
        lo, hi = _bound(ctx, lower, "nl.fori_loop"), _bound(ctx, upper, "nl.fori_loop")
        for v in range(lo, hi, stride):
            _set(ctx, index, v)
            _execute(ctx, body)
    else:  # "while"
        _, init, cond, body, nxt = step
        c = _get(ctx, init, "nl.while_loop")
        while c != 0:
            _set(ctx, cond, c)
            _execute(ctx, body)
            c = _get(ctx, nxt, "nl.while_loop")


def _bound(ctx: KernelContext, x, op: str) -> int:
    return _get(ctx, x, op) if isinstance(x, Register) else int(x)


def fori_loop(lower, upper, body, step: int, make_register) -> None:
    """``for i in range(lower, upper, step): body(i)`` on the device: ``body`` runs once (recorded) with ``i`` a
    register; the executor runs the recorded body once per iteration, setting ``i`` (by value: a write to it in the
    body lasts until the next iteration starts)."""
    if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step <= 0:
        raise ValueError(f"nl.fori_loop: step must be a compile-time positive integer, got {step!r}")
    _need_bound(lower, "nl.fori_loop")
    _need_bound(upper, "nl.fori_loop")
    ctx = current("fori_loop")
    _no_dynamic_loop_in_no_reorder(ctx, "nl.fori_loop")
    index = make_register()
    saved = _begin(ctx)
    st = _stream_push(ctx)
    try:
        body(index)
    finally:
        if st is not None:
            st.loop(ctx, "fori", (lower, upper, int(step), index))
        recorded = _end(ctx, saved)
    _run_or_record(ctx, ("for", index, lower, upper, int(step), recorded))


def while_loop(init: Register, body, make_register) -> None:
    """``r = init; while r != 0: r = body(r)`` on the device: ``body`` runs once (recorded) and returns the register
    holding the next condition; the executor runs the recorded body while it is nonzero."""
    if not isinstance(init, Register):
        raise TypeError(f"nl.while_loop: init must be a VirtualRegister, got {type(init).__name__}")
    ctx = current("while_loop")
    _no_dynamic_loop_in_no_reorder(ctx, "nl.while_loop")
    cond = make_register()
    saved = _begin(ctx)
    st = _stream_push(ctx)
    nxt = None
    try:
        nxt = body(cond)
    finally:
        if st is not None:
            st.loop(ctx, "while", (init, cond, nxt))
        recorded = _end(ctx, saved)
    if not isinstance(nxt, Register):
        raise TypeError("nl.while_loop: the body must return the next condition register (a VirtualRegister), "
                        f"got {type(nxt).__name__}")
    _run_or_record(ctx, ("while", init, cond, recorded, nxt))


class DynamicRange(metaclass=Sealed):
    """``nl.dynamic_range(start, stop, step)``: iterating it yields ONE register (the loop variable) and records the
    loop body the Python ``for`` statement runs; when the body ends, the executor runs it once per iteration."""

    __slots__ = ("start", "stop", "step", "make_register")

    def __init__(self, start, stop, step, make_register) -> None:
        if stop is None:
            start, stop = 0, start
        _need_bound(start, "nl.dynamic_range")
        _need_bound(stop, "nl.dynamic_range")
        if isinstance(step, Register):
            raise AssertionError("nl.dynamic_range: step must be a compile-time positive int, not a VirtualRegister "
                                 "(the hardware loop instruction encodes it as an immediate)")
        if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step <= 0:
            raise AssertionError(f"nl.dynamic_range: step must be a compile-time positive int, got {step!r}")
        self.start, self.stop, self.step, self.make_register = start, stop, int(step), make_register

    def __iter__(self):
        ctx = current("dynamic_range")
        # "dynamic_range loops inside a nl.no_reorder() block are not currently supported" (nki-dynamic-loops.rst)
        _no_dynamic_loop_in_no_reorder(ctx, "nl.dynamic_range")
        index = self.make_register()
        _FROZEN.add(index.rid)
        saved = _begin(ctx)
        st = _stream_push(ctx)
        done = False
        try:
            yield index
            done = True
        finally:
            if st is not None:
                st.loop(ctx, "drange", (self.start, self.stop, self.step, index))
            recorded = _end(ctx, saved)
            if not done:
                # the for statement left the body (break, return or an exception): the hardware loop has one body
                # that runs to its end; a break is refused (here, or by check_closed when the generator is not
                # closed before the kernel returns).  An exception closes the body too, on its way out: run_kernel
                # raises it rather than this fault (``ctx.open_body``), which would hide the error and its line.
                err = NKIError("nkisim_dynamic_loop", OPEN_BODY)
                if ctx.fault is None:
                    ctx.open_body = err
                fault(ctx, err)
        _run_or_record(ctx, ("for", index, self.start, self.stop, self.step, recorded))


OPEN_BODY = ("nl.dynamic_range: the loop body must run to its end (no break or return): the hardware loop "
             "instruction repeats one body")


def check_closed(ctx: KernelContext) -> None:
    """After the kernel's Python returned: no dynamic loop body is still being recorded (a ``break`` left one)."""
    if ctx.recording is not None:
        raise NKIError("nkisim_dynamic_loop", OPEN_BODY)


# The executor's frames between a wrapper and the front-end function it runs: the namespace check
# (KernelContext._check_namespace) looks through them as through the wrappers themselves.
TRAMPOLINES.update(f.__code__ for f in (_dispatch, _call_resolved, _record, _dry_call, _failed))

