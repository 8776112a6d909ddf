"""Strided views over a tensor's storage: the current NKI API's view algebra (``NkiTensor.ap``, ``permute``,
``broadcast``, ``select``, ``reshape_dim``, ``view(dtype)``, ... in nki/api/nki/language/__init__.py, NKI 0.6).

A view is an element offset plus ``[stride, count]`` pairs over the *storage* of its allocation ("the element
addressed by (i0, ..., in-1) sits at offset + sum_k strides[k] * i_k", NKI Language Guide, "Anatomy of a tensor").
Storage is the allocation in its physical layout (partition axis first for SBUF/PSUM, row-major for HBM), so a
pattern's partition stride is the number of elements per partition ("Partition stride is 1024 (storage's free-dim
count), NOT 1", same guide, "Low-level raw access pattern").  Every function here returns a view of the same
class as its input sharing the storage (writes through it are visible through every other view): NumPy strided
arrays, which the rest of the core (operands, values, bounds) already handles.

With :mod:`nkisim.core.tensor` and :mod:`nkisim.core.access`, this module reads a view's private slots.

(Over 600 lines on purpose: the documented view algebra is one piece, every view built by the same offset rules.)
"""

from __future__ import annotations

import numpy as np

from nkisim.core.access import LOGICAL_BLOCK
from nkisim.core.dtypes import name as dtype_name
from nkisim.core.instr import B_HBM
from nkisim.core.rules import fail
from nkisim.core.tensor import Tensor


def _basic(t: Tensor, what: str) -> None:
    if t._ix is not None:
        fail("nkisim_view", name=t.name, op=what, detail="the view is an indirect (gathered) access")


