"""Language-level semantics: what ``nl.<alu>(x, y)``, Python operators on tiles and ``t[...] = v`` / ``t += v`` mean.

A front end names its semantics class in the registry (``nkisim/frontends/__init__.py``); the running kernel's
instance is ``KernelContext.sem``, which :class:`~nkisim.core.tensor.Tensor`'s operator and item-assignment methods
call.  :class:`Semantics` is the legacy API's (``neuronxcc.nki``): operators are the ``nl`` element-wise functions,
assigning a fresh instruction result retargets the instruction, ``+=`` joins a matmul accumulation group.  A front
end with other rules subclasses it and overrides only what differs (as Triton's Gluon does with its semantic
class).
"""

from __future__ import annotations

import weakref

import numpy as np

from nkisim.core import dtypes, execute
from nkisim.core.context import KernelContext, current
from nkisim.core.instr import B_PSUM
from nkisim.core.ops import assign as _assign
from nkisim.core.ops import elementwise
from nkisim.core.ops.assign import retargetable
from nkisim.core.tensor import Tensor

# comparisons and logical ops default to dtype=bool (nki.language.less_equal docs, SDK 2.26)
_BOOL_RESULT = frozenset({"equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and",
                          "logical_or", "logical_xor"})
# NKI 0.6 (nki/api/nki/language/__init__.py): "At least one of x, y must be a tile" for these
_TILE_OPERAND = _BOOL_RESULT | {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"}
# Toolchain eras in which ``acc + nl.matmul(...)`` (both PSUM) spells matmul accumulation (the 2024 course compiler)
ACC_PLUS_MATMUL_ERAS = frozenset({"2024"})


def binary(alu: str, x, y, *, dtype=None, mask=None, bool_result: bool = True):
    """nl.<alu>(x, y) and the Python operators on tiles: tile (op) tile, tile (op) scalar, scalar (op) scalar.

    Tile (op) tile broadcasts a one-partition operand across the partitions (the language level does; the ISA
    instruction does not).  ``bool_result``: comparisons and logical operators give a bool tile unless ``dtype``
    says otherwise (the legacy API's docs).  NKI 0.6 documents them otherwise (``bool_result=False``): the result
    "Defaults to the input tile dtype" and holds "1 where equal, 0 otherwise" (``dtype=nl.uint8`` "for a
    boolean-like result"), and "At least one of x, y must be a tile" for them and the bitwise operators
    (nki/api/nki/language/__init__.py, ``nl.equal`` ... ``nl.right_shift``)."""
    xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
    if not bool_result and not (xt or yt) and alu in _TILE_OPERAND:
        raise TypeError(f"nl.{alu}: at least one of x, y must be a tile, got {type(x).__name__} and "
                        f"{type(y).__name__}")
    if dtype is None and alu in _BOOL_RESULT:
        if bool_result:
            dtype = np.bool_
        elif xt != yt:  # tile (op) scalar: the tile's dtype, whatever the scalar is
            dtype = x.dtype if xt else y.dtype
    if xt and yt:
        if alu == "add" and dtype is None and mask is None:
            ctx = current(alu)
            if ctx.era in ACC_PLUS_MATMUL_ERAS:
                mm = _acc_plus_matmul(ctx, x, y)
                if mm is not None:
                    return mm
        return elementwise.tensor_tensor(x, y, alu, dtype=dtype, mask=mask, partition_broadcast=True, op_name=alu)
    if xt or yt:
        tile, scalar = (x, y) if xt else (y, x)
        if isinstance(scalar, np.ndarray):
            raise TypeError(f"nl.{alu}: host NumPy arrays cannot be kernel operands; load them as tiles")
        out_dt = dtype if dtype is not None else dtypes.promote(tile.dtype, scalar)
        return elementwise.tensor_scalar(tile, alu, scalar, reverse0=not xt, dtype=out_dt, mask=mask, op_name=alu)
    return np.float32(execute.alu(alu, np.float32(x), np.float32(y)))


def _acc_plus_matmul(ctx: KernelContext, a, b) -> Tensor | None:
    """2024 toolchain: ``acc + <fresh matmul result>`` (both in PSUM) spells matmul accumulation into ``acc``.

    The matmul result is returned unchanged and remembered: assigned straight back into ``acc``
    (``acc[...] = acc + nl.matmul(..)``) the matmul joins acc's accumulation group, one instruction, exactly as
    ``acc += nl.matmul(..)``; used any other way, the sum is materialized into it at the next API call."""
    if not (a.kind == B_PSUM and b.kind == B_PSUM):
        return None
    if ctx.last_instr is None or ctx.last_instr.op != "nc_matmul":
        return None
    if retargetable(ctx, b):
        acc, mm = a, b
    elif retargetable(ctx, a):
        acc, mm = b, a
    else:
        return None

    def materialize() -> None:
        fresh = ref()
        if fresh is not None:
            elementwise.tensor_tensor(acc, fresh, "add", dst=fresh, partition_broadcast=True, psum_pair=True,
                                      op_name="add")

    ref = weakref.ref(mm)
    ctx.acc_spelling = (ref, acc, materialize)
    return mm


class Semantics:
    """The legacy API's (``neuronxcc.nki``) meaning of operators and assignment on kernel tensors."""

    def operator(self, t: Tensor, other, alu: str, reverse: bool):
        """``t <op> other`` (``other <op> t`` when ``reverse``): the ``nl.<alu>`` element-wise function."""
        return binary(alu, other, t) if reverse else binary(alu, t, other)

    def invert(self, t: Tensor):
        """``~t``: bitwise NOT of an integer tile, logical NOT of a bool tile."""
        return elementwise.invert(t)

    def assign(self, dst: Tensor, value) -> None:
        """``dst[...] = value``: retarget a fresh result, else copy a tile, else fill a number."""
        _assign.assign(dst, value)

    def iadd(self, dst: Tensor, other) -> None:
        """``dst += other``: join a matmul accumulation group, else add in place on VectorE."""
        _assign.accumulate(dst, other)

    def astype(self, t: Tensor, dtype):
        """``t.astype(dtype)``: a copy into a new tile of ``dtype``."""
        return elementwise.tensor_copy(t, dtype=dtype, op_name="astype")

    def broadcast_to(self, t: Tensor, shape):
        """``t.broadcast_to(shape)``: a copy broadcasting ``t`` to ``shape``."""
        return elementwise.broadcast_to(t, shape)
