"""One timing layer for every backend: run and time an NKI kernel wherever this machine can.

    from nkibench import launch, measure, ProfileRequest
    out = launch(kernel, (a, b))                                   # outputs, for the correctness check
    m = measure(kernel, (a, b), warmup=1, iterations=10,           # Measurement: m.timing.p99_us, ...
                profile=ProfileRequest("stream"))                  # optional: profile files stream.*
    run = launch_once(kernel, (a, b))                              # both from one launch where the backend can:
    out, m = run.outputs, run.measure(warmup=1, iterations=10)     # nkisim costs that launch's own trace

The backend is chosen per kernel (nkibench.detect): the kernel file's imports say its API, and the API's real
toolchain wins over nkisim's emulation when it is installed:

* ``nkisim``        -- the performance model's estimate, profile files and HTML page (nkibench/backends/sim.py);
* ``neuron-legacy`` -- ``neuronxcc.nki``'s nki.benchmark on Trainium, SDK <= 2.29 (backends/legacy.py);
* ``neuron-nki``    -- ``import nki`` on Trainium, SDK 2.30+: nki.jit's NEFF timed by the Neuron runtime's
  Python API and profiled with neuron-explorer (backends/nrt.py).

Importing this package imports neither NumPy nor nkisim; the hardware backends never import nkisim.
Design, and the AWS pages each hardware step follows: docs/timing.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nkibench.backends.base import Backend, Launch, ProfileRequest
from nkibench.errors import BenchError, HardwareError, KernelError, NoBackendError, ProfileError
from nkibench.result import Measurement, Timing

__all__ = [
    "Backend", "BenchError", "HardwareError", "KernelError", "Launch", "Measurement", "NoBackendError",
    "ProfileError", "ProfileRequest", "Timing", "backend_for", "error_text", "launch", "launch_once", "measure",
]

_BACKENDS: dict[tuple[str, str], Backend] = {}


def _make(name: str, api: str) -> Backend:
    if name == "nkisim":
        from nkibench.backends.sim import NkisimBackend

        return NkisimBackend(api)
    if name == "neuron-legacy":
        from nkibench.backends.legacy import LegacyNeuronBackend

        return LegacyNeuronBackend(api)
    from nkibench.backends.nrt import NrtBackend

    return NrtBackend(api)


def backend_for(kernel: Any = None, *, api: str | None = None) -> Backend:
    """The backend that runs ``kernel`` (or kernels of ``api``) on this machine; NoBackendError when none does."""
    from nkibench import detect

    if api is None:
        api = detect.api_of_kernel(kernel) if kernel is not None else detect.DEFAULT_API
    name = detect.backend_name(api)
    key = (name, api)
    if key not in _BACKENDS:
        _BACKENDS[key] = _make(name, api)
    return _BACKENDS[key]


def launch(kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, simulate: bool = False):
    """Run ``kernel`` once on ``args`` and return its output(s); ``simulate`` uses the API's CPU simulator."""
    return backend_for(kernel).launch(kernel, tuple(args), kwargs, simulate=simulate)


def measure(kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, warmup: int, iterations: int,
            profile: ProfileRequest | None = None) -> Measurement:
    """Time ``kernel`` on ``args`` (warmup + timed iterations), writing profile files when asked.  A timing on
    Trainium also records nkisim's estimate of the same kernel (nkibench.feedback; NKIBENCH_RECORD=0: off)."""
    backend = backend_for(kernel)
    m = backend.measure(kernel, tuple(args), kwargs, warmup=warmup, iterations=iterations, profile=profile)
    _record(backend, kernel, args, kwargs, m)
    return m


def launch_once(kernel, args: tuple, kwargs: Mapping[str, Any] | None = None) -> Launch:
    """Run ``kernel`` once on ``args`` for its outputs (``.outputs``), and time the same launch later
    (``.measure(warmup=, iterations=, profile=)``, as :func:`measure`) only if the outputs are right: on nkisim
    the timing costs that run's own trace, so a check-then-time script runs the kernel once, not twice."""
    backend = backend_for(kernel)
    run = backend.launch_once(kernel, tuple(args), kwargs)

    def measure(*, warmup: int, iterations: int, profile: ProfileRequest | None = None) -> Measurement:
        m = run.measure(warmup=warmup, iterations=iterations, profile=profile)
        _record(backend, kernel, args, kwargs, m)
        return m

    return Launch(run.outputs, measure)


def _record(backend: Backend, kernel, args: tuple, kwargs: Mapping[str, Any] | None, m: Measurement) -> None:
    if backend.name != "nkisim":
        from nkibench import feedback

        for timing in (m.timing, m.profiled):
            if timing is not None:
                feedback.record(kernel, tuple(args), kwargs, timing, source="nkibench.measure")


def error_text(exc: BaseException) -> tuple[str, str]:
    """(type name, message) of an error raised by a kernel, also when it ran in a helper process."""
    if isinstance(exc, KernelError):
        return exc.type_name, exc.message
    return type(exc).__name__, str(exc)
