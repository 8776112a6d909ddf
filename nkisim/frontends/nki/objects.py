"""The kernel-facing objects the modules of the ``nki`` front end share: the memory regions (``nl.sbuf``, ...:
what ``NkiTensor.buffer`` answers), ``NKIObject`` (base of configuration objects) and ``VirtualRegister``
(``nisa.register_alloc``, the loop variable of ``nl.dynamic_range``).  Defined here, below language.py, isa.py and
tensor.py, so none of them imports another for them (tests/test_nkisim_layers.py: no import cycle, lazy or not).
"""

from __future__ import annotations

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
    **kwargs)``), also on ``@dataclass`` subclasses whose generated ``__init__`` does not take them.

    AWS's nki-library writes configuration classes as ``@dataclass class SectionParams(nl.NKIObject)`` with plain
    class attributes (``section_idx = None``, no annotation, so no dataclass field) and builds them with
    ``SectionParams(section_idx=...)``; the dataclass ``__init__`` takes no such argument, so the keyword sets the
    attribute, as NKIObject's own ``__init__`` would.  A keyword that names neither a parameter of the class's
    ``__init__`` nor an attribute of the class stays Python's TypeError.  Frozen dataclasses are set through
    ``object.__setattr__`` (NKI 0.5 release notes: "NKIObject subclasses decorated with @dataclass(frozen=True)
    ... can now be constructed normally")."""

    def __call__(cls, *args, **kwargs):
        if not kwargs or cls.__init__ is NKIObject.__init__:
            return super().__call__(*args, **kwargs)
        params = _init_keywords(cls)
        extra = {k: v for k, v in kwargs.items() if k not in params} if params is not None else None
        if not extra:
            return super().__call__(*args, **kwargs)
        if [k for k in extra if not hasattr(cls, k)]:
            return super().__call__(*args, **kwargs)  # Python's "unexpected keyword argument"
        obj = super().__call__(*args, **{k: v for k, v in kwargs.items() if k in params})
        for k, v in extra.items():
            object.__setattr__(obj, k, v)
        return obj


_INIT_KEYWORDS: dict = {}


def _init_keywords(cls) -> frozenset | None:
    """The keyword parameters of ``cls.__init__`` (None when it takes ``**kwargs``), cached per class."""
    import inspect

    init = cls.__init__
    hit = _INIT_KEYWORDS.get(init, False)
    if hit is not False:
        return hit
    try:
        sig = inspect.signature(init)
    except (TypeError, ValueError):
        found = None
    else:
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            found = None
        else:
            found = frozenset(n for n, p in sig.parameters.items()
                              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    _INIT_KEYWORDS[init] = found
    return found


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

    __bool__ = __int__ = __index__ = __float__ = _python_control_flow
