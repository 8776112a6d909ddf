"""Engine-sequencer registers and the loops they drive (``nisa.register_*``, ``nl.fori_loop``/``while_loop``,
``nl.dynamic_range`` with register bounds).

"Each engine sequencer ... maintains its own set of physical registers for scalar operations (64x 32-bit registers
per engine sequencer)"; "these registers are primarily used to specify dynamic loop boundaries and while loop
conditions" (nki.isa.register_alloc, NKI 0.6).  nkisim runs a kernel eagerly, so a register is a 32-bit integer
known at the moment it is written: a dynamic loop runs its iterations as Python does and emits the body once per
iteration (what the device executes).  In timing mode no values are computed, so a register loaded from memory has
no value; using it as a loop bound or condition is then an error naming the cause, never a guess.

The sequencer instructions (``register_move``/``register_load``/``register_store``) are traced on SyncE: which
sequencer the compiler picks is not documented, and their cost is a guess (``perf/model.py``).
"""

from __future__ import annotations

import numpy as np

from nkisim.core import execute
from nkisim.core.access import mark_written, read, write
from nkisim.core.context import current
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, E_SYNC
from nkisim.core.ops.common import check_writable, need_on_chip, need_tensor
from nkisim.core.rules import fail
from nkisim.core.tensor import Tensor

_MASK32 = 0xFFFFFFFF


class ValuesNeeded(RuntimeError):
    """Control flow needs a register value that a timing run did not compute (``run_kernel`` reruns in full)."""


def _int32(value: int) -> int:
    """Wrap to a signed 32-bit register value."""
    v = int(value) & _MASK32
    return v - (1 << 32) if v >= 1 << 31 else v


class Register:
    """A virtual register: a 32-bit integer, or ``None`` while unknown (never written, or loaded in timing mode)."""

    __slots__ = ("value", "why_unknown")

    def __init__(self, value: int | None = None) -> None:
        self.value = None if value is None else _int32(value)
        self.why_unknown = "it was allocated without a value and never written" if value is None else ""

    def known(self, op: str) -> int:
        """The value, for control flow: an unknown value is an error that says why (in a timing run,
        :class:`ValuesNeeded`, which makes ``run_kernel`` compute the values)."""
        if self.value is None:
            raise ValuesNeeded(f"{op}: the register's value is unknown ({self.why_unknown}); nkisim runs dynamic "
                               "loops by their values, so it needs them (timing mode computes no values: run the "
                               "kernel in full mode)")
        return self.value

    def __repr__(self) -> str:
        return f"VirtualRegister({self.value if self.value is not None else '?'})"


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


def register_move(dst: Register, src) -> None:
    """``dst = src`` (an immediate integer or another register): one sequencer instruction, no memory access."""
    ctx = current("register_move")
    ctx.settle()
    if isinstance(src, Register):
        dst.value, dst.why_unknown = src.value, src.why_unknown
    elif isinstance(src, (int, np.integer)) and not isinstance(src, bool):
        dst.value, dst.why_unknown = _int32(src), ""
    else:
        raise TypeError(f"nisa.register_move: src must be an integer or a VirtualRegister, got {type(src).__name__}")
    ctx.emit("register_move", E_SYNC, (), (), {})


def register_load(dst: Register, src: Tensor) -> None:
    """``dst = src[0]`` from one element in SBUF or HBM (integers as they are, floats converted as the era casts:
    core.execute.cast)."""
    ctx = current("register_load")
    ctx.settle()
    src = _one_element(src, "register_load", "src")
    ctx.emit("register_load", E_SYNC, (src,), (), {})
    if ctx.full:
        v = np.asarray(read(src)).reshape(-1)[0]
        dst.value = _int32(int(execute.cast(np.asarray([v]), np.dtype(np.int64))[0]) if v.dtype.kind == "f"
                           else int(v))
        dst.why_unknown = ""
    else:
        dst.value, dst.why_unknown = None, "it was loaded from memory in timing mode"


def register_store(dst: Tensor, src: Register) -> None:
    """``dst[0] = src`` into one element in SBUF or HBM, cast to dst's dtype."""
    ctx = current("register_store")
    ctx.settle()
    dst = _one_element(dst, "register_store", "dst")
    if not isinstance(src, Register):
        raise TypeError(f"nisa.register_store: src must be a VirtualRegister, got {type(src).__name__}")
    check_writable(dst)
    ctx.emit("register_store", E_SYNC, (), (dst,), {})
    if ctx.full:
        value = src.known("nisa.register_store")
        write(dst, execute.cast(np.asarray(value, dtype=np.int64).reshape(dst.shape), dst.dtype))
        mark_written(dst)


def bound(x, op: str) -> int:
    """A loop bound: a Python integer or a register with a known value."""
    if isinstance(x, Register):
        return x.known(op)
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    raise TypeError(f"{op}: loop bounds are integers or VirtualRegisters, got {type(x).__name__}")


def fori_loop(lower, upper, body, step: int, make_register) -> None:
    """``for i in range(lower, upper, step): body(i)`` with ``i`` a fresh register each iteration (by value)."""
    if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step <= 0:
        raise ValueError(f"nl.fori_loop: step must be a compile-time positive integer, got {step!r}")
    lo, hi = bound(lower, "nl.fori_loop"), bound(upper, "nl.fori_loop")
    for i in range(lo, hi, int(step)):
        body(make_register(i))


def while_loop(init: Register, body, make_register) -> None:
    """``r = init; while r != 0: r = body(r)``: the body gets the condition by value and returns the next one."""
    if not isinstance(init, Register):
        raise TypeError(f"nl.while_loop: init must be a VirtualRegister, got {type(init).__name__}")
    r = init
    while r.known("nl.while_loop") != 0:
        nxt = body(make_register(r.value))
        if not isinstance(nxt, Register):
            raise TypeError("nl.while_loop: the body must return the next condition register (a VirtualRegister), "
                            f"got {type(nxt).__name__}")
        r = nxt


def scalar_value(x, op: str) -> int:
    """A run-time scalar (``.ap(scalar_offset=...)``): a register, or one integer element of an SBUF/HBM tensor, read
    when the access is made (instructions execute in program order).  A timing run has no values:
    :class:`ValuesNeeded` makes ``run_kernel`` compute them."""
    if isinstance(x, Register):
        return x.known(op)
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    t = _one_element(x, op, "scalar_offset")
    if t.dtype.kind not in "iu":
        fail("nkisim_bad_argument", op=op, detail=f"scalar_offset must hold an integer, not {t.dtype}")
    ctx = current(op)
    ctx.settle()
    if not ctx.full:
        raise ValuesNeeded(f"{op}: a run-time offset read from memory needs the values (timing mode)")
    return int(np.asarray(read(t)).reshape(-1)[0])
