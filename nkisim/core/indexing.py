"""Index expressions: nl.arange / nl.mgrid values, their affine arithmetic, and masks built from them.

An :class:`IndexExpr` is an integer NumPy array that broadcasts like NumPy advanced indexing.  Comparisons give a
:class:`Mask` (for ``mask=``); using either in Python control flow is the compiler error
err_control_flow_condition_depending_on_arange.
"""

from __future__ import annotations

import numpy as np

from nkisim.core.rules import fail
from nkisim.core.sealed import Sealed


def _val(x):
    if isinstance(x, IndexExpr):
        return x.values
    if isinstance(x, (int, np.integer)):
        return int(x)
    raise TypeError(f"index expressions combine with integers and other nl.arange expressions, not {type(x)}")


_NEXT_VAR = [0]


def _new_var() -> int:
    _NEXT_VAR[0] += 1
    return _NEXT_VAR[0]


def _merge_axes(a: IndexExpr, o) -> tuple | None:
    """Index variable of each axis of ``a (op) o`` (NumPy right-aligned broadcasting)."""
    if not isinstance(o, IndexExpr):
        return a.axv
    xa, xb = a.axv, o.axv
    if xa is None or xb is None:
        return None
    sa, sb = a.values.shape, o.values.shape
    r = max(len(sa), len(sb))
    out = []
    for i in range(r):
        ia, ib = i - (r - len(sa)), i - (r - len(sb))
        va = xa[ia] if ia >= 0 and sa[ia] != 1 else None
        vb = xb[ib] if ib >= 0 and sb[ib] != 1 else None
        out.append(va if va is not None else vb)
    return tuple(out)


