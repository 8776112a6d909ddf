"""``nki.language.NkiTensor``: the tensor kernels of the current API hold.

The core's tensor with the current API's surface (nki/api/nki/language/__init__.py, NKI 0.6, ``class NkiTensor``):
its attributes (``strides``, ``offset``, ``size``, ``buffer`` as a memory-region object), its view methods (``ap``,
``permute``, ``broadcast``, ``select``, ``slice``, ``reshape_dim``, ``flatten_dims``, ``expand_dim``,
``squeeze_dim``, ``view``, ``get_pattern``, ``is_contiguous``, ``is_indirect``), all of them
``nkisim.core.aps`` views of the same storage, and its indexing rules: negative indices count from the end, an
integer on the partition dim of an on-chip tensor keeps it as size 1 ("Result is always at least 2D"), an HBM
tensor indexed by an integer on every axis is a (1,) view ("Result is at least 1D"), and tensors are not index
expressions (``nl.ds`` is a slice).  No view copies data.
"""

from __future__ import annotations

from nkisim.core import aps
from nkisim.core import context as _ctx
from nkisim.core.access import allocation, is_gather
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF
from nkisim.core.ops import registers as _reg
from nkisim.core.placement import placed_address
from nkisim.core.tensor import Tensor
from nkisim.frontends._unsupported import NkisimUnsupportedError
from nkisim.frontends.nki import objects


