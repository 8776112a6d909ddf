"""``nki`` (NKI 0.6, Neuron SDK 2.32) as nkisim implements it: ``nki.jit`` and ``nki.simulate``.

``@nki.jit`` kernels called with NumPy arrays run on nkisim and return NumPy arrays; ``kernel[lnc](...)`` launches
with a Logical NeuronCore degree (1, or 2: two programs on two NeuronCores, ``nl.program_id(0)`` 0 and 1, inputs
in ``nl.shared_hbm``); ``nki.simulate(kernel)(*arrays)`` and ``NKI_SIMULATOR=1`` run in AWS's CPU-simulator mode
(capacity limits the compiler enforces only warn: nki/guides/nki_simulator.rst, "Memory Model").  As in AWS's
simulator, "input arrays are updated in-place if the kernel modified the corresponding HBM tensors" (same guide,
"Execution"), and the compiler's ``nki.jit(mode=...)`` / ``platform_target=`` are errors (NKI 0.3 migration guide:
both are breaking changes; set ``NEURON_PLATFORM_TARGET_OVERRIDE`` instead).
"""

from __future__ import annotations

import functools as _functools
import os as _os

from nkisim.core import context as _ctx
from nkisim.core import runtime as _rt
from nkisim.core.sealed import Sealed as _Sealed
from nkisim.frontends import NKI as _NKI
from nkisim.frontends.nki import collectives, dtype, isa, language, typing  # noqa: F401  (nki.language, nki.isa, ...)

# nkisim serves this `nki` (the import hook, `python -m nkisim info`): a real nki never carries the marker
__nkisim_fallback__ = True

SIMULATOR_ENV = "NKI_SIMULATOR"