class IndexExpr:
    """Affine integer index values (from nl.arange / nl.mgrid and loop variables).

    ``axv`` names the index variable along each axis (None: a unit axis or unknown): a mask is a predicate over
    these variables and is evaluated per element of an access through them (see :class:`Mask`).
    """

    __slots__ = ("values", "axv")
    __array_ufunc__ = None

    def __init__(self, values: np.ndarray, axv: tuple | None = None) -> None:
        self.values = values
        self.axv = axv

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @property
    def ndim(self) -> int:
        return self.values.ndim

    def __getitem__(self, item) -> IndexExpr:
        return IndexExpr(self.values[item], _index_axes(self.axv, self.values.ndim, item))

    def __setitem__(self, item, value) -> None:
        fail("err_cannot_assign_to_index")

    def __add__(self, o):
        if getattr(o, "_is_tile", False):  # expr + tile value: a dynamic index (Tensor.__radd__ builds it)
            return NotImplemented
        return IndexExpr(self.values + _val(o), _merge_axes(self, o))

    __radd__ = __add__

    def __sub__(self, o):
        return IndexExpr(self.values - _val(o), _merge_axes(self, o))

    def __rsub__(self, o):
        return IndexExpr(_val(o) - self.values, _merge_axes(self, o))

    def __mul__(self, o):
        return IndexExpr(self.values * _val(o), _merge_axes(self, o))

    __rmul__ = __mul__

    def __floordiv__(self, o):
        return IndexExpr(self.values // _val(o), _merge_axes(self, o))

    def __mod__(self, o):
        return IndexExpr(self.values % _val(o), _merge_axes(self, o))

    def __neg__(self):
        return IndexExpr(-self.values, self.axv)

    def _cmp(self, o, fn):
        return Mask.of(fn(self.values, _val(o)), _merge_axes(self, o))

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

    def layout(self, rank: int, out: dict) -> None:
        """Record {variable: axis} of this expression used as an index of an access of ``rank`` axes."""
        if self.axv is None:
            return
        shift = rank - self.values.ndim
        for i, (v, n) in enumerate(zip(self.axv, self.values.shape)):
            if v is not None and n != 1:
                out.setdefault(v, i + shift)


def _index_axes(axv: tuple | None, ndim: int, item) -> tuple | None:
    """Axis variables after ``expr[item]`` for ints, slices, None and Ellipsis (the ways kernels reshape aranges)."""
    if axv is None:
        return None
    if not isinstance(item, tuple):
        item = (item,)
    out = []
    k = 0
    for it in item:
        if it is None:
            out.append(None)
        elif it is Ellipsis:
            rest = sum(1 for x in item if x is not None and x is not Ellipsis)
            for _ in range(ndim - rest):
                out.append(axv[k])
                k += 1
        elif isinstance(it, slice):
            out.append(axv[k])
            k += 1
        elif isinstance(it, (int, np.integer)):
            k += 1
        else:
            return None
    out.extend(axv[k:])
    return tuple(out)


class Mask:
    """A predicate over tile positions (``mask=`` argument); combine with ``&``, ``|``, ``~``.

    Kept two ways: ``values`` broadcasts positionally as NumPy does (None when the combined expressions are laid
    out differently), and ``named = (array, variables)`` has one axis per index variable, so an instruction can
    evaluate the predicate at each element of its access through the variables that index it (:meth:`over`).
    """

    __slots__ = ("values", "named")
    __array_ufunc__ = None

    def __init__(self, values: np.ndarray | None, named: tuple | None = None) -> None:
        self.values = None if values is None else np.asarray(values, dtype=bool)
        self.named = named

    @classmethod
    def of(cls, values: np.ndarray, axv: tuple | None) -> Mask:
        """From a comparison result whose axes carry ``axv``: drop unit axes so every axis is one variable."""
        values = np.asarray(values, dtype=bool)
        if axv is None or len(axv) != values.ndim:
            return cls(values)
        keep = [i for i, n in enumerate(values.shape) if n != 1]
        names = tuple(axv[i] for i in keep)
        if any(v is None for v in names) or len(set(names)) != len(names):
            return cls(values)
        return cls(values, (values.reshape([values.shape[i] for i in keep]), names))

    def _combine(self, o, fn):
        if isinstance(o, (bool, np.bool_)):
            b = bool(o)
            named = None if self.named is None else (fn(self.named[0], b), self.named[1])
            return Mask(None if self.values is None else fn(self.values, b), named)
        if not isinstance(o, Mask):
            raise TypeError("masks combine with other masks using & and |")
        pos = None
        if self.values is not None and o.values is not None:
            try:
                pos = fn(self.values, o.values)
            except ValueError:
                try:
                    pos = fn(_fit_left(self.values, o.values.ndim), _fit_left(o.values, self.values.ndim))
                except ValueError:
                    pos = None
        named = None
        if self.named is not None and o.named is not None:
            names = self.named[1] + tuple(v for v in o.named[1] if v not in self.named[1])
            named = (fn(_spread(self.named, names), _spread(o.named, names)), names)
        if pos is None and named is None:
            raise ValueError(f"mask predicates of shapes {_shape(self)} and {_shape(o)} cannot be combined: build "
                             "them from nl.arange/nl.mgrid expressions")
        return Mask(pos, named)

    def __and__(self, o):
        return self._combine(o, np.logical_and)

    __rand__ = __and__

    def __or__(self, o):
        return self._combine(o, np.logical_or)

    __ror__ = __or__

    def __invert__(self):
        return Mask(None if self.values is None else ~self.values,
                    None if self.named is None else (~self.named[0], self.named[1]))

    def __bool__(self) -> bool:
        fail("err_control_flow_condition_depending_on_arange")
        return False

    def over(self, shape: tuple[int, ...], layout: dict | None) -> np.ndarray | None:
        """The predicate at every element of an access of ``shape`` whose axes carry ``layout`` ({variable:
        axis}); None when the mask's variables are not all in the layout."""
        if self.named is None or not layout:
            return None
        vals, names = self.named
        rank = len(shape)
        idx = []
        for v, n in zip(names, vals.shape):
            ax = layout.get(v)
            if ax is None or ax >= rank or shape[ax] != n:
                return None
            sh = [1] * rank
            sh[ax] = n
            idx.append(np.arange(n).reshape(sh))
        if not idx:
            return np.broadcast_to(vals, shape)
        return np.broadcast_to(vals[tuple(idx)], shape)


def _shape(m: Mask) -> list:
    return list(m.values.shape) if m.values is not None else list(m.named[0].shape)


def _spread(named: tuple, names: tuple) -> np.ndarray:
    """A named predicate with one axis per name in ``names`` (unit axes for variables it does not use)."""
    vals, own = named
    order = [own.index(v) for v in names if v in own]
    if order != list(range(len(order))):
        vals = np.transpose(vals, order)
    return vals.reshape([named[0].shape[own.index(v)] if v in own else 1 for v in names])


def _fit_left(a: np.ndarray, rank: int) -> np.ndarray:
    """Right-pad with unit axes (partition-first alignment) when the other operand has more axes."""
    if a.ndim < rank:
        return a.reshape(a.shape + (1,) * (rank - a.ndim))
    return a


def arange(*args) -> IndexExpr:
    """nl.arange(stop) / nl.arange(start, stop): a 1-D index vector; reshape it with [:, None] / [None, :]."""
    if not 1 <= len(args) <= 2:
        raise TypeError("nl.arange takes (stop) or (start, stop)")
    return IndexExpr(np.arange(*[int(a) for a in args], dtype=np.int64), (_new_var(),))


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


class _MGrid(metaclass=Sealed):
    """nl.mgrid[0:128, 0:512]: one IndexExpr per axis; each varies along its own axis only (unit elsewhere).

    NKI's index expressions are symbolic: an access spans each index variable it uses along that variable's axis,
    whatever grid the variable came from.  AWS's legacy samples rely on it: ``t[i_p, 0]`` with ``i_p`` from
    ``nl.mgrid[0:128, 0:32]`` is a [128, 1] access, and ``t[g, i_p, i_exp * 1024 + i_f]`` combines ``i_p`` of
    ``nl.mgrid[0:128, 0:4096]`` with ``i_f`` of ``nl.mgrid[0:1, 0:1024]`` into a [128, 1024] access
    (aws-neuron/nki-samples src/nki_samples/reference/allocated_attention.py, attention.py
    fused_self_attn_for_SD_small_head_size; both pass AWS's simulator).  NumPy's open grid (``np.ogrid``) gives
    exactly that per-variable extent, and broadcasting two components restores the dense grid
    (``i_p * 512 + i_f`` is [128, 512]), so values, masks and accesses built from both components are unchanged.
    """

    def __getitem__(self, item) -> MGridResult:
        if not isinstance(item, tuple):
            item = (item,)
        if len(item) == 1:
            grids = np.mgrid[item][None]
        else:
            grids = np.ogrid[item]
        names = tuple(_new_var() for _ in range(len(grids)))
        return MGridResult(IndexExpr(np.ascontiguousarray(g), names) for g in grids)


mgrid = _MGrid()


class DynIndex:
    """A run-time index: the values of an on-chip integer tile (indirect DMA ``t[idx_tile, i_f]``) plus an optional
    affine offset (``idx_tile[0, b] + iy`` of nisa.tensor_copy_dynamic_src).  Resolved when the access is made
    (nkisim executes in program order, so the tile holds its values by then)."""

    __slots__ = ("tile", "offset")

    def __init__(self, tile, offset=0) -> None:
        self.tile = tile
        self.offset = offset

    def __add__(self, o):
        if isinstance(o, (IndexExpr, int, np.integer)):
            return DynIndex(self.tile, _add(self.offset, o))
        raise TypeError(f"a dynamic index combines with integers and nl.arange expressions, not {type(o).__name__}")

    __radd__ = __add__


def _add(a, b):
    if isinstance(b, IndexExpr) and not isinstance(a, IndexExpr):
        return b + a
    return a + b