def _normalize(t: NkiTensor, idx) -> tuple:
    """The index with negative positions made positive and an integer on an on-chip partition dim kept as a
    size-1 slice; tensors as indices are refused (the API addresses dynamically through ``.ap``/``select``)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    # the usual index needs no rewriting: non-negative ints (not on an on-chip partition dim) and slices with
    # non-negative int (or no) bounds, at least one slice when it addresses every axis of an HBM tensor; returned as
    # it is, without the walk below (views are on the per-instruction path: python -m nkisim.bench)
    first = t.kind != B_HBM  # an int on an on-chip tensor's dim 0 becomes a size-1 slice
    sliced = False
    for it in items:
        c = it.__class__
        if c is slice:
            lo = it.start
            hi = it.stop
            if not (lo is None or lo.__class__ is int and lo >= 0) or not (
                    hi is None or hi.__class__ is int and hi >= 0):
                break
            sliced = True
        elif c is not int or it < 0 or first:
            break
        first = False
    else:
        if sliced or len(items) != len(t.shape):
            return items
    shape = t.shape
    n_real = sum(1 for it in items if it is not Ellipsis and it is not None)
    out = []
    dim = 0
    on_chip = t.kind != B_HBM
    for it in items:
        if it is Ellipsis:
            skip = len(shape) - n_real
            out.append(Ellipsis)
            dim += max(skip, 0)
            continue
        if isinstance(it, Tensor):
            raise TypeError(f"NkiTensor '{t.name}': a tensor cannot index a tensor in the nki API; address "
                            "dynamically with .ap(pattern, scalar_offset=..., vector_offset=...) or .select(dim, "
                            "index_tensor)")
        n = shape[dim] if dim < len(shape) else 0
        if isinstance(it, slice):
            start, stop = it.start, it.stop
            if isinstance(start, int) and start < 0:
                start += n
            if isinstance(stop, int) and stop < 0:
                stop += n
            out.append(slice(start, stop, it.step))
        elif isinstance(it, int) or hasattr(it, "__index__") and not isinstance(it, bool):
            i = int(it)
            if i < 0:
                i += n
            out.append(slice(i, i + 1) if on_chip and dim == 0 else i)
        else:
            out.append(it)
        dim += 1
    if not on_chip and out and len(out) == len(shape) and all(isinstance(o, int) for o in out):
        # "HBM tensors: integer indexing removes the dimension. Result is at least 1D" (NkiTensor.__getitem__,
        # NKI 0.6): an integer on every axis is the one-element (1,) view, not a 0-d one
        out[-1] = slice(out[-1], out[-1] + 1)
    return tuple(out)


def _unsupported_method(fn):
    fn.nkisim_unsupported = True  # python -m nkisim.apicoverage counts it as missing
    return fn


class NkiTensor(Tensor):
    """A view of an HBM, SBUF or PSUM tensor of the current NKI API."""

    __slots__ = ()

    # ---- attributes of the API ----------------------------------------------------------------------------
    @property
    def buffer(self):
        """The memory region (``t.buffer == nl.sbuf``)."""
        if self.kind == B_SBUF:
            return objects.sbuf
        if self.kind == B_PSUM:
            return objects.psum
        return objects.shared_hbm if allocation(self).space == "shared_hbm" else objects.private_hbm

    @property
    def strides(self) -> tuple[int, ...]:
        return aps.element_strides(self)

    @property
    def offset(self) -> int:
        return aps.element_offset(self)

    @property
    def address(self) -> tuple[int, int] | None:
        """``(partition_offset, free_offset)`` (bytes) where an explicitly placed on-chip tensor (``nl.ndarray(...,
        address=...)``) or a view of it starts; None where the compiler places the tensor.  Not in the API stubs:
        AWS's nki-library allocator reference prints it (nki/library/kernel-utils/allocator.rst)."""
        return placed_address(self)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __bool__(self) -> bool:
        """A tensor is a handle and is always true: ``if params.expert_index:`` tests that the optional tensor was
        given (AWS's nki-library, mlp_tkg_constants.calculate_constants, in the MoE TKG kernel its fast suite runs
        on Trainium).  No device value is read: the legacy API's "truth value of an array" error and the opacity
        of HBM values (np.asarray, iteration) are unchanged."""
        return True

    def __repr__(self) -> str:
        return f"<NkiTensor '{self.name}' shape={self.shape} dtype={self.dtype} buffer={self.buffer!r}>"

    # ---- indexing: Tensor.__getitem__ applies _normalize to every index but an in-bounds leading slice ---------
    index_hook = _normalize

    # ---- views (nkisim.core.aps) --------------------------------------------------------------------------
    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        """Explicit ``[[stride, count], ...]`` access pattern over the storage (offset: elements).  ``scalar_offset``
        (a register or a one-element integer tensor) adds ``scalar_offset * stride of dim indirect_dim``, a device value
        the executor reads when an instruction uses the view (the kernel's Python never sees it)."""
        if vector_offset is not None:
            if scalar_offset is not None:
                raise ValueError("NkiTensor.ap: vector_offset and scalar_offset are mutually exclusive "
                                 "(nki.isa.dma_copy, 'Indirect addressing')")
            # per-partition rows, a device value: resolved when its instructions execute (core.aps.vector_ap)
            return aps.vector_ap(self, pattern, offset, vector_offset, int(indirect_dim), dtype, "NkiTensor.ap")
        if scalar_offset is not None:
            if isinstance(scalar_offset, (_reg.Register, Tensor)):
                # a device value: the view is resolved when its instructions execute (core.aps.dynamic_ap)
                return aps.dynamic_ap(self, pattern, offset, scalar_offset, int(indirect_dim), dtype, "NkiTensor.ap")
            if isinstance(scalar_offset, bool) or not hasattr(scalar_offset, "__index__"):
                raise TypeError("NkiTensor.ap: scalar_offset must be an integer, a VirtualRegister or a one-element "
                                f"integer tensor, got {type(scalar_offset).__name__}")
            stride = aps.element_strides(self)[int(indirect_dim)]
            return aps.ap(self, pattern, offset, dtype, extra=int(scalar_offset) * stride)
        return aps.ap(self, pattern, offset, dtype)

    def permute(self, dims):
        return aps.permute(self, dims)

    def broadcast(self, dim, size):
        return aps.broadcast(self, dim, size)

    def expand_dim(self, dim):
        return aps.expand_dim(self, dim)

    def squeeze_dim(self, dim):
        return aps.squeeze_dim(self, dim)

    def reshape_dim(self, dim, shape):
        return aps.reshape_dim(self, dim, shape)

    def flatten_dims(self, start_dim, end_dim):
        return aps.flatten_dims(self, start_dim, end_dim)

    def slice(self, dim, start, end, step=1):
        return aps.slice_dim(self, dim, start, end, step)

    def select(self, dim, index):
        if isinstance(index, (Tensor, _reg.Register)):  # a run-time index (core.aps.dynamic_select)
            return aps.dynamic_select(self, dim, index)
        return aps.select(self, dim, index)

    def view(self, dtype):
        return aps.view_dtype(self, dtype)

    reinterpret_cast = view

    def get_pattern(self) -> list[list[int]]:
        return aps.get_pattern(self)

    def is_contiguous(self) -> bool:
        return aps.is_contiguous(self)

    def is_indirect(self) -> bool:
        return is_gather(self)

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None):
        """einops-style split / reorder / merge of dimensions (a view)."""
        return aps.rearrange(self, src_pattern, dst_pattern, fixed_sizes)

    def vector_select(self, dim, vector_offset):
        """Per-partition indirect addressing: row p reads ``self[vector_offset[p, 0], ...]`` (HBM, dim 0)."""
        v = aps.vector_select(self, dim, vector_offset)
        ctx = _ctx.active()
        if ctx is not None and ctx.stream is not None:  # a gather: the recorded program says how it was made
            ctx.stream.derived(v, ("vsel", self, int(dim), vector_offset))
        return v

    @_unsupported_method
    def indirect(self, index, num_elem=None):
        raise NkisimUnsupportedError("nkisim does not support NkiTensor.indirect yet (tensor indirection is "
                                     "NeuronCore-v4, which nkisim does not model)")