def _simulator_on() -> bool:
    """``NKI_SIMULATOR=1``: every @nki.jit kernel runs on the CPU simulator (nki_simulator.rst, "Usage")."""
    return _os.environ.get(SIMULATOR_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _host_args(args, kwargs) -> tuple[tuple, dict]:
    """Kernel arguments as the kernel sees them: a NumPy dtype or scalar type (``np.float16``,
    ``ml_dtypes.bfloat16``) becomes the NKI dtype of that name (nki.dtype.from_host)."""
    return (tuple(dtype.from_host(a) for a in args), {k: dtype.from_host(v) for k, v in kwargs.items()})


class _KernelBase(metaclass=_Sealed):
    """What every nki launcher shares: the front end, inputs updated in place, ``kernel[lnc]``."""

    # pytest must not collect a kernel named test_* (it would unwrap __wrapped__ and ask for fixtures)
    __test__ = False
    nki_frontend = _NKI.key  # the kernel is an nki kernel (core.runtime.frontend_of; a key, not the loader)
    nki_writes_args = True  # kernel arguments are HBM tensors the kernel may write; the caller's arrays see it

    def __getitem__(self, lnc):
        return _Launch(self, lnc)


class Kernel(_KernelBase):
    """The object ``nki.jit`` returns."""

    def __init__(self, func, **options) -> None:
        self.func = func
        self.options = options
        _functools.update_wrapper(self, func, updated=())

    def __call__(self, *args, **kwargs):
        if _ctx.active() is not None:
            # A nested @nki.jit kernel inlines into the caller's trace, under the top-level kernel's options.
            # Sources: NKI 0.4.0's release notes ("Improved error messages for nested NKI calls: kernel
            # compilation errors now show the full Python call stack"), AWS's nki-library (its MoE CTE kernel,
            # @nki.jit(mode="trace"), calls @nki.jit(mode="trace") sub-kernels, and its tests run on Trainium),
            # and NKI 0.7's nki.compiler.SpecializationConfig.allow_nested_config_override ("a nested @nki.jit
            # sub-kernel ... inline[s] under this kernel's config").  The 0.2.0 migration guide's "Remove
            # nki.jit decorator on sub-kernels" was about the 0.1 trace-mode decorator of that release.
            return self.func(*args, **kwargs)
        args, kwargs = _host_args(args, kwargs)
        return _rt.run_kernel(self, args, kwargs, mode="full", simulate=_simulator_on()).outputs

    def __repr__(self) -> str:
        return f"<nki.jit kernel {getattr(self.func, '__name__', '?')}>"


class _Launch(_KernelBase):
    """``kernel[lnc]``: a launch with a Logical NeuronCore degree (1 or 2)."""

    def __init__(self, launcher, lnc) -> None:
        if isinstance(lnc, tuple) or isinstance(lnc, bool) or not isinstance(lnc, int) or lnc not in (1, 2):
            raise ValueError(f"kernel[{lnc!r}]: the bracket sets the Logical NeuronCore degree, 1 or 2 (nki.jit docs: "
                             "'kernel[lnc](args)', LNC=1 by default); SPMD launch grids kernel[b, h] are the legacy "
                             "neuronxcc.nki API")
        self.func = launcher
        self.lnc = lnc
        # LNC=2: two programs, one per physical NeuronCore, in parallel (program_id 0 and 1), run in lockstep so
        # that nisa.sendrecv / nisa.core_barrier meet (nkisim.core.lockstep)
        self.nki_grid, self.nki_cores = ((2,), [0, 1]) if lnc == 2 else ((), None)
        self.nki_lockstep = lnc == 2
        _functools.update_wrapper(self, _rt.unwrap(launcher), updated=())

    def __call__(self, *args, **kwargs):
        if _ctx.active() is not None:
            raise TypeError("a launch kernel[lnc](...) cannot be called from inside a running kernel")
        simulate = isinstance(self.func, _Simulated) or _simulator_on()
        args, kwargs = _host_args(args, kwargs)
        return _rt.run_kernel(self, args, kwargs, mode="full", simulate=simulate).outputs


def jit(fn=None, **kwargs):
    """Decorate a top-level NKI kernel; usable bare (``@nki.jit``) or with options (``@nki.jit(...)``).

    ``mode=`` is "deprecated and ignored" from NKI 0.3 on (migration guide, ``nki.jit(mode=...)``; the release
    notes list it the same way): accepted with a DeprecationWarning, whatever its value (AWS's nki-library still
    passes "trace" and "auto").  ``platform_target=`` "raises an error in NKI 0.3.0" (same guide).  The other
    options (``debug_kernel``, ``show_compiler_tb``, ``experimental_flags``: a comma-separated string) are kept on
    the kernel (none changes what nkisim checks: see the note at _experimental_flags)."""
    if "platform_target" in kwargs:
        raise TypeError("nki.jit(platform_target=...) is not accepted from NKI 0.3 on (NKI migration guide: a "
                        "breaking change): set the NEURON_PLATFORM_TARGET_OVERRIDE environment variable")
    if "mode" in kwargs:
        import warnings as _warnings

        _warnings.warn(f"nki.jit(mode={kwargs['mode']!r}) is deprecated and ignored from NKI 0.3 on (NKI migration "
                       "guide): the framework is detected from the arguments; run on the CPU simulator with "
                       "nki.simulate(kernel)(...) or NKI_SIMULATOR=1", DeprecationWarning, stacklevel=2)
        kwargs = {k: v for k, v in kwargs.items() if k != "mode"}
    _experimental_flags(kwargs.get("experimental_flags"))
    if fn is None:
        return lambda f: Kernel(f, **kwargs)
    return Kernel(fn, **kwargs)


# nki.jit(experimental_flags=...): compiler internals; nkisim checks the spelling (a string) and keeps them.
# "skip-non-top-level-shared-hbm-check" (AWS's nki-library QKV kernel) opts out of a shared_hbm scope check that
# nkisim does not make for this API (core/rules.py, err_shared_hbm_must_in_kernel_level: its era note).


def _experimental_flags(flags) -> tuple[str, ...]:
    if flags is None:
        return ()
    if not isinstance(flags, str):
        raise TypeError(f"nki.jit(experimental_flags={flags!r}): a string of comma-separated flags")
    return tuple(f.strip() for f in flags.split(",") if f.strip())


class _Simulated(_KernelBase):
    """``nki.simulate(kernel)``: call it with NumPy arrays; returns NumPy arrays."""

    def __init__(self, kernel) -> None:
        self.func = kernel
        _functools.update_wrapper(self, _rt.unwrap(kernel), updated=())

    def __call__(self, *args, **kwargs):
        if _ctx.active() is not None:
            raise TypeError("nki.simulate(kernel)(...) cannot be called from inside a running kernel")
        args, kwargs = _host_args(args, kwargs)
        return _rt.run_kernel(self.func, args, kwargs, mode="full", simulate=True).outputs


def simulate(kernel):
    """A CPU-simulated version of ``kernel`` (``nki.simulate(kernel)(a, b)``, ``nki.simulate(kernel[2])(a, b)``); a
    plain function is wrapped with ``nki.jit`` first."""
    if not isinstance(kernel, _KernelBase):
        kernel = Kernel(kernel)
    return _Simulated(kernel)


_REMOVED = {
    "baremetal": "call the @nki.jit kernel with NumPy arrays",
    "benchmark": "time kernels with neuron-profile on Trainium; on nkisim, nkisim.run_kernel + nkisim.estimate",
    "simulate_kernel": "use nki.simulate(kernel)(*arrays)",
    "trace": "decorate with @nki.jit (a sub-kernel, plain or @nki.jit, inlines into its caller)",
    "profile": "neuron-profile on Trainium; on nkisim, nkisim.estimate",
    "tensor": "use nki.language.NkiTensor",
}


def __getattr__(name: str):
    from nkisim.frontends import _unsupported

    return _unsupported.missing(_NKI, "nki", name, _REMOVED)


del annotations  # the __future__ import must not leak as an NKI name
