"""Tensor views over HBM, SBUF and PSUM allocations: indexing, reshape, opacity.

A :class:`Tensor` is what kernel code holds.  It carries a NumPy view of its allocation but never exposes it:
kernel code sees shapes and dtypes only, and any attempt to read values on the host (``np.asarray``, iteration,
``float()``, arithmetic on HBM tensors) raises a clear error; values move only through DMA and engine
instructions.  Basic indexing gives true NumPy views; ``nl.arange``/``nl.mgrid`` indexing and slices that run
past the end (legal under ``mask=``) give *gather views* that read and write through index arrays.
"""

from __future__ import annotations

import math

import numpy as np

from nkisim.core.dtypes import name as dtype_name
from nkisim.core.indexing import IndexExpr, Mask
from nkisim.core.instr import B_HBM, Operand, Region
from nkisim.core.memory import BUF_NAMES, Allocation
from nkisim.core.rules import fail


class ParDim:
    """nl.par_dim(n): marks the partition dimension inside a shape tuple."""

    __slots__ = ("size",)

    def __init__(self, size) -> None:
        self.size = _as_int(size, "par_dim")

    def __index__(self) -> int:
        return self.size

    __int__ = __index__

    def __eq__(self, other) -> bool:
        return int(other) == self.size if isinstance(other, (int, ParDim, np.integer)) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.size)

    def __repr__(self) -> str:
        return f"par_dim({self.size})"


def _as_int(v, what: str) -> int:
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, ParDim):
        return v.size
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)  # students pass h/pool; integral floats are accepted leniently
    raise TypeError(f"{what}: expected an integer size, got {v!r}")


def parse_shape(shape) -> tuple[tuple[int, ...], int]:
    """Shape tuple (ints and at most one par_dim) -> (plain int shape, partition axis)."""
    if type(shape) is tuple:
        for d in shape:
            if type(d) is not int or d < 0:
                break
        else:
            return shape, 0
    if isinstance(shape, (int, np.integer, ParDim)):
        shape = (shape,)
    dims = []
    pdim = 0
    seen = False
    for i, d in enumerate(shape):
        if isinstance(d, ParDim):
            if seen:
                raise ValueError(f"shape {shape} has more than one nl.par_dim")
            pdim, seen = i, True
        n = _as_int(d, "shape")
        if n < 0:
            raise ValueError(f"negative dimension {n} in shape {tuple(shape)}")
        dims.append(n)
    return tuple(dims), pdim


def _is_adv(x) -> bool:
    return isinstance(x, (IndexExpr, np.ndarray))


