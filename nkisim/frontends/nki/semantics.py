"""Operators and assignment on tensors of the current NKI API (``nki``, NKI 0.6).

``NkiTensor`` defines no arithmetic, comparison or bitwise operators (nki/api/nki/language/__init__.py: the class
documents views and ``__setitem__`` only; computation is ``nl.<op>(x, y)`` or an ``nki.isa`` instruction), so
``a + b`` and ``acc += x`` are errors naming the replacement.  Item assignment keeps the core's meaning
(``t[...] = nl.load(x)`` writes the load's instruction into ``t``; a number fills): see
:class:`nkisim.core.semantics.Semantics`.
"""

from __future__ import annotations

from nkisim.core.ops import registers as _reg
from nkisim.core.semantics import Semantics

_SYMBOL = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "less": "<", "less_equal": "<=",
           "greater": ">", "greater_equal": ">=", "left_shift": "<<", "right_shift": ">>", "bitwise_and": "&",
           "bitwise_or": "|", "bitwise_xor": "^"}


class NkiSemantics(Semantics):
    """The current API: no operators on tensors; assignment as in the core."""

    def operator(self, t, other, alu: str, reverse: bool):
        sym = _SYMBOL.get(alu, alu)
        raise TypeError(
            f"NkiTensor '{t.name}' has no '{sym}' operator in the nki API (NKI 0.2+): compute with "
            f"nl.{alu}(x, y), which returns a new tile, or write into a tile you allocated with "
            f"nisa.tensor_tensor(dst, x, y, op=nl.{alu}) / nisa.tensor_scalar(dst, x, op0=nl.{alu}, operand0=c)")

    @_reg.api  # an instruction: a run-time-offset view among its operands is resolved first (core.ops.registers)
    def assign(self, dst, value) -> None:
        from nkisim.core.context import current

        if current("assignment").recording is not None:
            # item assignment rewrites the previous instruction's destination, which a recorded body cannot replay
            raise NotImplementedError(
                f"nkisim does not support item assignment ('{dst.name}[...] = ...') inside a dynamic loop body yet: "
                "write with an instruction that takes dst (nisa.dma_copy(dst=..., src=...), nisa.tensor_copy, ...)")
        super().assign(dst, value)

    @_reg.api  # makes instructions: recorded in a dynamic loop body and in a program's stream (nkisim.stream)
    def astype(self, t, dtype):
        return super().astype(t, dtype)

    @_reg.api
    def broadcast_to(self, t, shape):
        return super().broadcast_to(t, shape)

    def invert(self, t):
        raise TypeError(f"NkiTensor '{t.name}' has no '~' operator in the nki API: use nl.invert(x) (integers) or "
                        "nl.logical_not(x)")

    def iadd(self, dst, other) -> None:
        raise TypeError(
            f"NkiTensor '{dst.name}' has no '+=' in the nki API (NKI 0.2+: ISA calls take their destination first): "
            "accumulate a matmul with nisa.nc_matmul(dst=acc, stationary=..., moving=...) (the first matmul into a "
            "PSUM location overwrites, later ones accumulate), or add in place with "
            "nisa.tensor_tensor(dst=t, data1=t, data2=x, op=nl.add)")
