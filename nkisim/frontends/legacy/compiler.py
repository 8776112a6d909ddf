"""neuronxcc.nki.compiler (``ncc``): compiler directives and direct SBUF/PSUM allocation.

Directives such as ``skip_middle_end_transformations`` change how the real compiler schedules a kernel, not
what it computes; nkisim keeps the wrapped kernel callable and accepted by every launcher.  ``sbuf.mod_alloc``,
``psum.mod_alloc`` and ``sbuf.alloc`` / ``psum.alloc`` return buffer specs whose placement is
``nkisim.core.placement`` (tensors at explicit offsets of one per-kernel arena, aliasing as on hardware).
"""

from __future__ import annotations

import functools as _functools

from nkisim.core import buffers as _buffers
from nkisim.core import context as _ctx
from nkisim.core import placement as _placement
from nkisim.core.instr import Buf as _Buf
from nkisim.core.sealed import Sealed as _Sealed
from nkisim.frontends import LEGACY as _LEGACY
from nkisim.frontends import _unsupported


class _Directive(metaclass=_Sealed):
    """A compiler directive wrapped around a kernel: callable like the kernel it wraps."""

    def __init__(self, func, name: str) -> None:
        self.func = func
        self.directive = name
        _functools.update_wrapper(self, func, updated=())

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)

    def __getitem__(self, grid):
        if _LAUNCHER is None:
            raise RuntimeError("ncc directives launch through neuronxcc.nki: import neuronxcc.nki first")
        return _LAUNCHER(self, grid)


# neuronxcc.nki's grid launcher (frontends/legacy/nki.py: _Launch), bound by nki.py when it loads: nki.py imports
# this module, so this module must not import nki.py (tests/test_nkisim_layers.py: no import cycle, lazy or not)
_LAUNCHER = None


def _bind_launcher(launcher) -> None:
    global _LAUNCHER
    _LAUNCHER = launcher


def _directive(name: str):
    def deco(func=None, **kwargs):
        if func is None:
            return lambda f: _Directive(f, name)
        return _Directive(func, name)

    deco.__name__ = name
    return deco


skip_middle_end_transformations = _directive("skip_middle_end_transformations")
enable_stack_allocator = _directive("enable_stack_allocator")
force_auto_alloc = _directive("force_auto_alloc")


def multi_buffer(factor: int = 2):
    return lambda f: _Directive(f, "multi_buffer")


def no_reorder():
    return _ctx.NoReorder()


def allocation_scope():
    return _NullContext()


class _NullContext(metaclass=_Sealed):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class sbuf(metaclass=_Sealed):  # noqa: N801 - NKI namespace nki.compiler.sbuf
    @staticmethod
    def mod_alloc(*, base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=()):
        return _buffers.BufferSpec(_Buf.SBUF, "sbuf", direct=_placement.SbufModAlloc(base_addr, base_partition,
                                                                                      num_par_tiles, num_free_tiles))

    @staticmethod
    def auto_alloc():
        return _buffers.SBUF_SPEC

    @staticmethod
    def alloc(func):
        return _buffers.BufferSpec(_Buf.SBUF, "sbuf", direct=_placement.CallbackAlloc(func, _Buf.SBUF))


class psum(metaclass=_Sealed):  # noqa: N801 - NKI namespace nki.compiler.psum
    @staticmethod
    def auto_alloc():
        return _buffers.PSUM_SPEC

    @staticmethod
    def mod_alloc(*, base_bank, base_addr=0, num_bank_tiles=(), **kwargs):
        return _buffers.BufferSpec(_Buf.PSUM, "psum", direct=_placement.PsumModAlloc(base_bank, base_addr,
                                                                                      num_bank_tiles))

    @staticmethod
    def alloc(func):
        return _buffers.BufferSpec(_Buf.PSUM, "psum", direct=_placement.CallbackAlloc(func, _Buf.PSUM))


def __getattr__(name: str):
    return _unsupported.missing(_LEGACY, "ncc", name)


del annotations  # the __future__ import must not leak as an NKI name