class Tensor:
    """A view of an HBM, SBUF or PSUM tensor as NKI kernel code sees it."""

    __slots__ = ("_a", "_v", "_off", "_pd", "_ix", "_oob", "_opnd", "shape", "dtype", "__weakref__")
    __array_ufunc__ = None  # numpy must not treat tensors as arrays

    def __init__(self, alloc: Allocation, view: np.ndarray, pdim: int = 0, ix=None, shape=None,
                 oob: bool = False, off: int | None = None) -> None:
        self._a = alloc
        self._v = view
        # byte offset of the view's first element from the allocation's base (tracked, not queried: hot path)
        self._off = off if off is not None else view.__array_interface__["data"][0] - base_addr(alloc)
        self._pd = pdim
        self._ix = ix
        self._oob = oob
        self._opnd = None
        self.shape = view.shape if shape is None else shape
        self.dtype = view.dtype

    # ---- public, read-only metadata --------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def buffer(self) -> str:
        return BUF_NAMES[self._a.buf]

    @property
    def name(self) -> str:
        return self._a.name

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<nki tensor '{self._a.name}' shape={self.shape} dtype={self.dtype} buffer={self.buffer}>"

    def assert_shape(self, shape) -> Tensor:
        want, _ = parse_shape(shape)
        if tuple(want) != tuple(self.shape):
            raise AssertionError(f"shape of `{self._a.name}{list(self.shape)}` does not match the expected shape "
                                 f"of {list(want)}")
        return self

    # ---- opacity ----------------------------------------------------------------------------------------
    def _opaque(self, action: str):
        if self._a.buf == B_HBM:
            fail("nkisim_hbm_opaque", name=self._a.name, action=action)
        fail("err_dynamic_control_flow_not_supported")

    def __array__(self, *args, **kwargs):
        self._opaque("np.asarray / np.array")

    def __iter__(self):
        self._opaque("iteration")

    def __bool__(self) -> bool:
        if self._a.buf == B_HBM:
            self._opaque("truth value")
        fail("err_ambiguous_tensor_truth_value")
        return False

    def __float__(self) -> float:
        self._opaque("conversion to a Python number")
        return 0.0

    __int__ = __float__

    def __index__(self) -> int:
        self._opaque("use as a Python index")
        return 0

    def tolist(self):
        self._opaque("tolist")

    def __reduce_ex__(self, protocol):  # pickle/copy would hand out the backing array
        self._opaque("pickling or copying")

    def __getstate__(self):
        self._opaque("pickling or copying")

    # ---- indexing ---------------------------------------------------------------------------------------
    def __getitem__(self, idx) -> Tensor:
        if self._ix is not None:
            raise NotImplementedError(
                f"nkisim: indexing an advanced-indexed view of '{self._a.name}' again is not supported; "
                "index the tensor once with all index expressions")
        if type(idx) is slice and idx.step is None and not self._a.block_mod:
            # fast path for the most common index in kernels: one unit-step slice of the leading axis
            n = self.shape[0]
            start = 0 if idx.start is None else _as_index(idx.start)
            stop = n if idx.stop is None else _as_index(idx.stop)
            if 0 <= start and stop <= n and start <= stop:
                return Tensor(self._a, self._v[start:stop], self._pd, off=self._off + start * self._v.strides[0])
        if not isinstance(idx, tuple):
            idx = (idx,)
        shape = self.shape
        ndim = len(shape)
        n_adv = 0
        has_basic_slice = False
        for it in idx:
            if _is_adv(it):
                n_adv += 1
            elif isinstance(it, Mask):
                raise NotImplementedError("nkisim: operand masking t[mask] is not supported; pass mask= to the "
                                          "instruction instead")
            elif isinstance(it, slice):
                has_basic_slice = True
        if n_adv:
            if has_basic_slice:
                fail("err_unsupported_mixing_basic_advanced_tensor_indexing")
            return self._advanced(idx)
        # basic indexing: ints, slices, Ellipsis
        out_axes = 0
        new_pd = None
        pd = self._pd
        dim = 0
        norm = []
        strides = self._v.strides
        off = self._off
        overflow = False
        ell = False
        for it in idx:
            if it is Ellipsis:
                if ell:
                    raise IndexError("an index can only have a single ellipsis ('...')")
                ell = True
                n_rest = sum(1 for x in idx if x is not Ellipsis and x is not None)
                skip = ndim - n_rest
                for _ in range(skip):
                    if dim == pd:
                        new_pd = out_axes
                    norm.append(slice(None))
                    dim += 1
                    out_axes += 1
                continue
            if it is None:
                raise IndexError("nkisim: None (np.newaxis) is not a valid tensor index; use reshape or "
                                 "expand_dims")
            if dim >= ndim:
                raise IndexError(f"too many indices for tensor '{self._a.name}' of shape {shape}")
            n = shape[dim]
            if isinstance(it, slice):
                start, stop, step = it.start, it.stop, it.step
                start = 0 if start is None else _as_index(start)
                stop = n if stop is None else _as_index(stop)
                step = 1 if step is None else _as_index(step)
                if step <= 0:
                    raise IndexError(f"nkisim: slice step must be positive (got {step})")
                if start < 0 or stop < 0:
                    fail("err_tensor_access_out_of_bound", name=self._a.name, dim=dim, lo=start, hi=stop - 1,
                         size=n)
                if stop > n:
                    overflow = True
                norm.append(slice(start, stop, step))
                off += start * strides[dim]
                if dim == pd:
                    new_pd = out_axes
                out_axes += 1
            else:
                i = _as_index(it)
                if not 0 <= i < n:
                    fail("err_tensor_access_out_of_bound", name=self._a.name, dim=dim, lo=i, hi=i, size=n)
                if dim == 0 and self._a.block_mod:
                    i %= self._a.block_mod
                norm.append(i)
                off += i * strides[dim]
            dim += 1
        if overflow:
            return self._overflow_view(tuple(norm))
        view = self._v[tuple(norm)]
        return Tensor(self._a, view, new_pd if new_pd is not None else 0, off=off)

    def _overflow_view(self, norm: tuple) -> Tensor:
        """Slices running past the end: a gather view with the nominal length (only legal under a mask)."""
        shape = self._v.shape
        full = list(norm) + [slice(0, n, 1) for n in shape[len(norm):]]
        rank = sum(1 for it in full if isinstance(it, slice))
        arrays = []
        k = 0
        for it in full:
            if isinstance(it, slice):
                vals = np.arange(it.start, it.stop, it.step)
                sh = [1] * rank
                sh[k] = len(vals)
                arrays.append(vals.reshape(sh))
                k += 1
            else:
                arrays.append(np.asarray(it).reshape((1,) * rank))
        return self._gather(arrays, pdim=0)

    def _advanced(self, idx: tuple) -> Tensor:
        arrays = []
        for it in idx:
            if it is Ellipsis:
                raise IndexError("nkisim: Ellipsis cannot be combined with nl.arange/nl.mgrid indices")
            if isinstance(it, IndexExpr):
                vals = it.values
            elif isinstance(it, np.ndarray):
                vals = it.astype(np.int64)
            else:
                vals = np.asarray(_as_index(it))
            if vals.ndim == 1:
                fail("err_1d_arange_not_supported", name=self._a.name)
            arrays.append(vals)
        if len(arrays) < self._v.ndim:
            raise IndexError(f"nkisim: index all {self._v.ndim} dimensions of '{self._a.name}' when using "
                             "nl.arange/nl.mgrid indices")
        return self._gather(arrays, pdim=0)

    def _gather(self, arrays: list, pdim: int) -> Tensor:
        try:
            bshape = np.broadcast_shapes(*(a.shape for a in arrays))
        except ValueError as exc:
            raise IndexError(f"index expressions for '{self._a.name}' do not broadcast: {exc}") from None
        oob = False
        fixed = []
        for dim, a in enumerate(arrays):
            n = self._v.shape[dim]
            if a.size and (a.min() < 0 or a.max() >= n):
                oob = True
            fixed.append(a)
        return Tensor(self._a, self._v, pdim, ix=tuple(fixed), shape=tuple(bshape), oob=oob, off=self._off)

    def oob_message_fields(self) -> dict:
        for dim, a in enumerate(self._ix or ()):
            n = self._v.shape[dim]
            if a.size and (a.min() < 0 or a.max() >= n):
                return dict(name=self._a.name, dim=dim, lo=int(a.min()), hi=int(a.max()), size=n)
        return dict(name=self._a.name, dim=0, lo=0, hi=0, size=0)

    def __setitem__(self, idx, value) -> None:
        from nkisim.core import ops

        ops.assign(self[idx], value)

    # ---- in-place accumulate and operators --------------------------------------------------------------
    def __iadd__(self, other):
        from nkisim.core import ops

        ops.accumulate(self, other)
        return self

    def _binop(self, other, name: str, reverse: bool = False):
        if self._a.buf == B_HBM:
            self._opaque("Python arithmetic operator")
        from nkisim.api import language as nl

        fn = getattr(nl, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o):
        return self._binop(o, "add")

    def __radd__(self, o):
        return self._binop(o, "add", True)

    def __sub__(self, o):
        return self._binop(o, "subtract")

    def __rsub__(self, o):
        return self._binop(o, "subtract", True)

    def __mul__(self, o):
        return self._binop(o, "multiply")

    def __rmul__(self, o):
        return self._binop(o, "multiply", True)

    def __truediv__(self, o):
        return self._binop(o, "divide")

    def __rtruediv__(self, o):
        return self._binop(o, "divide", True)

    def __neg__(self):
        return self._binop(-1.0, "multiply")

    def __lt__(self, o):
        return self._binop(o, "less")

    def __le__(self, o):
        return self._binop(o, "less_equal")

    def __gt__(self, o):
        return self._binop(o, "greater")

    def __ge__(self, o):
        return self._binop(o, "greater_equal")

    def __isub__(self, o):
        return self._binop(o, "subtract")

    def __imul__(self, o):
        return self._binop(o, "multiply")

    # ---- views ------------------------------------------------------------------------------------------
    def reshape(self, *shape, **kwargs) -> Tensor:
        if "shape" in kwargs:
            shape = kwargs.pop("shape")
        elif len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        if kwargs:
            raise TypeError(f"reshape() got unexpected keyword arguments {sorted(kwargs)}")
        new, pdim = parse_shape(tuple(shape))
        if self._ix is not None:
            fail("nkisim_reshape", name=self._a.name, shape=self.shape, new=new,
                 detail="cannot reshape an advanced-indexed view")
        if math.prod(new) != math.prod(self.shape):
            fail("nkisim_reshape", name=self._a.name, shape=self.shape, new=new,
                 detail="the number of elements differs")
        v = self._v
        if self._a.buf != B_HBM and self._pd == 0 and pdim == 0 and new and new[0] != self.shape[0]:
            fail("nkisim_reshape", name=self._a.name, shape=self.shape, new=new,
                 detail="a tile reshape must keep the partition dimension size")
        try:
            out = v.view()
            out.shape = new  # raises instead of copying when the view is not contiguous enough
        except (AttributeError, ValueError):
            fail("nkisim_reshape", name=self._a.name, shape=self.shape, new=new,
                 detail="the view is not contiguous in its free dimensions (copy it into a tile first)")
        return Tensor(self._a, out, pdim, off=self._off)

    def broadcast_to(self, shape) -> Tensor:
        from nkisim.api import language as nl

        return nl.broadcast_to(self, shape=shape)

    def astype(self, dtype) -> Tensor:
        """Copy into a new tile of ``dtype`` (one VectorE copy instruction)."""
        from nkisim.core import ops

        return ops.tensor_copy(self, dtype=dtype, op_name="astype")

    def view(self, dtype) -> Tensor:
        """Reinterpret the bits as ``dtype`` of the same size (no copy)."""
        from nkisim.core.dtypes import to_dtype

        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize or self._ix is not None:
            fail("nkisim_reshape", name=self._a.name, shape=self.shape, new=self.shape,
                 detail=f"view({dt}) needs a basic view and a dtype of the same size as {self.dtype}")
        return Tensor(self._a, self._v.view(dt), self._pd, off=self._off)

    def expand_dims(self, axis: int) -> Tensor:
        shape = list(self.shape)
        shape.insert(axis, 1)
        return self.reshape(tuple(shape))

    # ---- internals used by the front end ----------------------------------------------------------------
    def operand(self) -> Operand:
        op = self._opnd
        if op is None:
            op = self._opnd = _make_operand(self)
        return op


