"""NKI data types of the current API (``nki.dtype``; ``nki.language`` re-exports each: ``nl.float32``).

In NKI 0.6 a data type is named by its string: the API stub declares ``DType = str``
(nki/api/nki/language/__init__.py), so ``str(nl.float32) == "float32"``, the same string a tensor's ``.dtype``
prints, and dtypes are plain hashable values kernels keep in tables (AWS's nki-library keys a dict by
``nl.float8_e4m3`` and looks it up with a tensor's dtype; it compares ``str(t.dtype) == str(nl.bfloat16)``).
``NkiDType`` prints as that name and equals it, and carries what nkisim needs to store it: NumPy accepts it
wherever it takes a dtype (``np.zeros(s, dtype=nl.bfloat16)``, through its ``.dtype``), it compares equal to the
NumPy dtype of the same name and hashes like it (a nkisim tensor's ``.dtype`` is a NumPy dtype, so
``{nl.float8_e4m3: 240.0}[t.dtype]`` finds the entry), and ``storage`` is the NumPy dtype nkisim keeps its values
in (``tfloat32`` is stored as float32: its 10-bit mantissa only matters inside TensorE's multipliers).  It is not
a ``str`` subclass: NumPy resolves a string by its hash in its own name table, which the dtype-like hash above
would miss.

A NumPy/ml_dtypes type passed as a kernel argument becomes the NKI dtype of the same name (:func:`from_host`), as
NKI 0.4 does for JAX dtypes ("automatically converted to the equivalent NKI dtype", release notes 0.4.0).
"""

from __future__ import annotations

import ml_dtypes as _ml_dtypes
import numpy as _np

from nkisim.core import dtypes as _dt
from nkisim.core.sealed import Sealed as _Sealed


class NkiDType:
    """An NKI data type: prints as its name, usable as a NumPy dtype (see the module docstring)."""

    __slots__ = ("_name", "storage", "_hash")

    def __new__(cls, name: str, storage=None):
        """Only this module makes data types.  Once it is loaded, calling the class -- ``type(nl.float32)(name,
        storage)``, which kernel code can spell, as it can ``nl.DType(name)`` -- gives the NKI data type of that name
        and refuses any other storage (``nl.DType``'s rule).  A second object named like a real data type compares
        and hashes equal to it by name, so it took the real one's place in process-wide tables keyed by data type:
        ``core.dtypes.to_dtype`` cached a forged ``float32`` stored as float16, and every later ``"float32"`` in
        the process was float16 (docs/grading-security.md, L7)."""
        if _SEALED:
            return DType(name, storage)
        self = object.__new__(cls)
        self._name = name
        self.storage = _np.dtype(storage)
        # hash like the NumPy dtype of the same name, so a tensor's dtype finds a table entry keyed by nl.X
        self._hash = hash(self.storage) if self.storage.name == name else hash(name)
        return self

    def __str__(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return self._name

    def __format__(self, spec: str) -> str:
        return format(self._name, spec)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if other is self:
            return True
        if isinstance(other, NkiDType):
            return other._name == self._name
        if isinstance(other, str):
            return other == self._name
        if isinstance(other, _np.dtype) or isinstance(other, type) and issubclass(other, _np.generic):
            return _np.dtype(other).name == self._name
        return NotImplemented

    def __ne__(self, other) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __reduce__(self):
        return (NkiDType, (self._name, self.storage))

    @property
    def name(self) -> str:
        return self._name

    @property
    def itemsize(self) -> int:
        return self.storage.itemsize

    # NumPy's protocol: np.dtype(x), np.zeros(s, dtype=x), a.astype(x) use x.dtype
    @property
    def dtype(self) -> _np.dtype:
        return self.storage

    def __getattr__(self, attr: str):
        """The storage dtype's other attributes (``kind``, ``char``, ``type``): code written for NumPy dtypes
        (nkisim's core included) reads them."""
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.storage, attr)


