"""What a running kernel may ask about its launch, and show: its program's place in the SPMD launch grid
(``nl.program_id`` / ``num_programs`` / ``program_ndim``) and ``nl.device_print``.  Defined once here for every
front end, which only spell the arguments (tests/test_nkisim_both_apis.py runs one kernel through both).

Grid queries answer from the launch (``KernelContext.grid``, ``program_ids``; nkisim.core.runtime): no grid is a
grid of one program along axis 0, and an axis outside the grid is an ``IndexError`` naming it.  AWS documents
``program_id(axis)`` as "the program id along axis in the launch grid" and ``num_programs(axes)`` as "the number of
SPMD programs along axes", "the entire launch grid" when not given (nki/api/nki/language/__init__.py; the legacy
API's nki.language.program_id, SDK 2.26): an axis the grid does not have has no answer, so both front ends refuse
it (the current one returned 0 or 1 before).

``device_print(prefix, tensor)`` prints the prefix and the tensor's values when the kernel runs with values
("In CPU simulation, this prints immediately to stdout", nki.language.device_print); a timing-only run prints
nothing.  The tensor "can be in SBUF or HBM"; a value of the kernel's Python that is not a tensor (a loop index,
a shape) is printed as it is, as ``print`` would (the legacy front end printed nothing for it, the current one
failed).
"""

from __future__ import annotations

import operator

import numpy as np

from nkisim.core.access import read
from nkisim.core.context import KernelContext, current
from nkisim.core.tensor import Tensor


def _axis(ctx: KernelContext, axis, api: str) -> int:
    """``axis`` as an index into the launch grid (negative axes count from the end)."""
    try:
        a = operator.index(axis)
    except TypeError:
        raise TypeError(f"nl.{api}: an axis of the launch grid is an integer, got {axis!r}") from None
    nd = len(ctx.grid)
    if nd == 0:
        if a == 0:
            return 0
        raise IndexError(f"nl.{api}({axis}): the kernel was launched without an SPMD grid (launch it as "
                         "kernel[n0, n1, ...](...))")
    if not -nd <= a < nd:
        raise IndexError(f"nl.{api}({axis}): axis out of range for a launch grid with {nd} dimension(s)")
    return a % nd


def program_id(axis=0) -> int:
    """Index of the running program along ``axis`` of the launch grid (0 without a grid)."""
    ctx = current("program_id")
    a = _axis(ctx, axis, "program_id")
    return ctx.program_ids[a] if ctx.grid else 0


def num_programs(axes=None) -> int:
    """Programs along ``axes`` (an axis or a tuple of axes); every program of the grid when ``axes`` is None."""
    ctx = current("num_programs")
    if axes is None:
        axes = tuple(range(len(ctx.grid)))
    elif not isinstance(axes, tuple | list):
        axes = (axes,)
    n = 1
    for axis in axes:
        a = _axis(ctx, axis, "num_programs")
        n *= ctx.grid[a] if ctx.grid else 1
    return n


def program_ndim() -> int:
    """Axes of the launch grid (0 for a kernel launched without one)."""
    return len(current("program_ndim").grid)


def device_print(prefix, tensor) -> None:
    """Print ``prefix`` and the values of ``tensor`` when the kernel runs with values.  The prefix (and a value that
    is not a tile) is made text at the call, in both modes: ``str()`` of an object of the kernel's class runs its
    ``__str__``, and run only when values are computed it told the kernel's Python which mode it ran in
    (docs/grading-security.md S11)."""
    ctx = current("device_print")
    ctx.settle()
    prefix = str(prefix)
    shown = None if isinstance(tensor, Tensor) else str(tensor)
    if ctx.full:
        print(prefix, np.array(read(tensor)) if shown is None else shown)