def base_addr(alloc: Allocation) -> int:
    if not alloc.addr:
        alloc.addr = alloc.base.__array_interface__["data"][0]
    return alloc.addr


def _as_index(v) -> int:
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, IndexExpr):
        fail("err_unsupported_mixing_basic_advanced_tensor_indexing")
    raise TypeError(f"tensor indices must be integers, slices or nl.arange expressions, not {type(v).__name__}")


def read(t: Tensor) -> np.ndarray:
    """Values of a view (gather views copy; out-of-bound positions are clipped, callers mask them)."""
    if t._ix is None:
        return t._v
    if t._oob:
        ix = tuple(np.clip(a, 0, n - 1) for a, n in zip(t._ix, t._v.shape))
        return t._v[ix]
    return t._v[t._ix]


def write(t: Tensor, values: np.ndarray, mask: np.ndarray | None = None) -> None:
    """Store ``values`` (already in t.dtype, broadcastable) into the view, honouring an optional mask."""
    if t._ix is None:
        if mask is None:
            t._v[...] = values
        else:
            m = np.broadcast_to(mask, t.shape)
            t._v[m] = np.broadcast_to(values, t.shape)[m]
        return
    vals = np.broadcast_to(values, t.shape)
    ix = [np.broadcast_to(a, t.shape) for a in t._ix]
    if mask is not None:
        m = np.broadcast_to(mask, t.shape)
        ix = [a[m] for a in ix]
        vals = vals[m]
    t._v[tuple(ix)] = vals


