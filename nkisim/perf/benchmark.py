"""nki.benchmark's back end: cost the kernel's timing-mode trace and answer like neuron-bench (the run itself is
``nkisim.measure.run_benchmark``'s: perf reads traces only).

``nki.benchmark`` (Neuron SDK <= 2.26, BENCH-226) reports ``benchmark_result.nc_latency.get_latency_percentile(p)``
in microseconds for p in {0, 1, 10, 25, 50, 90, 99, 100}.  The model is deterministic: every percentile is the
modelled nc_latency unless a (seeded) noise model is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nkisim.perf import estimate
from nkisim.perf.report import PerfReport

PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)


@dataclass
class LatencyStats:
    """Latency samples of the timed iterations (microseconds)."""

    samples_us: list[float]
    percentiles_us: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.percentiles_us:
            s = sorted(self.samples_us)
            n = len(s)
            for p in PERCENTILES:
                # nearest-rank percentile: one of the measured samples, as neuron-bench reports
                k = min(n - 1, max(0, -(-p * n // 100) - 1)) if p > 0 else 0
                self.percentiles_us[p] = float(s[k])

    def get_latency_percentile(self, p) -> float:
        try:
            key = int(p)
        except (TypeError, ValueError):
            key = None
        if key is None or key != p or key not in self.percentiles_us:
            raise ValueError(
                f"unsupported latency percentile {p!r}: nki.benchmark reports percentiles "
                f"{', '.join(str(x) for x in PERCENTILES)}"
            )
        return self.percentiles_us[key]


@dataclass
class BenchmarkResult:
    nc_latency: LatencyStats
    report: PerfReport
    warmup: int
    iters: int
    files: dict[str, str] = field(default_factory=dict)
    trace: object = field(default=None, repr=False)

    def format(self) -> str:
        lat = self.nc_latency
        parts = ", ".join(f"p{p}={lat.percentiles_us[p]:.2f}" for p in PERCENTILES)
        return (f"nkisim benchmark ({self.report.target}, modelled): warmup={self.warmup} iters={self.iters}\n"
                f"nc_latency (us): {parts}")


def _check_count(name: str, v, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"nki.benchmark: {name} must be an integer >= {minimum}, not {v!r}")
    return v


def check_benchmark_options(warmup, iters, additional_compile_opt) -> tuple[int, int]:
    """nki.benchmark's checks of its options, before anything runs."""
    warmup = _check_count("warmup", warmup, 0)
    iters = _check_count("iters", iters, 1)
    if additional_compile_opt is not None and not isinstance(additional_compile_opt, str):
        raise ValueError("nki.benchmark: additional_compile_opt must be a string of compiler flags")
    return warmup, iters


def benchmark_trace(
    trace,
    *,
    warmup: int = 10,
    iters: int = 100,
    save_neff_name: str | None = None,
    save_trace_name: str | None = None,
    additional_compile_opt: str | None = None,
    noise: float | None = None,
    seed: int | None = None,
    sources: dict[str, str] | None = None,
) -> BenchmarkResult:
    """Cost a timing-mode ``trace`` and answer as nki.benchmark would (``nkisim.measure.run_benchmark`` runs the
    kernel first).

    noise: optional relative standard deviation of a log-normal run-to-run jitter (off by default; seeded by
    ``seed`` so results are reproducible).  sources: the kernel's code as profiled, stored in the profile files.
    """
    warmup, iters = check_benchmark_options(warmup, iters, additional_compile_opt)
    opts = additional_compile_opt or ""
    trace.meta["additional_compile_opt"] = opts
    if "--disable-dge" in opts.split():
        trace.meta["dge"] = False
    report = estimate(trace)
    lat = report.nc_latency_us
    if noise:
        import numpy as np

        if not (0 < float(noise) < 1):
            raise ValueError("noise must be a relative standard deviation in (0, 1)")
        rng = np.random.default_rng(seed)
        samples = (lat * np.exp(rng.normal(0.0, float(noise), size=iters))).tolist()
    else:
        samples = [lat] * iters
    result = BenchmarkResult(LatencyStats(samples), report, warmup, iters, trace=trace)
    if save_neff_name or save_trace_name:
        from nkisim.perf.profile_files import write_profile

        result.files = write_profile(
            trace,
            report,
            neff_path=save_neff_name or None,
            ntff_path=save_trace_name or None,
            sources=sources or {},  # the code as profiled, for pages drawn from the .neff later
        )
    return result
