"""neuronxcc.nki as nkisim implements it: kernel decorators and launchers.

``nki.jit`` kernels called with NumPy arrays run on the emulator and return NumPy arrays; called from inside a
running kernel they are inlined like helpers.  ``nki.baremetal`` / ``nki.simulate_kernel`` run with values;
``nki.benchmark`` runs in timing-only mode and attaches the performance model's result as ``benchmark_result``.
"""

from __future__ import annotations

import functools as _functools
import logging as _logging

from nkisim.core import context as _ctx
from nkisim.core import runtime as _rt
from nkisim.core.sealed import Sealed as _Sealed
from nkisim.core.tensor import Tensor as tensor  # noqa: F401  (nki.tensor: the type of kernel tensors)
from nkisim.frontends import LEGACY as _LEGACY
from nkisim.frontends.legacy import compiler, isa, language, typing  # noqa: F401  (nki.language / .isa / .compiler / .typing)

# The real package defines logging.OFF on import and the 2024 starter calls logging.disable(logging.OFF).
if not hasattr(_logging, "OFF"):
    _logging.OFF = _logging.CRITICAL + 10


class _Grid(metaclass=_Sealed):
    """``kernel[grid]``: subscripting any launcher fixes its SPMD launch grid (``kernel[b, h](...)``).

    Every program of the grid runs on the same inputs with its own ``nl.program_id``; see nkisim.core.runtime.
    """

    # not a pytest test even when named test_*: pytest unwraps ``__wrapped__`` to the kernel function and would
    # collect it, asking for fixtures named after its arguments (AWS's nl.broadcast_to doc test names its kernel
    # ``test_nl_broadcast``; neuronxcc's kernel objects are not collected)
    __test__ = False
    nki_frontend = _LEGACY.key  # the kernel is a neuronxcc.nki kernel (core.runtime.frontend_of; a key, not the loader)

    def __getitem__(self, grid):
        return _Launch(self, grid)


class _Launch(metaclass=_Sealed):
    """A launcher bound to an SPMD grid; callable like the launcher it wraps."""

    __test__ = False

    def __init__(self, launcher, grid) -> None:
        self.func = launcher
        self.nki_grid, self.nki_cores = language._parse_grid(grid)
        _functools.update_wrapper(self, _rt.unwrap(launcher), updated=())

    def __call__(self, *args, **kwargs):
        if _ctx.active() is not None:
            raise TypeError("an SPMD launch (kernel[grid](...)) cannot be called from inside a running kernel")
        launcher = self.func
        if isinstance(launcher, _Benchmark):
            launcher.run(self, args, kwargs)
            self.benchmark_result = launcher.benchmark_result
            return None
        run = _rt.run_kernel(self, args, kwargs, mode="full")
        if isinstance(launcher, _Baremetal):
            _write_profile(run, launcher.options)
        return run.outputs


compiler._bind_launcher(_Launch)  # ncc directives launch like kernels (kernel[grid])

class _Kernel(_Grid):
    """The object nki.jit returns."""

    def __init__(self, func, mode: str = "auto", **options) -> None:
        self.func = func
        self.mode = mode
        self.options = options
        _functools.update_wrapper(self, func, updated=())

    def __call__(self, *args, **kwargs):
        if _ctx.active() is not None:
            return self.func(*args, **kwargs)
        # nki.jit(mode='simulation') runs the kernel in AWS's CPU simulator, as nki.simulate_kernel does
        return _rt.run_kernel(self, args, kwargs, mode="full", simulate=self.mode == "simulation").outputs

    def __repr__(self) -> str:
        return f"<nki.jit kernel {getattr(self.func, '__name__', '?')}>"


def jit(func=None, mode: str = "auto", **kwargs):
    """Decorate an NKI kernel; usable bare (@nki.jit) or with arguments (@nki.jit(mode=...))."""
    if func is None:
        return lambda f: _Kernel(f, mode, **kwargs)
    return _Kernel(func, mode, **kwargs)


class _Traced(_Kernel):
    """The object nki.trace returns: a kernel of the output-argument convention.  AWS's doc tests use it as
    ``nki_jit = nki.trace`` and run ``simulate_kernel(kernel, in_tensor, out_tensor)``, the kernel storing its
    result into ``out_tensor`` (general/nki/test/test_nki_isa_nc_stream_shuffle.py): its arguments are writable
    and the caller's NumPy arrays receive what the kernel stored."""

    nki_writes_args = True

    def __repr__(self) -> str:
        return f"<nki.trace kernel {getattr(self.func, '__name__', '?')}>"


