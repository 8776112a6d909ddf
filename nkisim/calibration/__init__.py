"""Calibration of the performance model against hardware measurements (``python -m nkisim.calibrate``)."""

from __future__ import annotations

import os
from types import ModuleType

_HERE = os.path.dirname(os.path.abspath(__file__))
_MODULE: ModuleType | None = None


def load_kernels() -> ModuleType:
    """The calibration kernels module, compiled under a file name outside the nkisim package.

    The NKI front end attributes instructions and tile-allocation sites to the innermost stack frame *outside*
    the nkisim package (that is how it finds the kernel's source line), so kernels that live inside the
    package must carry a code file name outside it to get their own allocation sites and 'file:line' labels.
    """
    global _MODULE
    if _MODULE is None:
        from nkisim import _hook

        _hook.install()  # `import neuronxcc.nki` -> nkisim when the real toolchain is absent
        path = os.path.join(_HERE, "kernels.py")
        with open(path, encoding="utf-8") as f:
            src = f.read()
        mod = ModuleType("nkisim_calibration_kernels")
        mod.__file__ = path
        code = compile(src, "calibration_kernels.py", "exec")
        exec(code, mod.__dict__)  # noqa: S102 - our own source file
        _MODULE = mod
    return _MODULE