def element_strides(t: Tensor) -> tuple[int, ...]:
    """Strides of the view in elements of its dtype."""
    _basic(t, "strides")
    isz = t._v.itemsize
    return tuple(s // isz for s in t._v.strides)


def element_offset(t: Tensor) -> int:
    """Offset of the view's first element from the start of its storage, in elements of its dtype."""
    return t._off // t._v.itemsize


def get_pattern(t: Tensor) -> list[list[int]]:
    """``[[stride, count], ...]`` of the view, one pair per dimension (``NkiTensor.get_pattern``)."""
    return [[s, n] for s, n in zip(element_strides(t), t.shape)]


def is_contiguous(t: Tensor) -> bool:
    """Dense row-major over its dimensions; for on-chip tensors the partition dim is skipped
    (``NkiTensor.is_contiguous``: "partitions are physically independent memory banks")."""
    if t._ix is not None:
        return False
    want = 1
    dims = range(len(t.shape) - 1, 0 if t.kind != B_HBM else -1, -1)
    strides = element_strides(t)
    for d in dims:
        n = t.shape[d]
        if n != 1 and strides[d] != want:
            return False
        want *= n
    return True


def _new(t: Tensor, arr: np.ndarray, off_bytes: int | None = None) -> Tensor:
    return t.__class__(t._a, arr, 0, off=t._off if off_bytes is None else off_bytes)


def _on_chip_dim0(t: Tensor, dim: int, op: str, what: str) -> None:
    if t.kind != B_HBM and dim == 0:
        fail("nkisim_view", name=t.name, op=op, detail=f"{what} the partition dimension (dim 0) of an on-chip tensor")


def _axis(t: Tensor, dim: int, op: str, extra: int = 0) -> int:
    nd = len(t.shape) + extra
    d = int(dim)
    if not -nd <= d < nd:
        fail("nkisim_view", name=t.name, op=op, detail=f"dimension {dim} out of range for {nd} dimensions")
    return d % nd


def permute(t: Tensor, dims) -> Tensor:
    """Reorder dimensions; on-chip tensors keep the partition dim first (``dims[0] == 0``)."""
    _basic(t, "permute")
    dims = tuple(int(d) for d in dims)
    if sorted(dims) != list(range(len(t.shape))):
        fail("nkisim_view", name=t.name, op="permute", detail=f"{dims} is not a permutation of {len(t.shape)} dims")
    if t.kind != B_HBM and dims[0] != 0:
        fail("nkisim_view", name=t.name, op="permute", detail="an on-chip tensor keeps its partition dimension "
             f"first (dims[0] must be 0, got {dims})")
    return _new(t, t._v.transpose(dims))


def broadcast(t: Tensor, dim: int, size: int) -> Tensor:
    """Repeat a size-1 dimension ``size`` times (stride 0); never the partition dim of an on-chip tensor."""
    _basic(t, "broadcast")
    d = _axis(t, dim, "broadcast")
    _on_chip_dim0(t, d, "broadcast", "cannot broadcast")
    if t.shape[d] != 1:
        fail("nkisim_view", name=t.name, op="broadcast", detail=f"dimension {d} has size {t.shape[d]}, not 1")
    shape = list(t.shape)
    shape[d] = int(size)
    strides = list(t._v.strides)
    strides[d] = 0
    return _new(t, np.lib.stride_tricks.as_strided(t._v, shape=shape, strides=strides))


def expand_dim(t: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dimension at ``dim`` (not before the partition dim of an on-chip tensor)."""
    _basic(t, "expand_dim")
    d = _axis(t, dim, "expand_dim", extra=1)
    _on_chip_dim0(t, d, "expand_dim", "cannot insert a dimension before")
    return _new(t, np.expand_dims(t._v, d))


def squeeze_dim(t: Tensor, dim: int) -> Tensor:
    """Remove a size-1 dimension (not the partition dim of an on-chip tensor)."""
    _basic(t, "squeeze_dim")
    d = _axis(t, dim, "squeeze_dim")
    _on_chip_dim0(t, d, "squeeze_dim", "cannot remove")
    if t.shape[d] != 1:
        fail("nkisim_view", name=t.name, op="squeeze_dim", detail=f"dimension {d} has size {t.shape[d]}, not 1")
    return _new(t, np.squeeze(t._v, axis=d))


def reshape_dim(t: Tensor, dim: int, shape) -> Tensor:
    """Split dimension ``dim`` into ``shape`` (one entry may be -1)."""
    d = _axis(t, dim, "reshape_dim")
    parts = [int(s) for s in shape]
    n = t.shape[d]
    if parts.count(-1) > 1:
        fail("nkisim_view", name=t.name, op="reshape_dim", detail=f"at most one -1 in {tuple(parts)}")
    if -1 in parts:
        known = int(np.prod([p for p in parts if p != -1]))
        if known == 0 or n % known:
            fail("nkisim_view", name=t.name, op="reshape_dim", detail=f"{tuple(parts)} cannot split size {n}")
        parts[parts.index(-1)] = n // known
    if int(np.prod(parts)) != n:
        fail("nkisim_view", name=t.name, op="reshape_dim", detail=f"{tuple(parts)} does not multiply to {n}")
    if t.kind != B_HBM and d == 0 and len(parts) != 1:
        fail("nkisim_view", name=t.name, op="reshape_dim", detail="cannot split the partition dimension")
    return t.reshape(tuple(t.shape[:d]) + tuple(parts) + tuple(t.shape[d + 1:]))


def flatten_dims(t: Tensor, start_dim: int, end_dim: int) -> Tensor:
    """Merge dimensions ``start_dim..end_dim`` (inclusive), which must be contiguous in memory."""
    s, e = _axis(t, start_dim, "flatten_dims"), _axis(t, end_dim, "flatten_dims")
    if e < s:
        fail("nkisim_view", name=t.name, op="flatten_dims", detail=f"end_dim {end_dim} < start_dim {start_dim}")
    _on_chip_dim0(t, s, "flatten_dims", "cannot merge")
    merged = int(np.prod(t.shape[s:e + 1]))
    return t.reshape(tuple(t.shape[:s]) + (merged,) + tuple(t.shape[e + 1:]))


def slice_dim(t: Tensor, dim: int, start: int, end: int, step: int = 1) -> Tensor:
    """``t[..., start:end:step, ...]`` along ``dim`` (``NkiTensor.slice``: 0 <= start < end <= size, step >= 1)."""
    d = _axis(t, dim, "slice")
    n = t.shape[d]
    if not (0 <= int(start) < int(end) <= n) or int(step) < 1:
        fail("nkisim_view", name=t.name, op="slice", detail=f"[{start}:{end}:{step}] of dimension {d} (size {n}) "
             "needs 0 <= start < end <= size and step >= 1")
    return t[(slice(None),) * d + (slice(int(start), int(end), int(step)),)]


def select(t: Tensor, dim: int, index: int) -> Tensor:
    """``t[..., index, ...]`` along ``dim``, removing the dimension (static index)."""
    d = _axis(t, dim, "select")
    n = t.shape[d]
    i = int(index)
    if not 0 <= i < n:
        fail("err_tensor_access_out_of_bound", name=t.name, dim=d, lo=i, hi=i, size=n)
    _on_chip_dim0(t, d, "select", "cannot remove")
    return t[(slice(None),) * d + (i,)]


def view_dtype(t: Tensor, dtype) -> Tensor:
    """Reinterpret the bits as ``dtype``; the last dimension is scaled by the size ratio and must be contiguous
    (``NkiTensor.view``)."""
    from nkisim.core.dtypes import to_dtype

    _basic(t, "view")
    dt = to_dtype(dtype)
    v = t._v
    if v.ndim == 0 or (v.shape[-1] > 1 and v.strides[-1] != v.itemsize):
        fail("nkisim_view", name=t.name, op="view", detail="the last dimension must be contiguous")
    if dt.itemsize < v.itemsize or (v.shape[-1] * v.itemsize) % dt.itemsize == 0:
        try:
            return _new(t, v.view(dt))
        except ValueError:
            pass
    fail("nkisim_view", name=t.name, op="view", detail=f"the last dimension ({v.shape[-1]} x {v.dtype}) does not "
         f"divide into {dt}")
    return t


_FAULTY: dict[type, type] = {}


def deferred_fault(t: Tensor, code: str, **fields) -> Tensor:
    """A view whose access pattern leaves its tensor: the error is raised when the view is used (an instruction
    reads any of it), not when the kernel's Python builds it.  An access pattern is a description until an
    instruction carries it, so a view that no instruction uses never reaches the compiler: AWS's nki-library
    output-projection TKG kernel builds ``w_sbuf.ap(..., offset=... + h_2_idx)`` for every group and guards the
    matmul with ``if h_2_idx < cfg.h_2_size`` (its fast suite runs on Trainium).  The object is an instance of the
    tensor's own class, so operand checks see a tensor, and its first attribute read raises the catalogue error."""
    cls = _FAULTY.get(type(t))
    if cls is None:
        def __getattribute__(self, name):  # noqa: N807
            if name in ("__class__", "_fault"):
                return object.__getattribute__(self, name)
            code, fields = object.__getattribute__(self, "_fault")
            fail(code, **fields)

        def __repr__(self) -> str:  # noqa: N807
            return f"<out-of-bounds view: {object.__getattribute__(self, '_fault')[1]}>"

        cls = _FAULTY[type(t)] = type(type(t).__name__, (type(t),), {
            "__slots__": ("_fault",), "__getattribute__": __getattribute__, "__repr__": __repr__,
            "__bool__": lambda self: True})
    view = object.__new__(cls)
    object.__setattr__(view, "_fault", (code, fields))
    return view


def ap(t: Tensor, pattern, offset: int | None = None, dtype=None, extra: int = 0) -> Tensor:
    """The view ``[[stride, count], ...]`` at element ``offset`` of the storage (``NkiTensor.ap``): ``offset`` None
    keeps this view's storage offset, an integer adds to it, and so do ``extra`` elements (a scalar offset's
    ``value * stride``).  The partition stride of an
    on-chip tensor is its elements per partition; the pattern must stay inside the storage.

    The storage is the tensor's allocation seen as (partitions, elements per partition).  On chip a partition's
    row need not follow the previous one in memory (a tensor placed with ``address=`` is a region of the arena,
    whose partitions are a whole arena row apart), so the partition pair maps to the allocation's partition pitch
    and the free pairs to element strides inside the row."""
    from nkisim.core.dtypes import to_dtype

    a = t._a
    base = a.base
    on_chip = t.kind != B_HBM
    if a.placed is not None:  # a region of the arena: partitions one arena row apart
        p_first, parts, f_first = a.placed
        pitch, row_bytes = base.strides[0], a.bytes_pp
        dt = t._v.dtype if dtype is None else to_dtype(dtype)
    else:
        if base.dtype != t._v.dtype or not base.flags.c_contiguous:
            fail("nkisim_view", name=t.name, op="ap", detail="nkisim does not support .ap() on reinterpreted "
                 "tensors yet")
        p_first = f_first = 0
        parts = base.shape[0] if on_chip and base.ndim else 1
        row_bytes = pitch = base.nbytes // parts
        dt = base.dtype if dtype is None else to_dtype(dtype)
    isz = dt.itemsize
    if row_bytes % isz:
        fail("nkisim_view", name=t.name, op="ap", detail=f"a partition of {row_bytes} bytes does not divide into "
             f"{dt}")
    row = row_bytes // isz  # elements per partition (the whole storage off chip), in the pattern's dtype
    # the view's own storage offset, plus ``offset`` ("element offset added to the view's base storage offset ...
    # offset=0 keeps the base, offset=N shifts by N additional elements", NkiTensor.ap, NKI 0.6 stub; nki-aps.rst's
    # "Composition" says .ap ignores "any ... offset carried by the view", which its examples, all on offset-0
    # views, cannot tell apart; the parameter's own text is the precise one)
    p_view, byte_in_row = divmod(t._off, pitch)
    start = (p_view - p_first) * row + (byte_in_row - f_first) // isz + (int(offset) if offset is not None else 0)
    start += extra
    pairs = [(int(s), int(c)) for s, c in pattern]
    if not pairs or any(c < 1 for _, c in pairs):
        fail("nkisim_view", name=t.name, op="ap", detail=f"pattern {pattern!r} needs [stride, count] pairs with "
             "counts >= 1")
    lo = start + sum(s * (c - 1) for s, c in pairs if s < 0)
    hi = start + sum(s * (c - 1) for s, c in pairs if s > 0)
    if lo < 0 or hi >= parts * row:
        return deferred_fault(t, "err_tensor_access_out_of_bound", name=t.name, dim=0, lo=lo, hi=hi,
                              size=parts * row)
    strides = [s * isz for s, _ in pairs]
    if on_chip:
        if pairs[0][1] > parts or (pairs[0][1] > 1 and pairs[0][0] != row):
            fail("nkisim_view", name=t.name, op="ap", detail=f"the first pair {list(pairs[0])} must walk the "
                 f"partitions: stride {row} (elements per partition), count <= {parts}")
        _check_free_pattern_in_row(t, pairs, start, row)
        strides[0] = pitch
    p_start, e_start = divmod(start, row)
    off = (p_first + p_start) * pitch + f_first + e_start * isz
    origin = base.reshape(-1).view(np.uint8)[off:]
    shape = tuple(c for _, c in pairs)
    # from the view's first byte: the pattern was bounds-checked against the storage above (a placed tensor's later
    # partitions lie one pitch apart in the same arena buffer); bytes first, then the dtype over a last axis of
    # itemsize bytes, because as_strided cannot rebuild ml_dtypes' fp8 typestr
    arr = np.lib.stride_tricks.as_strided(origin, shape=shape + (isz,), strides=tuple(strides) + (1,)).view(dt)[..., 0]
    return t.__class__(a, arr, 0, off=off)


def _check_free_pattern_in_row(t: Tensor, pairs: list[tuple[int, int]], start: int, row: int) -> None:
    """The free pairs of an on-chip pattern must stay inside one partition's row of the storage.

    On the hardware an access pattern is a run of partitions plus one free pattern that every partition walks in
    its own memory (trainium_inferentia2_arch.rst, "Access patterns": no P-dimension striding, the same free
    pattern on every active partition).  A free stride that steps past the row does not reach the next partition
    there: it reads bytes further along the same partition.  Over nkisim's compact (P, row) storage it would read
    the next partition's row instead, a cross-partition move no engine makes (docs/grading-security.md, G11), so
    it is refused."""
    in_row = start % row
    lo = in_row + sum(s * (c - 1) for s, c in pairs[1:] if s < 0)
    hi = in_row + sum(s * (c - 1) for s, c in pairs[1:] if s > 0)
    if lo < 0 or hi >= row:
        fail("nkisim_view", name=t.name, op="ap", detail=f"the free pairs {[list(p) for p in pairs[1:]]} starting "
             f"at element {in_row} of a partition reach elements [{lo}, {hi}], but each partition of this tensor "
             f"holds {row} elements: a free access pattern stays inside its own partition (every partition walks "
             "the same free pattern in its own memory), so it cannot reach another partition's data; move data "
             "across partitions with a DMA or a TensorE transpose/matmul")


def rearrange(t: Tensor, src_pattern, dst_pattern, fixed_sizes=None) -> Tensor:
    """einops-style ``NkiTensor.rearrange``: split the grouped dimensions of ``src_pattern`` (sizes from
    ``fixed_sizes``, at most one inferred per group), reorder the named dimensions to ``dst_pattern``'s order and
    merge its groups: ``t.rearrange(('b', ('h', 'w')), ('b', 'w', 'h'), {'h': 4})`` on (128, 24) -> (128, 6, 4).
    Built from :func:`reshape_dim`, :func:`permute` and ``reshape``, so the view rules (partition dim first on
    chip, merges of contiguous dims) are theirs."""
    sizes = dict(fixed_sizes or {})
    src = [tuple(g) if isinstance(g, (tuple, list)) else (g,) for g in src_pattern]
    dst = [tuple(g) if isinstance(g, (tuple, list)) else (g,) for g in dst_pattern]
    names = [n for g in src for n in g]
    if len(src) != len(t.shape):
        fail("nkisim_view", name=t.name, op="rearrange", detail=f"src_pattern {tuple(src_pattern)} names "
             f"{len(src)} dimensions, the tensor has {len(t.shape)}")
    if len(set(names)) != len(names) or sorted(names) != sorted(n for g in dst for n in g):
        fail("nkisim_view", name=t.name, op="rearrange", detail=f"src_pattern and dst_pattern must name the same "
             f"dimensions once each ({tuple(src_pattern)} -> {tuple(dst_pattern)})")
    split_shape: list[int] = []
    for g, n in zip(src, t.shape):
        unknown = [x for x in g if x not in sizes or sizes[x] == -1]
        if len(unknown) > 1:
            fail("nkisim_view", name=t.name, op="rearrange", detail=f"group {g}: give the sizes of all but one "
                 "dimension in fixed_sizes")
        known = int(np.prod([sizes[x] for x in g if x not in unknown]))
        if unknown:
            if known == 0 or n % known:
                fail("nkisim_view", name=t.name, op="rearrange", detail=f"group {g} cannot split size {n}")
            sizes[unknown[0]] = n // known
        elif known != n:
            fail("nkisim_view", name=t.name, op="rearrange", detail=f"group {g} has size {known}, the dimension {n}")
        split_shape.extend(int(sizes[x]) for x in g)
    v = t
    d = 0
    for g in src:  # split each group in place
        if len(g) > 1:
            v = reshape_dim(v, d, [sizes[x] for x in g])
        d += len(g)
    order = [names.index(n) for g in dst for n in g]
    if order != list(range(len(order))):
        v = permute(v, order)
    merged = tuple(int(np.prod([sizes[x] for x in g])) for g in dst)
    if merged != tuple(v.shape):
        if t.kind != B_HBM and len(dst[0]) > 1:
            fail("nkisim_view", name=t.name, op="rearrange", detail="cannot merge into the partition dimension")
        v = v.reshape(merged)
    return v


def vector_select(t: Tensor, dim: int, vector_offset: Tensor) -> Tensor:
    """``NkiTensor.vector_select``: row ``p`` of the result is ``t[vector_offset[p, 0], ...]`` (per-partition
    indirect addressing of an HBM tensor's dim 0 by an SBUF ``(P, 1)`` integer tile).  The result is a gather view
    whose index tile is a source of every DMA that reads or writes it (indirect DMA: the descriptors are built from
    it); its indices are read when the view is made, as for the legacy API's dynamic indices."""
    from nkisim.core.access import is_gather
    from nkisim.core.instr import B_SBUF

    if int(dim) != 0:
        fail("nkisim_view", name=t.name, op="vector_select", detail=f"dim must be 0, got {dim}")
    if t.kind != B_HBM:
        fail("nkisim_view", name=t.name, op="vector_select", detail="only HBM tensors take a vector_select")
    if is_gather(t):
        fail("nkisim_view", name=t.name, op="vector_select", detail="the tensor is already indirect (one dynamic "
             "select per tensor: check is_indirect())")
    if not isinstance(vector_offset, Tensor) or vector_offset.kind != B_SBUF or len(vector_offset.shape) != 2 \
            or vector_offset.shape[1] != 1 or vector_offset.dtype.kind not in "iu":
        fail("nkisim_view", name=t.name, op="vector_select", detail="vector_offset must be an integer SBUF tensor "
             "of shape (num_partitions, 1)")
    nd = len(t.shape)
    index = vector_offset
    for _ in range(nd - 2):
        index = index.expand_dims(index.ndim)  # (P, 1, ..., 1): broadcasts against the other dims' ranges
    items = [index] + [np.arange(n).reshape((1,) * (k + 1) + (n,) + (1,) * (nd - k - 2))
                       for k, n in enumerate(t.shape[1:])]
    return t._advanced(tuple(items))


# ---- run-time scalar offsets (``.ap(scalar_offset=...)``): the specialize/execute split -------------------------
# A view whose offset is a run-time value exists for the kernel's Python only as its pattern: the executor
# (core.ops.registers) resolves it just before each instruction that uses it, from the register or the one-element
# tensor holding the offset, and an offset outside the tensor is a fault of the run, not an error the kernel's
# Python could catch.  Its cost does not depend on the offset either: the compiler cannot know it, so the view's
# operand covers all of the tensor it may reach (hazards) with the pattern's own shape and runs (bytes,
# descriptors), in every mode.


class Recipe:
    """How the executor resolves a run-time-offset view: ``base.ap(pattern, offset + value * stride, dtype)``."""

    __slots__ = ("base", "pattern", "offset", "source", "stride", "dtype", "where", "dim")

    def __init__(self, base, pattern, offset, source, stride, dtype, where, dim: int = 0) -> None:
        self.base, self.pattern, self.offset, self.source = base, pattern, offset, source
        self.stride, self.dtype, self.where, self.dim = stride, dtype, where, dim


_DYNAMIC: dict = {}
_DYNAMIC_TYPES: set = set()  # _DYNAMIC's values: a set, for strided_key's per-argument test
# the view methods that derive a new view: "Once a view is indirect, the indirected dimension cannot be sliced or
# selected again" (NKI language guide, "Tensor views"); nkisim refuses every derivation made by kernel code
_DERIVING = ("__getitem__", "ap", "permute", "broadcast", "expand_dim", "squeeze_dim", "reshape_dim",
             "flatten_dims", "slice", "select", "view", "reinterpret_cast", "rearrange", "vector_select", "reshape",
             "expand_dims", "get_pattern")


def _from_kernel_code() -> bool:
    from nkisim.core.context import active

    ctx = active()
    return ctx is not None and not ctx.api_depth


def _refuse(name: str):
    def method(self, *args, **kwargs):
        if name == "__getitem__" and args and args[0] is Ellipsis:
            return self  # the whole view (``t[...] = x``): nothing derived
        if _from_kernel_code():
            fail("nkisim_view", name=self.name, op=name, detail="the view has a run-time offset (scalar_offset, "
                 "vector_offset or a dynamic select: is_indirect() is True), so no view can be derived from it "
                 "(\"Once a view is indirect, the indirected dimension cannot be sliced or selected again\", NKI "
                 "language guide); apply the run-time offset in the last view of the chain")
        return getattr(super(cls_of[0], self), name)(*args, **kwargs)

    cls_of: list = [None]
    method.__name__ = name
    return method, cls_of


def _dynamic_operand(self):
    """The operand of a run-time-offset view (or of a view the builders derive from it): the pattern's shape and runs,
    over the whole tensor it may reach (the compiler does not know the offset)."""
    op = self._opnd
    if op is None:
        from nkisim.core.access import make_operand
        from nkisim.core.instr import Region

        op = make_operand(self)
        a = self._a
        r = op.region
        if a.buf == B_HBM:
            region = Region(B_HBM, a.phys, 0, 1, 0, a.base.nbytes)
        else:
            lo = a.placed[2] if a.placed is not None else 0
            region = Region(r.buf, r.phys, r.p_lo, r.p_hi, lo, lo + a.bytes_pp)
        op = self._opnd = op._replace(region=region)
    return op


def _offset_unknown(self):
    if _from_kernel_code():
        raise TypeError(f"NkiTensor '{self.name}': the offset of a view with a run-time scalar_offset is not known "
                        "while the kernel is built (it is a device value)")
    return element_offset(self)


def indirection(t) -> str | None:
    """How a view addresses its tensor at run time: "vector" (per-partition offsets: ``vector_offset`` /
    ``vector_select``, or index arrays), "scalar" (``.ap(scalar_offset=...)`` / ``select(dim, tensor)``) or None."""
    r = getattr(t, "_recipe", None) if type(t) in _DYNAMIC.values() else None
    if r is not None:
        return "vector" if isinstance(r, VectorRecipe) else "scalar"
    return "vector" if getattr(t, "_ix", None) is not None else None


def dynamic_class(cls: type) -> type:
    """The class of run-time-offset views of tensor class ``cls`` (one per class, made once)."""
    dyn = _DYNAMIC.get(cls)
    if dyn is None:
        ns: dict = {"__slots__": ("_recipe",), "operand": _dynamic_operand, "is_indirect": lambda self: True,
                    "offset": property(_offset_unknown)}
        fixups = []
        for name in _DERIVING:
            if hasattr(cls, name):
                ns[name], holder = _refuse(name)
                fixups.append(holder)
        dyn = _DYNAMIC[cls] = type(cls.__name__, (cls,), ns)
        _DYNAMIC_TYPES.add(dyn)
        for holder in fixups:
            holder[0] = dyn
    return dyn


def dynamic_ap(t: Tensor, pattern, offset, source, indirect_dim: int, dtype, where: str) -> Tensor:
    """``t.ap(pattern, offset, scalar_offset=source, indirect_dim=...)`` with ``source`` a register or a one-element
    integer SBUF/HBM tensor: a view the executor resolves at each use (see above).  Statically it is the pattern at
    offset ``offset`` (checked against the tensor as any pattern is); ``scalar_offset * stride of dim indirect_dim``
    is added at run time."""
    from nkisim.core.context import current

    d = _axis(t, indirect_dim, "ap")
    if t.kind != B_HBM and d == 0:
        raise NotImplementedError("nkisim does not support a run-time scalar_offset along the partition dimension "
                                  "of an on-chip tensor yet; use indirect_dim >= 1")
    if isinstance(source, Tensor):
        from nkisim.core.instr import B_PSUM

        if int(np.prod(source.shape)) != 1 or source.dtype.kind not in "iu" or source.kind == B_PSUM:
            fail("nkisim_bad_argument", op="NkiTensor.ap", detail="scalar_offset must be a VirtualRegister or a "
                 f"one-element integer tensor in SBUF or HBM, got {list(source.shape)} {source.dtype}")
    stride = element_strides(t)[d]
    static = ap(t, pattern, offset, dtype)
    cls = dynamic_class(t.__class__)
    v = cls(static._a, static._v, 0, off=static._off)
    v._recipe = Recipe(t, [list(p) for p in pattern], None if offset is None else int(offset), source, stride, dtype,
                       where, d)
    _dynamic_operand(v)  # the record the trace takes (core.access.operand reads the cached one): offset-free
    ctx = current("NkiTensor.ap")
    ctx.dyn_views = True
    from nkisim.core import context

    context.LIVE[0] = True
    return v


def resolve(v: Tensor, value: int) -> None:
    """Point the run-time-offset view ``v`` at the offset ``value`` (the executor's value); an offset that leaves
    the tensor raises the pattern's bounds error, which the executor turns into a fault."""
    r = v._recipe
    new = ap(r.base, r.pattern, r.offset, r.dtype, extra=int(value) * r.stride)  # offset None: the view's own
    v._v, v._off = new._v, new._off


def symbolic_state(v: Tensor) -> tuple:
    """What :func:`resolve` or :func:`resolve_vector` overwrites in ``v``: handed back to :func:`restore` once the
    instruction that needed the executor's offset has run, so no resolved value stays in a view the kernel's Python
    holds (grading security S4): a scalar-offset view's storage view and offset, a vector-offset view's gather index
    arrays (the stand-in rows') and its entry in the kernel's dynamic-view table (no run-time bounds mask)."""
    if isinstance(v._recipe, VectorRecipe):
        from nkisim.core.context import current

        return v._ix, current("NkiTensor.ap").dyn.get(id(v))
    return v._v, v._off


def restore(v: Tensor, state: tuple) -> None:
    """Put ``v`` back to the state :func:`symbolic_state` saved."""
    if isinstance(v._recipe, VectorRecipe):
        from nkisim.core.context import current

        v._ix, entry = state
        dyn = current("NkiTensor.ap").dyn
        if entry is None:
            dyn.pop(id(v), None)
        else:
            dyn[id(v)] = entry
        return
    v._v, v._off = state


# ---- run-time vector offsets (``.ap(vector_offset=...)``) and dynamic selects ------------------------------------
class VectorRecipe(Recipe):
    """How the executor resolves a per-partition indirect view (``.ap(pattern, offset, vector_offset=idx,
    indirect_dim=0)``): partition ``w`` reads ``storage[offset + idx[w] * row + free pattern]`` (nki-aps.rst,
    "Vector Dynamic Access"), ``row`` the elements to the right of dim 0 of the base tensor."""

    __slots__ = ("rows", "free")

    def __init__(self, base, pattern, offset, source, stride, where, rows: int, free: np.ndarray) -> None:
        super().__init__(base, pattern, offset, source, stride, None, where)
        self.rows, self.free = rows, free


def vector_ap(t: Tensor, pattern, offset, vector_offset: Tensor, indirect_dim: int, dtype, where: str) -> Tensor:
    """``t.ap(pattern, offset, vector_offset=idx, indirect_dim=0)``: an indirect (gather/scatter) view of HBM tensor
    ``t`` whose partition ``w`` starts at row ``idx[w, 0]``.  The documented limits: "only indirect_dim=0 is
    supported"; "the stride specified in the leading dimension of the pattern in the .ap() is currently ignored"
    (nki-aps.rst); the tensor indexed "must be in HBM" and the index "an SBUF tensor of shape (P, 1) containing one
    row index per partition" (nki.isa.dma_copy, "Indirect addressing").  The index tile's values are the executor's:
    the view is resolved just before each instruction using it (core.ops.registers), an index leaving the tensor is a
    fault (or skipped rows under ``oob_mode.skip``), and its cost is an indirect DMA's (software DGE, the index tile
    a source) over the whole tensor."""
    from nkisim.core.access import is_gather
    from nkisim.core.context import LIVE, current
    from nkisim.core.instr import B_SBUF
    from nkisim.core.tensor import _register_dynamic

    op = "NkiTensor.ap"
    if int(indirect_dim) != 0:
        fail("nkisim_view", name=t.name, op="ap", detail=f"vector_offset needs indirect_dim=0 (\"Currently, only "
             f"indirect_dim=0 is supported\", nki-aps.rst), got {indirect_dim}")
    if t.kind != B_HBM:
        fail("nkisim_view", name=t.name, op="ap", detail="vector_offset indexes an HBM tensor (\"The tensor being "
             "indexed (the one .ap() is called on) must be in HBM\", nki.isa.dma_copy)")
    if is_gather(t) or getattr(t, "_recipe", None) is not None:
        fail("nkisim_view", name=t.name, op="ap", detail="the tensor is already indirect (one dynamic select per "
             "tensor: check is_indirect())")
    if dtype is not None and dtypes_of(dtype) != t.dtype:
        fail("nkisim_view", name=t.name, op="ap", detail="nkisim does not support a reinterpreting dtype= together "
             "with vector_offset yet")
    idx = vector_offset
    if not isinstance(idx, Tensor) or idx.kind != B_SBUF or len(idx.shape) != 2 or idx.dtype.kind not in "iu":
        fail("nkisim_bad_argument", op=op, detail="vector_offset must be an integer SBUF tensor of shape (P, 1), one "
             "row index per partition (or (128, N), read column by column: nki.isa.dma_transpose)")
    pairs = [(int(st), int(c)) for st, c in pattern]
    if len(pairs) < 2 or any(c < 1 for _, c in pairs):
        fail("nkisim_view", name=t.name, op="ap", detail=f"pattern {pattern!r} needs a partition pair and free "
             "[stride, count] pairs with counts >= 1")
    p = pairs[0][1]
    n_idx = idx.shape[0] * idx.shape[1]
    if (idx.shape[1] == 1 and p != idx.shape[0]) or p > n_idx:
        # (P, 1): one index per partition; (I, N): "flat_indices = indices.T.flatten()[:src.shape[0]]" and
        # "indices.shape[0] * indices.shape[1] must be >= src.shape[0]" (nki.isa.dma_transpose)
        fail("nkisim_view", name=t.name, op="ap", detail=f"the pattern's partition count {p} must be the number of "
             f"indices, vector_offset.shape[0] = {idx.shape[0]}" if idx.shape[1] == 1 else
             f"the pattern's leading count {p} exceeds the {n_idx} indices of vector_offset {list(idx.shape)}")
    base = t._a.base
    n_rows = base.shape[0] if base.ndim else 1
    row = base.size // max(n_rows, 1)  # elements to the right of dim 0 of the base tensor
    start = element_offset(t) + (int(offset) if offset is not None else 0)  # as ap(): added to the view's
    free = np.full([c for _, c in pairs[1:]], start, dtype=np.int64)
    for k, (st, c) in enumerate(pairs[1:]):
        free += st * np.arange(c, dtype=np.int64).reshape([c if j == k else 1 for j in range(len(pairs) - 1)])
    if free.size and (free.min() < 0 or free.max() >= base.size):
        fail("err_tensor_access_out_of_bound", name=t.name, dim=0, lo=int(free.min()), hi=int(free.max()),
             size=base.size)
    storage = base.reshape(n_rows, row)
    # stand-in rows (distinct, as a gather's are) until the executor resolves the view: checks and costs do not
    # depend on the index values
    stand_in = np.linspace(0, max(n_rows - 1, 0), p).round().astype(np.int64)
    cls = dynamic_class(t.__class__)
    v = cls(t._a, storage, 0, ix=_vector_ix(stand_in, free, row, n_rows)[0], shape=(p, *free.shape), oob=False,
            off=0)
    v._recipe = VectorRecipe(t, [list(q) for q in pairs], offset, idx, row, where, n_rows, free)
    _register_dynamic(v, (idx,))  # the index tile is a source of every DMA using the view (descriptors, hazards)
    current(op).dyn_views = True
    LIVE[0] = True
    return v


def _vector_ix(rows: np.ndarray, free: np.ndarray, row: int, n_rows: int) -> tuple[tuple, bool]:
    """Gather index arrays into the (rows, row) storage for partition start rows ``rows`` and the free offsets, and
    whether any element falls outside the tensor."""
    flat = rows.reshape((-1,) + (1,) * free.ndim) * row + free[None, ...]
    r, c = np.divmod(flat, row)
    return (r, c), bool(flat.size and (flat.min() < 0 or r.max() >= n_rows))


def resolve_vector(v: Tensor, rows: np.ndarray) -> None:
    """Point the indirect view ``v`` at the executor's row indices.  Elements outside the tensor are clipped for the
    executor and recorded as such (``KernelContext.dyn``): the instruction using the view skips them under
    ``oob_mode.skip`` or faults (core.access.runtime_bounds); the view's public ``oob`` stays the stand-in's."""
    from nkisim.core.tensor import _register_dynamic

    r = v._recipe
    rows = np.asarray(rows, dtype=np.int64)
    rows = rows.T.reshape(-1)[:v.shape[0]]  # column-major: "flat_indices = indices.T.flatten()" (dma_transpose)
    (ri, ci), oob = _vector_ix(rows, r.free, r.stride, r.rows)
    ok = None
    if oob:
        ok = np.broadcast_to((ri >= 0) & (ri < r.rows), v.shape)
        ri = np.clip(ri, 0, r.rows - 1)
    v._ix = (ri, ci)
    _register_dynamic(v, (r.source,), ok)


def dynamic_select(t: Tensor, dim: int, index) -> Tensor:
    """``t.select(dim, index)`` with ``index`` a run-time scalar (a one-element integer SBUF tensor or a register):
    the slice at that index along ``dim``, the dimension removed ("When index is a runtime scalar in SBUF ...
    picks one slice along dim at an index resolved at runtime, removing that dimension", nki-aps.rst).  It is the
    view's pattern without ``dim`` at a run-time ``scalar_offset`` on ``dim`` (:func:`dynamic_ap`).  "Only one
    dynamic select is allowed per view (no chaining); on SBUF / PSUM tensors the selected dimension must not be the
    partition dimension (dim 0)"."""
    from nkisim.core.access import is_gather

    d = _axis(t, dim, "select")
    if t.kind != B_HBM and d == 0:
        fail("nkisim_view", name=t.name, op="select", detail="on SBUF / PSUM tensors a dynamic select cannot pick "
             "along the partition dimension (dim 0) (nki-aps.rst, \"Scalar Dynamic Access\")")
    if is_gather(t):
        fail("nkisim_view", name=t.name, op="select", detail="the tensor is already indirect (one dynamic select "
             "per view: check is_indirect())")
    if len(t.shape) < 2:
        fail("nkisim_view", name=t.name, op="select", detail="a dynamic select needs a tensor of 2 or more dims")
    pattern = [q for k, q in enumerate(get_pattern(t)) if k != d]
    return dynamic_ap(t, pattern, None, index, d, None, "NkiTensor.select")


def dtypes_of(dtype):
    from nkisim.core.dtypes import to_dtype

    return to_dtype(dtype)


# ---- a view as plain data (nkisim.stream: the program a kernel's Python made, re-executed elsewhere) --------------
def view_state(t: Tensor) -> tuple:
    """What makes view ``t`` of its allocation, as plain data or API objects: ``("v", dtype name, shape, byte
    strides, byte offset, partition axis)`` for a strided view; ``("dyn", base, pattern, offset, source, dim, dtype,
    where)`` / ``("vec", ...)`` for a run-time-offset view (rebuilt through :func:`dynamic_ap` / :func:`vector_ap`,
    their checks included); ``("g", dtype name, storage shape, storage strides, byte offset, index arrays, shape)``
    for a legacy gather view of ``nl.arange`` indices (:func:`_rebuild_gather`)."""
    r = getattr(t, "_recipe", None)
    if r is not None:
        kind = "vec" if isinstance(r, VectorRecipe) else "dyn"
        return (kind, r.base, r.pattern, r.offset, r.source, r.dim, r.dtype, r.where)
    v = t._v
    from nkisim.core.dtypes import name

    if t._ix is not None:  # the legacy API's views indexed by nl.arange / nl.mgrid expressions that no stride gives
        return ("g", name(v.dtype), list(v.shape), list(v.strides), int(t._off), list(t._ix), list(t.shape))
    if tuple(t.shape) != v.shape:
        raise NotImplementedError(f"nkisim cannot record a view of '{t.name}' shaped {tuple(t.shape)} over "
                                  f"storage {v.shape} in an instruction stream")
    return ("v", name(v.dtype), list(v.shape), list(v.strides), int(t._off), int(t._pd))


def strided_key(t: Tensor) -> tuple | None:
    """:func:`view_state`'s fields of a strided view as one hashable tuple, ``(dtype name, shape, byte strides, byte
    offset, partition axis)``, or None for every other view (a run-time offset, a gather, a shape unlike its
    storage's: :func:`view_state` tells which).  The recorder's per-argument path (nkisim.stream interns strided
    views by these fields): no lists built, no attribute probed that the view has not."""
    if t._ix is not None or type(t) in _DYNAMIC_TYPES:
        return None
    v = t._v
    shape = v.shape
    if t._shape != shape:
        return None
    return (dtype_name(v.dtype), shape, v.strides, t._off, t._pd)


def view_extras(t: Tensor) -> tuple:
    """What a legacy view carries beyond its addresses: the index variables of its axes (``{variable: axis}``, for
    ``mask=`` predicates) and the logical block of a wrapped direct allocation; (None, None) for most views."""
    # the mapping's own dict: a WeakKeyDictionary's len() is Python code, and this runs per recorded legacy view
    return t._axv, LOGICAL_BLOCK.get(t) if LOGICAL_BLOCK.data else None


def annotate(t: Tensor, axv: dict | None, lblk: int | None) -> Tensor:
    """Give a rebuilt view the extras :func:`view_extras` read (a fresh view: never one the caller shares)."""
    from nkisim.core.access import LOGICAL_BLOCK

    t._axv = axv
    if lblk is not None:
        LOGICAL_BLOCK[t] = lblk
    return t


def _rebuild_gather(root: Tensor, state, checked: bool) -> Tensor:
    """A gather view (``("g", dtype, storage shape, storage strides, offset, index arrays, shape)``): the storage
    view is checked as any strided view (its partition axis is the one stepping by the storage's partition pitch),
    the index arrays must broadcast to the view's shape, and whether they leave the storage is computed here, as
    the core computes it when a kernel indexes (an out-of-bounds gather is an error unless a mask disables it)."""
    _, dt_name, vshape, vstrides, off, arrs, shape = state
    if not (isinstance(vshape, list) and isinstance(vstrides, list) and isinstance(shape, list)
            and all(type(n) is int and n >= 0 for n in shape) and isinstance(arrs, (list, tuple))
            and len(arrs) == len(vshape) and all(isinstance(x, np.ndarray) and x.dtype.kind in "iu" for x in arrs)):
        raise ValueError(f"malformed gather view state {state!r:.200}")
    pd = 0
    if root.kind != B_HBM:
        base = root._a.base
        pitch = base.strides[0] if base.ndim else base.nbytes
        pd = next((k for k, (n, st) in enumerate(zip(vshape, vstrides)) if n > 1 and st == pitch), 0)
    v = rebuild(root, ("v", dt_name, vshape, vstrides, off, pd), checked)
    arrs = tuple(x.astype(np.int64) for x in arrs)
    try:
        if np.broadcast_shapes(*(x.shape for x in arrs), tuple(shape)) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ValueError(f"gather view of '{root._a.name}': its index arrays do not broadcast to {shape}") from None
    oob = any(x.size and (x.min() < 0 or x.max() >= n) for x, n in zip(arrs, vshape))
    return root.__class__(root._a, v._v, 0, ix=arrs, shape=tuple(shape), oob=oob, off=off)


def rebuild(root: Tensor, state, checked: bool = False) -> Tensor:
    """The view :func:`view_state` described, of ``root``'s allocation.  ``state`` may come from an untrusted
    process: every element must lie inside the allocation's storage and, on chip, the partition axis must step by
    the storage's partition pitch with the free axes inside one partition row (what every view the API makes
    satisfies); anything else raises ValueError naming the problem.  ``checked``: this state was checked against a
    storage of the same size, layout and kind before (:func:`storage_key`), so only the view is made."""
    from nkisim.core.dtypes import to_dtype

    kind = state[0] if isinstance(state, (tuple, list)) and state else None
    if kind in ("dyn", "vec"):
        _, base, pattern, offset, source, dim, dtype, where = state
        if not isinstance(base, Tensor) or base._a is not root._a:
            raise ValueError("a run-time-offset view's base is not a view of its allocation")
        if where not in ("NkiTensor.ap", "NkiTensor.select"):
            raise ValueError(f"unknown run-time-offset view origin {where!r}")
        if kind == "vec":
            return vector_ap(base, pattern, offset, source, int(dim), dtype, where)
        return dynamic_ap(base, pattern, offset, source, int(dim), dtype, where)
    if kind == "g" and len(state) == 7:
        return _rebuild_gather(root, state, checked)
    if kind != "v" or len(state) != 6:
        raise ValueError(f"malformed view state {state!r:.200}")
    _, dt_name, shape, strides, off, pdim = state
    a = root._a
    base = a.base
    dt = to_dtype(dt_name)
    if checked:
        if off == 0 and dt is base.dtype and base.shape == tuple(shape) and base.strides == tuple(strides):
            return root.__class__(a, base, pdim, off=0)  # the whole storage, as below
        return root.__class__(a, np.ndarray(tuple(shape), dtype=dt, buffer=base, offset=off if 0 not in shape else 0,
                                            strides=tuple(strides)), pdim, off=off)
    if not (isinstance(shape, list) and isinstance(strides, list) and len(shape) == len(strides)
            and all(type(n) is int and n >= 0 for n in shape) and all(type(s) is int for s in strides)
            and type(off) is int and type(pdim) is int and 0 <= pdim <= max(len(shape) - 1, 0)):
        raise ValueError(f"malformed view state {state!r:.200}")
    isz = dt.itemsize
    lo = off + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n)
    hi = off + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n) + isz
    if any(n == 0 for n in shape):
        lo, hi = off, off
    if lo < 0 or hi > base.nbytes:
        raise ValueError(f"view of '{a.name}' reaches bytes [{lo}, {hi}) outside its {base.nbytes}-byte storage")
    if root.kind != B_HBM and shape:
        pitch = base.strides[0] if base.ndim else base.nbytes
        if shape[pdim] > 1 and strides[pdim] != pitch:
            raise ValueError(f"on-chip view of '{a.name}': partition stride {strides[pdim]} is not the partition "
                             f"pitch {pitch}")
        row_lo = off % pitch if pitch else 0
        span = sum((n - 1) * abs(s) for k, (n, s) in enumerate(zip(shape, strides)) if k != pdim and n)
        if any(s < 0 for k, s in enumerate(strides) if k != pdim) or row_lo + span + isz > pitch:
            raise ValueError(f"on-chip view of '{a.name}' leaves its partition row")
    if not base.flags.c_contiguous:
        raise ValueError(f"the storage of '{a.name}' is not contiguous")
    if off == 0 and dt is base.dtype and base.shape == tuple(shape) and base.strides == tuple(strides):
        # the whole storage in its own layout (a tile passed whole, ``dst=acc``): its view is the storage array
        # itself, as the tile's own view is in a direct run, so the core's whole-tile paths (lazy poison, uniform
        # PSUM flags: core.access) take it in a replay too
        return root.__class__(a, base, pdim, off=0)
    arr = np.ndarray(tuple(shape), dtype=dt, buffer=base, offset=off if 0 not in shape else 0, strides=tuple(strides))
    return root.__class__(a, arr, pdim, off=off)


def storage_key(root: Tensor) -> tuple:
    """What :func:`rebuild`'s checks depend on of a view's storage: its size, partition pitch and kind."""
    base = root._a.base
    return base.nbytes, base.strides[0] if base.ndim else 0, root.kind != B_HBM, base.flags.c_contiguous
