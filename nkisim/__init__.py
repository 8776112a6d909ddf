"""nkisim: run NKI kernels with NumPy, with a NeuronCore performance model.

This module is imported by the import-fallback .pth file at every interpreter start, so it must stay light:
no NumPy import here.  Public helpers are loaded lazily.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "check_kernel": ("nkisim.check", "check_kernel"),
    "run_kernel": ("nkisim.core.runtime", "run_kernel"),
    "estimate": ("nkisim.perf", "estimate"),
    "backend_info": ("nkisim.fallback", "backend_info"),
}


def __getattr__(name: str):
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'nkisim' has no attribute '{name}'") from None
    import importlib

    return getattr(importlib.import_module(module_name), attr)


__all__ = ["__version__", *_LAZY]