_new_region = tuple.__new__


def _make_operand(t: Tensor) -> Operand:
    """Describe a view for the cost model (called once per view, cached; hot path: keep it lean)."""
    if t._ix is not None:
        return _gather_operand(t)
    a = t._a
    v = t._v
    shape = v.shape
    strides = v.strides
    isz = v.itemsize
    pd = t._pd
    size = 1
    span = 0
    fspan = 0
    k = 0
    for n in shape:
        size *= n
        if n > 1:
            st = strides[k]
            d = (n - 1) * (st if st > 0 else -st)
            span += d
            if k != pd:
                fspan += d
        k += 1
    contig = isz  # longest contiguous byte run within one partition (DMA descriptor size)
    on_chip = a.buf != B_HBM
    k = len(shape)
    while k:
        k -= 1
        n = shape[k]
        if n == 1:
            continue
        if strides[k] != contig or (on_chip and k == pd):
            break
        contig *= n
    inner = strides[-1] if shape else isz
    if inner < 0:
        inner = -inner
    lo = t._off
    if a.buf == B_HBM:
        parts = shape[0] if shape else 1
        region = _new_region(Region, (B_HBM, a.phys, 0, 1, lo, lo + span + isz))
    else:
        rb = a.row_bytes
        parts = shape[pd] if shape else 1
        p_lo = lo // rb
        b_lo = lo - p_lo * rb
        region = _new_region(Region, (a.buf, a.phys, p_lo, p_lo + (parts or 1), b_lo, b_lo + fspan + isz))
    if not parts:
        parts = 1
    return Operand(region, shape, dtype_name(v.dtype), isz, parts, size // parts, inner, contig)


def _gather_operand(t: Tensor) -> Operand:
    """Bounding box of the positions an advanced-indexed view touches."""
    a = t._a
    v = t._v
    isz = v.itemsize
    lo_off = hi_off = 0
    for arr, st, n in zip(t._ix, v.strides, v.shape):
        amin = int(np.clip(arr.min(), 0, n - 1)) if arr.size else 0
        amax = int(np.clip(arr.max(), 0, n - 1)) if arr.size else 0
        lo_off += amin * st if st >= 0 else amax * st
        hi_off += amax * st if st >= 0 else amin * st
    lo, hi = t._off + lo_off, t._off + hi_off + isz
    shape = t.shape
    size = math.prod(shape)
    if a.buf == B_HBM:
        parts = shape[0] if shape else 1
        region = Region(B_HBM, a.phys, 0, 1, lo, hi)
    else:
        rb = a.row_bytes
        parts = shape[t._pd] if shape else 1
        p_lo = lo // rb
        b_lo = lo - p_lo * rb
        p_hi = (hi - 1) // rb + 1
        b_hi = rb if p_hi - p_lo > 1 else hi - p_lo * rb
        region = Region(a.buf, a.phys, p_lo, max(p_hi, p_lo + 1), b_lo, max(b_hi, b_lo + isz))
    parts = max(parts, 1)
    # contiguous run along the innermost axis (an nl.arange grid over a row): the DMA descriptor size
    contig = isz
    if len(shape) > 1 and shape[-1] > 1 and size:
        first = (0,) * (len(shape) - 1)
        row = sum(np.broadcast_to(arr, shape)[first].astype(np.int64) * st for arr, st in zip(t._ix, v.strides))
        if bool(np.all(np.diff(row) == isz)):
            contig = shape[-1] * isz
    return Operand(region, tuple(shape), dtype_name(v.dtype), isz, parts, size // parts, isz, contig)
