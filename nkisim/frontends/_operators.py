"""Operator arguments of the NKI APIs, resolved to the names the core uses: ALU operators (``op=nl.add``,
``np.add``), activation functions (``op=nl.exp``, ``np.exp``) and engine choices.  Shared by every front end: the
``nl`` functions carry their core name (``nki_alu`` / ``nki_act``), NumPy's ufuncs are looked up here.

The operator tables live once, in the core (``core.execute.ALU`` / ``UNARY_ALU`` / ``ACTIVATION``: what each
operator computes); :func:`language_operators` derives from them the element-wise ``nl`` functions a front end
defines (those its documented-symbol list names), so a new operator is one entry in ``core/execute.py``.
"""

from __future__ import annotations

import numpy as np

from nkisim.core import execute
from nkisim.core.instr import Engine
from nkisim.core.rules import fail

NP_ALU = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
    np.true_divide: "divide", np.maximum: "maximum", np.minimum: "minimum", np.max: "maximum",
    np.min: "minimum", np.amax: "maximum", np.amin: "minimum", np.power: "power", np.mod: "mod",
    np.fmod: "fmod", np.equal: "equal", np.not_equal: "not_equal", np.greater: "greater",
    np.greater_equal: "greater_equal", np.less: "less", np.less_equal: "less_equal",
    np.logical_and: "logical_and", np.logical_or: "logical_or", np.logical_xor: "logical_xor",
    np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor",
    np.left_shift: "left_shift", np.right_shift: "right_shift", np.sum: "add", np.prod: "multiply",
    # the unary operators (resolved only where one is allowed: alu(..., unary=True))
    np.abs: "abs", np.absolute: "abs", np.square: "square", np.reciprocal: "reciprocal", np.invert: "invert",
}


NP_ACT = {
    np.exp: "exp", np.log: "log", np.sqrt: "sqrt", np.tanh: "tanh", np.sin: "sin", np.cos: "cos",
    np.arctan: "arctan", np.square: "square", np.abs: "abs", np.absolute: "abs", np.sign: "sign",
    np.copy: "copy", np.negative: "negative", np.reciprocal: "reciprocal", np.floor: "floor",
    np.ceil: "ceil", np.trunc: "trunc",
}


def alu(op, what: str = "op", unary: bool = False) -> str:
    """The core name of ALU operator ``op``.  ``unary``: the instruction takes the table's unary operators
    (``nl.abs``, ``nl.rsqrt``, ... and ``nl.invert``: tensor_scalar's ``op0``/``op1``, tensor_scalar_reduce's
    ``op0``); elsewhere naming one is an error that says where it belongs."""
    name = getattr(op, "nki_alu", None)
    if name is None:
        name = getattr(op, "nki_act", None)
        if name not in execute.UNARY_ALU:
            try:
                name = NP_ALU.get(op)
            except TypeError:
                name = None
    if name is None:
        fail("nkisim_bad_argument", op=what, detail=f"{op!r} is not an NKI ALU operator (use nl.add, nl.maximum, ...)")
    if name in execute.UNARY_ALU and not unary:
        fail("nkisim_bad_argument", op=what, detail=f"nl.{name} is a unary ALU operator: only tensor_scalar and "
             "tensor_scalar_reduce take it (as op0 with operand0=0 or None); here an operator of two operands is "
             "needed (nl.add, nl.maximum, ...)")
    return name


def language_operators(symbols) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The element-wise ``nl`` functions of a front end whose documented names are ``symbols`` (``nl.<name>``
    entries): the core's binary ALU operators and its activation functions, in table order."""
    documented = {s[3:] for s in symbols if s.startswith("nl.")}
    binary = tuple(n for n in execute.ALU if n not in execute.UNARY_ALU and n in documented)
    unary = tuple(n for n in execute.ACTIVATION if n in documented and n != "copy")
    return binary, unary


def act(op) -> str:
    name = getattr(op, "nki_act", None)
    if name is None:
        try:
            name = NP_ACT.get(op)
        except TypeError:
            name = None
    if name is None and getattr(op, "__name__", None) == "copy":
        name = "copy"
    if name is None:
        fail("nkisim_bad_argument", op="activation",
              detail=f"{op!r} is not an activation function (use nl.exp, nl.copy, ...)")
    return name


def engine(e) -> Engine:
    if e is None:
        return Engine.UNKNOWN
    try:
        return Engine(int(e))
    except ValueError:
        fail("nkisim_bad_argument", op="engine", detail=f"unknown engine {e!r}")
    return Engine.UNKNOWN