class Trn3DType(NkiDType):
    """A NeuronCore-v4 (trn3) data type: the MX packed types ("custom data type for nki.isa.nc_matmul_mx on
    NeuronCore-v4", API stub) and their scale type.  nkisim models trn1 and trn2, where the compiler refuses them,
    so it has no storage for them: the name exists (kernels and tests name these types in tables and parameter
    lists that also hold trn2 cases), compares and hashes as its name, and any use as a data type (NumPy's
    ``.dtype``, its size, calling it) raises "nkisim does not support nl.X yet" (``python -m nkisim.apicoverage``
    counts it as missing)."""

    __slots__ = ()
    nkisim_unsupported = True

    def __new__(cls, name: str):
        if _SEALED:  # only this module makes data types (NkiDType.__new__)
            found = _TRN3.get(str(name))
            if found is None:
                raise TypeError(f"{name!r}: not a NeuronCore-v4 data type of nki.language ({', '.join(_TRN3)})")
            return found
        self = object.__new__(cls)
        self._name = name
        self._hash = hash(name)
        return self

    def _raise(self):
        from nkisim.frontends._unsupported import NkisimUnsupportedError

        raise NkisimUnsupportedError(
            f"nkisim does not support nl.{self._name} yet (an MX type of nisa.nc_matmul_mx / quantize_mx, "
            "NeuronCore-v4 (trn3) only; nkisim models trn1 and trn2; it is part of the current NKI API (nki, NKI 0.6 "
            "/ Neuron SDK 2.32); see docs/nkisim.md 'Unsupported API')")

    def __call__(self, *args, **kwargs):
        self._raise()

    def __reduce__(self):
        return (Trn3DType, (self._name,))

    @property
    def storage(self):  # noqa: D102  (no storage on trn1/trn2)
        self._raise()

    @property
    def dtype(self):
        self._raise()

    @property
    def itemsize(self):
        self._raise()

    def __getattr__(self, attr: str):
        if not attr.startswith("_") and hasattr(_F32, attr):
            self._raise()
        raise AttributeError(attr)


_F32 = _np.dtype(_np.float32)
_SEALED = False  # set once the data types below exist: NkiDType.__new__

bool_ = NkiDType("bool", _dt.bool_)
int8 = NkiDType("int8", _dt.int8)
int16 = NkiDType("int16", _dt.int16)
int32 = NkiDType("int32", _dt.int32)
uint8 = NkiDType("uint8", _dt.uint8)
uint16 = NkiDType("uint16", _dt.uint16)
uint32 = NkiDType("uint32", _dt.uint32)
float16 = NkiDType("float16", _dt.float16)
float32 = NkiDType("float32", _dt.float32)
bfloat16 = NkiDType("bfloat16", _dt.bfloat16)
tfloat32 = NkiDType("tfloat32", _dt.tfloat32)
float8_e4m3 = NkiDType("float8_e4m3", _dt.float8_e4m3)
float8_e4m3fn = NkiDType("float8_e4m3fn", _dt.float8_e4m3fn)
float8_e5m2 = NkiDType("float8_e5m2", _dt.float8_e5m2)

float8_e5m2_x4 = Trn3DType("float8_e5m2_x4")
float8_e4m3fn_x4 = Trn3DType("float8_e4m3fn_x4")
float4_e2m1fn_x4 = Trn3DType("float4_e2m1fn_x4")
float8_e8m0fnu = Trn3DType("float8_e8m0fnu")
_TRN3 = {str(d): d for d in (float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4, float8_e8m0fnu)}

_BY_NAME = {str(d): d for d in (bool_, int8, int16, int32, uint8, uint16, uint32, float16, float32, bfloat16,
                                tfloat32, float8_e4m3, float8_e4m3fn, float8_e5m2)}
_BY_NAME["bool_"] = bool_
_SEALED = True


class _DTypeMeta(_Sealed):  # sealed: kernel code cannot plant class attributes (grading security C5)
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, NkiDType)

    def __call__(cls, name, storage=None):
        """``nl.DType(name)``: the stub's ``DType = str`` names a data type, so this is the NKI data type of that name
        (as ``nl.DType("bfloat16") is nl.bfloat16``).  No new data type is made: a storage argument that is not the
        name's own storage is refused, so kernel code cannot pair a name with another storage."""
        found = _BY_NAME.get(str(name))
        if found is None:
            raise TypeError(f"nl.DType({name!r}): not an NKI data type (nki.language supports "
                            f"{', '.join(sorted(_BY_NAME))})")
        if storage is not None and _np.dtype(storage) != found.storage:
            raise TypeError(f"nl.DType({name!r}, {storage!r}): {name} is stored as {found.storage}, not "
                            f"{_np.dtype(storage)}")
        return found


class DType(metaclass=_DTypeMeta):
    """``nl.DType``: the type of the NKI data types (the stub's ``DType = str``): ``isinstance(nl.float32,
    nl.DType)``, annotations ``dtype: nl.DType``, and ``nl.DType("float32") is nl.float32``."""

    __slots__ = ()


def from_host(value):
    """A kernel argument as the kernel sees it: a NumPy / ml_dtypes scalar type or ``np.dtype`` (not an array)
    becomes the NKI dtype of that name; anything else is returned unchanged."""
    if isinstance(value, NkiDType):
        return value
    if isinstance(value, _np.dtype) or isinstance(value, type) and issubclass(value, _np.generic):
        name = _np.dtype(value).name
        found = _BY_NAME.get(name)
        if found is None:
            raise TypeError(f"a kernel argument of data type {name} is not an NKI data type (nki.language "
                            f"supports {', '.join(sorted(_BY_NAME))})")
        return found
    return value


del annotations, _ml_dtypes  # the __future__ import must not leak as an NKI name
