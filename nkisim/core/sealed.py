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
creation.
"""

from __future__ import annotations

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
