"""The kernel-facing objects the modules of the ``nki`` front end share: the memory regions (``nl.sbuf``, ...:
what ``NkiTensor.buffer`` answers), ``NKIObject`` (base of configuration objects) and ``VirtualRegister``
(``nisa.register_alloc``, the loop variable of ``nl.dynamic_range``).  Defined here, below language.py, isa.py and
tensor.py, so none of them imports another for them (tests/test_nkisim_layers.py: no import cycle, lazy or not).
"""

from __future__ import annotations

import dataclasses as _dataclasses

import numpy as _np

from nkisim.core.buffers import BufferSpec as _BufferSpec
from nkisim.core.instr import Buf as _Buf
from nkisim.core.ops import registers as _reg
from nkisim.core.sealed import Sealed as _Sealed

# ---- memory regions (nki.language) ------------------------------------------------------------------------------
sbuf = _BufferSpec(_Buf.SBUF, "sbuf")
psum = _BufferSpec(_Buf.PSUM, "psum")
private_hbm = _BufferSpec(_Buf.HBM, "private_hbm")
shared_hbm = _BufferSpec(_Buf.HBM, "shared_hbm")


class _NKIObjectMeta(_Sealed):
    """Construction of ``NKIObject`` subclasses: keyword arguments set attributes (the stub's ``__init__(self,
    **kwargs)``), also on ``@dataclass`` subclasses, whose generated ``__init__`` is stricter.

    AWS's nki-library (d2ad3a5) builds its kernel dataclasses in two ways a plain dataclass refuses, in kernels its
    fast suite runs on Trainium: ``@dataclass class SectionParams(nl.NKIObject)`` with plain class attributes
    (``section_idx = None``: no annotation, no field) built as ``SectionParams(section_idx=...)``
    (attention_cte), and ``MLPTKGConstantsDimensionSizes(...)`` called without its field ``remainderIFused``,
    which has no default (mlp_tkg_constants).  So an ``NKIObject`` dataclass takes any of its fields and class
    attributes by keyword; a field not given takes its default, or None when it has none (inferred from that
    kernel, not documented).  A keyword naming neither a field nor a class attribute stays Python's TypeError.
    Attributes are set through ``object.__setattr__``, so frozen dataclasses construct too (NKI 0.5 release notes:
    "NKIObject subclasses decorated with @dataclass(frozen=True) ... can now be constructed normally").  Other
    subclasses construct as Python does."""

    def __call__(cls, *args, **kwargs):
        if cls.__init__ is NKIObject.__init__ or not _dataclasses.is_dataclass(cls):
            return super().__call__(*args, **kwargs)
        fields = _dataclasses.fields(cls)
        names = [f.name for f in fields]
        if len(args) > len(names) or [k for k in kwargs if k in names[:len(args)]]:
            return super().__call__(*args, **kwargs)  # Python's own positional/duplicate argument errors
        given = dict(zip(names, args))
        given.update(kwargs)
        required = [f.name for f in fields if f.init and f.default is _MISSING and f.default_factory is _MISSING]
        if not [k for k in kwargs if k not in names] and not [n for n in required if n not in given]:
            return super().__call__(*args, **kwargs)  # what the dataclass's own __init__ takes
        if [k for k in kwargs if k not in names and not hasattr(cls, k)]:
            return super().__call__(*args, **kwargs)  # Python's "unexpected keyword argument"
        obj = cls.__new__(cls)
        for f in fields:
            if f.name in given:
                value = given.pop(f.name)
            elif f.default is not _MISSING:
                value = f.default
            elif f.default_factory is not _MISSING:
                value = f.default_factory()
            else:
                value = None
            object.__setattr__(obj, f.name, value)
        for k, v in given.items():
            object.__setattr__(obj, k, v)
        post = getattr(obj, "__post_init__", None)
        if post is not None:
            post()
        return obj


_MISSING = _dataclasses.MISSING


class NKIObject(metaclass=_NKIObjectMeta):
    """Base class for kernel dataclasses and configuration objects (their fields are keyword arguments)."""

    def __init__(self, **kwargs) -> None:
        for k, v in kwargs.items():
            object.__setattr__(self, k, v)


class VirtualRegister(NKIObject, _reg.Register):
    """A virtual register on an engine sequencer: a 32-bit integer on the device (``nisa.register_alloc``), used for
    dynamic loop bounds (``nl.dynamic_range``, ``nl.fori_loop``), while-loop conditions (``nl.while_loop``), run-time
    offsets (``.ap(scalar_offset=...)``) and the results of ``ncol.rank_id``.  Its value exists only when the
    instructions execute (``nkisim.core.ops.registers``): "a register's value is not known while the kernel is being
    built, so using a register in Python control flow (``if``/``while``) or converting it with ``int()`` /
    ``range()`` raises ``TypeError``" (nki.isa.VirtualRegister, NKI 0.6)."""

    __slots__ = ()

    def __init__(self, state=None, frozen=False) -> None:
        _reg.Register.__init__(self)
        if state is not None:
            _reg.immediate(self, state)

    def _python_control_flow(self, *args):
        raise TypeError("a VirtualRegister's value is not known while the kernel is built: using it in Python "
                        "control flow (if/while) or converting it with int()/range() raises TypeError "
                        "(nki.isa.VirtualRegister); use nl.fori_loop / nl.while_loop / nl.dynamic_range, "
                        "or nisa.register_store it into a tensor")

    __int__ = __index__ = __float__ = _python_control_flow

    def __bool__(self) -> bool:
        """``while reg:`` / ``if reg:``: the parser front end's register-conditioned loop, which the tracer refuses
        ("Under the tracer frontend ... using a register in Python control flow (if/while) ... raises TypeError",
        nki.isa.VirtualRegister; the migration guide replaces a bare ``while reg:`` with ``nl.while_loop``)."""
        raise TypeError("a VirtualRegister in Python control flow (`while reg:` / `if reg:`): its value is not known "
                        "while the kernel is built (nki.isa.VirtualRegister); write the data-dependent loop as "
                        "nl.while_loop(reg, body), whose body returns the next condition register (NKI 0.6 "
                        "migration guide), or nl.fori_loop for a counted one")

    def _compare(self, other):
        """A register compared with a number in Python (``while reg != 0:``, ``if reg == k:``) is the same control flow
        on a device value as ``bool(reg)``: refused alike.  Registers compare by identity among themselves (they are
        names), and with anything else as Python objects do."""
        if isinstance(other, (int, float, _np.number, _np.ndarray)):
            self.__bool__()
        return NotImplemented

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _compare
    __hash__ = _reg.Register.__hash__
