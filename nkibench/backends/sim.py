"""nkisim: the performance model's latency, the profile files, the offline HTML page.

Kernels of either API run through ``nkisim.run_kernel`` (what nkisim's ``nki.baremetal`` / ``nki.benchmark`` do
underneath) and are costed by ``nkisim.estimate``; nothing here depends on the front end a kernel was written
against.  The latency is the one nki.benchmark reports on nkisim (the model is deterministic: every iteration
and percentile is the modelled nc_latency).

A profile run is costed from the same trace a second time with DGE off when the course's practice asks for it
(legacy API: ``--disable-dge``), so the ordinary latency and the profiled one come from one emulation and both
are reported; the profile files and the HTML page show the profiled run and name the ordinary latency.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from nkibench.backends.base import Backend, Launch, ProfileRequest, call_kernel, check_counts
from nkibench.labels import DGE_OFF_WHY, NO_DGE_SWITCH
from nkibench.result import Measurement, Timing

DISABLE_DGE = "--disable-dge"


class NkisimBackend(Backend):
    name = "nkisim"

    def versions(self) -> dict[str, str]:
        import nkisim

        return {"nkisim": str(nkisim.__version__)}

    def target(self) -> str:
        from nkisim.fallback import current_target

        return current_target()

    def label(self) -> str:
        return f"nkisim estimate, {self.target()}"

    def launch(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, simulate: bool = False):
        import nkisim

        return call_kernel(lambda: nkisim.run_kernel(kernel, tuple(args), dict(kwargs or {}), mode="full",
                                                     simulate=simulate).outputs)

    def measure(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, warmup: int,
                iterations: int, profile: ProfileRequest | None = None) -> Measurement:
        import nkisim

        warmup, iterations = check_counts(warmup, iterations)
        run = call_kernel(lambda: nkisim.run_kernel(kernel, tuple(args), dict(kwargs or {}), mode="timing"))
        return self._measure_trace(run.trace, kernel, warmup, iterations, profile)

    def launch_once(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None) -> Launch:
        """One run with values; its trace is costed when the launch is measured, with no second (timing-mode) run.

        The trace of a run does not depend on whether values are computed: registers are symbolic, dynamic loops
        are recorded and run-time offsets are costed with the timing mode's stand-ins in both modes (issue 31), so
        a full run's trace is instruction for instruction the timing run's (checked on the staff kernels and the
        handout's starting point: tests/test_part1_run_benchmark.py).  The one difference is for the better:
        nc_matmul hints whose promise a full run checked on the values are not marked unverified."""
        import nkisim

        run = call_kernel(lambda: nkisim.run_kernel(kernel, tuple(args), dict(kwargs or {}), mode="full"))

        def measure(*, warmup: int, iterations: int, profile: ProfileRequest | None = None) -> Measurement:
            warmup, iterations = check_counts(warmup, iterations)
            return self._measure_trace(run.trace, kernel, warmup, iterations, profile)

        return Launch(run.outputs, measure)

    def _measure_trace(self, trace, kernel, warmup: int, iterations: int,
                       profile: ProfileRequest | None) -> Measurement:
        """The timing (and profile files) of one run's trace: what nki.benchmark reports on nkisim."""
        import nkisim

        trace.meta["additional_compile_opt"] = ""  # as nki.benchmark on nkisim records an ordinary run
        ordinary = nkisim.estimate(trace)
        timing = self._timing(ordinary.nc_latency_us, warmup, iterations, dge_disabled=False, profiled=False)
        if profile is None:
            return Measurement(timing)
        dge_off = profile.dge_off if profile.dge_off is not None else self.api == "legacy"
        report = ordinary
        if dge_off:
            trace.meta["additional_compile_opt"] = DISABLE_DGE
            trace.meta["dge"] = False
            trace.meta["profile_run"] = {"dge_off": True, "ordinary_nc_latency_us": ordinary.nc_latency_us}
            report = nkisim.estimate(trace)  # last: the trace's instruction times are now the profiled run's
        files, notes = self._write_files(trace, report, kernel, profile)
        if not dge_off:
            return Measurement(timing, None, files, (NO_DGE_SWITCH, *notes))
        profiled = self._timing(report.nc_latency_us, warmup, iterations, dge_disabled=True, profiled=True,
                                files=files)
        return Measurement(timing, profiled, files, (DGE_OFF_WHY, *notes))

    def _timing(self, latency_us: float, warmup: int, iterations: int, *, dge_disabled: bool, profiled: bool,
                files: tuple[str, ...] = ()) -> Timing:
        return Timing(
            p50_us=latency_us, p99_us=latency_us, warmup=warmup, iterations=iterations, backend=self.name,
            label=self.label(), target=self.target(), api=self.api, versions=self.versions(),
            dge_disabled=dge_disabled, profiled=profiled, measured=False, samples_us=(latency_us,) * iterations,
            profile_files=files,
        )

    @staticmethod
    def _write_files(trace, report, kernel, profile: ProfileRequest) -> tuple[tuple[str, ...], tuple[str, ...]]:
        from nkisim.perf.html_profile import kernel_sources
        from nkisim.perf.profile_files import write_profile

        stem = profile.stem
        sources = kernel_sources(kernel)  # stored in the .neff: compare pages show the code as it was profiled
        written = write_profile(trace, report, neff_path=f"{stem}.neff",
                                ntff_path=f"{stem}.ntff" if profile.perfetto else None,
                                summary_path=f"{stem}.summary.txt", sources=sources)
        files = [written[k] for k in ("neff", "ntff", "summary") if k in written]
        notes: list[str] = []
        if not profile.perfetto and os.path.exists(f"{stem}.ntff"):
            os.remove(f"{stem}.ntff")  # an earlier run's trace would pass for this run's
            notes.append(f"Removed {stem}.ntff, an earlier run's Perfetto trace (ask for one with the script's "
                         "--perfetto flag)")
        if profile.html:
            try:
                from nkisim.perf.html_profile import write_run_html

                files.append(write_run_html(trace, report, f"{stem}.html", sources=sources))
            except ImportError as exc:  # bokeh missing: an older environment; the other files are written
                notes.append(f"HTML profile not written ({exc}); run `make setup` (or pip install -e .) to "
                             "install bokeh")
        return tuple(os.path.abspath(f) for f in files), tuple(notes)
