"""``nt`` (``neuronxcc.nki.typing`` and ``nki.typing``) as nkisim implements it: kernel parameter annotations.

``x: nt.tensor[128, 512]`` / ``nt.tensor[[128, 512], nl.bfloat16]`` in a kernel signature declares the expected
shape (and dtype) of an HBM argument; ``nt.mutable_tensor`` (or ``nt.tensor[nt.mutable]``) marks a parameter the
kernel may write in place.  The same objects serve as shape-only stand-ins for ``nki.benchmark`` inputs
(``bench(nt.tensor[[K, M], nl.bfloat16], ...)``), which only need shapes and dtypes.

The launcher checks arguments against the annotations (err_annotation_shape_mismatch) in
nkisim.core.runtime, which reads the ``nki_shape`` / ``nki_dtype`` / ``nki_mutable`` attributes of these objects.
"""

from __future__ import annotations

import numpy as _np

from nkisim.core import dtypes as _dt
from nkisim.core.sealed import Sealed as _Sealed


class _Mutable(metaclass=_Sealed):
    """``nt.mutable``: a marker inside ``nt.tensor[...]`` for a parameter the kernel writes in place."""

    def __repr__(self) -> str:
        return "nt.mutable"


mutable = _Mutable()


class TensorType(metaclass=_Sealed):
    """A tensor annotation / shape-only placeholder: ``nt.tensor[shape]``, ``nt.tensor[shape, dtype]``."""

    __nkisim_placeholder__ = True

    def __init__(self, shape: tuple[int, ...] | None, dtype, is_mutable: bool) -> None:
        self.nki_shape = shape
        self.nki_dtype = _dt.to_dtype(dtype) if dtype is not None else None
        self.nki_mutable = is_mutable

    # a placeholder argument looks like an array of that shape and dtype to the launcher
    @property
    def shape(self) -> tuple[int, ...]:
        if self.nki_shape is None:
            raise TypeError(f"{self!r} has no shape: use nt.tensor[shape] or nt.tensor[[shape], dtype]")
        return self.nki_shape

    @property
    def dtype(self) -> _np.dtype:
        return self.nki_dtype if self.nki_dtype is not None else _np.dtype(_np.float32)

    def __getitem__(self, item) -> TensorType:
        return _parse(item, self.nki_mutable, self)

    def __repr__(self) -> str:
        name = "mutable_tensor" if self.nki_mutable else "tensor"
        parts = []
        if self.nki_shape is not None:
            parts.append(str(list(self.nki_shape)))
        if self.nki_dtype is not None:
            parts.append(_dt.name(self.nki_dtype))
        return f"nt.{name}[{', '.join(parts)}]" if parts else f"nt.{name}"


def _parse(item, is_mutable: bool, base: TensorType | None = None) -> TensorType:
    items = item if isinstance(item, tuple) else (item,)
    shape = base.nki_shape if base is not None else None
    dtype = base.nki_dtype if base is not None else None
    dims: list[int] = []
    for it in items:
        if it is mutable or isinstance(it, _Mutable):
            is_mutable = True
        elif isinstance(it, (list, tuple)):
            shape = tuple(int(d) for d in it)
        elif isinstance(it, (int, _np.integer)) and not isinstance(it, bool):
            dims.append(int(it))
        else:
            dtype = it  # a dtype spelling; to_dtype below rejects anything else
    if dims:
        shape = tuple(dims)
    return TensorType(shape, dtype, is_mutable)


tensor = TensorType(None, None, False)
mutable_tensor = TensorType(None, None, True)