def trace(func=None, **kwargs):
    """Decorate a kernel that writes its outputs into arguments (see _Traced); usable bare or with arguments."""
    if func is None:
        return lambda f: _Traced(f, **kwargs)
    return _Traced(func, **kwargs)


def _write_profile(run, options: dict) -> None:
    if not (options.get("save_neff_name") or options.get("save_trace_name")):
        return
    from nkisim.perf import estimate
    from nkisim.perf.profile_files import write_profile

    write_profile(run.trace, estimate(run.trace, run.target), neff_name=options.get("save_neff_name"),
                  trace_name=options.get("save_trace_name"))


class _Baremetal(_Grid):
    def __init__(self, kernel, options: dict) -> None:
        self.func = kernel
        self.options = options
        _functools.update_wrapper(self, _rt.unwrap(kernel), updated=())

    def __call__(self, *args, **kwargs):
        if _ctx.active() is not None:
            return _rt.unwrap(self.func)(*args, **kwargs)
        run = _rt.run_kernel(self.func, args, kwargs, mode="full")
        _write_profile(run, self.options)
        return run.outputs


def baremetal(kernel=None, **kwargs):
    """Compile and run on a NeuronDevice without a framework; here: run on nkisim with NumPy in/out.

    Accepts the real keywords (save_neff_name, save_trace_name, additional_compile_opt, artifacts_dir,
    disable_allocation_opt, ...).
    """
    if kernel is None:
        return lambda k: _Baremetal(k, kwargs)
    return _Baremetal(kernel, kwargs)


def simulate_kernel(kernel, *args, **kwargs):
    """Run the kernel on the CPU with NumPy inputs and return its outputs."""
    if _ctx.active() is not None:
        return _rt.unwrap(kernel)(*args, **kwargs)
    return _rt.run_kernel(kernel, args, kwargs, mode="full", simulate=True).outputs


def simulate(kernel):
    """Newer spelling: nki.simulate(kernel)(*args)."""
    return _functools.partial(simulate_kernel, kernel)


class _Benchmark(_Grid):
    """Result of nki.benchmark(...): call it with the kernel's inputs, then read .benchmark_result.

    ``bench[b, h]`` is a launch of its own: its ``benchmark_result`` is set when it is called."""

    def __init__(self, kernel, options: dict) -> None:
        self.func = kernel
        self.options = options
        self.benchmark_result = None
        _functools.update_wrapper(self, _rt.unwrap(kernel), updated=())

    def __call__(self, *args, **kwargs):
        if _ctx.active() is not None:
            raise TypeError("nki.benchmark(kernel)(...) cannot be called from inside a running kernel")
        self.run(self.func, args, kwargs)
        return None

    def run(self, kernel, args, kwargs) -> None:
        from nkisim.measure import run_benchmark

        self.benchmark_result = run_benchmark(kernel, args, kwargs, **self.options)


def benchmark(kernel=None, **kwargs):
    """Benchmark a kernel: latency percentiles (us) from nkisim's performance model.

    Both forms work: ``nki.benchmark(kernel, warmup=1, iters=10)`` and ``nki.benchmark(warmup=5, iters=20)(kernel)``.
    """
    if kernel is None:
        return lambda k: _Benchmark(k, kwargs)
    return _Benchmark(kernel, kwargs)


def profile(func=None, **kwargs):
    """Compile, run and write profile files (working_directory, save_neff_name, save_trace_name)."""
    import os

    def wrap(k):
        opts = dict(kwargs)
        wd = opts.pop("working_directory", None) or os.getcwd()
        opts.setdefault("save_neff_name", "file.neff")
        opts.setdefault("save_trace_name", "profile.ntff")
        opts["save_neff_name"] = os.path.join(wd, opts["save_neff_name"])
        opts["save_trace_name"] = os.path.join(wd, opts["save_trace_name"])
        return _Baremetal(k, opts)

    return wrap if func is None else wrap(func)


def __getattr__(name: str):
    from nkisim.frontends import LEGACY, _unsupported

    return _unsupported.missing(LEGACY, "nki", name)


del annotations  # the __future__ import must not leak as an NKI name
