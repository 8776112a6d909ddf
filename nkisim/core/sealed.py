"""The metaclass of every nkisim class kernel code can reach: its class attributes cannot be set or deleted from
kernel code.

Why: kernel code reaches the API's classes (``nl.NkiTensor``, ``type(tile)``, ``nl.sbuf``'s class, ``nki.jit``'s
kernel class, ...), and a class attribute planted there changes every instance at once -- a public slot shadowed
on a subclass (``NkiTensor.kind = ...``), a method the core or a front end calls replaced.  The static screen
refuses the syntax (attributes are set only on ``self`` in a kernel class's own methods, which cannot be called
unbound); this is the runtime layer under it, so a screen bypass still cannot change the API's classes
(docs/grading-security.md, "Trace integrity").

A set or delete is refused when the code doing it (the caller's frame) is not nkisim's own, the standard library
or an installed package (``dataclasses`` completes classes after creation, pytest's ``monkeypatch`` patches them in
tests); kernel files live elsewhere.  Only class-level writes pay the frame check: instance attributes, method
calls and attribute reads are untouched.

Not sealed, for speed: the classes the per-instruction path tests with ``isinstance`` (the tensor classes,
index expressions, masks, dynamic indices, ``par_dim``, registers, the nki front end's dtype objects).  CPython
answers ``isinstance(x, C)`` for a subclass or a miss without a call only when ``type(C) is type``; a metaclass
costs ~100 ns per such check, +7-12% per instruction on the nki front end.  What a class attribute planted on them
could change is not a trace record (those come from a view's private slots, ``core.access.operand``): a planted
method runs kernel code on the kernel's own data, and a class attribute shadowing a slot breaks every tensor
creation.  A tensor's public fields are read-only members over private slots (:func:`readonly_slots`).
"""

from __future__ import annotations

import ctypes
import enum
import os
import sys
import sysconfig

_NKISIM = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TRUSTED = tuple(
    {_NKISIM, "<frozen "}
    | {os.path.join(p, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")
       if (p := sysconfig.get_paths().get(key))}
)


def _check(cls: type, name: str, verb: str) -> None:
    caller = sys._getframe(2).f_code.co_filename
    # a subclass defined outside nkisim (AWS's nki-library builds its configuration classes on nl.NKIObject) is its
    # own module's business
    if not caller.startswith(_TRUSTED) and cls.__module__.startswith("nkisim."):
        raise AttributeError(
            f"cannot {verb} attribute '{name}' of {cls.__qualname__}: kernel code may not change the NKI API's "
            "classes")


class Sealed(type):
    """``type`` whose class attributes only nkisim, the standard library and installed packages may set."""

    def __setattr__(cls, name: str, value) -> None:
        _check(cls, name, "set")
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        _check(cls, name, "delete")
        super().__delattr__(name)


class SealedEnum(Sealed, enum.EnumType):
    """The API's enums (``nisa.engine``, ...): sealed like the other classes."""


# ---- read-only public slots ----------------------------------------------------------------------------------------
class _MemberDef(ctypes.Structure):
    """CPython's ``PyMemberDef`` (Include/descrobject.h; unchanged since 3.0): what a ``__slots__`` descriptor reads."""

    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int), ("offset", ctypes.c_ssize_t),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


_T_OBJECT_EX, _READONLY = 16, 1  # Include/structmember.h (Py_T_OBJECT_EX, Py_READONLY in 3.12+)
_MEMBER_DEFS: list = []  # the PyMemberDefs the descriptors point at: alive as long as the classes


def _slot_offset(cls: type, private: str) -> int:
    """The byte offset of ``cls``'s slot ``private`` in its instances, found by writing a sentinel through the
    slot's own descriptor into a bare instance and locating it (no layout of CPython's descriptor objects assumed)."""
    probe = object.__new__(cls)
    sentinel = object()
    cls.__dict__[private].__set__(probe, sentinel)
    word = ctypes.sizeof(ctypes.c_void_p)
    hits = [off for off in range(0, cls.__basicsize__, word)
            if ctypes.c_void_p.from_address(id(probe) + off).value == id(sentinel)]
    if len(hits) != 1:
        raise RuntimeError(f"slot {private} of {cls.__name__} not found")
    return hits[0]


def readonly_slots(cls: type, **public_to_private: str) -> None:
    """Give ``cls`` read-only public attributes over its private slots: ``readonly_slots(Tensor, shape="_shape")``
    makes ``t.shape`` read slot ``_shape`` and ``t.shape = x`` / ``del t.shape`` raise AttributeError ("readonly
    attribute"), while nkisim writes the private slot.

    Why this way: the public fields of a tensor (``shape``, ``dtype``, ``kind``, ``oob``) are the front ends' checks'
    inputs, so kernel code must not overwrite them (docs/grading-security.md, C12); and they are read on every
    instruction.  The descriptor is the one CPython gives a C type's read-only member (``PyDescr_NewMember`` with the
    READONLY flag, the same C getter as any ``__slots__`` slot), so reading costs what reading a slot costs;
    a ``property`` would cost a Python call per read and a ``__setattr__`` one per write, tensor creation included.
    Where the C API is not there (another interpreter), a ``property`` without a setter does the same, slower."""
    new_member = getattr(ctypes.pythonapi, "PyDescr_NewMember", None) if hasattr(ctypes, "pythonapi") else None
    for public, private in public_to_private.items():
        descr = None
        if new_member is not None:
            new_member.restype = ctypes.py_object
            new_member.argtypes = (ctypes.py_object, ctypes.c_void_p)
            member = _MemberDef(public.encode(), _T_OBJECT_EX, _slot_offset(cls, private), _READONLY, None)
            _MEMBER_DEFS.append(member)
            descr = new_member(cls, ctypes.addressof(member))
        if descr is None:
            import operator

            descr = property(operator.attrgetter(private), doc=f"read-only: {public}")
        type.__setattr__(cls, public, descr)
