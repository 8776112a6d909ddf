"""Index expressions: nl.arange / nl.mgrid values, their affine arithmetic, and masks built from them.

An :class:`IndexExpr` is an integer NumPy array that broadcasts like NumPy advanced indexing.  Comparisons give a
:class:`Mask` (for ``mask=``); using either in Python control flow is the compiler error
err_control_flow_condition_depending_on_arange.
"""

from __future__ import annotations

import numpy as np

from nkisim.core.rules import fail


def _val(x):
    if isinstance(x, IndexExpr):
        return x.values
    if isinstance(x, (int, np.integer)):
        return int(x)
    raise TypeError(f"index expressions combine with integers and other nl.arange expressions, not {type(x)}")


class IndexExpr:
    """Affine integer index values (from nl.arange / nl.mgrid and loop variables)."""

    __slots__ = ("values",)
    __array_ufunc__ = None

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @property
    def ndim(self) -> int:
        return self.values.ndim

    def __getitem__(self, item) -> IndexExpr:
        return IndexExpr(self.values[item])

    def __setitem__(self, item, value) -> None:
        fail("err_cannot_assign_to_index")

    def __add__(self, o):
        return IndexExpr(self.values + _val(o))

    __radd__ = __add__

    def __sub__(self, o):
        return IndexExpr(self.values - _val(o))

    def __rsub__(self, o):
        return IndexExpr(_val(o) - self.values)

    def __mul__(self, o):
        return IndexExpr(self.values * _val(o))

    __rmul__ = __mul__

    def __floordiv__(self, o):
        return IndexExpr(self.values // _val(o))

    def __mod__(self, o):
        return IndexExpr(self.values % _val(o))

    def __neg__(self):
        return IndexExpr(-self.values)

    def _cmp(self, o, fn):
        return Mask(fn(self.values, _val(o)))

    def __lt__(self, o):
        return self._cmp(o, np.less)

    def __le__(self, o):
        return self._cmp(o, np.less_equal)

    def __gt__(self, o):
        return self._cmp(o, np.greater)

    def __ge__(self, o):
        return self._cmp(o, np.greater_equal)

    def __eq__(self, o):  # type: ignore[override]
        return self._cmp(o, np.equal)

    def __ne__(self, o):  # type: ignore[override]
        return self._cmp(o, np.not_equal)

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        fail("err_control_flow_condition_depending_on_arange")
        return False

    def __index__(self) -> int:
        fail("err_control_flow_condition_depending_on_arange")
        return 0

    def __iter__(self):
        fail("err_control_flow_condition_depending_on_arange")

    def __repr__(self) -> str:
        return f"IndexExpr(shape={self.shape})"


class Mask:
    """A predicate over tile positions (``mask=`` argument); combine with ``&``, ``|``, ``~``."""

    __slots__ = ("values",)
    __array_ufunc__ = None

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values, dtype=bool)

    def __and__(self, o):
        return Mask(self.values & _mask_val(o))

    __rand__ = __and__

    def __or__(self, o):
        return Mask(self.values | _mask_val(o))

    __ror__ = __or__

    def __invert__(self):
        return Mask(~self.values)

    def __bool__(self) -> bool:
        fail("err_control_flow_condition_depending_on_arange")
        return False


def _mask_val(o):
    if isinstance(o, Mask):
        return o.values
    if isinstance(o, (bool, np.bool_)):
        return bool(o)
    raise TypeError("masks combine with other masks using & and |")


def arange(*args) -> IndexExpr:
    """nl.arange(stop) / nl.arange(start, stop): a 1-D index vector; reshape it with [:, None] / [None, :]."""
    if not 1 <= len(args) <= 2:
        raise TypeError("nl.arange takes (stop) or (start, stop)")
    return IndexExpr(np.arange(*[int(a) for a in args], dtype=np.int64))


class MGridResult(tuple):
    """Result of nl.mgrid[...]: unpacks like a tuple and offers .p/.x/.y/.z (axes 0..3)."""

    __slots__ = ()

    @property
    def p(self) -> IndexExpr:
        return self[0]

    @property
    def x(self) -> IndexExpr:
        return self[1]

    @property
    def y(self) -> IndexExpr:
        return self[2]

    @property
    def z(self) -> IndexExpr:
        return self[3]


class _MGrid:
    """nl.mgrid[0:128, 0:512]: one IndexExpr per axis, each shaped to broadcast over the others."""

    def __getitem__(self, item) -> MGridResult:
        if not isinstance(item, tuple):
            item = (item,)
        grids = np.mgrid[item]
        if len(item) == 1:
            grids = grids[None]
        return MGridResult(IndexExpr(np.ascontiguousarray(g)) for g in grids)


mgrid = _MGrid()
