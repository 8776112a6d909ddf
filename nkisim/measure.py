"""Run a kernel and cost it: the drivers above the core's runtime and the performance model.

``nkisim.perf`` reads traces only (``core.instr``, ``core.traceio``; tests/test_nkisim_layers.py), so what runs a
kernel *and* costs it lives here: :func:`run_benchmark` (``nki.benchmark``'s result, for the legacy front end's
``nki.benchmark``) and :func:`profile_run` (the data of an HTML profile page).
"""

from __future__ import annotations

from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate
from nkisim.perf.benchmark import BenchmarkResult, benchmark_trace, check_benchmark_options
from nkisim.perf.html_profile import ProfileData, kernel_sources


def run_benchmark(
    kernel,
    args=(),
    kwargs=None,
    *,
    warmup: int = 10,
    iters: int = 100,
    save_neff_name: str | None = None,
    save_trace_name: str | None = None,
    additional_compile_opt: str | None = None,
    target: str | None = None,
    noise: float | None = None,
    seed: int | None = None,
    **ignored,
) -> BenchmarkResult:
    """Run ``kernel`` once in timing mode and report its modelled latency as nki.benchmark would.

    noise: optional relative standard deviation of a log-normal run-to-run jitter (off by default; seeded by
    ``seed`` so results are reproducible).  Unknown keywords (disable_allocation_opt, ...) are accepted.
    """
    warmup, iters = check_benchmark_options(warmup, iters, additional_compile_opt)
    run = run_kernel(kernel, tuple(args), dict(kwargs or {}), mode="timing", target=target)
    sources = kernel_sources(kernel) if (save_neff_name or save_trace_name) else None
    return benchmark_trace(run.trace, warmup=warmup, iters=iters, save_neff_name=save_neff_name,
                           save_trace_name=save_trace_name, additional_compile_opt=additional_compile_opt,
                           noise=noise, seed=seed, sources=sources)


def profile_run(kernel, args: tuple, kwargs: dict | None = None, *, target: str | None = None, title: str = "",
                dge: bool | None = None) -> ProfileData:
    """Run ``kernel`` in timing mode on nkisim and cost it: a ProfileData ready for
    :func:`nkisim.perf.html_profile.write_html`."""
    run = run_kernel(kernel, tuple(args), dict(kwargs or {}), mode="timing", target=target)
    report = estimate(run.trace, target, dge=dge)
    return ProfileData(run.trace, report, title=title or report.kernel_name, sources=kernel_sources(kernel),
                       origin=title or report.kernel_name)
